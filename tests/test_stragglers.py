"""The straggler model and Dolly's clone count and budget."""
import numpy as np
import pytest

from apollo.core.spec import JobSpec, StageSpec
from apollo.core.stragglers import DOLLY, NONE, clones_needed
from rm.clones import CloneBudget, CloneConfig


def test_dolly_model_matches_the_papers_slowest_over_median_for_small_phases():
    rng = np.random.default_rng(3)
    ratios = []
    for _ in range(4000):
        n = int(rng.integers(2, 11))
        s = np.array([DOLLY.draw(rng) for _ in range(n)])
        ratios.append(s.max() / np.median(s))
    assert 5.5 <= np.median(ratios) <= 8.0          # Dolly section 2: a median of 6-8x
    assert NONE.draw(rng) == 1.0


def test_mean_slowdown_is_what_the_draws_average():
    rng = np.random.default_rng(4)
    draws = np.array([DOLLY.draw(rng) for _ in range(100000)])
    assert draws.mean() == pytest.approx(DOLLY.mean(), rel=0.03)
    assert NONE.mean() == 1.0


def test_clone_count_follows_pseudocode_1():
    # c = ceil(log(1 - (1 - eps)^(1/n)) / log p)
    assert clones_needed(0.2, 1, 0.05) == 2        # 0.2^2 = 4% <= 5%
    assert clones_needed(0.2, 10, 0.05) == 4
    assert clones_needed(0.0, 10, 0.05) == 1        # no stragglers: no clones
    for n in (1, 3, 10):
        c = clones_needed(0.2, n, 0.05)
        assert 1 - (1 - 0.2 ** c) ** n <= 0.05 < 1 - (1 - 0.2 ** (c - 1)) ** n


def job(tasks, cpu=1.0):
    return JobSpec("j", [StageSpec("map", tasks, np.full(tasks, 1.0), cpu=cpu)])


def test_budget_admits_a_jobs_clones_all_or_none_and_never_beyond_beta():
    b = CloneBudget(CloneConfig(beta=0.05, p=0.2))
    cap = 100.0                                      # budget: 5 CPUs of clones
    assert b.grant(job(1), cap, lambda: 0.0) == (2, 1.0, False)
    assert b.grant(job(2), cap, lambda: 0.0) == (3, 4.0, False)     # 2 tasks x 2 clones
    assert b.grant(job(1), cap, lambda: 0.0) == (1, 0.0, False)     # 5 used: one more would exceed
    assert b.used == 5.0
    b.release(4.0)
    assert b.grant(job(11), cap, lambda: 0.0) == (1, 0.0, False)    # too big to clone
    # above tau = 80% utilization: cloned at low priority, within the same budget ...
    assert b.grant(job(1), cap, lambda: 79.5) == (2, 1.0, True)
    assert b.grant(job(1), cap, lambda: 10.0) == (2, 1.0, False)
    assert b.used == 3.0
    assert b.grant(job(4), cap, lambda: 79.5) == (1, 0.0, False)    # ... never beyond it
    # ... or, as in Dolly, not at all
    strict = CloneBudget(CloneConfig(beta=0.05, p=0.2, low_above_tau=False))
    assert strict.grant(job(1), cap, lambda: 79.5) == (1, 0.0, False)
    assert b.used <= 0.05 * cap


from hypothesis import given, settings, strategies as hs

from helpers import examples


@settings(max_examples=examples(200), deadline=None)
@given(hs.lists(hs.tuples(hs.booleans(), hs.integers(1, 12), hs.floats(0.5, 4.0), hs.floats(0.0, 1.0)),
                max_size=40), hs.floats(0.01, 0.2))
def test_clones_never_exceed_the_budget(ops, beta):
    """Admissions and job ends in any order: the clone CPUs granted never pass beta x capacity,
    and a job's clones are granted all or none."""
    b = CloneBudget(CloneConfig(beta=beta, p=0.2))
    cap = 64.0
    held = []
    for admit, tasks, cpu, busy in ops:
        if admit or not held:
            c, got, _ = b.grant(job(tasks, cpu), cap, lambda: busy * cap)
            if c > 1:
                assert got == pytest.approx((c - 1) * tasks * cpu)
                held.append(got)
            else:
                assert got == 0.0
        else:
            b.release(held.pop(0))
        assert b.used <= beta * cap + 1e-9
        assert b.used == pytest.approx(sum(held))
