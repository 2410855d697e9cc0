"""Sharing policies of the capacity plane: who is admitted, how many tokens each job holds, and
what must be given back, computed from one snapshot of the RM's jobs.

A queue file names its way of sharing (``sharing = "fair"``); ``KINDS`` below is the one table
from that name to the kind's class:
- "fair" (rm/share_fair.py, HFS): hierarchical weighted max-min sharing with min shares and
  kills after Tmin / Tfair;
- "capacity" (rm/share_capacity.py, HADOOP-3445): guarantees, lending within limits, reclaim
  within a timeout, user limits reclaimed like lent capacity.
Every kind is a ``SharingKind`` (rm/share_kind.py), which runs the round the same way for all
and asks the kind for its rules (shares, starvation, over-share, victim order, invariants).
A queue's order among its jobs (fifo | fair) is an object of rm/queue_order.py.

Adding a kind: a module with a ``SharingKind`` subclass, and its line in ``KINDS``. Without a
queue file the RM runs one root queue under "fair" sharing; the ``--tokens`` names (even,
fifo) are that queue's order (rm/state.py).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .queue_order import ORDERS, QueueOrder, queue_rank, split_in_queue, user_floors
from .share_capacity import CapacitySharing, capacity_shares
from .share_fair import FairSharing, fair_shares
from .share_kind import SharingKind
from .share_math import EPS, round_tokens, water_fill
from .sharing_types import Allocation, Ask, JobView, Owed, Reclaim, Round, Snapshot

if TYPE_CHECKING:
    from .queues import QueueTree     # (not at run time: rm/queues.py reads KINDS from here)

KINDS: dict[str, type[SharingKind]] = {
    "fair": FairSharing,
    "capacity": CapacitySharing,
}

SharingPolicy = SharingKind         # the RM's name for whichever kind its tree asks for


def make_sharing_policy(tree: QueueTree) -> SharingKind:
    return KINDS[tree.sharing](tree)


__all__ = ["EPS", "KINDS", "ORDERS", "Allocation", "Ask", "CapacitySharing", "FairSharing", "JobView", "Owed",
           "QueueOrder", "Reclaim", "Round", "SharingKind", "SharingPolicy", "Snapshot", "capacity_shares",
           "fair_shares", "make_sharing_policy", "queue_rank", "round_tokens", "split_in_queue", "user_floors",
           "water_fill"]
