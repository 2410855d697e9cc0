"""Candidate servers per task: where its input lives, those servers' racks, two lightly loaded
(drawn from ``lightly_loaded``: the RM's list, or the part of it known idle now, jm.policies.deferral).

Rows are deduplicated (a repeated server is marked invalid) and sorted, so
the matcher sees each (task, server) pair once.
"""
from __future__ import annotations

import functools

import numpy as np

from apollo.core.cluster import Topology


@functools.lru_cache(maxsize=None)
def _repeat_columns(width: int, times: int) -> np.ndarray:
    return np.repeat(np.arange(width), times)


def candidate_rows(reps: np.ndarray, topo: Topology, lightly_loaded: np.ndarray, rng,
                   per_rack: int = 2, n_light: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """(cand int64[B, K], valid bool[B, K]) for tasks whose replica servers are ``reps`` (-1: none)."""
    B = len(reps)
    has = reps >= 0
    R = reps.shape[1] * per_rack
    # One draw for every random choice (numpy's per-call cost dominates small batches).
    u = rng.random((B, 2 * R + n_light))
    # Servers in the replicas' racks (random members); tasks with no input get random servers.
    cols = _repeat_columns(reps.shape[1], per_rack)      # each replica's column, per_rack times
    racks_rep = topo.rack_of[np.maximum(reps, 0)[:, cols]]
    in_rack = topo.rack_start[racks_rep] + (u[:, :R] * topo.rack_size[racks_rep]).astype(np.int64)
    anywhere = (u[:, R:2 * R] * topo.servers).astype(np.int64)
    in_rack = np.where(has[:, cols], in_rack, anywhere)
    pool = len(lightly_loaded) or topo.servers
    light = (u[:, 2 * R:] * pool).astype(np.int64)
    if len(lightly_loaded):
        light = lightly_loaded[light]
    cand = np.concatenate((np.where(has, reps, anywhere[:, :reps.shape[1]]), in_rack, light), axis=1)
    cand = cand.astype(np.int64)      # (a copy: sorted in place, no second one)
    cand.sort(axis=1)
    valid = np.ones(cand.shape, dtype=bool)
    valid[:, 1:] = cand[:, 1:] != cand[:, :-1]
    return cand, valid
