"""Tests for bench/matching.py (the Figure 12 matching-quality simulation)."""
from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from apollo.bench import matching as bm
from jm.stable_matching import is_stable, stable_match


def brute_force_sum(wait: np.ndarray, runtime: np.ndarray) -> float:
    """Minimum summed completion time over every task-to-server assignment; for a fixed
    assignment each server runs its tasks shortest first (optimal for one machine)."""
    n, S = runtime.shape
    best = np.inf
    for assign in itertools.product(range(S), repeat=n):
        total = 0.0
        for s in range(S):
            rs = sorted(runtime[j, s] for j in range(n) if assign[j] == s)
            t = wait[s]
            for r in rs:
                t += r
                total += t
        best = min(best, total)
    return float(best)


def brute_force_with_orders(wait: np.ndarray, runtime: np.ndarray) -> float:
    """Same minimum, enumerating every order of the tasks too (no SPT shortcut)."""
    n, S = runtime.shape
    best = np.inf
    for perm in itertools.permutations(range(n)):
        for assign in itertools.product(range(S), repeat=n):
            sched = [[j for j in perm if assign[j] == s] for s in range(S)]
            best = min(best, float(bm.completion_times(wait, runtime, sched).sum()))
    return best


def tiny(seed: int, n: int, servers: int) -> tuple[np.ndarray, np.ndarray]:
    return bm.make_instance(np.random.default_rng(seed), n, servers)


@pytest.mark.parametrize("seed", range(12))
def test_optimal_matches_brute_force(seed):
    n, S = (4, 2) if seed % 2 == 0 else (5, 3)
    wait, runtime = tiny(seed, n, S)
    sched, objective = bm.optimal_schedule(wait, runtime)
    expect = brute_force_sum(wait, runtime)
    assert objective == pytest.approx(expect, rel=1e-9, abs=1e-12)
    # the returned sequences realise that objective
    assert bm.completion_times(wait, runtime, sched).sum() == pytest.approx(expect, rel=1e-9)


def test_spt_shortcut_matches_full_enumeration():
    wait, runtime = tiny(99, 4, 2)
    assert brute_force_sum(wait, runtime) == pytest.approx(brute_force_with_orders(wait, runtime))
    _, objective = bm.optimal_schedule(wait, runtime)
    assert objective == pytest.approx(brute_force_with_orders(wait, runtime), rel=1e-9)


def test_optimal_raises_positions_when_tight():
    # one server far faster than the rest attracts more than ceil(N/S) + 0 tasks
    wait = np.array([0.0, 50.0, 50.0])
    runtime = np.ones((6, 3))
    sched, objective = bm.optimal_schedule(wait, runtime, extra_positions=0)
    assert len(sched[0]) == 6
    assert objective == pytest.approx(brute_force_sum(wait, runtime))


def _placed_once(sched, n):
    flat = [j for seq in sched for j in seq]
    return sorted(flat) == list(range(n))


VARIANTS = {
    "default": {},
    "rounds1": {"max_rounds": 1},
    "no_defer": {"defer_scale": None},
    "no_delay": {"delay": False},
    "random_order": {"spt": False},
    "one_batch": {"batch_size": None},
    "batch1": {"batch_size": 1, "defer_scale": None},
}


@pytest.mark.parametrize("n", [1, 7, 100, 250])
def test_greedy_and_stable_place_every_task_once(n):
    wait, runtime = bm.make_instance(np.random.default_rng(n), n)
    order = np.random.default_rng(1).permutation(n)
    scheds = [bm.greedy_schedule(wait, runtime, order)]
    scheds += [bm.stable_schedule(wait, runtime, **kw) for kw in VARIANTS.values()]
    for sched in scheds:
        assert len(sched) == bm.SERVERS
        assert _placed_once(sched, n)
        bm.completion_times(wait, runtime, sched)   # raises on a missing/duplicate task


def test_greedy_takes_own_earliest_completion():
    wait = np.array([0.0, 1.0])
    base = np.array([2.0, 2.0])
    runtime = np.stack([base, base], axis=1)
    runtime[1, 1] *= bm.PREFERRED_FACTOR        # task 1 prefers server 1
    sched = bm.greedy_schedule(wait, runtime, np.array([0, 1]))
    # task 0 -> server 0 (done at 2); task 1: server 0 -> 4, server 1 -> 1 + 1 = 2
    assert sched == [[0], [1]]


def test_spt_order_and_queue_behind():
    runtime = np.array([[3.0, 1.5], [1.0, 0.5], [2.0, 4.0], [1.0, 0.5]])
    assert bm.spt_order(runtime).tolist() == [1, 3, 0, 2]   # min runtimes 1.5 .5 2 .5
    pref = runtime.argmin(axis=1)                             # [1, 1, 0, 1]
    q = bm.queue_behind(pref, np.array([0, 2, 3]), 2, pref_share=0.5)
    # later tasks 0, 3 prefer server 1, task 2 server 0; 3 later tasks over 2 servers
    assert q == pytest.approx([0.5 * 1 + 0.5 * 1.5, 0.5 * 2 + 0.5 * 1.5])
    assert bm.queue_behind(pref, np.array([], dtype=int), 2).tolist() == [0.0, 0.0]


def test_batch_costs_formula():
    wait, runtime = tiny(4, 6, 3)
    pref = runtime.argmin(axis=1)
    w = wait + np.array([0.5, 0.0, 1.0])
    batch, later = np.array([2, 0]), np.array([1, 3, 4, 5])
    cost, defer = bm.batch_costs(w, runtime, batch, later, pref, pref_share=0.25,
                                 defer_scale=2.0)
    q = bm.queue_behind(pref, later, 3, pref_share=0.25)
    for i, b in enumerate(batch):
        for s in range(3):
            assert cost[i, s] == pytest.approx(w[s] + runtime[b, s] * (1 + q[s]))
    mean_pref_runtime = runtime[batch].min(axis=1).mean()
    assert defer == pytest.approx(cost.min(axis=1) + 2.0 * mean_pref_runtime)
    plain, none = bm.batch_costs(w, runtime, batch, later, pref, delay=False, defer_scale=None)
    assert none is None and plain == pytest.approx(w[None, :] + runtime[batch])


def test_defer_keeps_a_task_off_a_long_wait():
    # two equal tasks, one server free and one busy for 10: the second task waits for the
    # free server (done at 2) rather than take the busy one (done at 11)
    wait = np.array([0.0, 10.0])
    runtime = np.ones((2, 2))
    assert bm.stable_schedule(wait, runtime, batch_size=2) == [[0, 1], []]
    assert bm.stable_schedule(wait, runtime, batch_size=2, defer_scale=None) == [[0], [1]]
    _, objective = bm.optimal_schedule(wait, runtime)
    assert objective == pytest.approx(3.0)


def test_batch1_without_defer_or_delay_is_greedy_in_spt_order():
    wait, runtime = bm.make_instance(np.random.default_rng(8), 120)
    assert (bm.stable_schedule(wait, runtime, batch_size=1, defer_scale=None, delay=False)
            == bm.greedy_schedule(wait, runtime, bm.spt_order(runtime)))


def test_stable_first_batch_is_a_stable_matching():
    wait, runtime = bm.make_instance(np.random.default_rng(5), 150)
    pool = bm.spt_order(runtime)
    batch, later = pool[:bm.BATCH_SIZE], pool[bm.BATCH_SIZE:]
    cost, defer = bm.batch_costs(wait, runtime, batch, later, runtime.argmin(axis=1))
    cand = np.broadcast_to(np.arange(bm.SERVERS), cost.shape)
    got = stable_match(cand, cost, cand.size + 1, defer)
    assert is_stable(cand, cost, got, defer)
    matched = np.flatnonzero(got >= 0)
    assert 0 < len(matched) < len(batch)                      # some tasks deferred
    assert (cost[matched, got[matched]] <= defer[matched]).all()
    # the bench's first batch is exactly that matching: those tasks head their servers
    sched = bm.stable_schedule(wait, runtime)
    for b in matched:
        assert sched[int(got[b])][0] == int(batch[b])


def test_small_run_optimal_is_a_lower_bound(tmp_path):
    res = bm.run(reps=2, seed=3, ns=(10, 30))
    assert res["tasks"] == [10, 30] and res["servers"] == 100
    assert "mean" in res["measure"]
    for key in ("greedy", "stable", "optimal", "stable_over_optimal", "greedy_over_optimal",
                "greedy_spt", "greedy_spt_delay", "greedy_spt_over_optimal",
                "greedy_spt_delay_over_optimal"):
        assert len(res[key]) == 2
    assert res["stable_batch_size"] == bm.BATCH_SIZE and res["stable_order"] == "SPT"
    for i in range(2):
        for key in ("greedy", "stable", "greedy_spt", "greedy_spt_delay"):
            assert res["optimal"][i] <= res[key][i] + 1e-12
            assert res[f"{key}_over_optimal"][i] == pytest.approx(res[key][i] / res["optimal"][i])
    # deterministic for a seed
    assert bm.run(reps=2, seed=3, ns=(10, 30)) == res


def test_stable_near_optimal_and_greedy_worse():
    res = bm.run(reps=3, seed=0, ns=(10, 100, 300))
    for ratio in res["stable_over_optimal"]:
        assert ratio < 1.05                  # target; ~1.01 here
    greedy = dict(zip(res["tasks"], res["greedy_over_optimal"]))
    stable = dict(zip(res["tasks"], res["stable_over_optimal"]))
    assert greedy[100] > stable[100] + 0.05
    assert greedy[300] > stable[300] + 0.2


@pytest.mark.slow
def test_main_writes_json_and_plot(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bm, "run", lambda reps, seed, max_rounds: _real_run(
        reps=reps, seed=seed, ns=(10,), max_rounds=max_rounds))
    js, png = tmp_path / "m.json", tmp_path / "m.png"
    assert bm.main(["--json", str(js), "--plot", str(png), "--reps", "1", "--seed", "2"]) == 0
    out = capsys.readouterr().out
    assert "stable/opt" in out and "mean task completion time" in out
    data = json.loads(js.read_text())
    assert data["tasks"] == [10] and data["reps"] == 1 and "measure" in data
    assert {"tasks", "greedy", "stable", "optimal"} <= set(data)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


_real_run = bm.run


def test_run_passes_max_rounds_to_stable():
    full = bm.run(reps=1, seed=0, ns=(100,))
    cut = bm.run(reps=1, seed=0, ns=(100,), max_rounds=1)
    assert full["stable_max_rounds"] is None and cut["stable_max_rounds"] == 1
    assert cut["optimal"] == full["optimal"] and cut["greedy"] == full["greedy"]
    assert cut["stable"] != full["stable"]
