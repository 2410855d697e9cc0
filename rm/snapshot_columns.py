"""A round's snapshot as columns: the one pass over its job objects a sharing kind makes
(rm/share_kind.py), everything after it working on arrays.

Rounds come every tick while jobs wait or demand moves, and most of a round's jobs are the last
round's with nothing moved: the RM hands the same JobView object for those (rm/jobs.py
views_of). So the columns are kept from round to round: when the jobs are the same, in the same
order, only the rows of views that are new objects are read again; what never moves for a job
(its leaf, user, place in queue order, id) is kept whole while those views say the same of it.
Anything else reads every job.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .sharing_types import JobView

# The numeric fields, as the columns of ``Columns.cols``, then the two names
_NUMBERS = ("weight", "demand", "running", "admitted", "priority", "submitted_at", "job_id")
_FIELDS = operator.attrgetter(*_NUMBERS, "queue", "user")
_NUMBERS_OF = operator.attrgetter(*_NUMBERS)
# What a job's leaf, user code and place in queue order are worked out from (in the RM, never
# moving for a job; a snapshot made otherwise may say another thing of the same id)
_KEPT_OF = operator.attrgetter("job_id", "queue", "user", "priority", "submitted_at")


@dataclass(frozen=True, slots=True)
class Columns:
    """Per job of a snapshot (read-only arrays)."""
    jobs: tuple[JobView, ...]       # the views they were read from
    cols: np.ndarray                # [n, 7] floats, _NUMBERS in order
    leaf: np.ndarray                # its leaf's index
    users: np.ndarray               # its user's code (an index into user_names)
    user_names: tuple[str, ...]     # in order of first appearance
    ids: list[int]
    rank: np.ndarray                # its place in queue order: priority (higher first), submit time, id


def read_columns(jobs: tuple[JobView, ...], leaf_index: Callable[[str], int]) -> Columns:
    """Every job's row, read afresh."""
    n = len(jobs)
    rows = list(map(_FIELDS, jobs))
    cols = np.array([r[:7] for r in rows], dtype=float).reshape(n, 7)
    rank = np.empty(n, dtype=np.int64)
    rank[np.lexsort((cols[:, 6], cols[:, 5], -cols[:, 4]))] = np.arange(n)
    leaf = np.array([leaf_index(r[7]) for r in rows], dtype=np.int64)
    codes: dict[str, int] = {}
    users = np.array([codes.setdefault(r[8], len(codes)) for r in rows], dtype=np.int64)
    for a in (cols, rank, leaf, users):
        a.flags.writeable = False
    return Columns(jobs, cols, leaf, users, tuple(codes), [r[6] for r in rows], rank)


class SnapshotColumns:
    def __init__(self, leaf_index: Callable[[str], int]) -> None:
        self.leaf_index = leaf_index
        self.last: Columns | None = None

    def of(self, jobs: tuple[JobView, ...]) -> Columns:
        """The columns of ``jobs``, from the last round's where its jobs are the same."""
        last = self.last
        if last is not None and len(last.jobs) == len(jobs):
            before = last.jobs
            moved = [i for i, (now, then) in enumerate(zip(jobs, before)) if now is not then]
            if all(_KEPT_OF(jobs[i]) == _KEPT_OF(before[i]) for i in moved):
                cols = last.cols
                if moved:
                    cols = cols.copy()
                    for i in moved:
                        cols[i] = _NUMBERS_OF(jobs[i])
                    cols.flags.writeable = False
                self.last = Columns(jobs, cols, last.leaf, last.users, last.user_names, last.ids, last.rank)
                return self.last
        self.last = read_columns(jobs, self.leaf_index)
        return self.last

    def validate(self, jobs: tuple[JobView, ...]) -> None:
        """The columns kept for ``jobs`` (the last round's) equal a fresh read."""
        last = self.last
        if last is None or last.jobs is not jobs:
            return
        fresh = read_columns(jobs, self.leaf_index)
        assert (np.array_equal(last.cols, fresh.cols) and np.array_equal(last.leaf, fresh.leaf)
                and np.array_equal(last.users, fresh.users) and last.user_names == fresh.user_names
                and last.ids == fresh.ids and np.array_equal(last.rank, fresh.rank)), "snapshot columns kept out of sync"
