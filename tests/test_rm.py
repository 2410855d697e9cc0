import numpy as np

from apollo.core.effects import Log, PeerBack, PeerLost, Persist, Send, SetTimer, Start, Timer
from apollo.core.messages import (CancelJob, ClusterView, Heartbeat, JobAccepted, JobDemand, JobDone, ReclaimTokens,
                             StartJob, SubmitJob, TokenGrant)
from apollo.core.spec import JobSpec, StageSpec
from rm.queues import QueueTree
from rm.sharing import water_fill
from rm.state import RmConfig, RmState, single_queue
from rm.store import SqliteJobStore

from helpers import Rng


def rm(n=4, tokens="even", queues=None):
    r = RmState(RmConfig(n, 12, queues=queues or single_queue(tokens)))
    r.handle(Start(), 0.0, Rng())
    return r


def sent(out, kind):
    return [e.msg for e in out if isinstance(e, Send) and isinstance(e.msg, kind)]


def hb(s, t, w0=0.0, boot=0.0, held=None):
    """Server ``s``'s heartbeat; ``held``: job -> CPUs its regular attempts run on there."""
    m = np.full(12, w0, np.float32)
    held = held or {}
    return Heartbeat(s, boot, t, m, len(held), 0, 4.0 - sum(held.values()), list(held), list(held.values()))


def one_task_job(name="j", tasks=4, cpu=1.0):
    return JobSpec(name, [StageSpec("s", tasks, np.ones(tasks), cpu=cpu)])


def test_aggregates_matrices_and_marks_dead_servers():
    r = rm()
    for s in range(4):
        r.handle(hb(s, 1.0, w0=float(s)), 1.0, Rng())
    assert r.alive.sum() == 4 and r.matrices[2, 0] == 2.0
    r.handle(hb(2, 0.5, w0=99.0), 1.1, Rng())        # an older reading arriving late is ignored
    assert r.matrices[2, 0] == 2.0
    out = r.handle(PeerLost("pn:2"), 6.5, Rng())
    assert [e for e in out if isinstance(e, Log) and e.kind == "servers_dead"] == [Log("servers_dead", (2,))]
    out = r.handle(Timer("tick"), 7.0, Rng())
    view = [e.msg for e in out if isinstance(e, Send) and isinstance(e.msg, ClusterView)][0]
    assert list(view.alive) == [1, 1, 0, 1]
    assert 2 not in view.lightly_loaded.tolist()


def test_silence_is_not_death_only_a_lost_connection_is():
    """PNs report only on change: a server not heard for a long time is quiet, not dead; the RM
    marks it dead on PeerLost of its PN, and nothing else (another actor's loss is not a server's)."""
    r = rm()
    for s in range(4):
        r.handle(hb(s, 1.0), 1.0, Rng())
    r.handle(Timer("tick"), 3600.0, Rng())
    assert r.alive.sum() == 4
    for who in ("jmhost:0", "client:x", "pn:99", "pn:x", "rm"):
        assert r.handle(PeerLost(who), 3600.0, Rng()) == []
    assert r.alive.sum() == 4
    r.handle(PeerLost("pn:1"), 3600.0, Rng())
    assert list(r.alive) == [1, 0, 1, 1]
    r.validate()


def test_a_lost_server_comes_back_by_a_new_connection_or_a_new_incarnation_not_a_late_heartbeat():
    r = rm()
    for s in range(4):
        r.handle(hb(s, 1.0, held={0: 1.0} if s == 0 else None), 1.0, Rng())
    r.handle(PeerLost("pn:0"), 2.0, Rng())
    assert not r.alive[0] and r.held(0) == 0.0
    r.handle(hb(0, 1.9, held={0: 1.0}), 2.001, Rng())   # sent before the connection went: stays dead
    assert not r.alive[0] and r.held(0) == 0.0
    r.validate()
    r.handle(PeerBack("pn:0"), 5.0, Rng())             # a healed partition: its full state follows
    assert not r.alive[0]
    r.handle(hb(0, 5.0), 5.001, Rng())
    assert r.alive[0]
    r.handle(PeerLost("pn:1"), 6.0, Rng())
    r.handle(hb(1, 8.0, boot=8.0), 8.0, Rng())          # restarted: a new incarnation
    assert r.alive.sum() == 4
    r.validate()


def test_lightly_loaded_prefers_short_waits():
    r = RmState(RmConfig(20, 12, lightly_loaded=3))
    for s in range(20):
        r.handle(hb(s, 1.0, w0=float(20 - s)), 1.0, Rng())
    assert sorted(r.lightly_loaded().tolist()) == [17, 18, 19]


def test_submit_admits_with_tokens_and_refuses_oversized():
    r = rm()
    for s in range(4):
        r.handle(hb(s, 0.1), 0.1, Rng())
    out = r.handle(SubmitJob(-1, one_task_job(), "client"), 1.0, Rng())
    acc = [e.msg for e in out if isinstance(e, Send) and isinstance(e.msg, JobAccepted)][0]
    start = [e.msg for e in out if isinstance(e, Send) and isinstance(e.msg, StartJob)][0]
    assert acc.accepted and acc.job_id == 0 and start.tokens == 4
    out = r.handle(SubmitJob(-1, one_task_job("big", cpu=64), "client"), 1.0, Rng())
    acc = [e.msg for e in out if isinstance(e, Send) and isinstance(e.msg, JobAccepted)][0]
    assert not acc.accepted and "64" in acc.reason and "'s'" in acc.reason
    assert not any(isinstance(e.msg, StartJob) for e in out if isinstance(e, Send))


def test_even_split_regrants_on_tick_and_fifo_serves_oldest():
    r = rm()
    for s in range(4):
        r.handle(hb(s, 0.1), 0.1, Rng())
    r.handle(SubmitJob(-1, one_task_job("a", tasks=100), "c"), 1.0, Rng())
    r.handle(SubmitJob(-1, one_task_job("b", tasks=100), "c"), 1.0, Rng())
    out = r.handle(Timer("tick"), 1.5, Rng())
    grants = {e.msg.job_id: e.msg.tokens for e in out if isinstance(e, Send) and isinstance(e.msg, TokenGrant)}
    assert grants == {0: 8}
    assert [(s.job_id, s.tokens) for s in sent(out, StartJob)] == [(1, 8)]   # b waited for no free token
    r.validate()
    f = rm(tokens="fifo")
    for s in range(4):
        f.handle(hb(s, 0.1), 0.1, Rng())
    f.handle(SubmitJob(-1, one_task_job("a", tasks=10), "c"), 1.0, Rng())
    f.handle(SubmitJob(-1, one_task_job("b", tasks=10), "c"), 1.1, Rng())
    out = f.handle(Timer("tick"), 1.5, Rng())
    assert not sent(out, TokenGrant)            # oldest first: a keeps 10, b has the other 6
    assert f.jobs[0].tokens == 10 and f.jobs[1].tokens == 6


def test_water_fill_properties_small():
    a = water_fill(10, np.array([2.0, 5.0, 8.0]))
    assert np.allclose(a, [2.0, 4.0, 4.0])
    assert np.allclose(water_fill(100, np.array([2.0, 5.0])), [2.0, 5.0])


def test_job_done_forwarded_and_store_survives_restart(tmp_path):
    store = SqliteJobStore(str(tmp_path / "jobs.db"))

    def handle(r, event, now):      # as a runtime does: carry out the Persists, in order
        out = r.handle(event, now, Rng())
        for e in out:
            if isinstance(e, Persist):
                store.apply(e)
        return out

    r = rm()
    out = handle(r, SubmitJob(-1, one_task_job("a"), "client"), 1.0)
    # The job is written before it is acknowledged (a runtime carries effects out in order).
    kinds = [type(e.msg).__name__ if isinstance(e, Send) else type(e).__name__ for e in out]
    assert kinds.index("Persist") < kinds.index("JobAccepted")
    handle(r, SubmitJob(-1, one_task_job("b"), "client"), 1.0)
    out = handle(r, JobDone(0, True, "", 5.0, 4), 5.0)
    # Stored now; the RM's copy to the submitter (whom the JM host told directly) goes out with
    # the next tick's messages, off the job's critical path.
    assert [type(e) for e in out] == [Persist]
    out = handle(r, Timer("tick"), 5.25)
    copies = [e for e in out if isinstance(e, Send) and isinstance(e.msg, JobDone)]
    assert [(e.to, e.msg.job_id) for e in copies] == [("client", 0)]
    assert not [e for e in handle(r, Timer("tick"), 5.5) if isinstance(e, Send) and isinstance(e.msg, JobDone)]
    assert [row[2] for row in store.all()] == ["done", "running"]
    # A new RM started with what the database holds re-admits the unfinished job only.
    r2 = RmState(RmConfig(4, 12))
    out = r2.handle(Start(SqliteJobStore(str(tmp_path / "jobs.db")).recovered()), 9.0, Rng())
    starts = [e.msg for e in out if isinstance(e, Send) and isinstance(e.msg, StartJob)]
    assert [s.job_id for s in starts] == [1] and starts[0].spec.name == "b"
    assert r2.next_job_id == 2


def test_heartbeats_in_one_list_fold_in_as_one_at_a_time():
    """The simulator hands the RM the heartbeats of a batch window as one list: late, stale
    and unknown-server readings must come out exactly as delivered one by one."""
    batch = [hb(0, 1.0, 3.0), hb(1, 1.0, 1.0), hb(0, 0.5, 9.0), hb(9, 1.0), hb(1, 1.2, 2.0, boot=1.1),
             hb(3, 1.0, 4.0)]
    one, many = rm(), rm()
    out_one = [e for h in batch for e in one.handle(h, 1.3, Rng())]
    out_many = many.handle(batch, 1.3, Rng())
    assert [e.data for e in out_many] == [e.data for e in out_one] == [("heartbeat from unknown server 9",)]
    for a in ("matrices", "stamps", "boot_times", "alive"):
        assert np.array_equal(getattr(one, a), getattr(many, a)), a
    # (boot times on the RM's clock: the PN's plus the offset its heartbeats show, 1.3 - 1.2 s)
    assert many.matrices[0, 0] == 3.0 and many.matrices[1, 0] == 2.0 and abs(many.boot_times[1] - 1.2) < 1e-9


def test_admission_gives_free_capacity_up_to_demand_and_never_more_tokens_than_cores():
    r = rm()                                            # 4 servers x 4 cores = 16 tokens
    for s in range(4):
        r.handle(hb(s, 0.1), 0.1, Rng())

    def start_tokens(out):
        return [(m.job_id, m.tokens) for m in sent(out, StartJob)]

    assert start_tokens(r.handle(SubmitJob(-1, one_task_job("a", tasks=6), "c"), 1.0, Rng())) == [(0, 6)]
    # 10 tokens nobody holds: the second job gets its whole demand of 10, not half the cluster.
    assert start_tokens(r.handle(SubmitJob(-1, one_task_job("b", tasks=10), "c"), 1.0, Rng())) == [(1, 10)]
    # The cluster is fully held: the third job waits (first in line) for a round, due shortly.
    out = r.handle(SubmitJob(-1, one_task_job("c", tasks=10), "c"), 1.0, Rng())
    assert start_tokens(out) == [] and sent(out, JobAccepted)[0].reason == "waiting in queue root at position 1"
    assert [e.key for e in out if isinstance(e, SetTimer)] == ["soon"]
    r.validate()
    out = r.handle(Timer("soon"), 1.05, Rng())          # water-fill of 16 over demands 6, 10, 10
    got = {m.job_id: m.tokens for m in sent(out, TokenGrant)} | dict(start_tokens(out))
    assert got[2] >= 5 and sum(r.jobs[j].tokens for j in r.jobs) == 16
    r.validate()
    # Job a now needs only 1 and job b is done: its tokens are free again; a's spare ones are
    # trimmed for a newcomer.
    r.handle(JobDemand(0, 1), 1.5, Rng())
    r.handle(JobDone(1, True, "", 2.0, 10), 2.0, Rng())
    out = r.handle(SubmitJob(-1, one_task_job("d", tasks=8), "c"), 2.0, Rng())
    assert start_tokens(out) and sum(e.tokens for e in r.jobs.values()) <= 16
    r.validate()


def test_a_hundred_jobs_on_sixteen_cores_hold_sixteen_tokens_at_most():
    r = rm()
    for s in range(4):
        r.handle(hb(s, 0.1), 0.1, Rng())
    t = 1.0
    for i in range(100):
        r.handle(SubmitJob(-1, one_task_job(f"j{i}", tasks=3), "c"), t, Rng())
        r.validate()
        assert sum(e.tokens for e in r.jobs.values()) <= 16
        t += 0.005
    for k in range(5):
        r.handle(Timer("soon"), t + k * 0.05, Rng())
        r.validate()
    admitted = [e for e in r.jobs.values() if e.admitted]
    assert sum(e.tokens for e in admitted) <= 16 and len(admitted) == 16
    assert sorted(p for _, p in r.positions.values()) == list(range(1, 85))


def test_unknown_queue_is_refused_and_nothing_stored():
    tree = QueueTree.parse({"queues": {"prod": {"guarantee": "60%"}, "dev": {}}}, source="q.toml")
    r = rm(queues=tree)
    job = one_task_job("x")
    job.queue = "nope"
    out = r.handle(SubmitJob(-1, job, "client"), 1.0, Rng())
    acc = sent(out, JobAccepted)[0]
    assert not acc.accepted and "unknown queue 'nope'" in acc.reason and "prod" in acc.reason
    assert not any(isinstance(e, Persist) for e in out) and not r.jobs


def test_running_job_limit_queues_jobs_with_positions_and_cancel_while_waiting():
    tree = QueueTree.parse({"queues": {"a": {"max_running_jobs": 1}, "b": {}}}, source="q.toml")
    r = rm(queues=tree)
    for s in range(4):
        r.handle(hb(s, 0.1), 0.1, Rng())
    jobs = []
    for i in range(3):
        j = one_task_job(f"a{i}", tasks=2)
        j.queue = "a"
        jobs.append(r.handle(SubmitJob(-1, j, "c"), 1.0 + i, Rng()))
    assert sent(jobs[0], StartJob) and not sent(jobs[1], StartJob) and not sent(jobs[2], StartJob)
    assert r.positions == {1: ("a", 1), 2: ("a", 2)}
    out = r.handle(CancelJob(1), 4.0, Rng())         # a waiting job is ended by the RM itself
    assert [m.job_id for m in sent(out, JobDone)] == [1] and sent(out, JobDone)[0].reason == "cancelled"
    r.validate()
    r.handle(Timer("soon"), 4.1, Rng())
    assert r.positions == {2: ("a", 1)}
    out = r.handle(JobDone(0, True, "", 5.0, 2), 5.0, Rng())
    out = r.handle(Timer("tick"), 5.5, Rng())
    assert [m.job_id for m in sent(out, StartJob)] == [2] and not r.positions
    r.validate()


def test_fair_pools_preempt_after_the_min_share_timeout():
    tree = QueueTree.parse({"queues": {"prod": {"guarantee": 8, "min_share_timeout_s": 5},
                                       "dev": {}}}, source="q.toml")
    r = rm(queues=tree)
    for s in range(4):
        r.handle(hb(s, 0.1), 0.1, Rng())
    dev = one_task_job("dev", tasks=100)
    dev.queue = "dev"
    r.handle(SubmitJob(-1, dev, "c"), 1.0, Rng())
    r.handle(JobDemand(0, 100), 1.2, Rng())
    for s in range(4):                                  # dev runs on all 16 cores
        r.handle(hb(s, 1.2, held={0: 4.0}), 1.2, Rng())
    prod = one_task_job("prod", tasks=20)
    prod.queue = "prod"
    r.handle(SubmitJob(-1, prod, "c"), 2.0, Rng())
    t, reclaims = 2.0, []
    while t < 9.0 and not reclaims:
        t += 0.5
        for s in range(4):
            r.handle(hb(s, t, held={0: 4.0}), t, Rng())
        for e in r.handle(Timer("tick"), t, Rng()):
            if isinstance(e, Send) and isinstance(e.msg, ReclaimTokens):
                reclaims.append((t, e.msg))
        r.validate()
    (when, msg), = reclaims
    assert msg.job_id == 0 and msg.within_s == 0 and 6.9 <= when <= 7.6   # 5 s after prod's arrival
    assert msg.keep == 8                                 # kills 8: prod's min share, no more


def test_what_a_job_holds_is_what_the_servers_say_it_runs_and_a_dead_server_holds_nothing():
    r = rm()
    r.handle(SubmitJob(-1, one_task_job("a", tasks=8), "c"), 0.2, Rng())
    r.handle(hb(0, 1.0, held={0: 3.0}), 1.0, Rng())
    r.handle(hb(1, 1.0, held={0: 2.5, 7: 1.0}), 1.0, Rng())       # job 7: not the RM's (ended): not counted
    for s in (2, 3):
        r.handle(hb(s, 1.0), 1.0, Rng())
    assert r.held(0) == 5.5 and r.holding() == {"root": 5.5}
    r.handle(hb(0, 2.0, held={0: 1.0}), 2.0, Rng())               # the newest heartbeat replaces the last
    assert r.held(0) == 3.5
    r.validate()
    r.handle(PeerLost("pn:0"), 7.5, Rng())                        # server 0's PN is gone: dead
    assert not r.alive[0] and r.held(0) == 2.5
    r.validate()


def test_a_job_of_a_queue_below_its_guarantee_is_admitted_at_once_and_the_borrower_cut_in_that_round():
    tree = QueueTree.parse({"sharing": "capacity", "queues": {"a": {"guarantee": "70%"},
                                                             "b": {"guarantee": "25%", "reclaim_timeout_s": 10}}},
                           source="q.toml")
    r = rm(queues=tree)
    for s in range(4):
        r.handle(hb(s, 0.1), 0.1, Rng())
    big = one_task_job("big", tasks=100)
    big.queue = "a"
    assert sent(r.handle(SubmitJob(-1, big, "c"), 1.0, Rng()), StartJob)[0].tokens == 16   # borrows all 16
    for s in range(4):
        r.handle(hb(s, 1.5, held={0: 4.0}), 1.5, Rng())
    small = one_task_job("small", tasks=10)
    small.queue = "b"
    out = r.handle(SubmitJob(-1, small, "c"), 2.0, Rng())
    (start,) = sent(out, StartJob)
    assert start.job_id == 1 and start.tokens == 4 and sent(out, JobAccepted)[0].reason == ""   # not "waiting"
    (cut,) = sent(out, ReclaimTokens)
    assert cut.job_id == 0 and cut.tokens == 12 and cut.keep == 12 and cut.within_s == 10.0
    r.validate()
