"""What a placement policy sees: a read-only snapshot of the batch of tasks being placed.

Per task (row), as arrays for a batch of one task as for many: ids, stage, replica servers,
input bytes, runtime estimate, grid shape, CPUs (and whether it reads input).
Per (task, candidate): the candidate server, whether it is a real (non-repeated) choice,
its locality, and once the matcher asks for them, the estimated cost C, completion E and
queue wait W. Filters do not write into it: they return a Cut, which the pipeline applies.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np


class Cut(NamedTuple):
    """Drop every candidate whose ``column`` ("E": expected completion s, "loc": 0 node,
    1 rack, 2 remote) is above ``limit`` (a number, or one per task); ``only_if``, when given,
    is asked only if some candidate would be dropped (it may be costly), and the cut applies
    only if it says yes. A task left with no candidate is held back this round."""
    column: str
    limit: float | np.ndarray
    only_if: Callable[[], bool] | None = None


class Batch:
    __slots__ = ("now", "view", "cfg", "topology", "ids", "sidx", "reps", "in_bytes", "runtime", "shape", "cpu",
                 "per_server", "cand", "valid", "loc", "C", "E", "W", "max_loc", "_has_input", "light",
                 "no_replicas")

    def __init__(self, now: float, view, cfg, ids, sidx, reps, in_bytes, runtime, shape, cpu,
                 per_server: int, has_input=None, no_replicas: bool = False) -> None:
        self.now = now
        self.view = view            # the host's ViewCache (read-only here)
        self.cfg = cfg              # the JmConfig
        self.topology = cfg.topology
        self.ids = ids
        self.sidx = sidx
        self.reps = reps
        self.in_bytes = in_bytes
        self.runtime = runtime
        self.shape = shape
        self.cpu = cpu
        self.per_server = per_server    # tasks one server may take per batch (pipelined short tasks)
        self._has_input = has_input     # (None: read off ``reps`` when a policy first asks)
        self.no_replicas = no_replicas  # known that no task has replica servers (reps all -1)
        # (Any: arrays once the pipeline sets them, None before)
        self.cand: Any = None
        self.valid: Any = None
        self.loc: Any = None
        self.C: Any = None
        self.E: Any = None
        self.W: Any = None
        self.light: Any = view.lightly_loaded if view is not None else None   # where the lightly loaded
                                    # candidates are drawn from (the pipeline may narrow it)
        self.max_loc: Any = None    # the tightest "loc" cut per task, if any (matchers that look
                                    # beyond the candidates honour it)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def has_input(self) -> np.ndarray:
        """Per task, whether it reads replicated input (locality can matter)."""
        if self._has_input is None:
            self._has_input = self.reps[:, 0] >= 0
        return self._has_input
