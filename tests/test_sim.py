"""Seeded end-to-end simulations through the real actors (every actor's validate() after every
event: conftest.py)."""
import json

import numpy as np
import pytest

from apollo.tools.simulate import SimConfig, run_simulation
from apollo.core.spec import JobSpec, StageSpec, Workload
from apollo.workloads import load_workload
from helpers import interpreted_only, profiles


def strip(report):
    r = dict(report)
    r.pop("throughput")
    return json.dumps(r, sort_keys=True)


def small(seed=0):
    return load_workload("dag:jobs=12", seed=seed)


@pytest.mark.parametrize("sched", profiles())
def test_every_job_completes_under_every_scheduler(sched):
    w = small()
    r = run_simulation(w, SimConfig(servers=30, racks=3, scheduler=sched, seed=3, check=True))
    assert r["jobs"] == {"submitted": 12, "completed": 12, "failed": 0, "refused": 0}
    assert r["tasks"]["completed"] == w.total_tasks
    assert set(r) >= {"schema", "mode", "workload", "cluster", "scheduler", "jobs", "tasks",
                      "job_completion_s", "small_job_completion_s", "task_queue_delay_s", "locality",
                      "utilization", "fairness", "throughput", "sim_time_s"}


@pytest.mark.parametrize("sched", [p if p == "apollo" else pytest.param(p, marks=pytest.mark.slow)
                                   for p in profiles()])          # three runs each: apollo's in the fast tier
def test_same_seed_same_report_and_wire_changes_nothing(sched):
    cfg = SimConfig(servers=30, racks=3, seed=5, fail_prob=0.05, scheduler=sched)
    a = run_simulation(small(1), cfg)
    b = run_simulation(small(1), cfg)
    assert strip(a) == strip(b)
    cfg.wire = False
    c = run_simulation(small(1), cfg)
    assert strip(c).replace('"wire": false', '"wire": true') == strip(a)


@pytest.mark.parametrize("sched", profiles())
def test_pn_crashes_and_task_failures_still_complete_every_job(sched):
    w = load_workload("heavytail:jobs=30", seed=2)
    crashes = [(5.0, s, 200.0) for s in range(0, 12, 2)] + [(30.0, 1, 5.0)]
    r = run_simulation(w, SimConfig(servers=24, racks=4, seed=2, crashes=crashes, fail_prob=0.02,
                                    scheduler=sched))
    assert r["jobs"]["completed"] == 30 and r["jobs"]["failed"] == 0
    assert r["tasks"]["failed"] > 0


def test_task_that_always_fails_fails_its_job_with_reason():
    good = JobSpec("good", [StageSpec("s", 2, np.ones(2))])
    bad = JobSpec("bad", [StageSpec("s", 1, np.ones(1))], max_retries=2, arrival_s=1.0)
    r = run_simulation(Workload("w", [good, bad]), SimConfig(servers=4, racks=1, fail_prob=1.0))
    assert r["jobs"]["failed"] == 2 and r["tasks"]["failed"] >= 3


def test_oversized_task_is_refused_not_run():
    big = JobSpec("big", [StageSpec("s", 1, np.ones(1), cpu=64)])
    ok = JobSpec("ok", [StageSpec("s", 1, np.ones(1))], arrival_s=1.0)
    r = run_simulation(Workload("w", [big, ok]), SimConfig(servers=4, racks=1))
    assert r["jobs"]["refused"] == 1 and r["jobs"]["completed"] == 1


def test_locality_is_mostly_node_local_with_apollo():
    w = load_workload("smalljobs:jobs=40", seed=1)
    r = run_simulation(w, SimConfig(servers=40, racks=4, seed=1))
    assert r["locality"]["node"] > 0.6


@pytest.mark.slow
def test_real_trace_slice(traces):
    w = load_workload(str(traces / "FB-2009_samples_24_times_1hr_0_first50jobs.tsv"), cluster_servers=50)
    r = run_simulation(w, SimConfig(servers=50, racks=5, seed=1))
    assert r["jobs"]["completed"] == 50


def test_batched_messages_arrive_together_in_order_and_die_with_a_crash():
    from apollo.core.messages import KillTask
    from apollo.runtime.sim import BATCH_WINDOW_S, NetModel, SimRuntime

    class Sink:
        batched = (KillTask,)

        def __init__(self):
            self.got = []

        def handle(self, event, now, rng):
            self.got.append((now, event))
            return []

    rt = SimRuntime(seed=1, net=NetModel(latency_s=0.0002, jitter_s=0.0))
    sink = Sink()
    rt.add("sink", sink, start=False)
    for i in range(3):
        rt.inject("sink", KillTask(1, i, 0))                    # one window: one list, in order
    rt.call_at(0.0001, lambda: rt.crash("sink"))                 # ...lost with the crash
    rt.call_at(0.0002, lambda: rt.restart("sink", sink))
    rt.call_at(0.01, lambda: [rt.inject("sink", KillTask(1, i, 0)) for i in (7, 8)])
    rt.run()
    lists = [(t, [m.task for m in ev]) for t, ev in sink.got if isinstance(ev, list)]
    assert lists == [(pytest.approx(0.010 + BATCH_WINDOW_S), [7, 8])]


def test_rm_restart_recovers_admitted_jobs_from_its_store():
    """The RM keeps nothing durable itself: its Persist effects go to the node's store, which
    outlives a crash; the restarted RM is handed what it holds and re-admits the unfinished
    jobs (the JM host already runs them and keeps going), so every job still completes."""
    from apollo.tools.simulate import build
    from rm.state import RmState
    w = load_workload("dag:jobs=10,gap_s=1.0", seed=4)
    rt, rec, client, meta = build(SimConfig(servers=12, racks=2, seed=4), w)
    rm = rt.slots["rm"].actor
    rt.call_at(3.0, lambda: rt.crash("rm"))
    rt.call_at(3.5, lambda: rt.restart("rm", RmState(rm.cfg, rm.policy)))
    readmitted = []
    rt.call_at(3.5, lambda: readmitted.append(sorted(rt.slots["rm"].actor.jobs)))
    rt.run()
    assert readmitted and readmitted[0], "no job was in flight at the crash: the test shows nothing"
    assert client.finished == 10 and all(d.ok for d in client.results.values())
    rt.stopped = False                  # the client may have heard before the RM: let it hear too
    rt.run(until=rt.now + 1.0)
    new_rm = rt.slots["rm"].actor
    assert new_rm is not rm and new_rm.next_job_id == 10 and not new_rm.jobs
    assert [row[2] for row in rt.slots["rm"].store.all()] == ["done"] * 10


@pytest.mark.slow
def test_long_tasks_probed_while_running_still_complete():
    """Heavy-tailed tasks run long enough for their JM to probe them; a running one's answer
    repeats what the JM knew (this once raised IllegalTransition and stopped the run)."""
    r = run_simulation(load_workload("heavytail:jobs=300", seed=1), SimConfig(servers=300, racks=10, seed=1))
    assert r["jobs"] == {"submitted": 300, "completed": 300, "failed": 0, "refused": 0}


@interpreted_only
def test_a_simulation_in_a_test_validates_every_actor_after_every_event():
    """conftest.py turns the check on for every SimRuntime, whoever builds it: an actor whose
    invariant breaks stops the run at the event that broke it."""
    from apollo.runtime.sim import SimRuntime
    from apollo.core.messages import KillTask

    class Broken:
        def __init__(self):
            self.events = 0

        def handle(self, event, now, rng):
            self.events += 1
            return []

        def validate(self):
            assert self.events < 2, "broken after its second event"

    rt = SimRuntime(seed=1)
    assert rt.check
    rt.add("b", Broken(), start=False)
    for i in range(3):
        rt.inject("b", KillTask(1, i, 0))
    with pytest.raises(AssertionError, match="second event"):
        rt.run()


def test_attempt_log_reads_back_the_rows_it_packed(monkeypatch):
    from apollo.core.records import AttemptLog
    monkeypatch.setattr(AttemptLog, "CHUNK", 4)
    log = AttemptLog()
    assert not log and len(log) == 0 and list(log) == []
    rows = [(i, 0, i % 3, 1, 7 * i - 1, i % 3, 0.5 * i, 1.0, -1.0 if i % 2 else 2.5, 3.25, "done" if i % 4 else "lost",
             bool(i % 2), 1.0, i % 5 == 0, i % 4) for i in range(10)]
    for r in rows:
        log.append(r)
    back = list(log)
    assert len(log) == 10 and back == rows and log[9] == rows[9]
    assert [type(x) for x in back[3]] == [type(x) for x in rows[3]]      # Python numbers, str and bools again
