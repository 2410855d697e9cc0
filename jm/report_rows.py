"""A JM host's HostReport rows: each job's (token seq, demand, CPUs in use), in job order, kept
as the report's own columns, and which rows changed since the report the RM acknowledged.

A host runs hundreds of long jobs and reports every second, and few of its jobs move between
two reports. So a report carries only the rows changed (and the jobs dropped) since the last
report the RM acknowledged (ReportAck; apollo.core.messages.HostReport), with the count and
digest of the whole table for the RM to check its copy against; a full report (every row,
four array copies) goes when the RM has acknowledged nothing (the host's first report, or the
RM asked with an acknowledgement of 0)."""
from __future__ import annotations

import numpy as np

from apollo.core.messages import report_digest

EMPTY = np.zeros(0, dtype=np.int64)


class ReportRows:
    __slots__ = ("jobs", "seqs", "demand", "in_use", "slot", "n", "holes", "digest", "next_seq", "acked", "changed",
                 "ended", "rows")

    def __init__(self) -> None:
        self.jobs = np.zeros(16, dtype=np.int64)
        self.seqs = np.zeros(16, dtype=np.int64)
        self.demand = np.zeros(16, dtype=np.int64)
        self.in_use = np.zeros(16, dtype=np.int64)
        self.slot: dict[int, int] = {}     # job -> its row, in job order (rows of jobs gone are holes)
        self.n = 0                         # rows used, holes included
        self.holes = 0
        self.digest = 0                    # xor of the live rows' report_digest
        self.next_seq = 1                  # the seq of the next report (what a change goes out in)
        self.acked = 0                     # the last report the RM acknowledged (0: none; send all)
        self.changed: dict[int, int] = {}  # job -> the report its row last changed for (> acked)
        self.ended: dict[int, int] = {}    # job dropped -> the report that says so first (> acked)
        # each live job's row as Python numbers (compared on every set: reading the arrays' items
        # back would make numpy scalars)
        self.rows: dict[int, tuple[int, int, int]] = {}

    def add(self, job_id: int) -> None:
        """A job started here: its row goes last (job order), all zeros until set."""
        if self.n == len(self.jobs):
            self._resize(2 * self.n)
        i = self.n
        self.jobs[i] = job_id
        self.seqs[i] = self.demand[i] = self.in_use[i] = 0
        self.slot[job_id] = i
        self.n = i + 1
        self.digest ^= report_digest(job_id, 0, 0, 0)
        self.rows[job_id] = (0, 0, 0)
        self.changed[job_id] = self.next_seq
        self.ended.pop(job_id, None)       # (dropped and started again since the RM heard)

    def remove(self, job_id: int) -> None:
        del self.slot[job_id]
        self.holes += 1
        seq, demand, in_use = self.rows.pop(job_id)
        self.digest ^= report_digest(job_id, seq, demand, in_use)
        self.changed.pop(job_id, None)
        self.ended[job_id] = self.next_seq

    def set(self, job_id: int, seq: int, demand: int, in_use: int) -> None:
        old_seq, old_demand, old_in_use = self.rows[job_id]
        if old_seq == seq and old_demand == demand and old_in_use == in_use:
            return
        self.digest ^= report_digest(job_id, old_seq, old_demand, old_in_use) ^ report_digest(job_id, seq, demand,
                                                                                              in_use)
        self.rows[job_id] = (seq, demand, in_use)
        i = self.slot[job_id]
        self.seqs[i] = seq
        self.demand[i] = demand
        self.in_use[i] = in_use
        self.changed[job_id] = self.next_seq

    # ---- reports and their acknowledgements -------------------------------------------------
    def report(self) -> tuple[int, int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
        """The next report's (seq, base, (jobs, seqs, demand, in_use), ended): every row (base 0)
        when the RM has acknowledged none, else the rows changed and the jobs dropped since the
        acknowledged report ``base``, in job order."""
        seq = self.next_seq
        self.next_seq = seq + 1
        base = self.acked
        if base == 0:
            return seq, 0, self.columns(), EMPTY
        changed, slot = self.changed, self.slot
        if not changed:
            cols = (EMPTY, EMPTY, EMPTY, EMPTY)
        else:
            at = np.array(sorted([slot[j] for j in changed]), dtype=np.intp)
            cols = (self.jobs[at], self.seqs[at], self.demand[at], self.in_use[at])
        ended = np.fromiter(self.ended, dtype=np.int64, count=len(self.ended)) if self.ended else EMPTY
        return seq, base, cols, ended

    def ack(self, seq: int) -> None:
        """The RM applied report ``seq`` (0: it asks for every row). An acknowledgement of a
        report this table never sent (an earlier incarnation's) counts as 0."""
        if seq <= 0 or seq >= self.next_seq:
            self.acked = 0
            return
        if seq <= self.acked:
            return                          # (an older one, overtaken)
        self.acked = seq
        self.changed = {j: s for j, s in self.changed.items() if s > seq}
        self.ended = {j: s for j, s in self.ended.items() if s > seq}

    def row(self, job_id: int) -> tuple[int, int, int]:
        i = self.slot[job_id]
        return int(self.seqs[i]), int(self.demand[i]), int(self.in_use[i])

    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(jobs, seqs, demand, in_use) of the live jobs, in job order: copies (a report in flight
        keeps its own)."""
        if self.holes:
            self._resize(len(self.jobs))
        n = self.n
        return self.jobs[:n].copy(), self.seqs[:n].copy(), self.demand[:n].copy(), self.in_use[:n].copy()

    def _resize(self, size: int) -> None:
        """Close the holes (keeping job order) into columns of ``size`` rows."""
        keep = np.fromiter(self.slot.values(), dtype=np.int64, count=len(self.slot))
        k = len(keep)
        size = max(size, 2 * k, 16)
        self.jobs, self.seqs, self.demand, self.in_use = (_kept(c, keep, size) for c in
                                                          (self.jobs, self.seqs, self.demand, self.in_use))
        self.slot = dict(zip(self.slot, range(k)))
        self.n = k
        self.holes = 0

    def validate(self, jobs: list[int]) -> None:
        assert list(self.slot) == jobs, "report rows out of job order"
        assert [int(self.jobs[i]) for i in self.slot.values()] == jobs, "a report row under another job"
        assert self.n == len(self.slot) + self.holes and self.n <= len(self.jobs)
        d = 0
        for job_id in jobs:
            d ^= report_digest(job_id, *self.row(job_id))
        assert d == self.digest, "report rows' digest out of sync"
        assert self.rows == {j: self.row(j) for j in jobs}, "report rows' numbers out of sync"
        assert all(j in self.slot and self.acked < s <= self.next_seq for j, s in self.changed.items())
        assert all(j not in self.slot and self.acked < s <= self.next_seq for j, s in self.ended.items())


def _kept(col: np.ndarray, keep: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros(size, dtype=np.int64)
    out[:len(keep)] = col[keep]
    return out
