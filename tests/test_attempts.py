"""A task's several attempts (jm/attempts.py): event in, effects out, for each attempt kind, and
first-wins / kill-the-rest; Hypothesis: a task's result counts once whatever order its attempts
start, finish, fail, crash and get killed in."""
import numpy as np
from hypothesis import given, settings, strategies as hs

from apollo.core.cluster import Topology
from apollo.core.effects import Log, Send, SetTimer, Timer
from apollo.core.lifecycle import AttemptKind, TaskState
from apollo.core.messages import Dispatch, KillTask, ProbeTask, StatusBatch, TaskReport
from apollo.core.spec import JobSpec, StageSpec
from jm.state import JmConfig, JmState
from jm.view import ViewCache

from helpers import Rng, examples

TOPO = Topology(20, 4)


def view(wait=0.0):
    v = ViewCache(20)
    v.matrices[:] = wait
    v.stamps[:] = 0.0
    return v


def one_task_job(tokens=4, clones=1, clone_cpu=0.0, dur=2.0, v=None, **cfg):
    spec = JobSpec("j", [StageSpec("map", 1, np.full(1, dur))], max_retries=2)
    j = JmState(1, spec, tokens, 0.0, JmConfig(topology=TOPO, **cfg), v or view(), clones=clones,
                clone_cpu=clone_cpu)
    return j, j.start(0.0, Rng())


def sent(out):
    return [(int(e.to.split(":")[1]), t) for e in out if isinstance(e, Send) and isinstance(e.msg, Dispatch)
            for t in e.msg.tasks]


def kills(out):
    return [(int(e.to.split(":")[1]), e.msg.attempt) for e in out if isinstance(e, Send) and isinstance(e.msg, KillTask)]


def records(out):
    """(attempt, kind, outcome) of the attempt records logged."""
    return [(e.data[3], e.data[14], e.data[10]) for e in out if isinstance(e, Log) and e.kind == "attempt"]


def status(server, attempt, state, t0=0.0, t1=0.0, detail="", progress=-1.0, task=0):
    return StatusBatch(1, server, [TaskReport(1, task, attempt, int(state), t0, t1, 0, detail, progress)],
                       np.zeros(12, np.float32), t1)


def queued_long(j, first_server, first_attempt, now):
    """The first attempt reported queued, then no start heard until ``now`` (every other server
    vouched for just now: idle)."""
    j.handle(status(first_server, first_attempt, TaskState.DISPATCHED), 0.5, Rng())
    j.view.stamps[:] = now
    j.view.time = now
    return j.on_view(now, Rng())


def test_a_duplicate_that_starts_first_wins_and_the_first_is_killed():
    j, out = one_task_job()
    (srv, first), = sent(out)
    out = queued_long(j, srv, first.attempt, 5.0)        # well past twice the expected wait + 1 s
    (dsrv, dup), = sent(out)
    assert dsrv != srv and dup.kind == AttemptKind.DUPLICATE and dup.attempt != first.attempt
    assert not kills(out)
    j.validate()
    out = j.handle(status(dsrv, dup.attempt, TaskState.RUNNING, t0=5.1), 5.1, Rng())
    assert kills(out) == [(srv, first.attempt)]
    assert records(out) == [(first.attempt, 0, "lost")]
    assert j.tasks.attempt[0] == dup.attempt and j.tasks.server[0] == dsrv and j.tasks.state[0] == TaskState.RUNNING
    j.validate()
    out = j.handle(status(dsrv, dup.attempt, TaskState.DONE, t0=5.1, t1=7.0), 7.0, Rng())
    assert records(out)[0] == (dup.attempt, AttemptKind.DUPLICATE, "done") and j.finished and j.done == 1


def test_a_duplicate_is_discarded_when_the_first_starts():
    j, out = one_task_job()
    (srv, first), = sent(out)
    (dsrv, dup), = sent(queued_long(j, srv, first.attempt, 5.0))
    out = j.handle(status(srv, first.attempt, TaskState.RUNNING, t0=5.2), 5.2, Rng())
    assert kills(out) == [(dsrv, dup.attempt)]
    assert records(out) == [(dup.attempt, AttemptKind.DUPLICATE, "lost")]
    assert not j.attempts.extra and j.tasks.state[0] == TaskState.RUNNING
    j.validate()
    # the PN's word that it killed the duplicate is news of nothing
    assert not j.handle(status(dsrv, dup.attempt, TaskState.KILLED, t1=5.3), 5.3, Rng())
    j.validate()


def test_a_planned_start_far_above_the_decision_triggers_a_duplicate_at_once():
    j, out = one_task_job()
    (srv, first), = sent(out)
    # The PN says it plans to start it at t = 30: far above the 0 s the decision expected.
    out = j.handle(status(srv, first.attempt, TaskState.DISPATCHED, t1=30.0), 1.0, Rng())
    (dsrv, dup), = sent(out)
    assert dup.kind == AttemptKind.DUPLICATE
    assert ("dup_trigger", "wait_above_decision") in [(e.kind, e.data[2]) for e in out if isinstance(e, Log)]


def test_no_duplicate_where_no_server_is_significantly_better():
    v = view(wait=20.0)
    j, out = one_task_job(v=v)
    (srv, first), = sent(out)
    out = j.handle(status(srv, first.attempt, TaskState.DISPATCHED, t1=25.0), 1.0, Rng())
    assert not sent(out)        # everywhere else waits about as long


def test_a_task_without_peers_is_never_judged_a_straggler():
    j, out = one_task_job()
    (srv, first), = sent(out)
    j.handle(status(srv, first.attempt, TaskState.RUNNING, t0=0.0), 0.1, Rng())
    assert np.isinf(j.tasks.check_t[0])
    # (the silence watchdog may still ask where it is; no copy comes of the answer)
    out = j.handle(status(srv, first.attempt, TaskState.RUNNING, t0=0.0, detail="probed", progress=0.01), 500.0,
                   Rng())
    assert not sent(out) and not j.attempts.extra


def test_greedy_makes_no_duplicates():
    j, out = one_task_job(policy="greedy")
    (srv, first), = sent(out)
    assert not sent(queued_long(j, srv, first.attempt, 50.0))


def peers_job():
    """A stage of two 2 s tasks: task 1 ends on time (its peer's baseline), task 0 runs on."""
    spec = JobSpec("j", [StageSpec("map", 2, np.full(2, 2.0))], max_retries=2)
    j = JmState(1, spec, 4, 0.0, JmConfig(topology=TOPO), view())
    got = dict((t.task, (s, t)) for s, t in sent(j.start(0.0, Rng())))
    s1, t1 = got[1]
    j.handle(status(s1, t1.attempt, TaskState.DONE, t0=0.0, t1=2.1, task=1), 2.1, Rng())
    srv, first = got[0]
    return j, srv, first


def straggling(j, srv, first, now, progress):
    """Run the first attempt until ``now`` and answer the straggler probe with ``progress``."""
    j.handle(status(srv, first.attempt, TaskState.RUNNING, t0=0.0), 0.1, Rng())
    out = j.on_view(now, Rng())
    probes = [e for e in out if isinstance(e, Send) and isinstance(e.msg, ProbeTask)]
    assert [(int(p.to.split(":")[1]), p.msg.attempt) for p in probes] == [(srv, first.attempt)]
    return j.handle(status(srv, first.attempt, TaskState.RUNNING, t0=0.0, detail="probed", progress=progress),
                    now, Rng())


def test_a_straggler_gets_a_copy_and_the_copy_that_finishes_first_wins():
    j, srv, first = peers_job()
    used = j.tasks.used_tokens
    out = straggling(j, srv, first, 8.0, progress=0.1)   # 8 s for 10%: 72 s left, a copy takes ~2 s
    (csrv, copy), = sent(out)
    assert copy.kind == AttemptKind.COPY and csrv != srv
    assert j.tasks.used_tokens == used + 1                    # a copy holds a token of the job's
    j.validate()
    out = j.handle(status(csrv, copy.attempt, TaskState.DONE, t0=8.0, t1=10.5), 10.5, Rng())
    assert kills(out) == [(srv, first.attempt)]
    assert sorted(records(out)) == sorted([(first.attempt, 0, "lost"), (copy.attempt, AttemptKind.COPY, "done")])
    assert j.finished and j.done == 2 and j.tasks.used_tokens == 0
    j.validate()


def test_no_copy_for_a_task_on_its_way():
    j, srv, first = peers_job()
    out = straggling(j, srv, first, 8.0, progress=0.9)
    assert not sent(out)
    assert j.tasks.check_t[0] > 8.0 and np.isfinite(j.tasks.check_t[0])     # looked at again later


def test_the_first_failing_hands_the_task_to_its_copy_not_to_a_retry():
    j, srv, first = peers_job()
    (csrv, copy), = sent(straggling(j, srv, first, 8.0, progress=0.05))
    out = j.handle(status(srv, first.attempt, TaskState.FAILED, t0=0.0, t1=9.0), 9.0, Rng())
    assert not sent(out) and not kills(out)
    assert j.tasks.attempt[0] == copy.attempt and j.tasks.state[0] == TaskState.DISPATCHED and not j.attempts.extra
    j.validate()
    out = j.handle(status(csrv, copy.attempt, TaskState.DONE, t0=8.0, t1=11.0), 11.0, Rng())
    assert j.finished and j.done == 2


def test_a_duplicate_that_takes_over_the_task_is_probed_when_it_goes_silent():
    # A one-task job: its queued first attempt gets a duplicate, which starts first and becomes
    # the task's attempt; its end is never heard (the report was lost). The JM must ask its PN,
    # as for any attempt silent too long (apollo chaos seed 775: the job never ended).
    j, out = one_task_job()
    (srv, first), = sent(out)
    (dsrv, dup), = sent(queued_long(j, srv, first.attempt, 5.0))
    assert np.isfinite(j.watchdog.watch_at)             # the first attempt may go silent too
    j.handle(status(dsrv, dup.attempt, TaskState.RUNNING, t0=5.1), 5.1, Rng())
    assert j.tasks.attempt[0] == dup.attempt
    assert j.watchdog.watch_at <= float(j.watchdog.silence_limits(0))
    later = float(j.watchdog.silence_limits(0)) + 1.0
    out = j.on_view(later, Rng())
    assert [(e.to, e.msg.attempt) for e in out if isinstance(e, Send) and isinstance(e.msg, ProbeTask)] == \
        [(f"pn:{dsrv}", dup.attempt)]


def test_clones_go_out_with_the_first_within_the_grant_and_the_first_to_finish_wins():
    j, out = one_task_job(clones=3, clone_cpu=2.0)
    got = sent(out)
    assert len(got) == 3 and len({s for s, _ in got}) == 3
    assert [t.kind for _, t in got].count(AttemptKind.CLONE) == 2
    assert j.attempts.clone_used == 2.0
    j.validate()
    s2, c2 = got[2]
    out = j.handle(status(s2, c2.attempt, TaskState.DONE, t0=0.0, t1=2.2), 2.2, Rng())
    assert sorted(kills(out)) == sorted([(s, t.attempt) for s, t in got[:2]])
    assert j.finished and j.attempts.clone_used == 0.0
    j.validate()


def test_clones_never_exceed_the_grant():
    spec = JobSpec("j", [StageSpec("map", 4, np.full(4, 2.0))])
    j = JmState(1, spec, 4, 0.0, JmConfig(topology=TOPO), view(), clones=3, clone_cpu=5.0)
    out = j.start(0.0, Rng())
    kinds = [t.kind for _, t in sent(out)]
    assert kinds.count(AttemptKind.FIRST) == 4 and kinds.count(AttemptKind.CLONE) == 5
    j.validate()


EVENTS = hs.lists(hs.tuples(hs.integers(0, 3), hs.sampled_from(["start", "done", "fail", "killed", "lost", "view"])),
                  max_size=14)


@settings(max_examples=examples(150), deadline=None)
@given(EVENTS)
def test_a_task_result_counts_once_whatever_its_attempts_do(events):
    """Three attempts of one task (first and two clones), then a random sequence of news about
    any of them, including attempts already ended: the task is done at most once, one "done"
    record at most, every invariant holds after every event."""
    j, out = one_task_job(clones=3, clone_cpu=2.0)
    attempts = [(s, t.attempt) for s, t in sent(out)]
    dones = 0
    now = 0.0
    for who, what in events:
        now += 1.0
        if j.finished:
            break
        if who == 3:
            if what == "view":
                out = j.on_view(now, Rng())
            else:
                continue
        else:
            srv, att = attempts[who] if who < len(attempts) else attempts[0]
            state = {"start": TaskState.RUNNING, "done": TaskState.DONE, "fail": TaskState.FAILED,
                     "killed": TaskState.KILLED, "lost": TaskState.READY, "view": TaskState.RUNNING}[what]
            out = j.handle(status(srv, att, state, t0=now - 0.5, t1=now), now, Rng())
        attempts += [(s, t.attempt) for s, t in sent(out)]
        dones += sum(1 for _, _, o in records(out) if o == "done")
        j.validate()
        assert j.done <= 1 and dones <= 1
    assert dones == j.done


def cloned_mapreduce():
    m = StageSpec("map", 2, np.full(2, 2.0))
    r = StageSpec("reduce", 1, np.full(1, 1.0), input_bytes=np.full(1, 400e6), depends_on=("map",))
    j = JmState(1, JobSpec("mr", [m, r]), 4, 0.0, JmConfig(topology=TOPO), view(), clones=2, clone_cpu=3.0)
    got = sent(j.start(0.0, Rng()))
    first = {t.task: (s, t) for s, t in got if t.kind == 0}
    clone = {t.task: (s, t) for s, t in got if t.kind == AttemptKind.CLONE}
    return j, first, clone


def test_delay_assignment_downstream_clones_wait_for_copies_of_the_upstream_output():
    j, first, clone = cloned_mapreduce()
    assert sorted(first) == sorted(clone) == [0, 1]
    for t in (0, 1):                                 # the first attempts win; their clones run on
        s, a = first[t]
        out = j.handle(status(s, a.attempt, TaskState.DONE, t0=0.0, t1=2.0 + t, task=t), 2.0 + t, Rng())
        assert not kills(out)
        j.validate()
    reduce_first = [t for _, t in sent(out) if t.task == 2]
    assert [t.kind for t in reduce_first] == [0]     # the reduce's first attempt goes at once ...
    assert any(isinstance(e, SetTimer) and e.key == "clones" for e in out)  # ... its clone waits (omega)
    s, a = clone[0]
    out = j.handle(status(s, a.attempt, TaskState.DONE, t0=0.0, t1=3.5, task=0), 3.5, Rng())
    assert not sent(out)                             # map 1 has one copy still
    assert records(out) == [(a.attempt, AttemptKind.CLONE, "copy")]
    s, a = clone[1]
    out = j.handle(status(s, a.attempt, TaskState.DONE, t0=0.0, t1=3.8, task=1), 3.8, Rng())
    (cs, c), = sent(out)
    assert c.task == 2 and c.kind == AttemptKind.CLONE and c.input_bytes == 400e6   # an exclusive copy
    j.validate()


def test_delay_assignment_after_omega_clones_read_a_shared_copy_and_upstream_clones_die():
    j, first, clone = cloned_mapreduce()
    for t in (0, 1):
        s, a = first[t]
        j.handle(status(s, a.attempt, TaskState.DONE, t0=0.0, t1=2.0 + t, task=t), 2.0 + t, Rng())
    out = j.handle(Timer("clones"), 5.0, Rng())
    (cs, c), = sent(out)
    assert c.task == 2 and c.input_bytes == 2 * 400e6           # shared by two readers: twice as slow
    assert sorted(kills(out)) == sorted((s, a.attempt) for s, a in clone.values())
    j.validate()


def test_delay_assignment_only_the_outputs_with_few_copies_read_slower():
    j, first, clone = cloned_mapreduce()
    s, a = first[0]
    j.handle(status(s, a.attempt, TaskState.DONE, t0=0.0, t1=2.0, task=0), 2.0, Rng())
    s, a = clone[0]                                  # map 0: two copies (its clone finished too)
    j.handle(status(s, a.attempt, TaskState.DONE, t0=0.0, t1=2.5, task=0), 2.5, Rng())
    s, a = first[1]
    j.handle(status(s, a.attempt, TaskState.DONE, t0=0.0, t1=3.0, task=1), 3.0, Rng())
    out = j.handle(Timer("clones"), 30.0, Rng())
    (cs, c), = sent(out)
    # map 1's output (half the input) is shared by two readers, map 0's is not: 1.5x the read
    assert c.task == 2 and c.input_bytes == 1.5 * 400e6
    j.validate()


def test_omega_before_any_sample_is_one_exclusive_remote_read():
    j, first, clone = cloned_mapreduce()
    for t in (0, 1):
        s, a = first[t]
        out = j.handle(status(s, a.attempt, TaskState.DONE, t0=0.0, t1=2.0 + t, task=t), 2.0 + t, Rng())
    (omega,) = [e.delay for e in out if isinstance(e, SetTimer) and e.key == "clones"]
    assert omega == 400e6 / j.cfg.io.remote_bytes_per_s      # what sharing with one more would add


def test_clones_granted_above_tau_run_at_low_priority_and_take_a_token_upgraded():
    spec = JobSpec("j", [StageSpec("map", 1, np.full(1, 2.0))], max_retries=2)
    j = JmState(1, spec, 4, 0.0, JmConfig(topology=TOPO), view(), clones=2, clone_cpu=1.0, clones_low=True)
    (s0, first), (s1, c) = sent(j.start(0.0, Rng()))
    assert not first.opportunistic and c.kind == AttemptKind.CLONE and c.opportunistic
    j.handle(status(s1, c.attempt, TaskState.RUNNING, t0=0.1), 0.1, Rng())
    out = j.handle(status(s0, first.attempt, TaskState.FAILED, t0=0.0, t1=0.5), 0.5, Rng())
    ups = [e for e in out if isinstance(e, Send) and type(e.msg).__name__ == "UpgradeTask"]
    assert [(int(u.to.split(":")[1]), u.msg.attempt) for u in ups] == [(s1, c.attempt)]
    assert j.tasks.attempt[0] == c.attempt and j.tasks.used_tokens == 1.0 and j.attempts.clone_used == 0.0
    j.validate()


def cloned_peers(clone_started: float):
    """Two 2 s tasks, cloned: task 1 ends on time (the baseline); task 0's clone started at
    ``clone_started``. Returns (JM, task 0's first (server, spec), its clone's server)."""
    spec = JobSpec("j", [StageSpec("map", 2, np.full(2, 2.0))], max_retries=2)
    j = JmState(1, spec, 4, 0.0, JmConfig(topology=TOPO), view(), clones=2, clone_cpu=2.0)
    got = sent(j.start(0.0, Rng()))
    first = {t.task: (s, t) for s, t in got if t.kind == 0}
    clone = {t.task: (s, t) for s, t in got if t.kind == AttemptKind.CLONE}
    s, a = first[1]
    j.handle(status(s, a.attempt, TaskState.DONE, t0=0.0, t1=2.1, task=1), 2.1, Rng())
    cs, ca = clone[0]
    j.handle(status(cs, ca.attempt, TaskState.RUNNING, t0=clone_started), max(clone_started, 0.1), Rng())
    return j, first[0], cs


def test_a_cloned_task_whose_every_attempt_straggles_gets_a_copy():
    j, (srv, f0), cs = cloned_peers(clone_started=0.0)
    out = straggling(j, srv, f0, 8.0, progress=0.1)
    (ksrv, copy), = sent(out)
    assert copy.kind == AttemptKind.COPY and ksrv not in (srv, cs)
    j.validate()


def test_no_copy_while_a_clone_may_still_be_on_time():
    j, (srv, f0), _ = cloned_peers(clone_started=7.5)      # the clone started late
    assert not sent(straggling(j, srv, f0, 8.0, progress=0.1))


def test_no_duplicate_where_it_would_queue():
    """A duplicate holds nothing: it goes only where it would start about now, not into another
    queue (where it would be a phantom in that server's reading)."""
    j, out = one_task_job(v=view(wait=3.0))
    (srv, first), = sent(out)
    j.view.matrices[srv] = 60.0
    assert not sent(queued_long(j, srv, first.attempt, 30.0))
