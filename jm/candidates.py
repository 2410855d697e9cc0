"""Candidate servers per task: where its input lives, those servers' racks, two lightly loaded.

Rows are deduplicated (a repeated server is marked invalid) and sorted, so
the matcher sees each (task, server) pair once.
"""
from __future__ import annotations

import numpy as np

from apollo.cluster import Topology


def candidate_rows(reps: np.ndarray, topo: Topology, lightly_loaded: np.ndarray, rng,
                   per_rack: int = 2, n_light: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """(cand int64[B, K], valid bool[B, K]) for tasks whose replica servers are ``reps`` (-1: none)."""
    B = len(reps)
    has = reps >= 0
    # Servers in the replicas' racks (random members); tasks with no input get random servers.
    racks = topo.rack_of[np.maximum(reps, 0)]
    racks_rep = np.repeat(racks, per_rack, axis=1)
    size = topo.rack_size[racks_rep]
    in_rack = topo.rack_start[racks_rep] + (rng.random(racks_rep.shape) * size).astype(np.int64)
    anywhere = rng.integers(0, topo.servers, size=in_rack.shape)
    in_rack = np.where(np.repeat(has, per_rack, axis=1), in_rack, anywhere)
    if len(lightly_loaded):
        light = lightly_loaded[rng.integers(0, len(lightly_loaded), size=(B, n_light))]
    else:
        light = rng.integers(0, topo.servers, size=(B, n_light))
    cand = np.concatenate((np.where(has, reps, anywhere[:, :reps.shape[1]]), in_rack, light), axis=1)
    cand = np.sort(cand.astype(np.int64), axis=1)
    valid = np.ones(cand.shape, dtype=bool)
    valid[:, 1:] = cand[:, 1:] != cand[:, :-1]
    return cand, valid
