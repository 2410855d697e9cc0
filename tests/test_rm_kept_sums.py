"""The RM's figures kept as they move (per-queue demand, tokens and held CPUs, the dead scan's
bound on the live servers' stamps, a round's snapshot columns): after any sequence of stimuli
they equal a fresh count over every job and server. RmState.validate (called after every
stimulus here) checks each against a recomputation; this test also holds queue_figures against
the plain sums over every job."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as hs

from apollo.core.effects import PeerBack, PeerLost, Start, Timer
from apollo.core.messages import CancelJob, Heartbeat, HostReport, JobDemand, JobDone, SubmitJob
from apollo.core.spec import JobSpec, StageSpec
from rm.queues import QueueTree
from rm.state import RmConfig, RmState, single_queue

from helpers import Rng, examples

SERVERS = 6
POOLS = QueueTree.parse_text("""
sharing = "fair"
[queues.small]
guarantee = "30%"
min_share_timeout_s = 2
[queues.large]
order = "fifo"
max_running_jobs = 2
""")
LEAVES = ("small", "large")


def plain_figures(r: RmState) -> dict[str, tuple[float, int, float]]:
    """queue_figures as a sum over every job."""
    out: dict[str, list] = {}
    for e in r.jobs.values():
        f = out.setdefault(e.queue, [0.0, 0, 0.0])
        if e.admitted:
            f[0] += r.held(e.job_id)
            f[1] += e.tokens
        f[2] += e.demand
    return {q: (f[0], f[1], f[2]) for q, f in out.items()}


def same_figures(kept: dict, plain: dict) -> bool:
    return kept.keys() == plain.keys() and all(
        math.isclose(kept[q][0], plain[q][0], abs_tol=1e-9) and kept[q][1] == plain[q][1]
        and math.isclose(kept[q][2], plain[q][2], abs_tol=1e-9) for q in plain)


event = hs.one_of(
    hs.tuples(hs.just("submit"), hs.integers(0, 1), hs.integers(1, 30), hs.sampled_from([0.5, 1.0, 1.5, 0.1])),
    hs.tuples(hs.just("hb"), hs.integers(0, SERVERS - 1),
              hs.dictionaries(hs.integers(0, 6), hs.sampled_from([0.1, 0.5, 1.0, 1.3]), max_size=3)),
    hs.tuples(hs.just("demand"), hs.integers(0, 6), hs.integers(0, 40), hs.integers(0, 8)),
    hs.tuples(hs.just("report"), hs.lists(hs.tuples(hs.integers(0, 6), hs.integers(0, 40), hs.integers(0, 8)),
                                          max_size=4)),
    hs.tuples(hs.just("done"), hs.integers(0, 6)),
    hs.tuples(hs.just("cancel"), hs.integers(0, 6)),
    hs.tuples(hs.just("tick"), hs.sampled_from([0.3, 1.0, 4.0, 12.0])),
    hs.tuples(hs.just("lost"), hs.integers(0, SERVERS - 1)),      # its PN's connection went
    hs.tuples(hs.just("back"), hs.integers(0, SERVERS - 1)),      # ...and came back
)


def run(events: list, tree: QueueTree) -> None:
    r = RmState(RmConfig(SERVERS, 3, queues=tree, jm_hosts=("h0", "h1"), host_dead_after_s=6.0))
    rng = Rng()
    now = 0.0
    r.handle(Start(), now, rng)
    for s in range(SERVERS):
        r.handle(Heartbeat(s, 0.0, now, np.zeros(3, np.float32), 0, 0, 4.0), now, rng)
    first = [("submit", 0, 3, 1.0), ("submit", 1, 20, 0.5), ("submit", 0, 2, 0.1)]
    for ev in first + events:
        kind = ev[0]
        if kind == "submit":
            _, leaf, tasks, cpu = ev
            spec = JobSpec(f"j{tasks}", [StageSpec("s", tasks, np.ones(tasks), cpu=cpu)],
                           queue=LEAVES[leaf] if not tree.is_single else "default")
            r.handle(SubmitJob(-1, spec, "client"), now, rng)
        elif kind == "hb":
            _, s, held = ev
            cpus = [min(c, 4.0 / max(len(held), 1)) for c in held.values()]
            r.handle([Heartbeat(s, 0.0, now, np.zeros(3, np.float32), len(held), 0, 4.0 - sum(cpus),
                                list(held), cpus)], now, rng)
        elif kind == "demand":
            _, job, remaining, in_use = ev
            e = r.jobs.get(job)
            r.handle(JobDemand(job, remaining, in_use, -1.0, e.seq if e else 0), now, rng)
        elif kind == "report":
            rows = ev[1]
            host = r.jobs[rows[0][0]].host if rows and rows[0][0] in r.jobs and r.jobs[rows[0][0]].host else "h0"
            ids = np.array([j for j, _, _ in rows], dtype=np.int64)
            seqs = np.array([r.jobs[j].seq if j in r.jobs else 0 for j, _, _ in rows], dtype=np.int64)
            r.handle(HostReport(host, ids, seqs, np.array([d for _, d, _ in rows], dtype=np.int64),
                                np.array([u for _, _, u in rows], dtype=np.int64), np.zeros(0, np.int64), []),
                     now, rng)
        elif kind == "done":
            r.handle(JobDone(ev[1], True, "", now, 1), now, rng)
        elif kind == "cancel":
            r.handle(CancelJob(ev[1]), now, rng)
        elif kind == "lost":
            r.handle(PeerLost(f"pn:{ev[1]}"), now, rng)
        elif kind == "back":
            r.handle(PeerBack(f"pn:{ev[1]}"), now, rng)
        else:
            now += ev[1]
            r.handle(Timer("tick"), now, rng)
            r.handle(Timer("soon"), now, rng)
        r.validate()
        assert same_figures(r.queue_figures(), plain_figures(r))


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hs.lists(event, min_size=20, max_size=80))
def test_kept_queue_sums_equal_a_fresh_count_in_pools(events):
    run(events, POOLS)


@settings(max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hs.lists(event, min_size=20, max_size=80))
def test_kept_queue_sums_equal_a_fresh_count_in_one_queue(events):
    run(events, single_queue("fifo"))


def test_a_job_admitted_without_tokens_after_the_cluster_shrank_keeps_the_grant_bound():
    """Every server dies with the large pool's jobs holding their tokens; one comes back and a
    FIFO pool job is admitted at once without a token (max_running_jobs): no token was handed
    out, so the bound of what was granted stays the one of the last hand-out, not today's
    smaller cluster (validate used to fail here)."""
    r = RmState(RmConfig(SERVERS, 3, queues=POOLS, jm_hosts=("h0",), host_dead_after_s=60.0))
    rng = Rng()
    r.handle(Start(), 0.0, rng)
    for s in range(SERVERS):
        r.handle(Heartbeat(s, 0.0, 0.0, np.zeros(3, np.float32), 0, 0, 4.0), 0.0, rng)
    spec = JobSpec("big", [StageSpec("s", 40, np.ones(40), cpu=1.0)], queue="large")
    r.handle(SubmitJob(-1, spec, "client"), 0.0, rng)
    r.handle(Timer("tick"), 1.0, rng)
    r.validate()
    assert r.admission.granted > 4            # more than one server's cores
    for s in range(SERVERS):                  # every server's connection lost
        r.handle(PeerLost(f"pn:{s}"), 10.0, rng)
    r.handle(Timer("tick"), 10.0, rng)
    r.handle(PeerBack("pn:0"), 10.0, rng)
    r.handle(Heartbeat(0, 0.0, 10.0, np.zeros(3, np.float32), 0, 0, 4.0), 10.0, rng)
    r.handle(SubmitJob(-1, JobSpec("late", [StageSpec("s", 2, np.ones(2), cpu=1.0)], queue="large"), "client"),
             10.0, rng)
    late = max(r.jobs)
    assert r.jobs[late].admitted and r.jobs[late].tokens == 0
    r.validate()
