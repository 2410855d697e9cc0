"""The sharing plane end to end: delay scheduling, slot offers, give-backs at the JM, and seeded
simulations with queue files whose every actor (and every RM allocation) is validated after
every event."""
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as hs

from apollo.core.cluster import NODE, RACK, REMOTE, Topology
from apollo.core.effects import Send, SetTimer, Timer
from apollo.core.lifecycle import TaskState
from apollo.core.messages import (DemoteTask, Dispatch, KillTask, ReclaimTokens, StatusBatch, TaskReport, TokenGrant,
                             UpgradeTask, YieldJob)
from apollo.tools.simulate import SimConfig, run_simulation
from apollo.core.spec import JobSpec, StageSpec
from apollo.workloads import load_workload
from apollo.workloads.assign import assign
from jm.policies.delay import DelayScheduling, DelayState, allowed_level
from jm.config import PlacementConfig
from jm.state import JmConfig, JmState
from jm.view import ViewCache
from rm.queues import load_queue_file
from rm.state import KEEP_ALL

from helpers import Rng, examples

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "queues"
TOPO = Topology(20, 4, cores=2.0)


def sent(out, kind):
    return [e for e in out if isinstance(e, Send) and isinstance(e.msg, kind)]


# ---- delay scheduling ------------------------------------------------------------------------

def test_delay_levels_widen_with_the_wait_and_a_launch_resets_them():
    st = DelayState()
    st.since = 10.0
    assert allowed_level(st, 10.0, 2.0, 3.0) == NODE
    assert allowed_level(st, 11.9, 2.0, 3.0) == NODE
    assert allowed_level(st, 12.0, 2.0, 3.0) == RACK
    assert allowed_level(st, 15.0, 2.0, 3.0) == REMOTE
    f = DelayScheduling()
    f.dispatched(st, np.array([RACK]), 15.0)          # launched rack-local: level 1, wait restarts
    assert st.level == RACK and st.since is None
    st.since = 20.0
    assert allowed_level(st, 20.0, 2.0, 3.0) == RACK and allowed_level(st, 23.0, 2.0, 3.0) == REMOTE
    f.dispatched(st, np.array([REMOTE, NODE]), 24.0)  # a node-local launch: back to waiting for node
    assert st.level == NODE


@settings(max_examples=examples(200), deadline=None)
@given(w1=hs.floats(0, 20), w2=hs.floats(0, 20),
       steps=hs.lists(hs.tuples(hs.floats(0, 10), hs.sampled_from([None, NODE, RACK, REMOTE])), max_size=30))
def test_no_task_waits_past_w1_plus_w2(w1, w2, steps):
    """Whatever launches happened, once a job has waited W1 + W2 it may take any free slot."""
    st = DelayState()
    f = DelayScheduling()
    now = 0.0
    for dt, launched in steps:
        now += dt
        if st.since is None:
            st.since = now                      # a pass that found nothing it would take
        if now - st.since >= w1 + w2:
            assert allowed_level(st, now, w1, w2) == REMOTE
        if launched is not None:
            f.dispatched(st, np.array([launched]), now)


def delay_jm(now_free, w1=1.0, w2=1.0):
    """A hfs-delay JM of one 1-task job whose input lives on servers 0, 5, 10 (replicas of
    block 0 of dataset "d"); only the servers in ``now_free`` have a free core."""
    v = ViewCache(20, cores=2.0)
    v.matrices[:] = 1e9                       # nothing fits anywhere ...
    v.stamps[:] = 0.0
    for s in now_free:
        v.matrices[s] = 0.0                   # ... but on these
    spec = JobSpec("j", [StageSpec("map", 1, np.ones(1), input_bytes=np.full(1, 1e8), dataset="d")])
    cfg = JmConfig(topology=TOPO, policy="hfs-delay", placement=PlacementConfig(delay_node_s=w1, delay_rack_s=w2))
    j = JmState(1, spec, 1, 0.0, cfg, v)
    return j, TOPO.replicas("d", np.arange(1))[0].tolist()


def test_hfs_delay_holds_a_task_for_a_local_slot_then_takes_any():
    j, reps = delay_jm([])
    far = next(s for s in range(20) if TOPO.rack_of[s] not in {TOPO.rack_of[r] for r in reps})
    j.view.matrices[far] = 0.0                          # the only free slot: another rack
    out = j.start(0.0, Rng())
    assert not sent(out, Dispatch)                      # held: waiting for a node-local slot
    wake = [e.delay for e in out if isinstance(e, SetTimer) and e.key == "retry"]
    assert wake and wake[0] <= 1.0 + 1e-9
    out = j.handle(Timer("retry"), 1.5, Rng())           # past W1: rack-local allowed, none free
    assert not sent(out, Dispatch)
    out = j.handle(Timer("retry"), 2.0, Rng())           # past W1 + W2: any free slot
    (d,) = sent(out, Dispatch)
    assert d.to == f"pn:{far}" and d.msg.tasks[0].locality == REMOTE
    j.validate()


def test_hfs_delay_takes_a_node_local_slot_at_once():
    j, reps = delay_jm([])
    j.view.matrices[reps[1]] = 0.0
    (d,) = sent(j.start(0.0, Rng()), Dispatch)
    assert d.to == f"pn:{reps[1]}" and d.msg.tasks[0].locality == NODE


def test_slot_offers_give_each_slot_to_the_closest_task():
    """Two tasks, one free slot holding task 1's input: task 1 gets it, task 0 waits."""
    v = ViewCache(20, cores=2.0)
    v.matrices[:] = 1e9
    v.stamps[:] = 0.0
    spec = JobSpec("j", [StageSpec("map", 2, np.ones(2), input_bytes=np.full(2, 1e8), dataset="e")])
    reps = TOPO.replicas("e", np.arange(2))
    target = next(int(s) for s in reps[1] if s not in reps[0])
    v.matrices[target] = 0.0
    v.matrices[target, 4:] = 1e9                        # one core free there, not two
    cfg = JmConfig(topology=TOPO, policy="hfs-delay", placement=PlacementConfig(delay_node_s=0.0, delay_rack_s=0.0))
    j = JmState(1, spec, 2, 0.0, cfg, v)
    (d,) = sent(j.start(0.0, Rng()), Dispatch)
    assert d.to == f"pn:{target}" and [t.task for t in d.msg.tasks] == [1]


# ---- give-backs at the JM ----------------------------------------------------------------------

def running_jm(n=6):
    v = ViewCache(20, cores=2.0)
    spec = JobSpec("j", [StageSpec("s", n, np.full(n, 30.0))])
    j = JmState(1, spec, n, 0.0, JmConfig(topology=TOPO, policy="greedy"), v)
    j.start(0.0, Rng())
    return j


def report(j, t, state, detail="", now=1.0):
    """The PN of task ``t``'s attempt reports it in ``state``."""
    rep = TaskReport(1, t, int(j.tasks.attempt[t]), int(state), now, now, 0, detail)
    return j.handle(StatusBatch(1, int(j.tasks.server[t]), [rep], np.zeros(12, np.float32), now), now, Rng())


def test_a_reclaim_tells_every_server_of_the_job_to_yield_at_the_deadline_and_no_more_once_within():
    j = running_jm()
    servers = sorted(set(j.tasks.server.tolist()))
    out = j.handle(ReclaimTokens(1, 2, 4, 10.0), 1.0, Rng())
    assert not sent(out, KillTask)                      # the PNs kill, at the deadline, for waiting work
    marks = sent(out, YieldJob)
    assert sorted(int(e.to[3:]) for e in marks) == servers and all(e.msg.after_s == 10.0 for e in marks)
    assert [e.delay for e in out if isinstance(e, SetTimer) and e.key == "reclaim"] == [10.0]
    again = j.handle(Timer("reclaim"), 11.0, Rng())      # the deadline: every server told again
    assert sorted(int(e.to[3:]) for e in sent(again, YieldJob)) == servers
    assert all(e.msg.after_s == 0.0 for e in sent(again, YieldJob))
    out = report(j, 5, TaskState.READY, "preempted", 11.5)      # a PN preempted one: 5 held, still above 4
    assert not sent(out, YieldJob) and not sent(out, KillTask)
    out = report(j, 4, TaskState.READY, "preempted", 11.6)      # back within the kill line: no longer
    offs = sent(out, YieldJob)
    assert sorted(int(e.to[3:]) for e in offs) == servers and all(e.msg.after_s < 0 for e in offs)
    assert j.tasks.used_tokens == 4 and not sent(out, KillTask)
    j.validate()


def test_a_give_back_no_longer_owed_is_called_off_at_the_servers():
    j = running_jm()
    out = j.handle(ReclaimTokens(1, 3, 3, 10.0), 1.0, Rng())
    assert sent(out, YieldJob) and not sent(out, KillTask)
    out = j.handle(ReclaimTokens(1, 3, KEEP_ALL, 0.0), 5.0, Rng())      # the shortfall was met meanwhile
    offs = sent(out, YieldJob)
    assert offs and all(e.msg.after_s < 0 for e in offs)
    assert not sent(j.handle(Timer("reclaim"), 11.0, Rng()), YieldJob)
    j.validate()


def test_a_job_cut_below_its_attempts_demotes_its_queued_ones_and_places_them_again_when_a_token_frees():
    j = running_jm()
    for t in (3, 4, 5):
        report(j, t, TaskState.DISPATCHED, "queued", 1.5)         # three are queued at their PNs
    j.tasks.dispatch_t[:] = np.arange(6.0)
    out = j.handle(TokenGrant(1, 4, 0), 2.0, Rng())
    assert sorted(e.msg.task for e in sent(out, DemoteTask)) == [4, 5]   # the most recent queued, as many as over
    report(j, 5, TaskState.DISPATCHED, "demoted", 2.1)
    report(j, 4, TaskState.DISPATCHED, "demoted", 2.1)
    assert j.tasks.used_tokens == 4 and j.tasks.outstanding_opp == 2 and bool(j.tasks.opp[4]) and bool(j.tasks.opp[5])
    j.validate()
    # a token frees: a demoted one, still queued, is taken back and placed again as a regular one
    # (upgraded where it waits, it would stay behind that server's regular work)
    out = report(j, 0, TaskState.DONE, "", 3.0)
    assert not sent(out, UpgradeTask)
    (kill,) = sent(out, KillTask)
    assert kill.msg.task in (4, 5) and [t.task for e in sent(out, Dispatch) for t in e.msg.tasks] == [kill.msg.task]
    assert j.tasks.used_tokens == 4 and j.tasks.outstanding_opp == 1
    j.validate()


# ---- seeded simulations with queue files, every actor validated after every event ------------

@pytest.mark.parametrize("queues,sched", [pytest.param("three-pools.toml", "hfs-delay", marks=pytest.mark.slow),
                                          pytest.param("three-pools.toml", "apollo", marks=pytest.mark.slow),
                                          ("capacity-70-30.toml", "fifo")])
def test_seeded_simulation_with_queues_keeps_every_invariant(queues, sched):
    tree = load_queue_file(EXAMPLES / queues)
    w = load_workload("heavytail:jobs=40", seed=4)
    assign(w, [q.path for q in tree.leaves()], "size:small=5,medium=20" if "pools" in queues else "random:users=3",
           seed=4)
    cfg = SimConfig(servers=12, racks=2, cores=2.0, scheduler=sched, seed=4, queues=tree, check=True)
    w.scaled_to_load(1.2, 24.0)                       # oversubscribed: queues wait, shares bind
    r = run_simulation(w, cfg)
    assert r["jobs"]["completed"] == 40 and r["jobs"]["failed"] == 0
    assert set(r["queues"]) == {q.path for q in tree.leaves()}
    assert sum(q["jobs"] for q in r["queues"].values()) == 40
    assert all(q["jobs"] > 0 for q in r["queues"].values())
    assert 0 <= r["fairness"]["queue_jain_index"] <= 1


def test_same_seed_same_report_with_queues():
    tree = load_queue_file(EXAMPLES / "three-pools.toml")

    def once():
        w = load_workload("heavytail:jobs=30", seed=2)
        assign(w, [q.path for q in tree.leaves()], "size:small=5,medium=20", seed=2)
        r = run_simulation(w, SimConfig(servers=16, racks=2, scheduler="hfs-delay", seed=2, queues=tree))
        r.pop("throughput")
        return r
    assert once() == once()
