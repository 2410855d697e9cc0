"""PN state: event in, effects out."""
import numpy as np
import pytest

from apollo.core.effects import Kill, Launch, Send, SetTimer, Start, TaskExited, Timer
from apollo.core.lifecycle import TaskState
from apollo.core.messages import Dispatch, Heartbeat, KillTask, StatusBatch, YieldJob
from apollo.core.shapes import ShapeGrid
from pn.state import NEVER_S, PnConfig, PnState

from helpers import Rng, task


def pn(cores=4.0, mem=16.0):
    p = PnState(3, PnConfig(cores=cores, mem_gb=mem))
    p.handle(Start(), 0.0, Rng())
    return p


def kinds(effects):
    return [type(e).__name__ for e in effects]


def test_start_sends_heartbeat_and_arms_liveness():
    p = PnState(3, PnConfig())
    out = p.handle(Start(), 5.0, Rng())
    hb = [e for e in out if isinstance(e, Send)][0]
    assert hb.to == "rm" and isinstance(hb.msg, Heartbeat)
    assert hb.msg.boot_time == 5.0 and hb.msg.server == 3
    assert np.all(np.asarray(hb.msg.matrix)[:3] == 0.0)
    assert not any(isinstance(e, SetTimer) for e in out)      # a quiet server arms nothing


def test_dispatch_to_idle_server_launches_at_once():
    p = pn()
    out = p.handle(Dispatch(1, [task(t=0)]), 1.0, Rng())
    launches = [e for e in out if isinstance(e, Launch)]
    assert len(launches) == 1 and launches[0].task.key == (1, 0, 1)
    assert p.free_cpu == 3.0
    p.validate()


def test_fifo_queue_then_start_on_exit_reports_running():
    p = pn(cores=1.0)
    p.handle(Dispatch(1, [task(t=0, est=10)]), 0.0, Rng())
    out = p.handle(Dispatch(1, [task(t=1, est=5)]), 0.0, Rng())
    assert not any(isinstance(e, Launch) for e in out)
    assert len(p.queue) == 1
    p.handle(Timer("queued"), p.cfg.queued_report_s, Rng())     # told its JM it is queued
    out = p.handle(TaskExited((1, 0, 1), True), 10.0, Rng())
    assert [e.task.key for e in out if isinstance(e, Launch)] == [(1, 1, 1)]
    batch = [e.msg for e in out if isinstance(e, Send) and isinstance(e.msg, StatusBatch)][0]
    states = {(r.task, r.state) for r in batch.reports}
    assert (0, int(TaskState.DONE)) in states and (1, int(TaskState.RUNNING)) in states
    p.validate()


def test_backfill_small_task_fills_gap_without_delaying_head():
    p = pn(cores=4.0)
    p.handle(Dispatch(1, [task(t=0, cpu=3, est=100)]), 0.0, Rng())        # runs, 1 core left
    p.handle(Dispatch(1, [task(t=1, cpu=4, est=10)]), 0.0, Rng())         # must wait for t=100
    out = p.handle(Dispatch(1, [task(t=2, cpu=1, est=50)]), 0.0, Rng())   # fits the gap, ends by 100
    assert [e.task.key for e in out if isinstance(e, Launch)] == [(1, 2, 1)]
    out = p.handle(Dispatch(1, [task(t=3, cpu=1, est=500)]), 0.0, Rng())  # would delay the 4-core task
    assert not any(isinstance(e, Launch) for e in out)


def test_task_larger_than_server_is_refused_with_reason():
    p = pn(cores=2.0)
    out = p.handle(Dispatch(7, [task(job=7, t=0, cpu=3)]), 0.0, Rng())
    rep = [e.msg for e in out if isinstance(e, Send) and isinstance(e.msg, StatusBatch)][0].reports[0]
    assert rep.state == int(TaskState.FAILED) and "needs 3" in rep.detail


def test_non_positive_resources_are_refused():
    p = pn()
    out = p.handle(Dispatch(7, [task(job=7, t=0, cpu=-1.0)]), 0.0, Rng())
    rep = [e.msg for e in out if isinstance(e, Send) and isinstance(e.msg, StatusBatch)][0].reports[0]
    assert rep.state == int(TaskState.FAILED) and p.free_cpu == 4.0
    p.validate()


def test_matrix_monotone_and_never_for_oversized():
    p = pn(cores=4.0, mem=16.0)
    p.handle(Dispatch(1, [task(t=0, cpu=2, est=30), task(t=1, cpu=1, est=10)]), 0.0, Rng())
    m = p.matrix(0.0).reshape(3, 4)
    assert m[0, 0] == 0.0          # one core free now
    assert m[2, 0] == pytest.approx(30.0)   # four cores only after the 30 s task
    assert np.all(np.diff(m, axis=0) >= 0) and np.all(np.diff(m, axis=1) >= 0)
    big = PnState(0, PnConfig(cores=2.0, mem_gb=4.0))
    big.handle(Start(), 0.0, Rng())
    assert big.matrix(0.0).reshape(3, 4)[2, 0] == pytest.approx(NEVER_S)


def test_matrix_shrinks_with_time_without_replanning():
    p = pn(cores=1.0)
    p.handle(Dispatch(1, [task(t=0, est=10)]), 0.0, Rng())
    assert p.matrix(0.0)[0] == pytest.approx(10.0)
    assert p.matrix(4.0)[0] == pytest.approx(6.0)


def test_kill_running_and_queued():
    p = pn(cores=1.0)
    p.handle(Dispatch(1, [task(t=0), task(t=1)]), 0.0, Rng())
    out = p.handle(KillTask(1, 0, 1), 1.0, Rng())
    assert any(isinstance(e, Kill) and e.task_key == (1, 0, 1) for e in out)
    assert [e.task.key for e in out if isinstance(e, Launch)] == [(1, 1, 1)]
    p.validate()


def test_opportunistic_runs_on_idle_and_is_preempted_by_regular():
    p = pn(cores=1.0)
    out = p.handle(Dispatch(1, [task(t=0, opp=True, est=100)]), 0.0, Rng())
    assert [e.task.key for e in out if isinstance(e, Launch)] == [(1, 0, 1)]
    out = p.handle(Dispatch(2, [task(job=2, t=0, est=5)]), 1.0, Rng())
    assert any(isinstance(e, Kill) and e.task_key == (1, 0, 1) for e in out)
    assert [e.task.key for e in out if isinstance(e, Launch)] == [(2, 0, 1)]
    reps = {e.msg.job_id: e.msg.reports for e in out if isinstance(e, Send) and isinstance(e.msg, StatusBatch)}
    assert reps[1][0].state == int(TaskState.READY) and reps[1][0].detail == "preempted"
    p.validate()


def test_queue_change_schedules_an_early_heartbeat():
    p = pn()
    out = p.handle(Dispatch(1, [task(t=0)]), 2.0, Rng())
    assert any(isinstance(e, SetTimer) and e.key == "hb" and e.delay == p.cfg.heartbeat_s for e in out)
    out = p.handle(Timer("hb"), 3.0, Rng())
    assert isinstance(out[0].msg, Heartbeat) and out[0].msg.running == 1


def test_shape_index():
    grid = ShapeGrid((1.0, 2.0, 4.0), (2.0, 4.0, 8.0, 16.0))
    assert grid.index(1, 2) == 0
    assert grid.index(1.5, 3) == 1 * 4 + 1
    assert grid.index(64, 64) == 11
    assert grid.size == 12


def test_a_task_past_its_estimate_is_planned_to_run_on_and_reported_again():
    p = pn(cores=1.0)
    p.handle(Dispatch(1, [task(t=0, est=10.0, dur=100.0)]), 0.0, Rng())
    assert p.matrix(5.0)[0] == pytest.approx(5.0)       # planned end at 10 s
    # A busy server looks again a heartbeat later; with nothing changed by then it stays quiet
    # until the plan turns wrong (the estimate runs out).
    out = p.handle(Timer("hb"), 1.0, Rng())
    assert [type(e.msg) for e in out if isinstance(e, Send)] == [Heartbeat]
    assert [e.delay for e in out if isinstance(e, SetTimer)] == [p.cfg.heartbeat_s]
    out = p.handle(Timer("hb"), 2.0, Rng())
    assert not [e for e in out if isinstance(e, Send)]
    assert [e.delay for e in out if isinstance(e, SetTimer)] == [pytest.approx(8.0)]
    out = p.handle(Timer("hb"), 10.0, Rng())
    assert [type(e.msg) for e in out if isinstance(e, Send)] == [Heartbeat]
    # Past the estimate: not "free now" but still busy, for a fraction of the time it has run.
    w = p.matrix(20.0)[0]
    assert w == pytest.approx(p.cfg.overrun_factor * 20.0, abs=0.01)


def test_tasks_still_queued_after_a_while_are_reported_queued():
    p = pn(cores=1.0)
    out = p.handle(Dispatch(1, [task(t=0, est=10), task(t=1), task(t=2)]), 0.0, Rng())
    assert not [e for e in out if isinstance(e, Send) and isinstance(e.msg, StatusBatch)]
    assert [e.delay for e in out if isinstance(e, SetTimer) and e.key == "queued"] == [p.cfg.queued_report_s]
    later = p.handle(Dispatch(1, [task(t=3)]), 0.5, Rng())        # the timer is armed already
    assert not [e for e in later if isinstance(e, SetTimer) and e.key == "queued"]
    out = p.handle(Timer("queued"), 1.0, Rng())
    sb = [e.msg for e in out if isinstance(e, Send) and isinstance(e.msg, StatusBatch)]
    assert len(sb) == 1 and [(r.task, r.state) for r in sb[0].reports] == [(1, int(TaskState.DISPATCHED)),
                                                                          (2, int(TaskState.DISPATCHED))]
    assert [e.delay for e in out if isinstance(e, SetTimer) and e.key == "queued"] == [pytest.approx(0.5)]
    out = p.handle(Timer("queued"), 1.5, Rng())
    sb = [e.msg for e in out if isinstance(e, Send) and isinstance(e.msg, StatusBatch)]
    assert [(r.task, r.state) for r in sb[0].reports] == [(3, int(TaskState.DISPATCHED))]
    # A reported task's start is reported; one that starts before its report is due is not.
    out = p.handle(TaskExited((1, 0, 1), True), 10.0, Rng())
    sb = [e.msg for e in out if isinstance(e, Send) and isinstance(e.msg, StatusBatch)][0]
    assert (1, int(TaskState.RUNNING)) in {(r.task, r.state) for r in sb.reports}
    q = pn(cores=1.0)
    q.handle(Dispatch(1, [task(t=0, est=0.1), task(t=1)]), 0.0, Rng())
    out = q.handle(TaskExited((1, 0, 1), True), 0.1, Rng())
    sb = [e.msg for e in out if isinstance(e, Send) and isinstance(e.msg, StatusBatch)][0]
    assert [(r.task, r.state) for r in sb.reports] == [(0, int(TaskState.DONE))]
    assert [e.task.key for e in out if isinstance(e, Launch)] == [(1, 1, 1)]
    assert q.handle(Timer("queued"), 1.0, Rng()) == []


# ---- give-backs: a job that yields (docs/sharing.md) -----------------------------------------

def test_a_yielding_jobs_queued_attempts_wait_as_opportunistic_and_its_running_room_is_free_at_the_deadline():
    p = pn(cores=2.0, mem=8.0)
    p.handle(Dispatch(1, [task(t=0, est=60), task(t=1, est=60), task(t=2, est=60)]), 0.0, Rng())
    assert len(p.running) == 2 and len(p.queue) == 1
    out = p.handle(YieldJob(1, 10.0), 5.0, Rng())
    reps = [r for e in out if isinstance(e, Send) and isinstance(e.msg, StatusBatch) for r in e.msg.reports]
    assert [(r.task, r.detail) for r in reps] == [(2, "demoted")] and not p.queue and len(p.opp_queue) == 1
    assert any(isinstance(e, SetTimer) and e.key == "yield" and abs(e.delay - 10.0) < 1e-9 for e in out)
    assert abs(p.matrix(5.0)[0] - 10.0) < 1e-3       # a 1-core task would start at the deadline (not in 55 s)
    p.validate()


def test_at_the_deadline_waiting_regular_work_preempts_the_youngest_yielding_attempts_no_more():
    p = pn(cores=2.0, mem=8.0)
    p.handle(Dispatch(1, [task(t=0, est=60)]), 0.0, Rng())
    p.handle(Dispatch(1, [task(t=1, est=60)]), 1.0, Rng())                 # the younger of job 1's two
    p.handle(YieldJob(1, 10.0), 5.0, Rng())
    out = p.handle(Dispatch(2, [task(job=2, t=0, est=5)]), 6.0, Rng())      # another job's task waits
    assert not [e for e in out if isinstance(e, Kill)] and len(p.queue) == 1
    out = p.handle(Timer("yield"), 15.0, Rng())
    assert [e.task_key for e in out if isinstance(e, Kill)] == [(1, 1, 1)]   # the youngest, and only it
    assert [e.task.key for e in out if isinstance(e, Launch)] == [(2, 0, 1)]
    assert any(isinstance(e, Send) and isinstance(e.msg, Heartbeat) for e in out)   # the RM hears at once
    reps = {(e.msg.job_id, r.task, r.detail) for e in out if isinstance(e, Send) and isinstance(e.msg, StatusBatch)
            for r in e.msg.reports}
    assert (1, 1, "preempted") in reps
    p.validate()
    # no longer yielding: its last attempt stays, even for more regular work
    p.handle(YieldJob(1, -1.0), 16.0, Rng())
    out = p.handle(Dispatch(3, [task(job=3, t=0, est=5)]), 17.0, Rng())
    assert not [e for e in out if isinstance(e, Kill)] and (1, 0, 1) in p.running
    p.validate()


def test_at_the_deadline_a_duplicate_preempts_no_yielding_attempt_its_first_attempt_would():
    """A kill is for a task's token, which its first attempt holds: a duplicate waiting for a
    yielding attempt's room waits (its first attempt, waiting elsewhere, kills for the task)."""
    from apollo.core.lifecycle import AttemptKind
    for kind, kills in ((int(AttemptKind.DUPLICATE), 0), (0, 1)):
        p = pn(cores=2.0, mem=8.0)
        p.handle(Dispatch(1, [task(t=0, est=60), task(t=1, est=60)]), 0.0, Rng())
        p.handle(YieldJob(1, 10.0), 5.0, Rng())
        s = task(job=2, t=0, est=5)
        s.kind = kind
        if kind:
            s.attempt = 1 << 15 | 1
        p.handle(Dispatch(2, [s]), 6.0, Rng())
        out = p.handle(Timer("yield"), 15.0, Rng())
        assert len([e for e in out if isinstance(e, Kill)]) == kills
        assert len([e for e in out if isinstance(e, Launch)]) == kills and len(p.queue) == 1 - kills
        p.validate()
        if kind:     # it starts when room frees otherwise
            out = p.handle(TaskExited((1, 0, 1), True, 0, ""), 20.0, Rng())
            assert [e.task.key for e in out if isinstance(e, Launch)] == [s.key] and not p.queue
            p.validate()


def test_a_heartbeat_says_what_each_jobs_regular_attempts_hold():
    p = pn(cores=4.0)
    p.handle(Dispatch(1, [task(t=0, cpu=1), task(t=1, cpu=2)]), 0.0, Rng())
    p.handle(Dispatch(2, [task(job=2, t=0, cpu=1, opp=True)]), 0.0, Rng())
    hb = next(e.msg for e in p.handle(Timer("hb"), 5.0, Rng()) if isinstance(e, Send) and isinstance(e.msg, Heartbeat))
    assert dict(zip(hb.jobs, hb.job_cpus)) == {1: 3.0}          # an opportunistic attempt holds nothing


def test_an_overrunning_task_is_reported_once_with_how_its_reading_grows():
    """Issue 30: a task past its planned end costs one report, not one every few seconds; the
    report's ``grow`` lets receivers extrapolate the reading as the PN would plan it."""
    p = pn(cores=1.0)
    p.handle(Dispatch(1, [task(t=0, est=10.0, dur=1000.0)]), 0.0, Rng())
    p.handle(Timer("hb"), 1.0, Rng())                       # the change reported
    out = p.handle(Timer("hb"), 2.0, Rng())                 # quiet until the planned end
    assert [e.delay for e in out if isinstance(e, SetTimer)] == [pytest.approx(8.0)]
    out = p.handle(Timer("hb"), 10.0, Rng())
    (hb,) = [e.msg for e in out if isinstance(e, Send)]
    assert hb.grow == p.cfg.overrun_factor
    out = p.handle(Timer("hb"), 11.0, Rng())                # (a busy server looks once more)
    assert not [e for e in out if isinstance(e, (Send, SetTimer))]   # nothing more is due while it runs
    # What a receiver extrapolates (wait + grow x elapsed) is what the PN would plan then.
    w0 = hb.matrix[0]
    for t in (15.0, 100.0, 900.0):
        assert p.matrix(t)[0] == pytest.approx(w0 + hb.grow * (t - 10.0), rel=1e-4)
    # The task's end is a change: reported, counting down again.
    out = p.handle(TaskExited((1, 0, 1), True), 1000.0, Rng())
    out += p.handle(Timer("hb"), 1001.0, Rng())
    (hb,) = [e.msg for e in out if isinstance(e, Send) and isinstance(e.msg, Heartbeat)]
    assert hb.grow == -1.0 and hb.running == 0


def test_a_reading_on_fixed_ends_counts_down_and_the_next_planned_end_is_reported():
    p = pn(cores=2.0)
    p.handle(Dispatch(1, [task(t=0, est=10.0, dur=1000.0), task(t=1, est=30.0, dur=1000.0)]), 0.0, Rng())
    out = p.handle(Timer("hb"), 1.0, Rng())
    (hb,) = [e.msg for e in out if isinstance(e, Send)]
    assert hb.grow == -1.0                                  # both ends fixed
    out = p.handle(Timer("hb"), 10.0, Rng())                # the first passes its planned end
    (hb,) = [e.msg for e in out if isinstance(e, Send)]
    assert hb.grow == p.cfg.overrun_factor
    out = p.handle(Timer("hb"), 11.0, Rng())
    assert [e.delay for e in out if isinstance(e, SetTimer)] == [pytest.approx(19.0)]   # the second's end
    out = p.handle(Timer("hb"), 30.0, Rng())
    assert [type(e.msg) for e in out if isinstance(e, Send)] == [Heartbeat]
    out = p.handle(Timer("hb"), 31.0, Rng())
    assert not [e for e in out if isinstance(e, (Send, SetTimer))]


def test_status_batches_carry_the_readings_grow():
    p = pn(cores=2.0)
    p.handle(Dispatch(1, [task(t=0, est=10.0, dur=1000.0)]), 0.0, Rng())
    p.handle(Timer("hb"), 10.0, Rng())                      # overrunning from here
    p.handle(Dispatch(1, [task(t=1, est=5.0, dur=1.0)]), 12.0, Rng())
    out = p.handle(TaskExited((1, 1, 1), True), 13.0, Rng())
    (sb,) = [e.msg for e in out if isinstance(e, Send) and isinstance(e.msg, StatusBatch)]
    assert sb.matrix_time == 10.0 and sb.grow == p.cfg.overrun_factor   # the last reading, as it moves


def test_a_server_holding_only_opportunistic_work_reads_free_soon_and_is_not_reported_again():
    """Its room is advertised as free within opportunistic_room_s, counted down by receivers to
    free (a slot scheduler may use it): no report falls due while the task runs."""
    p = pn(cores=1.0)
    p.handle(Dispatch(1, [task(t=0, est=60.0, dur=60.0, opp=True)]), 0.0, Rng())
    out = p.handle(Timer("hb"), 1.0, Rng())
    (hb,) = [e.msg for e in out if isinstance(e, Send)]
    assert hb.grow == -1.0 and hb.matrix[0] == pytest.approx(p.cfg.opportunistic_room_s)
    out = p.handle(Timer("hb"), 2.0, Rng())
    assert not [e for e in out if isinstance(e, (Send, SetTimer))]
