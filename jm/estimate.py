"""Estimation of each (task, candidate server) pair: Apollo's E = I + W + R and cost C.

I: start-up plus reading the task's input at node / rack / remote bandwidth;
W: the server's expected wait for the task's shape, from its wait-time matrix,
   made pessimistic with age (an old reading is trusted less) and raised by
   the work this JM itself sent there after the reading;
R: the stage's runtime estimate, refined from its finished tasks;
C = Psucc*E + Kfail*(1-Psucc)*E, Psucc from the failures this JM saw per server,
plus a tiny random term so that JMs do not all break ties the same way.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from apollo.core.cluster import REMOTE, IoModel
from apollo.core.nonzero import count_nonzero

from .view import IN_FLIGHT_S, ViewCache


@dataclass(slots=True)
class EstimateConfig:
    kfail: float = 2.0
    stale_penalty: float = 0.25      # seconds of wait added per second of matrix age
    max_stale_s: float = 60.0
    tie_noise_s: float = 0.01
    failure_prior: float = 0.002     # prior failure probability of any server


def rack_or_none(rack_of: np.ndarray) -> np.ndarray:
    """``rack_of`` with one more entry, -1, at index -1: a missing replica (-1) indexes it, so
    that the racks of a replica matrix are one gather (no mask, no where). Made once per
    topology (the same array object), as every batch asks."""
    got = _RACK_OR_NONE.get(id(rack_of))
    if got is None or got[0] is not rack_of:
        if len(_RACK_OR_NONE) > 64:      # (tests make many topologies; a process uses one or two)
            _RACK_OR_NONE.clear()
        got = _RACK_OR_NONE[id(rack_of)] = (rack_of, np.append(rack_of.astype(np.int64), -1))
    return got[1]


_RACK_OR_NONE: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def bandwidths(io: IoModel) -> np.ndarray:
    """``io.bandwidths()`` (node, rack, remote), made once per model and shared: read-only.
    (Looked up by the model's identity: hashing a frozen dataclass hashes all its fields.)"""
    got = _BANDWIDTHS.get(id(io))
    if got is None or got[0] is not io:
        if len(_BANDWIDTHS) > 64:      # (tests make many models; a process uses one or two)
            _BANDWIDTHS.clear()
        bw = io.bandwidths()
        bw.flags.writeable = False
        got = _BANDWIDTHS[id(io)] = (io, bw)
    return got[1]


_BANDWIDTHS: dict[int, tuple[IoModel, np.ndarray]] = {}


def _all_remote(shape: tuple) -> np.ndarray:
    """uint8 REMOTE of ``shape``: shared and read-only for small batches (made once per shape)."""
    got = _ALL_REMOTE.get(shape)
    if got is None:
        got = np.full(shape, REMOTE, dtype=np.uint8)
        if got.size > 256:
            return got
        if len(_ALL_REMOTE) > 64:
            _ALL_REMOTE.clear()
        got.flags.writeable = False
        _ALL_REMOTE[shape] = got
    return got


_ALL_REMOTE: dict[tuple, np.ndarray] = {}


# Up to this many candidate x replica pairs, localities compares them all in one step (measured
# crossover ~300: below it the fewer numpy calls win, above it the per-element cost does).
_ONE_SHOT_ELEMENTS: Final = 256


def localities(cand: np.ndarray, reps: np.ndarray, rack_of: np.ndarray, no_replicas: bool = False) -> np.ndarray:
    """uint8[B, K]: NODE/RACK/REMOTE of each candidate for each task (a task's replicas are all
    servers, or all -1: it reads no input)."""
    if no_replicas or not count_nonzero(reps + 1):
        return _all_remote(cand.shape)     # no task reads input
    # (both sides int64, from the one padded copy: rack_of is int32, and comparing int32 with
    # int64 casts every element)
    racks = rack_or_none(rack_of)
    cand_rack, rep_rack = racks.take(cand), racks.take(reps)
    if cand.size * reps.shape[1] <= _ONE_SHOT_ELEMENTS:
        # Every replica column against every candidate at once: a small batch pays numpy per
        # call, not per element.
        node = np.logical_or.reduce(cand[:, :, None] == reps[:, None, :], axis=2)
        rack = np.logical_or.reduce(cand_rack[:, :, None] == rep_rack[:, None, :], axis=2)
    else:
        # A column at a time: a [B, K, R] temporary reduced over its short last axis costs
        # ~8x more per element than R passes over [B, K] (a 16 x 256 batch: 300 us vs 40 us).
        node = cand == reps[:, :1]
        rack = cand_rack == rep_rack[:, :1]
        for j in range(1, reps.shape[1]):
            node |= cand == reps[:, j:j + 1]
            rack |= cand_rack == rep_rack[:, j:j + 1]
    # A replica's server is in the replica's rack, so node implies rack: REMOTE - rack - node.
    # (a missing replica's rack is -1, no server's)
    return REMOTE - np.add(rack, node, dtype=np.uint8)


def costs(cand: np.ndarray, loc: np.ndarray, in_bytes: np.ndarray, runtime: np.ndarray,
          shape_idx: np.ndarray, cpu: np.ndarray, now: float, view: ViewCache, fail_rate: np.ndarray | None, io: IoModel,
          cfg: EstimateConfig, rng, valid: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(C, E, W) float[B, K] for candidate matrix ``cand``; entries of C that are no choice (a
    dead server, a shape it never fits, a candidate not ``valid``) are inf.

    (A batch of one task, the common case at a job's start, is priced on Python numbers,
    _costs_one; more tasks as arrays, in few numpy calls: the same floats either way.)"""
    if len(cand) == 1 and cand.shape[1] <= ONE_TASK_MAX_K:
        return _costs_one(cand, loc, in_bytes.item(0), runtime.item(0), shape_idx.item(0), cpu.item(0), now, view,
                          fail_rate, io, cfg, rng, valid)
    return _costs_rows(cand, loc, in_bytes, runtime, shape_idx, cpu, now, view, fail_rate, io, cfg, rng, valid)


def _costs_rows(cand: np.ndarray, loc: np.ndarray, in_bytes: np.ndarray, runtime: np.ndarray,
                shape_idx: np.ndarray, cpu: np.ndarray, now: float, view: ViewCache, fail_rate: np.ndarray | None,
                io: IoModel, cfg: EstimateConfig, rng, valid: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """costs() as arrays, any number of tasks at once."""
    # (no task reads input: start-up alone, the same floats as init_s + 0 / bandwidth per pair)
    I: Any = io.init_s + in_bytes[:, None] / bandwidths(io).take(loc) if count_nonzero(in_bytes) else io.init_s
    wait = view.matrices[cand, shape_idx[:, None]]      # (float32: the arithmetic below is float64)
    stamps = view.stamps[cand]
    elapsed = now - stamps
    clock = np.maximum(elapsed, 0.0)
    # The queue has drained since the reading was planned (waits count down from its stamp),
    # unless its server's tasks overran: then its waits above zero grow (ViewCache.grows).
    drained = np.maximum(wait - clock, 0.0)
    if view.growing:
        g = view.grows[cand]
        up = g >= 0.0
        if count_nonzero(up):
            drained = np.where(up, np.where(wait > 0.0, wait + g * clock, 0.0), drained)
    # PNs report on change, so a quiet server's reading stays right; what is uncertain is the
    # time since anyone vouched for it: the RM's last view, or a newer piggybacked reading:
    # min(max(now - max(stamp, view time), 0), max_stale_s). (Subtraction is monotone, so that
    # is min(max(now - stamp, 0), max(now - view time, 0), max_stale_s), the same float.)
    age = np.minimum(clock, min(max(now - view.time, 0.0), cfg.max_stale_s))
    W = drained + cfg.stale_penalty * age
    # Work this host sent after the server's last reading (none: the common case, nothing added)
    mine = stamps <= view.sent_at[cand] + IN_FLIGHT_S
    if count_nonzero(mine):
        view.add_pending_wait(W, cand, cpu, elapsed, mine)
    E = I + W + runtime[:, None]
    p_fail: Any = cfg.failure_prior if fail_rate is None else np.maximum(fail_rate[cand], cfg.failure_prior)
    C = (1.0 - p_fail) * E + cfg.kfail * p_fail * E
    if cfg.tie_noise_s > 0:
        C += rng.random(C.shape) * cfg.tie_noise_s
    # No choice (inf): dead, or not a valid candidate, or a shape it never fits: ~(alive & valid)
    # | never, as one comparison. (C is this call's own array: written in place)
    bad = (view.alive[cand] if valid is None else view.alive[cand] & valid) <= (wait >= 1e8)
    np.putmask(C, bad, np.inf)
    return C, E, W


# Up to this many candidates, one task's costs are worked out candidate by candidate on Python
# numbers (_costs_one): a job's start with one task, and every token freed one at a time, is on
# the job's critical path, and there the ~40 numpy calls of the array form are most of the work.
ONE_TASK_MAX_K: Final = 64
INF: Final = float("inf")


def _costs_one(cand: np.ndarray, loc: np.ndarray, in_b: float, runtime: float, shape: int, cpu: float, now: float,
               view: ViewCache, fail_rate: np.ndarray | None, io: IoModel, cfg: EstimateConfig, rng,
               valid: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """costs() of one task (``cand`` and ``loc`` of one row): the same floats, each step as the
    array form takes it, in the same order (float32 readings widened exactly, IEEE arithmetic,
    the tie noise drawn as one block of the row's length). A server met again in the row (a
    repeated candidate: on a small cluster, most of them) is read once."""
    servers: list[int] = cand[0].tolist()
    k = len(servers)
    locs: list[int] = loc[0].tolist()
    oks: list[bool] = valid[0].tolist() if valid is not None else [True] * k
    bw: list[float] = bandwidths(io).tolist()
    init_s = io.init_s
    stale = min(max(now - view.time, 0.0), cfg.max_stale_s)
    prior, kfail = cfg.failure_prior, cfg.kfail
    noise: list[float] = (rng.random(k) * cfg.tie_noise_s).tolist() if cfg.tie_noise_s > 0 else []
    seen: dict[int, tuple[float, float, bool]] = {}     # server -> (its W, its failure odds, no choice)
    C: list[float] = []
    E: list[float] = []
    W: list[float] = []
    for i in range(k):
        s = servers[i]
        got = seen.get(s)
        if got is None:
            got = seen[s] = _server_terms(view, s, shape, cpu, now, stale, cfg.stale_penalty, fail_rate, prior)
        w, p, never = got
        e = ((init_s + in_b / bw[locs[i]]) if in_b != 0.0 else init_s) + w + runtime
        c = (1.0 - p) * e + kfail * p * e
        if noise:
            c += noise[i]
        if never or not oks[i]:
            c = INF
        C.append(c)
        E.append(e)
        W.append(w)
    return np.array([C]), np.array([E]), np.array([W])


def _server_terms(view: ViewCache, s: int, shape: int, cpu: float, now: float, stale: float, penalty: float,
                  fail_rate: np.ndarray | None, prior: float) -> tuple[float, float, bool]:
    """(W, failure odds, no choice) of server ``s`` for one task of grid shape ``shape`` needing
    ``cpu`` CPUs: _costs_rows' arithmetic for one entry."""
    wait: float = view.matrices.item(s, shape)
    stamp: float = view.stamps.item(s)
    elapsed = now - stamp
    # (np.maximum and np.minimum keep their first argument on a tie or a NaN: so do these)
    clock = elapsed if not elapsed < 0.0 else 0.0
    drained = wait - clock
    if drained < 0.0:
        drained = 0.0
    g = -1.0
    if view.growing:
        g = view.grows.item(s)
        if g >= 0.0:
            drained = wait + g * clock if wait > 0.0 else 0.0
    w = drained + penalty * (clock if not clock > stale else stale)
    sent_at: float = view.sent_at.item(s)
    if stamp <= sent_at + IN_FLIGHT_S:
        # (add_pending_wait's: the CPUs free, less this host's sends there, short of the task's)
        if view.free_cpu_one(s, now) < cpu - 1e-9:
            sent_wait: float = view.sent_wait.item(s)
            w += sent_wait
    p = prior
    if fail_rate is not None:
        f: float = fail_rate.item(s)
        if not f <= p:
            p = f
    alive: bool = view.alive.item(s)
    return w, p, not alive or wait >= 1e8
