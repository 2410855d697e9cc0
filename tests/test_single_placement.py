"""A batch of one task through the one placement route (jm.placement, jm.policies.pipeline): the
same answer as the matcher's own, as the same task at the head of a larger batch, and the same
state and effects as a batch of many leaves for the same tasks."""
import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as hs

from apollo.core.cluster import IoModel, Topology
from apollo.core.effects import Timer
from apollo.core.lifecycle import TaskState
from apollo.core.messages import Holding, StatusBatch, TaskReport
from apollo.core.shapes import ShapeGrid
from apollo.core.spec import JobSpec, StageSpec
from apollo.core.stragglers import DOLLY
from apollo.tools.simulate import SimConfig, run_simulation
from apollo.workloads import load_workload
from jm import estimate as est
from jm.config import DispatchConfig, PlacementConfig
from jm.policies import PROFILES
from jm.policies.base import Matcher
from jm.state import JmConfig, JmState
from jm.view import ViewCache
from helpers import examples

DISPATCHED, RUNNING, DONE, FAILED = TaskState.DISPATCHED, TaskState.RUNNING, TaskState.DONE, TaskState.FAILED
GRID = ShapeGrid((1.0, 2.0, 4.0), (2.0, 4.0, 8.0, 16.0))
CPU_GRID, MEM_GRID = GRID.cpu, GRID.mem


def scene(seed: int, servers: int, racks: int, policy: str, with_input: bool, failures: bool, tasks: int = 1,
          estimate: est.EstimateConfig | None = None, defer: float = 1.0):
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
    stage = StageSpec("s", tasks, g.exponential(3.0, tasks), cpu=float(g.choice([1.0, 2.0, 4.0])),
                      mem_gb=float(g.choice([1.0, 3.0, 12.0])),
                      input_bytes=g.exponential(3e8, tasks) if with_input else None,
                      dataset="d" if with_input else None)
    cfg = JmConfig(topology=topo, policy=policy, io=IoModel(), grid=GRID,
                   estimate=estimate or est.EstimateConfig(), placement=PlacementConfig(defer_s=defer))
    jm = JmState(1, JobSpec("j", [stage]), 4, 0.0, cfg, view)
    if failures:
        for s in g.choice(servers, size=3):
            jm.placement.note_failure(int(s))
    return jm, cfg, float(g.uniform(15.0, 30.0))


def _asks_the_matcher(monkeypatch):
    """The pipeline asks every matcher's ``match``, a lone task's too (no answer read off the row)."""
    for cls in {type(p.matcher) for p in PROFILES.values()}:
        monkeypatch.setattr(cls, "picks_cheapest_alone", Matcher.picks_cheapest_alone)


def _lists(placed):
    return [a.tolist() for a in placed]


@settings(max_examples=examples(300), deadline=None)
@given(seed=hs.integers(0, 2**32 - 1), servers=hs.integers(1, 60), racks=hs.integers(1, 6),
       policy=hs.sampled_from(["apollo", "greedy"]), with_input=hs.booleans(), failures=hs.booleans(),
       defer=hs.sampled_from([0.0, 1.0, 30.0]))
def test_a_lone_task_read_off_its_row_is_the_matchers_answer(seed, servers, racks, policy, with_input, failures,
                                                             defer):
    """Dead servers, shapes that never fit, failures, deferral, with and without input: the answer
    the pipeline reads off a lone task's row is the one the matcher gives (same draws)."""
    jm, cfg, now = scene(seed, min(servers, 60), min(racks, servers), policy, with_input, failures, defer=defer)
    ids = np.array([0])
    read_off = jm.placement.place(ids, now, np.random.default_rng(seed))
    with pytest.MonkeyPatch.context() as mp:
        _asks_the_matcher(mp)
        matched = jm.placement.place(ids, now, np.random.default_rng(seed))
    assert _lists(read_off) == _lists(matched)


@settings(max_examples=examples(200), deadline=None)
@given(seed=hs.integers(0, 2**32 - 1), servers=hs.integers(1, 60), racks=hs.integers(1, 6), with_input=hs.booleans(),
       failures=hs.booleans(), tasks=hs.integers(2, 9), defer=hs.sampled_from([0.0, 1.0, 30.0]))
def test_a_batch_of_one_places_its_task_as_the_head_of_a_larger_batch(seed, servers, racks, with_input, failures,
                                                                      tasks, defer):
    """Greedy matching, no tie noise (so that a task's draws are its row's alone): the head of a
    batch takes its cheapest candidate whatever follows it, so a batch of one puts the task where
    the larger batch puts it, with the same expected wait and locality."""
    jm, cfg, now = scene(seed, servers, min(racks, servers), "greedy", with_input, failures, tasks=tasks,
                         estimate=est.EstimateConfig(tie_noise_s=0.0), defer=defer)
    alone = jm.placement.place(np.array([0]), now, np.random.default_rng(seed))
    head = [a[:1] for a in jm.placement.place(np.arange(tasks), now, np.random.default_rng(seed))]
    assert _lists(alone) == _lists(head)


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
def test_whole_runs_are_the_same_when_the_matcher_places_every_lone_task(monkeypatch, workload, extra):
    """Whole seeded runs, every actor validated after every event: the same report whether the
    pipeline reads a lone task's answer off its row or asks the matcher for it."""
    cfg = SimConfig(servers=30, racks=3, seed=4, check=True, **extra)
    read_off = _report(workload, cfg)
    _asks_the_matcher(monkeypatch)
    assert _report(workload, cfg) == read_off


def _jm(tokens: int, spec: JobSpec, generation: int = 0) -> JmState:
    cfg = JmConfig(topology=Topology(20, 2, 4.0, 16.0), dispatch=DispatchConfig(opportunistic=False))
    v = ViewCache(20)
    v.stamps[:] = 0.0
    v.matrices[:] = np.linspace(0.0, 3.0, 20)[:, None]
    return JmState(1, spec, tokens, 0.0, cfg, v, generation=generation)


def _columns(j: JmState, ids) -> list:
    tk = j.tasks
    return [getattr(tk, c)[ids].tolist() for c in ("state", "server", "attempt", "opp", "dispatch_t", "exp_wait",
                                                   "last_heard", "passed_at", "start_t", "locality", "est_sent",
                                                   "check_t")]


@pytest.mark.parametrize("with_input", [False, True])
@pytest.mark.parametrize("generation", [0, 3])
def test_tasks_dispatched_one_at_a_time_are_as_the_same_tasks_dispatched_together(with_input, generation):
    """Two tasks sent as two batches of one, and as one batch of two: the same columns, tokens,
    attempts, ledger, watchdog and the same TaskSpecs (a one-task batch's arithmetic is on
    numbers, a larger batch's on arrays). Waits and sizes are exact binary fractions, so that
    the stage's sum of expected waits is the same in either order."""
    spec = JobSpec("j", [StageSpec("s", 2, np.array([1.5, 2.25]), cpu=1.0, mem_gb=1.0,
                                   input_bytes=np.array([2.5e8, 1.25e8]) if with_input else None,
                                   dataset="d" if with_input else None)])
    ids, srv, wait, where = np.array([0, 1]), np.array([3, 11]), np.array([0.5, 1.25]), np.array([2, 0])
    apart, together = _jm(2, spec, generation), _jm(2, spec, generation)
    for j in (apart, together):
        j.tasks.release_stage(j.tasks.stages[0], 0.0)
        j.tasks.pop_ready(2)
    out_apart: list = []
    for k in range(2):
        assert apart.placement.dispatch(ids[k:k + 1], srv[k:k + 1], wait[k:k + 1], where[k:k + 1], 1.0, 0.0,
                                        out_apart, np.random.default_rng(1)) == 1
    out_together: list = []
    assert together.placement.dispatch(ids, srv, wait, where, 1.0, 0.0, out_together, np.random.default_rng(1)) == 2
    assert _columns(apart, ids) == _columns(together, ids)
    assert out_apart == out_together
    for a, b in ((apart.tasks, together.tasks), (apart.watchdog, together.watchdog), (apart.view, together.view)):
        for name in ("used_tokens", "outstanding_opp", "watch_at", "sent_wait", "sent_cpu", "sent_at"):
            if hasattr(a, name):
                assert np.array_equal(getattr(a, name), getattr(b, name)), name
    st_a, st_b = apart.tasks.stages[0], together.tasks.stages[0]
    assert (st_a.wait_sum, st_a.wait_n) == (st_b.wait_sum, st_b.wait_n)
    apart.validate()
    together.validate()
    if generation:
        assert all(a > generation << 16 for a in apart.tasks.attempt.tolist())


@pytest.mark.parametrize("generation", [0, 3])
@pytest.mark.parametrize("tokens", [1, 3])
@pytest.mark.parametrize("with_input", [False, True])
def test_stages_released_one_after_another_run_to_the_end(generation, tokens, with_input):
    """Stages released one after another (batches of one, then a stage of three), run through
    JmState, validated after every event, with the pipeline reading lone tasks' answers off
    their rows and asking the matcher: the same effects and the same state after every event.
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
    for asks_matcher in (False, True):
        with pytest.MonkeyPatch.context() as mp:
            if asks_matcher:
                _asks_the_matcher(mp)
            j = _jm(tokens, spec, generation)
            rng = np.random.default_rng(7)
            steps = [repr(j.start(0.0, rng)), _columns(j, slice(None))]
            fail = set()
            if generation:
                held = Holding(1, 5, [j.tasks.spec_for(0, earlier)],
                               [TaskReport(1, 0, earlier, int(RUNNING), 0.0, 0.0, 0, "")], [])
                steps += [repr(j.handle(held, 0.1, rng)), repr(j.handle(Timer("adopted"), 0.2, rng)),
                          _columns(j, slice(None))]
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
                                  _columns(j, slice(None))]
                        j.validate()
            assert j.finished
            assert all(a > generation << 16 for a in j.tasks.attempt.tolist())
            runs.append(steps)
    assert runs[0] == runs[1]
