"""Candidate servers per task: where its input lives, those servers' racks, two lightly loaded
(drawn from ``lightly_loaded``: the RM's list, or the part of it known idle now, jm.policies.deferral).

Rows are deduplicated (a repeated server is marked invalid) and sorted, so
the matcher sees each (task, server) pair once.
"""
from __future__ import annotations

import functools
from typing import Any

import numpy as np

from apollo.core.cluster import Topology
from apollo.core.nonzero import count_nonzero


@functools.lru_cache(maxsize=None)
def _repeat_columns(width: int, times: int) -> np.ndarray:
    return np.repeat(np.arange(width), times)


def _rack_spans(topo: Topology) -> tuple[np.ndarray, np.ndarray]:
    """Per server, its rack's first server and size, with one more entry (0, 0) at index -1: a
    missing replica (-1) indexes it. Made once per topology, as every batch asks."""
    got = _SPANS.get(id(topo))
    if got is None or got[0] is not topo:
        if len(_SPANS) > 64:      # (tests make many topologies; a process uses one or two)
            _SPANS.clear()
        got = _SPANS[id(topo)] = (topo, np.append(topo.rack_start[topo.rack_of], 0),
                                  np.append(topo.rack_size[topo.rack_of], 0))
    return got[1], got[2]


_SPANS: dict[int, tuple[Topology, np.ndarray, np.ndarray]] = {}


def candidate_rows(reps: np.ndarray, topo: Topology, lightly_loaded: np.ndarray, rng,
                   per_rack: int = 2, n_light: int = 2, no_replicas: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(cand int64[B, K], valid bool[B, K]) for tasks whose replica servers are ``reps`` (-1: none;
    ``no_replicas``: the caller knows they are all -1, which is then not looked at)."""
    if len(reps) == 1:
        return _candidate_row(reps, topo, lightly_loaded, rng, per_rack, n_light, no_replicas)
    return _candidate_arrays(reps, topo, lightly_loaded, rng, per_rack, n_light, no_replicas)


def _candidate_arrays(reps: np.ndarray, topo: Topology, lightly_loaded: np.ndarray, rng, per_rack: int,
                      n_light: int, no_replicas: bool) -> tuple[np.ndarray, np.ndarray]:
    """candidate_rows for any number of tasks, as arrays."""
    B, w = reps.shape
    R = w * per_rack
    # One draw for every random choice (numpy's per-call cost dominates small batches, so this
    # is written for few calls: a batch of one task is the common case at a job's start).
    u = rng.random((B, 2 * R + n_light))
    pool = len(lightly_loaded) or topo.servers
    light = (u[:, 2 * R:] * pool).astype(np.int64)
    if len(lightly_loaded):
        light = lightly_loaded[light]
    # Servers in the replicas' racks (random members); tasks with no input get random servers
    # (drawn only if some task has none: a task's replicas are all servers or all -1).
    has: Any = None if no_replicas else reps >= 0
    readers = 0 if has is None else count_nonzero(has)
    if readers:
        rep_cols = reps[:, _repeat_columns(w, per_rack)]      # each replica, per_rack times
        start, size = _rack_spans(topo)
        near = start[rep_cols] + (u[:, :R] * size[rep_cols]).astype(np.int64)
    if readers < reps.size:
        anywhere = (u[:, R:2 * R] * topo.servers).astype(np.int64)
    if readers == reps.size:
        first, second = reps, near
    elif not readers:
        first, second = anywhere[:, :w], anywhere
    else:
        first, second = np.where(has, reps, anywhere[:, :w]), np.where(rep_cols >= 0, near, anywhere)
    cand = np.concatenate((first, second, light), axis=1, dtype=np.int64)
    cand.sort(axis=1)
    valid = np.empty(cand.shape, dtype=bool)
    valid[:, 0] = True
    np.not_equal(cand[:, 1:], cand[:, :-1], out=valid[:, 1:])
    return cand, valid


def _candidate_row(reps: np.ndarray, topo: Topology, lightly_loaded: np.ndarray, rng, per_rack: int,
                   n_light: int, no_replicas: bool) -> tuple[np.ndarray, np.ndarray]:
    """candidate_rows for one task, on Python numbers (a job's start with one task, and every
    token freed one at a time): the same draws, taken the same way, and the same row."""
    w: int = reps.shape[1]       # (typed: compiled, the index arithmetic below is on C integers)
    R = w * per_rack
    u: list[float] = rng.random(2 * R + n_light).tolist()
    n_pool = len(lightly_loaded)
    # (floats: numpy multiplies a draw by a count as doubles, and so, compiled, do these)
    pool = float(n_pool or topo.servers)
    row: list[int] = []
    for k in range(2 * R, 2 * R + n_light):
        i = int(u[k] * pool)
        row.append(int(lightly_loaded.item(i)) if n_pool else i)
    servers = float(topo.servers)
    rep: list[int] = [-1] * w if no_replicas else reps[0].tolist()
    start, size = _rack_spans(topo)
    for j in range(w):                 # the replicas' servers (a random server for a missing one)
        r = rep[j]
        row.append(r if r >= 0 else int(u[R + j] * servers))
    for c in range(R):                 # per replica, per_rack servers of its rack (or anywhere)
        r = rep[c // per_rack]
        if r >= 0:
            first: int = start.item(r)
            span: int = size.item(r)
            row.append(first + int(u[c] * float(span)))
        else:
            row.append(int(u[R + c] * servers))
    row.sort()
    valid = [True]
    for j in range(1, len(row)):
        valid.append(row[j] != row[j - 1])
    return np.array([row], dtype=np.int64), np.array([valid])
