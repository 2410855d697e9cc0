"""The CPU x memory shape grid: the one vocabulary PNs, JMs and the RM share.

A wait-time matrix has one entry per grid shape (a hypothetical task of that many
CPUs and that much memory): a PN plans them, the RM and JM hosts store them, and a
JM looks its task up by the smallest shape that holds it. Configured here, once.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ShapeGrid:
    cpu: tuple[float, ...] = (1.0, 2.0, 4.0)
    mem: tuple[float, ...] = (2.0, 4.0, 8.0, 16.0)

    @property
    def size(self) -> int:
        return len(self.cpu) * len(self.mem)

    def index(self, cpu: float, mem: float) -> int:
        """Index of the smallest shape that holds (cpu, mem); the largest one if none does."""
        ci = next((i for i, c in enumerate(self.cpu) if c >= cpu - 1e-9), len(self.cpu) - 1)
        mi = next((i for i, m in enumerate(self.mem) if m >= mem - 1e-9), len(self.mem) - 1)
        return ci * len(self.mem) + mi


GRID = ShapeGrid()
