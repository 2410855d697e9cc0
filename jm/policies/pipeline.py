"""The one placement pipeline: candidates -> costs -> filters' cuts -> the matcher.

Every batch goes this way, one task or thousands, as arrays. A batch of one task is the
common case at a job's start (and whenever tokens free one at a time) and it is on the job's
critical path, where numpy's per-call cost is most of the work: so the steps are written for
few numpy calls (jm.candidates, jm.estimate), and a lone task's answer is read off its row when
the matcher's answer for one task is its cheapest candidate.
"""
from __future__ import annotations

from typing import Final

import numpy as np

from apollo.core.cluster import REMOTE
from apollo.core.nonzero import count_nonzero

from .. import estimate as est
from ..stable_matching import UNMATCHED
from .batch import Batch, Cut

INF: Final = float("inf")


def _unmatched(B: int):
    return np.full(B, UNMATCHED, dtype=np.int64), np.zeros(B), np.full(B, REMOTE)


def place(b: Batch, profile, states, fail_rate, rng):
    """(server or UNMATCHED, expected wait there, locality) per task of ``b``."""
    m = profile.matcher
    _narrow_light(b, profile)
    got = m.candidates(b, rng)
    if got is None:
        return _unmatched(len(b))
    b.cand, b.valid = got
    cfg = b.cfg
    b.loc = est.localities(b.cand, b.reps, b.topology.rack_of, b.no_replicas)
    if m.uses_estimates():
        b.C, b.E, b.W = est.costs(b.cand, b.loc, b.in_bytes, b.runtime, b.shape, b.cpu, b.now, b.view, fail_rate,
                                  cfg.io, cfg.estimate, rng, b.valid)
    for f, st in zip(profile.filters, states):
        if f.uses_estimates() and b.E is None:
            continue            # a filter over estimates under a matcher that makes none
        cut = f.cut(b, st)
        if cut is not None:
            _apply(b, cut)
    if len(b) == 1 and b.C is not None and m.picks_cheapest_alone():
        # One task, and a matcher whose answer for it is its cheapest candidate (the promise
        # tests/test_policies_seams.py holds it to): that answer, read off the row, costs a few
        # numpy calls where the matcher's machinery for many would cost dozens.
        row = b.C[0]
        best = int(row.argmin())
        if not row.item(best) < INF:
            return _unmatched(1)
        # (the server and wait as views of the row's entry: nobody writes to them)
        return b.cand[0, best:best + 1], b.W[0, best:best + 1], np.array([b.loc.item(0, best)], dtype=np.int64)
    srv, wait, where = m.match(b)
    if wait is None:
        B = len(b)
        wait = np.zeros(B)
        where = np.full(B, REMOTE)
        ok = srv != UNMATCHED
        if count_nonzero(ok):
            k = (b.cand[ok] == srv[ok, None]).argmax(axis=1)
            wait[ok] = b.W[ok, k]
            where[ok] = b.loc[ok, k]
    return srv, wait, where


def _narrow_light(b: Batch, profile) -> None:
    """Let a filter say where the lightly loaded candidates come from (Deferral: the servers
    known idle now, so that a task is offered the idle server it would otherwise wait for)."""
    for f in profile.filters:
        pool = f.light_pool(b)
        if pool is not None:
            b.light = pool
            return


def _apply(b: Batch, cut: Cut) -> None:
    col = b.E if cut.column == "E" else b.loc
    lim = cut.limit
    worse = col > (lim[:, None] if isinstance(lim, np.ndarray) and lim.ndim else lim)
    if not count_nonzero(worse) or (cut.only_if is not None and not cut.only_if()):
        return
    if b.C is not None:
        b.C[worse] = np.inf
    b.valid = b.valid & ~worse
    if cut.column == "loc":
        lim = np.broadcast_to(np.asarray(lim, dtype=float), (len(b),))
        b.max_loc = lim if b.max_loc is None else np.minimum(b.max_loc, lim)
