import numpy as np

from apollo.effects import Persist, Send, SetTimer, Start, Timer
from apollo.messages import (ClusterView, Heartbeat, JobAccepted, JobDemand, JobDone, StartJob, SubmitJob,
                             TokenGrant)
from apollo.spec import JobSpec, StageSpec
from rm.state import RmConfig, RmState
from rm.store import SqliteJobStore
from rm.tokens import EvenSplit, FifoTokens, water_fill

from helpers import Rng


def rm(n=4, policy=None):
    r = RmState(RmConfig(n, 12, dead_after_s=5.0), policy or EvenSplit())
    r.handle(Start(), 0.0, Rng())
    return r


def hb(s, t, w0=0.0, boot=0.0):
    m = np.full(12, w0, np.float32)
    return Heartbeat(s, boot, t, m, 0, 0, 4.0)


def one_task_job(name="j", tasks=4, cpu=1.0):
    return JobSpec(name, [StageSpec("s", tasks, np.ones(tasks), cpu=cpu)])


def test_aggregates_matrices_and_marks_dead_servers():
    r = rm()
    for s in range(4):
        r.handle(hb(s, 1.0, w0=float(s)), 1.0, Rng())
    assert r.alive.sum() == 4 and r.matrices[2, 0] == 2.0
    r.handle(hb(2, 0.5, w0=99.0), 1.1, Rng())        # an older reading arriving late is ignored
    assert r.matrices[2, 0] == 2.0
    for s in (0, 1, 3):
        r.handle(hb(s, 6.5), 6.5, Rng())
    out = r.handle(Timer("tick"), 7.0, Rng())
    view = [e.msg for e in out if isinstance(e, Send) and isinstance(e.msg, ClusterView)][0]
    assert list(view.alive) == [1, 1, 0, 1]
    assert 2 not in view.lightly_loaded.tolist()


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
    assert FifoTokens().allocate([], 16) == {}


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
    assert [type(e) for e in out] == [Persist, Send] and out[1].to == "client"
    assert [row[2] for row in store.all()] == ["done", "running"]
    # A new RM started with what the database holds re-admits the unfinished job only.
    r2 = RmState(RmConfig(4, 12), EvenSplit())
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
    assert many.matrices[0, 0] == 3.0 and many.matrices[1, 0] == 2.0 and many.boot_times[1] == 1.1


def test_admission_gives_free_capacity_up_to_demand_then_an_equal_share():
    r = rm()                                            # 4 servers x 4 cores = 16 tokens
    for s in range(4):
        r.handle(hb(s, 0.1), 0.1, Rng())

    def start_tokens(out):
        return [e.msg.tokens for e in out if isinstance(e, Send) and isinstance(e.msg, StartJob)][0]

    assert start_tokens(r.handle(SubmitJob(-1, one_task_job("a", tasks=6), "c"), 1.0, Rng())) == 6
    # 10 tokens nobody holds: the second job gets its whole demand of 10, not half the cluster.
    assert start_tokens(r.handle(SubmitJob(-1, one_task_job("b", tasks=10), "c"), 1.0, Rng())) == 10
    # The cluster is fully held: an equal share (16 / 3 jobs).
    assert start_tokens(r.handle(SubmitJob(-1, one_task_job("c", tasks=10), "c"), 1.0, Rng())) == 5
    # Job a now needs only 1 and job b is done: 16 - 1 - 5 = 10 tokens are free again.
    r.handle(JobDemand(0, 1, 0), 1.5, Rng())
    r.handle(JobDone(1, True, "", 2.0, 10), 2.0, Rng())
    r.validate()
    assert start_tokens(r.handle(SubmitJob(-1, one_task_job("d", tasks=8), "c"), 2.0, Rng())) == 8
    r.validate()
    out = r.handle(Timer("tick"), 2.5, Rng())           # the tick re-balances to exact fair shares
    grants = {e.msg.job_id: e.msg.tokens for e in out if isinstance(e, Send) and isinstance(e.msg, TokenGrant)}
    assert grants == {0: 1, 2: 7, 3: 7}          # water-fill of 16 over demands 1, 10, 8
    r.validate()
