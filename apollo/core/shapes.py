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
        return _first_at_least(self.cpu, cpu) * len(self.mem) + _first_at_least(self.mem, mem)


def _first_at_least(sizes: tuple[float, ...], x: float) -> int:
    """The index of the first of ``sizes`` that holds ``x``; the last if none does."""
    for i, size in enumerate(sizes):
        if size >= x - 1e-9:
            return i
    return len(sizes) - 1


GRID = ShapeGrid()
