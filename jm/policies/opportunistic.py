"""Where opportunistic tasks go: Apollo's randomized allocation (OSDI'14, section 3.5).

An opportunistic task runs on resources no regular task holds, at low priority, and is preempted
the moment a regular task needs the room. Rather than the server a matching would pick (which
all JMs would agree on), each goes to a server drawn at random among those with idle CPUs as
far as the JM's view knows (the RM's lightly loaded list): no job can corner the idle capacity
by being first, and over time each job gets idle resources in proportion to how many
opportunistic tasks its allowance lets it send (proportional to its tokens): probabilistic
fairness.
"""
from __future__ import annotations

import numpy as np


def random_idle(view, cpu: np.ndarray, now: float, rng) -> np.ndarray:
    """A server for each task of ``cpu`` (in order) drawn at random among the lightly loaded
    servers with that many CPUs idle, each draw taking its CPUs; fewer servers than tasks when
    the idle room runs out (the rest are not sent opportunistically)."""
    light = view.lightly_loaded
    if len(light) == 0 or len(cpu) == 0:
        return np.zeros(0, dtype=np.int64)
    # (as the servers reported it, less this host's sends: room that a reading says frees soon,
    # opportunistic work's, is not idle, and opportunistic tasks sent there would only queue)
    free = view.free_cpu_reported(light).astype(np.float64)
    free[~view.alive[light].astype(bool)] = 0.0
    got = []
    for c in cpu.tolist():
        ok = np.flatnonzero(free >= c - 1e-9)
        if len(ok) == 0:
            break
        k = ok[int(rng.integers(len(ok)))] if len(ok) > 1 else ok[0]
        free[k] -= c
        got.append(int(light[k]))
    return np.array(got, dtype=np.int64)
