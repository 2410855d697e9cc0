"""The policy seams (jm.policies.base and gate): every part of every profile subclasses its base, a
matcher's capabilities are methods and keep their promises, and a filter written from
docs/policies.md's recipe alone runs a whole seeded simulation."""
import re
from pathlib import Path

import numpy as np
import pytest

import jm.policies
from apollo.core.cluster import IoModel, Topology
from apollo.core.shapes import ShapeGrid
from apollo.tools.simulate import SimConfig, run_simulation
from apollo.workloads import load_workload
from jm import estimate as est
from jm.policies import PROFILES, Profile
from jm.policies.base import Filter, Matcher
from jm.policies.gate import Gate
from jm.stable_matching import UNMATCHED
from jm.policies.batch import Batch
from jm.state import JmConfig
from jm.view import ViewCache

GRID = ShapeGrid((1.0, 2.0, 4.0), (2.0, 4.0, 8.0, 16.0))


@pytest.mark.parametrize("name", list(PROFILES))
def test_every_part_of_every_profile_subclasses_its_seam(name):
    p = PROFILES[name]
    assert isinstance(p.matcher, Matcher)
    assert all(isinstance(f, Filter) for f in p.filters)
    assert isinstance(p.gate, Gate)


def test_the_profiles_gates_switch_what_they_declare():
    # (A compiled Gate base once hid DispatchGate's dataclass fields behind its own class-level
    # False: the apollo profile then lost opportunistic tasks, lookahead and pipelining unseen.)
    apollo, hfs, greedy = PROFILES["apollo"].gate, PROFILES["hfs-delay"].gate, PROFILES["greedy"].gate
    assert (apollo.opportunistic, apollo.lookahead, apollo.pipelining) == (True, True, True)
    assert (hfs.opportunistic, hfs.lookahead, hfs.pipelining) == (False, True, False)
    assert (greedy.opportunistic, greedy.lookahead, greedy.pipelining) == (False, False, False)
    assert apollo.describe() == ["opportunistic", "lookahead", "pipelining"]
    assert apollo.describe(opportunistic=False) == ["lookahead", "pipelining"]


def test_a_filter_overriding_nothing_changes_nothing():
    f = Filter()
    assert (f.uses_estimates(), f.new_state(), f.light_pool(None), f.cut(None, None), f.rematches_on_news(None),
            f.wake_at(None, 0.0, None), f.dispatched(None, np.zeros(0), 0.0)) == (False, None, None, None, False,
                                                                                    None, None)


def test_the_old_flags_are_read_only_and_may_not_be_set_on_a_subclass():
    m = PROFILES["apollo"].matcher
    assert (m.single, m.one_per_slot, m.needs_costs, m.bounded) == (True, True, True, False)
    with pytest.raises(AttributeError):
        m.single = False
    with pytest.raises(TypeError, match="override the method"):
        type("Promise", (Matcher,), {"single": True})
    with pytest.raises(TypeError, match="override the method"):
        type("Costly", (Filter,), {"needs_costs": True})


def _scene(seed: int, servers: int = 24, racks: int = 3):
    """A host's view with random readings, and a JmConfig over a matching topology."""
    g = np.random.default_rng(seed)
    topo = Topology(servers, racks, 4.0, 16.0)
    view = ViewCache(servers, GRID)
    view.matrices[:] = (np.where(g.random(servers) < 0.3, 0.0, g.exponential(5.0, servers))[:, None]
                        + np.sort(g.exponential(1.0, (servers, GRID.size)), axis=1)).astype(np.float32)
    view.stamps[:] = g.uniform(0.0, 10.0, servers)
    view.time = 10.0
    view.alive[:] = g.random(servers) < 0.9
    view.lightly_loaded = np.sort(g.choice(servers, size=servers // 4, replace=False)).astype(np.int32)
    return view, JmConfig(topology=topo, io=IoModel(), grid=GRID), g


def _batch(view, cfg, g, n: int, now: float = 12.0) -> Batch:
    """A batch of ``n`` one-CPU tasks, some reading input with three replicas."""
    servers = cfg.topology.servers
    reps = np.where(g.random((n, 1)) < 0.7, g.integers(0, servers, (n, 3)), -1).astype(np.int64)
    return Batch(now, view, cfg, np.arange(n), np.zeros(n, dtype=np.int64), reps, g.exponential(3e8, n),
                 g.exponential(3.0, n), np.zeros(n, dtype=np.int64), np.ones(n), 1, reps[:, 0] >= 0)


def _priced(b: Batch, m: Matcher, rng) -> Batch:
    """``b`` with the candidates and estimates the pipeline would give ``m``."""
    b.cand, b.valid = m.candidates(b, rng)
    b.loc = est.localities(b.cand, b.reps, b.topology.rack_of)
    if m.uses_estimates():
        b.C, b.E, b.W = est.costs(b.cand, b.loc, b.in_bytes, b.runtime, b.shape, b.cpu, b.now, b.view, None,
                                  b.cfg.io, b.cfg.estimate, rng)
        b.C[~b.valid] = np.inf
    return b


@pytest.mark.parametrize("name", [n for n, p in PROFILES.items() if p.matcher.picks_cheapest_alone()])
@pytest.mark.parametrize("seed", range(20))
def test_a_matcher_that_says_it_picks_the_cheapest_alone_does(name, seed):
    """The promise that lets the pipeline read a lone task's answer off its row."""
    m = PROFILES[name].matcher
    view, cfg, g = _scene(seed)
    b = _priced(_batch(view, cfg, g, 1), m, np.random.default_rng(seed))
    srv = m.match(b)[0]
    best = int(b.C[0].argmin())
    assert srv[0] == (b.cand[0, best] if np.isfinite(b.C[0, best]) else UNMATCHED)


def _recipe() -> tuple[str, str]:
    """docs/policies.md's "Adding a policy": the module's code block and the profile line."""
    doc = (Path(__file__).resolve().parent.parent / "docs" / "policies.md").read_text()
    section = doc.split("## Adding a policy", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 2, "the recipe is a module and a profile line"
    return blocks[0], blocks[1].strip().rstrip(",")


def test_a_filter_built_from_the_recipe_alone_runs_a_seeded_simulation(monkeypatch):
    module, line = _recipe()
    ns: dict = {"__name__": "jm.policies.recipe", "__package__": "jm.policies"}
    exec(compile(module, "docs/policies.md", "exec"), ns)
    filters = [v for v in ns.values() if isinstance(v, type) and issubclass(v, Filter) and v is not Filter]
    assert len(filters) == 1
    prof = eval(line, {**vars(jm.policies), **ns})
    assert isinstance(prof, Profile) and prof.filters and isinstance(prof.filters[0], filters[0])
    monkeypatch.setitem(PROFILES, prof.name, prof)
    r = run_simulation(load_workload("heavytail:jobs=25", seed=1),
                       SimConfig(servers=20, racks=2, scheduler=prof.name, seed=4, wire=False, check=True))
    assert r["jobs"]["completed"] == r["jobs"]["submitted"] == 25
    assert filters[0].name in r["scheduler"]["policies"]


# ---- sparrow: Sparrow's batch sampling (jm/policies/sparrow.py) ---------------------------

@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("m", [1, 3, 8])
def test_sparrow_probes_2m_live_servers_and_places_on_the_least_loaded(seed, m):
    sparrow = PROFILES["sparrow"].matcher
    view, cfg, g = _scene(seed)
    b = _priced(_batch(view, cfg, g, m), sparrow, np.random.default_rng(seed))
    probed = b.cand[0]
    assert (b.cand == probed).all()                       # one set of probes for the batch
    assert len(set(probed.tolist())) == len(probed) == min(2 * m, int(view.alive.sum()))
    assert view.alive[probed].all()
    srv, wait, where = sparrow.match(b)
    load = b.W[0]                                         # (one-CPU tasks of one shape: one answer per probe)
    least = probed[np.argsort(load, kind="stable")[:m]]
    assert srv.tolist() == least.tolist()                 # the m least loaded, the first task on the least
    k = [probed.tolist().index(s) for s in srv.tolist()]
    assert wait.tolist() == load[k].tolist() and where.tolist() == b.loc[np.arange(m), k].tolist()


def test_sparrow_gives_each_task_its_least_loaded_untaken_probe_when_answers_differ():
    """Tasks of different shapes (or with a cut) see different answers: in priority order, each
    takes the least loaded probed server still untaken, and none goes where it may not."""
    sparrow = PROFILES["sparrow"].matcher
    view, cfg, g = _scene(3)
    b = _batch(view, cfg, g, 3)
    b.cand = np.broadcast_to(np.array([4, 5, 6, 7, 8, 9]), (3, 6))
    b.valid = np.ones((3, 6), dtype=bool)
    b.valid[1, 0] = False                                 # task 1 may not go to server 4
    b.loc = np.full((3, 6), 2, dtype=np.uint8)
    b.W = np.array([[1.0, 5.0, 0.5, 9.0, 7.0, 3.0],
                    [0.0, 0.2, 4.0, 9.0, 7.0, 3.0],
                    [9.0, 9.0, 9.0, 0.1, 9.0, 9.0]])
    b.C = b.W.copy()
    b.C[2, 3] = np.inf                                    # server 7 never fits task 2
    srv, wait, _ = sparrow.match(b)
    assert srv.tolist() == [6, 5, 4] and wait.tolist() == [0.5, 0.2, 9.0]   # (4: the first of the ties)


def test_sparrow_places_nothing_when_no_server_is_alive():
    sparrow = PROFILES["sparrow"].matcher
    view, cfg, g = _scene(1)
    view.alive[:] = False
    assert sparrow.candidates(_batch(view, cfg, g, 4), np.random.default_rng(1)) is None


@pytest.mark.parametrize("workload,extra", [("fb2009:jobs=40", {}),
                                            ("heavytail:jobs=30", dict(opportunistic=True, fail_prob=0.02)),
                                            ("dag:jobs=10", dict(jm_hosts=2))])
def test_a_seeded_sparrow_run_completes_with_every_actor_validated(workload, extra):
    r = run_simulation(load_workload(workload, seed=2),
                       SimConfig(servers=30, racks=3, scheduler="sparrow", seed=5, wire=False, check=True, **extra))
    assert r["jobs"]["completed"] == r["jobs"]["submitted"] > 0
    assert r["scheduler"]["policies"][0] == "batch-sampling"
