"""How a leaf queue's share goes to its jobs: the queue's order (fifo | fair), after per-user
floors where the queue has a user limit. A queue file names the order (``order = "fifo"``);
``ORDERS`` turns the name into the object that splits.

Jobs are taken in queue order: priority (higher first), then submit time, then id."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .share_math import EPS, water_fill

if TYPE_CHECKING:
    from .queues import QueueSpec
    from .sharing_types import JobView


class QueueOrder:
    """One way of splitting a leaf's share among its jobs."""
    name = "base"
    # Whether every job with demand is promised a token. Where not, a job the split leaves
    # nothing waits, as in Hadoop's FIFO (the head of the line takes the next slot).
    token_of_right = True

    def split(self, share: float, demand: np.ndarray, weight: np.ndarray | None, rank: np.ndarray) -> np.ndarray:
        """``share`` over jobs with these demands (>= 0), weights (None: equal) and places in
        queue order."""
        raise NotImplementedError


class Fifo(QueueOrder):
    """Earlier jobs (lower rank) take all they can use; the next gets what is left."""
    name = "fifo"
    token_of_right = False

    def split(self, share, demand, weight, rank):
        o = np.argsort(rank, kind="stable")
        ds = demand[o]
        out = np.empty_like(demand)
        out[o] = np.clip(share - (np.cumsum(ds) - ds), 0.0, ds)
        return out


class Fair(QueueOrder):
    """Max-min by weight."""
    name = "fair"

    def split(self, share, demand, weight, rank):
        return water_fill(share, demand, weight)


ORDERS: dict[str, QueueOrder] = {"fifo": Fifo(), "fair": Fair()}
FIFO = ORDERS["fifo"]


def order_of(q: QueueSpec) -> QueueOrder:
    return ORDERS[q.order]


def runs_without_token(q: QueueSpec) -> bool:
    """Whether a job of leaf ``q`` is admitted (runs) with no token: in a queue that promises
    none (FIFO) and says how many jobs run at once (``max_running_jobs``, Hadoop's
    maxRunningJobs), that many jobs run, and those behind the head wait for its slots inside
    the queue, as runnable jobs of a Hadoop FIFO pool do. Elsewhere a job is admitted when it
    can hold a token (or, in FIFO, at the head of the line)."""
    return not ORDERS[q.order].token_of_right and q.max_running_jobs is not None


def user_floors(q: QueueSpec, share: float, d: np.ndarray, rank: np.ndarray, users: np.ndarray):
    """HADOOP-3445 user limits: every active user (one with demand) first gets max(limit,
    1/users) of the queue's share (no more than it can use), users taken by their first job in
    queue order, so when the floors cannot all be met the later users wait, as the later jobs
    do. ``d`` >= 0. -> (the active users' codes, each one's floor, each active job's index into
    them)."""
    act = d > 0
    codes, inv = np.unique(users[act], return_inverse=True)
    if codes.size == 0:
        return codes, np.zeros(0), inv
    demand_u = np.bincount(inv, weights=d[act], minlength=len(codes))
    first_u = np.full(len(codes), np.inf)
    np.minimum.at(first_u, inv, rank[act])
    share = min(max(0.0, share), float(d.sum()))
    frac = max(q.user_limit, 1.0 / len(codes))
    return codes, FIFO.split(share, np.minimum(frac * share, demand_u), None, first_u), inv


def split_leaf(q: QueueSpec, share: float, d: np.ndarray, w: np.ndarray, rank: np.ndarray,
               users: np.ndarray) -> np.ndarray:
    """split_in_queue over arrays; ``rank``: each job's place in queue order; ``users``: codes."""
    order = ORDERS[q.order]
    d = np.maximum(d, 0.0)
    share = min(max(0.0, share), float(d.sum()))
    if d.size == 0 or share <= 0:
        return np.zeros(d.size)
    if q.user_limit <= 0:
        return order.split(share, d, w, rank)
    _, floor_u, inv = user_floors(q, share, d, rank, users)
    act = d > 0
    a1 = np.zeros(d.size)
    idx_act = np.flatnonzero(act)
    o = np.lexsort((rank[idx_act], inv))                # by user, then queue order
    bounds = np.flatnonzero(np.diff(inv[o])) + 1
    for u, grp in enumerate(np.split(idx_act[o], bounds)):
        if floor_u[u] > 0:
            a1[grp] = order.split(floor_u[u], d[grp], w[grp], rank[grp])
    rest = share - a1.sum()
    if rest > EPS:
        a1 += order.split(rest, d - a1, w, rank)
    return a1


def queue_rank(jobs) -> np.ndarray:
    """Each job's place in queue order: priority (higher first), then submit time, then id."""
    n = len(jobs)
    pri = np.fromiter((j.priority for j in jobs), float, n)
    sub = np.fromiter((j.submitted_at for j in jobs), float, n)
    ids = np.fromiter((j.job_id for j in jobs), float, n)
    rank = np.empty(n, dtype=np.int64)
    rank[np.lexsort((ids, sub, -pri))] = np.arange(n)
    return rank


def split_in_queue(queue: QueueSpec, share: float, jobs: list[JobView]) -> dict[int, float]:
    """A leaf's share over its jobs: its order's split, after per-user floors when the queue
    has a user limit."""
    if not jobs:
        return {}
    d = np.array([j.demand for j in jobs], dtype=float)
    w = np.array([j.weight for j in jobs], dtype=float)
    codes: dict[str, int] = {}
    users = np.array([codes.setdefault(j.user, len(codes)) for j in jobs])
    got = split_leaf(queue, share, d, w, queue_rank(jobs), users)
    return dict(zip((j.job_id for j in jobs), got.tolist()))
