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

import numpy as np

from apollo.core.cluster import NODE, RACK, REMOTE, IoModel


@dataclass(slots=True)
class EstimateConfig:
    kfail: float = 2.0
    stale_penalty: float = 0.25      # seconds of wait added per second of matrix age
    max_stale_s: float = 60.0
    tie_noise_s: float = 0.01
    failure_prior: float = 0.002     # prior failure probability of any server


def localities(cand: np.ndarray, reps: np.ndarray, rack_of: np.ndarray) -> np.ndarray:
    """uint8[B, K]: NODE/RACK/REMOTE of each candidate for each task (reps -1: no input)."""
    has = reps[:, 0] >= 0
    rc = rack_of[cand]
    rr = np.where(reps >= 0, rack_of[np.maximum(reps, 0)], -1)
    # One comparison per replica column (3): cheaper than a [B, K, 3] temporary and a reduction.
    node = cand == reps[:, :1]
    rack = rc == rr[:, :1]
    for j in range(1, reps.shape[1]):
        node |= cand == reps[:, j:j + 1]
        rack |= rc == rr[:, j:j + 1]
    # A replica's server is in the replica's rack, so node implies rack: REMOTE - rack - node.
    loc = REMOTE - rack.view(np.uint8) - node.view(np.uint8)
    loc[~has] = REMOTE
    return loc


def costs(cand: np.ndarray, loc: np.ndarray, in_bytes: np.ndarray, runtime: np.ndarray,
          shape_idx: np.ndarray, cpu: np.ndarray, now: float, view, fail_rate: np.ndarray | None, io: IoModel,
          cfg: EstimateConfig, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(C, E, W) float[B, K] for candidate matrix ``cand``; infeasible entries of C are inf."""
    bw = io.bandwidths()
    I = io.init_s + in_bytes[:, None] / bw[loc]
    wait = view.matrices[cand, shape_idx[:, None]].astype(np.float64)
    stamps = view.stamps[cand]
    # The queue has drained since the reading was planned (waits count down from its stamp).
    drained = np.maximum(wait - np.maximum(now - stamps, 0.0), 0.0)
    # PNs report on change, so a quiet server's reading stays right; what is uncertain is the
    # time since anyone vouched for it: the RM's last view, or a newer piggybacked reading.
    age = np.minimum(np.maximum(now - np.maximum(stamps, view.time), 0.0), cfg.max_stale_s)
    W = drained + cfg.stale_penalty * age
    W += view.pending_wait(cand, cpu, now, stamps)   # work this host sent after the server's last reading
    E = I + W + runtime[:, None]
    p_fail = cfg.failure_prior if fail_rate is None else np.maximum(fail_rate[cand], cfg.failure_prior)
    C = (1.0 - p_fail) * E + cfg.kfail * p_fail * E
    if cfg.tie_noise_s > 0:
        C = C + rng.random(C.shape) * cfg.tie_noise_s
    dead = ~view.alive[cand] | (wait >= 1e8)
    C[dead] = np.inf
    return C, E, W
