"""A round's snapshot as columns: the one pass over its job objects a sharing kind makes
(rm/share_kind.py), everything after it working on arrays.

Rounds come every tick while jobs wait or demand moves, and most of a round's jobs are the last
round's with nothing moved: the RM hands the same JobView object for those (rm/jobs.py
views_of). So the columns are kept from round to round: when the jobs are the same, in the same
order, only the rows of views that are new objects are read again; what never moves for a job
(its leaf, user, place in queue order, id) is kept whole while those views say the same of it.
When jobs came or went since (on a busy cluster, most rounds: a job ends or arrives between two
ticks), the kept jobs' rows are gathered (matched in step: the RM keeps its jobs' order) and
only the new jobs' and moved views' rows are read; the user codes and the queue order are worked out again over the arrays. Only a job
whose unmoving fields changed under the same id (a snapshot not made by the RM) reads every job.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .sharing_types import JobView

# The numeric fields, as the columns of ``Columns.cols``, then the two names
_NUMBERS = ("weight", "demand", "running", "admitted", "priority", "submitted_at", "job_id", "tokens")
_FIELDS = operator.attrgetter(*_NUMBERS, "queue", "user")
_NUMBERS_OF = operator.attrgetter(*_NUMBERS)
# What a job's leaf, user code and place in queue order are worked out from (in the RM, never
# moving for a job; a snapshot made otherwise may say another thing of the same id)
_KEPT_OF = operator.attrgetter("job_id", "queue", "user", "priority", "submitted_at")


@dataclass(frozen=True, slots=True)
class Columns:
    """Per job of a snapshot (read-only arrays)."""
    jobs: tuple[JobView, ...]       # the views they were read from
    cols: np.ndarray                # [n, 8] floats, _NUMBERS in order
    leaf: np.ndarray                # its leaf's index
    users: np.ndarray               # its user's code (an index into user_names)
    user_names: tuple[str, ...]     # in order of first appearance
    ids: list[int]
    rank: np.ndarray                # its place in queue order: priority (higher first), submit time, id


def _queue_rank(cols: np.ndarray) -> np.ndarray:
    """Each row's place in queue order: priority (higher first), submit time, id."""
    n = len(cols)
    rank = np.empty(n, dtype=np.int64)
    rank[np.lexsort((cols[:, 6], cols[:, 5], -cols[:, 4]))] = np.arange(n)
    return rank


def read_columns(jobs: tuple[JobView, ...], leaf_index: Callable[[str], int]) -> Columns:
    """Every job's row, read afresh."""
    n = len(jobs)
    rows = list(map(_FIELDS, jobs))
    cols = np.array([r[:8] for r in rows], dtype=float).reshape(n, 8)
    rank = _queue_rank(cols)
    leaf = np.array([leaf_index(r[8]) for r in rows], dtype=np.int64)
    codes: dict[str, int] = {}
    users = np.array([codes.setdefault(r[9], len(codes)) for r in rows], dtype=np.int64)
    for a in (cols, rank, leaf, users):
        a.flags.writeable = False
    return Columns(jobs, cols, leaf, users, tuple(codes), [r[6] for r in rows], rank)


class SnapshotColumns:
    def __init__(self, leaf_index: Callable[[str], int]) -> None:
        self.leaf_index = leaf_index
        self.last: Columns | None = None
        # A code per user name kept across rounds (a round's own codes go by first appearance,
        # which moves as jobs come and go), and ``last``'s rows' kept codes
        self._kept_code: dict[str, int] = {}
        self._kept_names: list[str] = []
        self._kept_users = np.zeros(0, dtype=np.int64)

    def of(self, jobs: tuple[JobView, ...]) -> Columns:
        """The columns of ``jobs``, from the last round's for the jobs it had."""
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
        got = self._merged(jobs, last) if last is not None else None
        if got is None:
            got = read_columns(jobs, self.leaf_index)
            codes = [self._kept_code_of(name) for name in got.user_names]
            self._kept_users = np.array(codes, dtype=np.int64)[got.users] if codes else np.zeros(0, dtype=np.int64)
        self.last = got
        return got

    def _kept_code_of(self, user: str) -> int:
        k = self._kept_code.get(user)
        if k is None:
            k = self._kept_code[user] = len(self._kept_names)
            self._kept_names.append(user)
        return k

    def _merged(self, jobs: tuple[JobView, ...], last: Columns) -> Columns | None:
        """The columns of ``jobs`` from ``last``'s rows of the jobs it had (by id), reading only
        the new jobs and the moved views; None when a kept job's unmoving fields changed.

        The jobs are matched in step with ``last``'s: the RM's jobs keep their order (a dict's),
        new ones come after, and those gone are skipped over, so each is found by looking ahead
        from the last match, not up in a table. A job not found ahead (new, or out of order in a
        snapshot made otherwise) is read afresh, which is right either way."""
        before = last.jobs
        n, m = len(jobs), len(before)
        if not m or not n:
            return None                 # nothing kept to take from (or nothing to take)
        take: list[int] = []
        read: list[int] = []            # rows whose numbers are read (new jobs, moved views)
        new: list[int] = []             # rows of jobs ``last`` did not have (ahead of the last match)
        ids: list[int] = []
        v: JobView
        w: JobView
        j = 0                           # where the next match is looked for in ``before``
        budget = 4 * (n + m)            # (looking ahead past that: out of order; every row afresh)
        for i in range(n):
            v = jobs[i]
            job_id = v.job_id
            ids.append(job_id)
            k = j
            while k < m:
                w = before[k]
                if w.job_id == job_id:
                    break
                k += 1
            budget -= k - j
            if budget < 0:
                return None
            if k == m:
                take.append(0)
                read.append(i)
                new.append(i)
                continue
            j = k + 1
            take.append(k)
            w = before[k]
            if v is not w:
                if _KEPT_OF(v) != _KEPT_OF(w):
                    return None
                read.append(i)
        idx = np.array(take, dtype=np.intp)
        cols = last.cols.take(idx, axis=0)
        for i in read:
            cols[i] = _NUMBERS_OF(jobs[i])
        leaf = last.leaf.take(idx)
        kept_users = self._kept_users.take(idx)
        for i in new:
            v = jobs[i]
            leaf[i] = self.leaf_index(v.queue)
            kept_users[i] = self._kept_code_of(v.user)
        # A round's user codes go by first appearance (as a fresh read numbers them)
        uniq, first = np.unique(kept_users, return_index=True)
        order = np.argsort(first)
        code = np.empty(len(uniq), dtype=np.int64)
        code[order] = np.arange(len(uniq))
        users = code[np.searchsorted(uniq, kept_users)]
        user_names = tuple([self._kept_names[k] for k in uniq[order].tolist()])
        rank = _queue_rank(cols)
        for a in (cols, rank, leaf, users):
            a.flags.writeable = False
        self._kept_users = kept_users
        return Columns(jobs, cols, leaf, users, user_names, ids, rank)

    def validate(self, jobs: tuple[JobView, ...]) -> None:
        """The columns kept for ``jobs`` (the last round's) equal a fresh read."""
        last = self.last
        if last is None or last.jobs is not jobs:
            return
        fresh = read_columns(jobs, self.leaf_index)
        assert (np.array_equal(last.cols, fresh.cols) and np.array_equal(last.leaf, fresh.leaf)
                and np.array_equal(last.users, fresh.users) and last.user_names == fresh.user_names
                and last.ids == fresh.ids and np.array_equal(last.rank, fresh.rank)), "snapshot columns kept out of sync"
