"""What really happens to a task in the simulator (the runtime's ``task_model``): its modelled
compute time on the server it got (slow servers stretch it), plus start-up and input I/O at the
locality it got, and whether it fails. Called once per task attempt, so compiled with the kernel."""
from __future__ import annotations

from typing import Any

import numpy as np

from apollo.core.cluster import IoModel
from apollo.core.messages import TaskSpec


class TaskTruth:
    def __init__(self, servers: int, io: IoModel, seed: int, slow_fraction: float = 0.0,
                 slow_factor: float = 1.0, fail_prob: float = 0.0) -> None:
        rng = np.random.default_rng(seed + 7)
        slow = np.where(rng.random(servers) < slow_fraction, slow_factor, 1.0).tolist()
        # By PN address; empty when no server is slow (the usual case: no lookup per task).
        self.slow_at: dict[str, float] = {f"pn:{s}": f for s, f in enumerate(slow) if f != 1.0}
        self.init_s = io.init_s
        self.bandwidth: list[float] = io.bandwidths().tolist()          # by locality
        self.fail_prob = fail_prob
        self.rand: Any = np.random.default_rng(seed + 11)

    def __call__(self, address: str, task: TaskSpec, locality: int, slowdown: float = 1.0) -> tuple[float, bool]:
        # (io.io_time, inlined)
        dur = task.duration_s * slowdown * (self.slow_at.get(address, 1.0) if self.slow_at else 1.0) + self.init_s \
            + task.input_bytes / self.bandwidth[locality]
        if self.fail_prob and self.rand.random() < self.fail_prob:
            return dur * float(self.rand.random()), False
        return dur, True
