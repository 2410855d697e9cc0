"""Token policies: how many concurrent regular task slots each admitted job may hold.

A token is one CPU of guaranteed capacity. The RM calls ``allocate`` whenever
jobs arrive, finish or change demand; fair-share and capacity-queue policies
implement the same interface.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass(slots=True)
class JobDemandView:
    job_id: int
    arrival: float
    demand: float      # CPUs the job could use right now (remaining tasks, capped by width)


def water_fill(capacity: float, demands: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Max-min fair split of ``capacity`` over ``demands`` (weighted): nobody above demand,
    the sum is min(capacity, total demand), and any job below its demand gets at least
    as much (per weight) as every other job."""
    d = np.asarray(demands, dtype=float)
    n = len(d)
    if n == 0:
        return d
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=float)
    if d.sum() <= capacity:
        return d.copy()
    # Jobs in order of demand per weight: the first k get their whole demand and the rest
    # split what is left at one level (per weight). Job k is below the level that filling
    # jobs 0..k-1 leaves, or it is the first job at the level, and then so are all after it.
    order = np.argsort(d / w, kind="stable")
    ds, ws = d[order], w[order]
    before = np.cumsum(ds) - ds                        # demand of the jobs ahead of each
    weight_from = np.cumsum(ws[::-1])[::-1]            # weight of each job and those after it
    level = (capacity - before) / weight_from
    over = ds > level * ws
    k = int(np.argmax(over)) if over.any() else n
    alloc = np.empty(n)
    alloc[order[:k]] = ds[:k]
    if k < n:
        alloc[order[k:]] = level[k] * ws[k:]
    return alloc


class TokenPolicy:
    name = "base"

    def allocate(self, jobs: list[JobDemandView], capacity: float) -> dict[int, int]:
        raise NotImplementedError

    def initial(self, job: JobDemandView, running: int, capacity: float,
                jobs: Callable[[], list[JobDemandView]], held: float) -> int:
        """Tokens for a job being admitted now, one of ``running`` admitted jobs (``jobs()``
        lists them all; ``held``: the tokens the others hold and can use, each job's tokens
        capped by its demand); the others are re-balanced on the RM's next tick."""
        return self.allocate(jobs(), capacity).get(job.job_id, 0)


class FixedTokens(TokenPolicy):
    """Every job gets the same configured number of tokens."""
    name = "fixed"

    def __init__(self, per_job: int) -> None:
        self.per_job = per_job

    def allocate(self, jobs, capacity):
        return {j.job_id: self.per_job for j in jobs}


class EvenSplit(TokenPolicy):
    """Capacity split max-min fairly over the jobs' demands (equal weights)."""
    name = "even"

    def initial(self, job, running, capacity, jobs, held):
        # O(1) per admission; exact shares follow on the next tick. Capacity nobody holds goes
        # to the newcomer at once, up to its demand (as water-filling would give it while the
        # cluster is not full); on a full cluster, an equal share. An equal share alone held
        # most arrivals to a fraction of their demand until the tick although the cluster had
        # room, and their remaining tasks waited for it.
        share = max(capacity - held, capacity / max(running, 1))
        return max(1 if job.demand > 0 else 0, int(min(job.demand, share)))

    def allocate(self, jobs, capacity):
        if not jobs:
            return {}
        alloc = water_fill(capacity, np.array([j.demand for j in jobs]))
        # Whole tokens; every job with demand keeps at least one so it always progresses.
        return {j.job_id: max(1 if j.demand > 0 else 0, int(a)) for j, a in zip(jobs, alloc.tolist())}


class FifoTokens(TokenPolicy):
    """Hadoop's default FIFO: the oldest job takes all it can use, the next gets the rest."""
    name = "fifo"

    def allocate(self, jobs, capacity):
        left = capacity
        out = {}
        for j in sorted(jobs, key=lambda j: (j.arrival, j.job_id)):
            give = min(left, j.demand)
            out[j.job_id] = int(give)
            left -= int(give)
        return out


def make_token_policy(name: str, per_job: int = 0) -> TokenPolicy:
    if name == "fixed":
        return FixedTokens(per_job or 100)
    if name == "even":
        return EvenSplit()
    if name == "fifo":
        return FifoTokens()
    raise ValueError(f"unknown token policy {name!r} (known: fixed, even, fifo)")
