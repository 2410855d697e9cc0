"""jm.single (one task in plain floats) against the vectorised placement: the same answer."""
import dataclasses

import numpy as np
from hypothesis import given, settings, strategies as hs

from apollo.cluster import IoModel, Topology
from apollo.shapes import ShapeGrid
from apollo.spec import JobSpec, StageSpec
from jm.state import JmConfig, JmState
from jm.view import ViewCache

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
            jm._note_failure(int(s))
    return jm, cfg, float(g.uniform(15.0, 30.0))


@settings(max_examples=300, deadline=None)
@given(seed=hs.integers(0, 2**32 - 1), servers=hs.integers(1, 60), racks=hs.integers(1, 6),
       policy=hs.sampled_from(["apollo", "greedy"]), with_input=hs.booleans(), failures=hs.booleans(),
       defer=hs.sampled_from([0.0, 1.0, 30.0]))
def test_one_task_placement_equals_the_vectorised_one(seed, servers, racks, policy, with_input, failures, defer):
    racks = min(racks, servers)
    jm, cfg, now = scene(seed, servers, racks, policy, with_input, failures)
    fast = dataclasses.replace(cfg, defer_s=defer)
    slow = dataclasses.replace(fast, single_fast_path=False)
    ids = np.array([0])
    jm.cfg = fast
    a = jm._place(ids, now, np.random.default_rng(seed))
    jm.cfg = slow
    b = jm._place(ids, now, np.random.default_rng(seed))
    assert a[0].tolist() == b[0].tolist()
    assert a[1].tolist() == b[1].tolist()
    assert a[2].tolist() == b[2].tolist()
