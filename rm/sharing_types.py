"""What goes in and out of a sharing kind: the RM's snapshot of its jobs, the allocation it gets
back, and the read-only round figures the kinds' rules are written over."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from .queues import Limits


@dataclass(frozen=True, slots=True, init=False)
class JobView:
    """What the RM knows of one job."""
    job_id: int
    queue: str
    user: str
    weight: float
    priority: int
    submitted_at: float
    demand: float       # CPUs it could use now (ready + running tasks)
    tokens: int         # tokens it holds now (0 while waiting)
    running: float      # CPUs its regular tasks occupy now (may exceed tokens after a cut)
    admitted: bool

    # (spelled out: compiled, these sets are struct writes; the generated __init__ of a frozen
    # dataclass is interpreted Python, ~30x the cost, and a round makes a view per moved job)
    def __init__(self, job_id: int, queue: str, user: str, weight: float, priority: int, submitted_at: float,
                 demand: float, tokens: int, running: float, admitted: bool) -> None:
        object.__setattr__(self, "job_id", job_id)
        object.__setattr__(self, "queue", queue)
        object.__setattr__(self, "user", user)
        object.__setattr__(self, "weight", weight)
        object.__setattr__(self, "priority", priority)
        object.__setattr__(self, "submitted_at", submitted_at)
        object.__setattr__(self, "demand", demand)
        object.__setattr__(self, "tokens", tokens)
        object.__setattr__(self, "running", running)
        object.__setattr__(self, "admitted", admitted)


@dataclass(frozen=True, slots=True)
class Snapshot:
    now: float
    capacity: float
    jobs: tuple[JobView, ...]


@dataclass(frozen=True, slots=True)
class Reclaim:
    """A forced give-back. ``tokens`` is the kill line: the job kills running regular tasks above
    it if they have not ended by themselves within ``within_s`` (0: at once). It is never below
    the job's grant in ``Allocation.tokens``; between the two the job shrinks as tasks end."""
    job_id: int
    tokens: int
    within_s: float


@dataclass(slots=True)
class Allocation:
    tokens: dict[int, int]                  # every admitted job after this round -> tokens
    admit: list[int]                        # waiting jobs admitted now, in admission order
    reclaim: list[Reclaim]                  # every give-back owed now; a job absent owes none
    next_run_s: float | None                # seconds until a timeout expires; None: no need
    shares: dict[str, float]                # every queue path ("root" too) -> share in cores
    positions: dict[int, tuple[str, int]]   # waiting job -> (leaf, 1-based position in it)
    starving: dict[str, float]              # leaf -> seconds below its guarantee/min share
    # the admitted jobs whose tokens differ from their view's (None: not told; look at all)
    changed: list[int] | None = None


@dataclass(frozen=True, slots=True)
class Round:
    """One round's figures, after this round's admissions, for a kind's rules to read (the
    arrays are read-only). Leaves are indexed as in ``QueueTree.leaves()``, jobs as in
    ``Snapshot.jobs``; only admitted jobs count towards a leaf's figures."""
    now: float
    limits: dict[str, Limits]       # every queue's guarantee, max and lending limit in cores
    shares: dict[str, float]        # every queue's share this round
    leaf_demand: np.ndarray         # per leaf: CPUs its jobs could use
    holding: np.ndarray             # per leaf: CPUs its jobs' regular tasks run on
    leaf: np.ndarray                # per job: its leaf
    user: np.ndarray                # per job: its user's code (an index into user_names)
    user_names: tuple[str, ...]
    admitted: np.ndarray            # per job: admitted (before or in this round)
    demand: np.ndarray              # per job: CPUs it could use (>= 0)
    allocation: np.ndarray          # per job: its share of its leaf's share (0 if waiting)
    running: np.ndarray             # per job: CPUs its regular tasks run on
    rank: np.ndarray                # per job: place in queue order (0 first)
    priority: np.ndarray
    submitted_at: np.ndarray

    def __post_init__(self) -> None:
        for name in ("leaf_demand", "holding", "leaf", "user", "admitted", "demand", "allocation",
                     "running", "rank", "priority", "submitted_at"):
            a = getattr(self, name).view()
            a.flags.writeable = False
            object.__setattr__(self, name, a)


class Ask(NamedTuple):
    """CPUs owed back within ``within_s``: to a starving leaf (``leaf`` -1: from the leaves over
    their share), or to a user of ``leaf`` below its floor (from that leaf's users over their
    allocation)."""
    want: float
    within_s: float
    leaf: int = -1
    user: int = -1


@dataclass(slots=True)
class Owed:
    """A kind's starvation rule's answer for one round."""
    asks: list[Ask] = field(default_factory=list)
    next_run_s: float | None = None         # until the next timeout expires; None: none runs
    starving: dict[str, float] = field(default_factory=dict)   # leaf -> seconds short
    # Leaves whose users reclaim -> CPUs each user (by code) holds above its allocation.
    user_spare: dict[int, np.ndarray] = field(default_factory=dict)


def sooner(a: float | None, b: float | None) -> float | None:
    """The earlier of two optional deadlines."""
    return b if a is None else a if b is None else min(a, b)
