"""The arithmetic every sharing kind and queue order uses: weighted max-min splits (water
filling), parents' shares as their children's sums, and whole tokens from fractional shares.
Pure functions."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from apollo.core.nonzero import count_nonzero

if TYPE_CHECKING:
    from .queues import QueueTree

EPS = 1e-9


def water_fill(capacity: float, demands, weights=None, floors=None) -> np.ndarray:
    """Weighted max-min split of ``capacity``: each gets clip(weight * L, floor, demand) for the
    one level L at which the total is min(capacity, total demand). Floors (capped by demand)
    are met first; if they alone exceed the capacity they are scaled down together."""
    d = np.maximum(np.asarray(demands, dtype=float), 0.0)
    n = d.size
    cap = max(0.0, float(capacity))
    if n == 0:
        return np.zeros(0)
    if d.sum() <= cap:
        return d.copy()
    w = np.ones(n) if weights is None else np.maximum(np.asarray(weights, dtype=float), EPS)
    f = np.zeros(n) if floors is None else np.clip(np.asarray(floors, dtype=float), 0.0, d)
    fs = f.sum()
    if fs >= cap:
        return f * (cap / fs) if fs > 0 else np.zeros(n)
    # The total g(L) = sum clip(w L, f, d) is piecewise linear in L: its slope rises by w_i at
    # f_i / w_i and falls by w_i at d_i / w_i. Walk the sorted breakpoints to the one passing
    # the capacity and interpolate: O(n log n), no loop over jobs.
    x = np.concatenate([f / w, d / w])
    s = np.concatenate([w, -w])
    o = np.argsort(x, kind="stable")
    x, s = x[o], s[o]
    slope = np.cumsum(s)
    g = fs + np.concatenate([[0.0], np.cumsum(slope[:-1] * np.diff(x))])
    k = int(np.searchsorted(g, cap, side="left"))
    k = min(max(k, 1), len(x) - 1)
    level = x[k - 1] + (cap - g[k - 1]) / max(slope[k - 1], EPS)
    return np.clip(w * level, f, d)


def sum_up(tree: QueueTree, share: dict[str, float]) -> dict[str, float]:
    """Each parent's share (in ``share``, filled in place): the sum of its children's."""
    for q in reversed(tree.nodes()):
        if q.children:
            share[q.path] = sum(share[c.path] for c in q.children)
    return share


def whole_tokens(x: np.ndarray, total: int, must: np.ndarray | None = None) -> np.ndarray:
    """round_tokens over arrays; ``must``: jobs that need at least one token."""
    x = np.maximum(np.asarray(x, dtype=float), 0.0)
    total = max(0, int(total))
    base = np.floor(x + 1e-9).astype(np.int64)
    target = min(total, int(math.floor(float(x.sum()) + 1e-6)))
    keep = np.zeros(x.size, dtype=np.int64)             # the least each job may be cut to
    if must is not None and count_nonzero(must):
        # At most ``total`` jobs can be promised a token (admission keeps this from binding).
        m = np.flatnonzero(must)
        have = m[base[m] > 0][:total]
        lack = m[base[m] == 0][:total - have.size]
        base[lack] = 1
        keep[have] = 1
        keep[lack] = 1
    extra = int(base.sum()) - target
    while extra > 0:                                    # over: take from the largest holders
        elig = np.flatnonzero(base > keep)
        if elig.size == 0:
            break
        top = elig[np.argsort(-base[elig], kind="stable")[:extra]]
        base[top] -= 1
        extra -= top.size
    short = target - int(base.sum())
    if short > 0:                                       # under: largest remainders first
        frac = x - base
        elig = np.flatnonzero(frac > 1e-9)
        top = elig[np.argsort(-frac[elig], kind="stable")[:short]]
        base[top] += 1
    return base


def round_tokens(alloc: dict[int, float], total: int, at_least_one=()) -> dict[int, int]:
    """Whole tokens: floors, then the largest remainders, summing to at most ``total`` (and to
    no more than the floats' sum), none above its float's ceiling, except that each job in
    ``at_least_one`` gets one token while the total allows (taken from the largest holders)."""
    ids = list(alloc)
    x = np.array([alloc[i] for i in ids], dtype=float)
    one = set(at_least_one)
    must = np.array([i in one for i in ids], dtype=bool) if one else None
    return dict(zip(ids, whole_tokens(x, total, must).tolist()))
