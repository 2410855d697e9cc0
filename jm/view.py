"""A JM host's picture of the cluster: every server's last wait-time matrix, with its age.

One ViewCache is shared read-only by all JMs of a host: the host folds in
the RM's ClusterView and every matrix a PN piggybacks on a status batch
(whichever reading is newer wins), so JMs schedule on the freshest reading
they have and carry on with a stale one when the RM is away.
"""
from __future__ import annotations

import numpy as np

from apollo.messages import ClusterView


class ViewCache:
    def __init__(self, servers: int, shapes: int) -> None:
        self.servers = servers
        self.shapes = shapes
        self.matrices = np.zeros((servers, shapes), dtype=np.float32)
        self.stamps = np.full(servers, -np.inf)
        self.boot_times = np.zeros(servers)
        self.alive = np.ones(servers, dtype=bool)   # optimistic until the RM says otherwise
        self.lightly_loaded = np.arange(servers, dtype=np.int32)
        self.time = -np.inf                          # when the RM's last view was taken

    def apply_view(self, v: ClusterView) -> None:
        n = self.servers
        if len(v.stamps) != n or len(v.matrices) != n * self.shapes:
            raise ValueError(f"cluster view for {len(v.stamps)} servers x {len(v.matrices) // max(len(v.stamps), 1)}"
                             f" shapes does not fit this host's {n} x {self.shapes}")
        newer = v.stamps > self.stamps
        if newer.any():
            self.matrices[newer] = v.matrices.reshape(n, self.shapes)[newer]
            self.stamps[newer] = v.stamps[newer]
        self.boot_times = np.maximum(self.boot_times, v.boot_times)
        self.alive = v.alive.astype(bool)
        if len(v.lightly_loaded):
            self.lightly_loaded = v.lightly_loaded
        self.time = v.time

    def apply_row(self, server: int, matrix: np.ndarray, time: float) -> None:
        if time > self.stamps[server]:
            self.matrices[server] = matrix
            self.stamps[server] = time
