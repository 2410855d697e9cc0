"""jm.single and JmState's one-task steps (plain floats) against the vectorised placement and
dispatch: the same answers."""
import dataclasses
import functools
import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as hs

from apollo.tools import simulate

from apollo.core.cluster import IoModel, Topology
from apollo.core.effects import Timer
from apollo.core.shapes import ShapeGrid
from apollo.tools.simulate import SimConfig, run_simulation
from apollo.core.spec import JobSpec, StageSpec
from apollo.core.stragglers import DOLLY
from apollo.workloads import load_workload
from apollo.core.lifecycle import TaskState
from apollo.core.messages import Holding, StatusBatch, TaskReport
from jm.config import DispatchConfig, PlacementConfig
from jm.state import JmConfig, JmState

DISPATCHED, RUNNING, DONE, FAILED = TaskState.DISPATCHED, TaskState.RUNNING, TaskState.DONE, TaskState.FAILED
from jm.view import ViewCache
from helpers import examples

GRID = ShapeGrid((1.0, 2.0, 4.0), (2.0, 4.0, 8.0, 16.0))
CPU_GRID, MEM_GRID = GRID.cpu, GRID.mem


def scene(seed: int, servers: int, racks: int, policy: str, with_input: bool, failures: bool):
    g = np.random.default_rng(seed)
    topo = Topology(servers, racks, 4.0, 16.0)
    view = ViewCache(servers, GRID)
    shapes = len(CPU_GRID) * len(MEM_GRID)
    # Waits that grow with the shape (as PNs report), some zero, some "never fits".
    base = np.where(g.random(servers) < 0.3, 0.0, g.exponential(5.0, servers))
    view.matrices[:] = (base[:, None] + np.sort(g.exponential(1.0, (servers, shapes)), axis=1)
                        * (g.random((servers, 1)) < 0.7)).astype(np.float32)
    small = g.random(servers) < 0.4          # servers too small for the bigger shapes
    view.matrices[np.ix_(small, np.arange(len(MEM_GRID), shapes))] = 1e9
    view.stamps[:] = g.uniform(0.0, 20.0, servers)
    view.time = float(g.uniform(0.0, 20.0))
    view.alive[:] = g.random(servers) < g.choice([0.3, 0.9])
    view.lightly_loaded = np.sort(g.choice(servers, size=max(1, servers // 5), replace=False)).astype(np.int32)
    view.sent_at[:] = np.where(g.random(servers) < 0.5, g.uniform(0.0, 25.0, servers), -np.inf)
    view.sent_wait[:] = g.exponential(2.0, servers)
    view.sent_cpu[:] = g.integers(0, 4, servers).astype(float)
    stage = StageSpec("s", 1, np.array([float(g.exponential(3.0))]), cpu=float(g.choice([1.0, 2.0, 4.0])),
                      mem_gb=float(g.choice([1.0, 3.0, 12.0])),
                      input_bytes=np.array([float(g.exponential(3e8))]) if with_input else None,
                      dataset="d" if with_input else None)
    cfg = JmConfig(topology=topo, policy=policy, io=IoModel(), grid=GRID)
    jm = JmState(1, JobSpec("j", [stage]), 4, 0.0, cfg, view)
    if failures:
        for s in g.choice(servers, size=3):
            jm.placement.note_failure(int(s))
    return jm, cfg, float(g.uniform(15.0, 30.0))


@settings(max_examples=examples(300), deadline=None)
@given(seed=hs.integers(0, 2**32 - 1), servers=hs.integers(1, 60), racks=hs.integers(1, 6),
       policy=hs.sampled_from(["apollo", "greedy"]), with_input=hs.booleans(), failures=hs.booleans(),
       defer=hs.sampled_from([0.0, 1.0, 30.0]))
def test_one_task_placement_equals_the_vectorised_one(seed, servers, racks, policy, with_input, failures, defer):
    racks = min(racks, servers)
    jm, cfg, now = scene(seed, servers, racks, policy, with_input, failures)
    fast = dataclasses.replace(cfg, placement=PlacementConfig(defer_s=defer))
    slow = dataclasses.replace(fast, placement=PlacementConfig(defer_s=defer, single_fast_path=False))
    ids = np.array([0])
    jm.cfg = fast
    a = jm.placement.place(ids, now, np.random.default_rng(seed))
    jm.cfg = slow
    b = jm.placement.place(ids, now, np.random.default_rng(seed))
    assert a[0].tolist() == b[0].tolist()
    assert a[1].tolist() == b[1].tolist()
    assert a[2].tolist() == b[2].tolist()


def _report(workload: str, cfg: SimConfig) -> str:
    r = run_simulation(load_workload(workload, seed=1), cfg)
    r.pop("throughput")
    return json.dumps(r, sort_keys=True)


@pytest.mark.parametrize("workload,extra", [
    pytest.param("fb2009:jobs=15", dict(fail_prob=0.03, opportunistic=True, slow_fraction=0.2), marks=pytest.mark.slow),
    pytest.param("fb2009:jobs=20", dict(jm_hosts=2, crashes=[(4.0, "jm:0", 2.0)], host_dead_after_s=1.0),
                 marks=pytest.mark.slow),
    ("heavytail:jobs=25", dict(delay=(2.0, 2.0))),
    ("heavytail:jobs=25", dict(stragglers=DOLLY, clone_beta=0.1)),
])
def test_a_batch_of_one_placed_and_dispatched_in_plain_numbers_runs_as_the_vectorised_steps(
        monkeypatch, workload, extra):
    """JmState's one-task steps (_place_one, _dispatch_one) against _place/_dispatch on arrays:
    whole seeded runs, every actor validated after every event, give the same report."""
    cfg = SimConfig(servers=30, racks=3, seed=4, check=True, **extra)
    fast = _report(workload, cfg)
    monkeypatch.setattr(simulate, "PlacementConfig", functools.partial(PlacementConfig, single_fast_path=False))
    assert _report(workload, cfg) == fast


def _snapshot(j: JmState) -> str:
    """Everything a JM holds (its columns, counters, per-task memories) and its host's ledger."""
    parts = {"": j, "tasks.": j.tasks, "watchdog.": j.watchdog, "placement.": j.placement,
             "attempts.": j.attempts, "giveback.": j.giveback, "adoption.": j.adoption}
    skip = {"cfg", "view", "spec", "prof", "fstates", "stages", "attempts", *(p.rstrip(".") for p in parts)}
    fields = {p + n: getattr(o, n, None) for p, o in parts.items() for n in type(o).__slots__ if n not in skip}
    fields = {n: v.tolist() if isinstance(v, np.ndarray) else v for n, v in fields.items()}
    stages = [(st.est_runtime, st.wait_sum, st.wait_n, list(st.ready), st.remaining) for st in j.tasks.stages]
    v = j.view
    return repr((sorted(fields.items()), stages, v.sent_wait.tolist(), v.sent_cpu.tolist(), v.sent_at.tolist()))


@pytest.mark.parametrize("generation", [0, 3])
@pytest.mark.parametrize("tokens", [1, 3])
@pytest.mark.parametrize("with_input", [False, True])
def test_one_task_steps_leave_the_same_state_and_send_the_same_attempts(generation, tokens, with_input):
    """Stages released one after another (batches of one), run through JmState with the one-task
    steps and with the vectorised ones: after every event the same effects and the same state.
    Re-homed (generation > 0), the JM adopts an attempt of an earlier home that then fails: its
    next attempt is numbered above every attempt an earlier home could have sent."""
    def stage(i, deps, n=1):
        return StageSpec(f"s{i}", n, 1.0 + i + np.arange(n), cpu=min(1.0 + 0.5 * (i % 2), tokens), mem_gb=1.0 + i,
                         input_bytes=1e8 * (i + 1 + np.arange(n)) if with_input else None,
                         dataset=f"d{i}" if with_input else None, depends_on=deps)
    spec = JobSpec("j", [stage(0, ()), stage(1, ("s0",)), stage(2, ("s1",)), stage(3, ("s1",)),
                         stage(4, ("s2", "s3"), n=3)])
    earlier = ((generation - 1) << 16) + 1          # an attempt the previous home sent
    runs = []
    for fast in (True, False):
        cfg = JmConfig(topology=Topology(20, 2, 4.0, 16.0), placement=PlacementConfig(single_fast_path=fast),
                       dispatch=DispatchConfig(opportunistic=False))
        v = ViewCache(20)
        v.stamps[:] = 0.0
        v.matrices[:] = np.linspace(0.0, 3.0, 20)[:, None]
        j = JmState(1, spec, tokens, 0.0, cfg, v, generation=generation)
        rng = np.random.default_rng(7)
        steps = [repr(j.start(0.0, rng)), _snapshot(j)]
        fail = set()
        if generation:
            held = Holding(1, 5, [j.tasks.spec_for(0, earlier)], [TaskReport(1, 0, earlier, int(RUNNING), 0.0, 0.0, 0, "")],
                           [])
            steps += [repr(j.handle(held, 0.1, rng)), repr(j.handle(Timer("adopted"), 0.2, rng)), _snapshot(j)]
            fail.add((0, earlier))
        now = 1.0
        while not j.finished and now < 100:
            sent = [(t, int(j.tasks.server[t]), int(j.tasks.attempt[t]))
                    for t in np.flatnonzero((j.tasks.state == DISPATCHED) | (j.tasks.state == RUNNING)).tolist()]
            assert sent, "nothing in flight and not finished"
            for t, srv, a in sent:
                for state in ((FAILED,) if (t, a) in fail else (RUNNING, DONE)):
                    now += 0.5
                    rep = TaskReport(1, t, a, int(state), now - 0.5, now, 0, "")
                    steps += [repr(j.handle(StatusBatch(1, srv, [rep], np.zeros(12, np.float32), now), now, rng)),
                              _snapshot(j)]
                    j.validate()
        assert j.finished
        runs.append(steps)
    assert runs[0] == runs[1]
    assert all(a > generation << 16 for a in j.tasks.attempt.tolist())
