"""A JM host's HostReport rows: each job's (token seq, demand, CPUs in use), in job order, kept
as the report's own columns. A host runs hundreds of long jobs and reports every second, and
few of its jobs move between two reports: a report is then four array copies, where making its
columns from per-job dicts was four passes over every job (numpy.fromiter)."""
from __future__ import annotations

import numpy as np


class ReportRows:
    __slots__ = ("jobs", "seqs", "demand", "in_use", "slot", "n", "holes")

    def __init__(self) -> None:
        self.jobs = np.zeros(16, dtype=np.int64)
        self.seqs = np.zeros(16, dtype=np.int64)
        self.demand = np.zeros(16, dtype=np.int64)
        self.in_use = np.zeros(16, dtype=np.int64)
        self.slot: dict[int, int] = {}     # job -> its row, in job order (rows of jobs gone are holes)
        self.n = 0                         # rows used, holes included
        self.holes = 0

    def add(self, job_id: int) -> None:
        """A job started here: its row goes last (job order), all zeros until set."""
        if self.n == len(self.jobs):
            self._resize(2 * self.n)
        i = self.n
        self.jobs[i] = job_id
        self.seqs[i] = self.demand[i] = self.in_use[i] = 0
        self.slot[job_id] = i
        self.n = i + 1

    def remove(self, job_id: int) -> None:
        del self.slot[job_id]
        self.holes += 1

    def set(self, job_id: int, seq: int, demand: int, in_use: int) -> None:
        i = self.slot[job_id]
        self.seqs[i] = seq
        self.demand[i] = demand
        self.in_use[i] = in_use

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


def _kept(col: np.ndarray, keep: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros(size, dtype=np.int64)
    out[:len(keep)] = col[keep]
    return out
