"""Other processes' clocks, as seen from this one.

No clock is shared between processes: each reads its own monotonic clock, from its own origin.
A timestamp another process put in a message (a PN's heartbeat time, the reading time of a
matrix, a task's start and end, the RM's view time) is turned into this process's clock by an
estimated offset per sender: the least (arrival time - timestamp) seen from it, which is the
difference of the two clocks plus the shortest one-way delay (under a millisecond on a LAN:
that much is all the estimate can be wrong by, and it errs towards older, never newer). A
sample far above the estimate means the sender's clock jumped (it restarted, with a new
origin): the estimate starts again from it.
"""
from __future__ import annotations

from typing import Final

RESET_S: Final = 1.0           # a sample this far above the estimate: the sender's clock jumped


class Offsets:
    """Estimated offsets of ``n`` senders' clocks (index -> seconds to add to their timestamps)."""
    __slots__ = ("of",)

    def __init__(self, n: int) -> None:
        self.of: list[float] = [float("nan")] * n

    def observe(self, i: int, now: float, stamp: float) -> float:
        """A message from sender ``i`` stamped ``stamp`` (its clock) arrived at ``now`` (ours):
        the offset, refined; ``stamp + offset`` is that moment on our clock."""
        d = now - stamp
        cur = self.of[i]
        if not (d >= cur) or d > cur + RESET_S:      # (not >=: the first sample, cur is nan)
            self.of[i] = cur = d
        return cur

    def get(self, i: int) -> float:
        """The current estimate (0 before any sample)."""
        v = self.of[i]
        return 0.0 if v != v else v
