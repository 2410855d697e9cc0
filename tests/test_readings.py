"""A reading's ``grow`` at the JM host: a server whose tasks overran reports once, and the view
extrapolates its waits (they grow) instead of counting them down to "free"."""
import numpy as np
import pytest

from apollo.core.cluster import IoModel
from jm.estimate import EstimateConfig, costs
from jm.view import ViewCache


def _view():
    v = ViewCache(2, cores=4.0)
    row = [0.0] * v.shapes
    busy = [20.0] * v.shapes                 # every shape waits 20 s (the cores are busy)
    v.apply_row(0, busy, 10.0, grow=-1.0)    # server 0: its tasks end at a fixed time
    v.apply_row(1, busy, 10.0, grow=0.1)     # server 1: they overran (grow 10% of a second per second)
    v.time = 10.0
    return v, row


def test_a_growing_reading_never_counts_down_to_free():
    v, _ = _view()
    assert v.growing == 1
    both = np.array([0, 1])
    assert list(v.free_cpu(both, 29.0)) == [0.0, 0.0]
    assert list(v.free_cpu(both, 31.0)) == [4.0, 0.0]      # the fixed one's ends passed; not the other's


def test_estimates_extrapolate_a_growing_reading():
    v, _ = _view()
    cand = np.array([[0, 1]])
    one = np.array([1.0])
    args = (np.full((1, 2), 2, np.uint8), np.zeros(1), np.array([5.0]), np.array([0]), one)
    cfg = EstimateConfig(tie_noise_s=0.0, stale_penalty=0.0)
    _, _, W = costs(cand, *args, 30.0, v, None, IoModel(), cfg, np.random.default_rng(0))
    assert W[0, 0] == pytest.approx(0.0)                     # counted down
    assert W[0, 1] == pytest.approx(20.0 + 0.1 * 20.0)       # grown


def test_a_new_reading_replaces_the_growth():
    v, row = _view()
    v.apply_row(1, row, 40.0, grow=-1.0)
    assert v.growing == 0 and v.grows[1] == -1.0
    v.apply_row(1, row, 39.0, grow=0.5)                      # older: ignored
    assert v.growing == 0
