"""Sharing policies of the capacity plane: who is admitted, how many tokens each job holds, and
what must be given back, computed from one snapshot of the RM's jobs.

Two ways of sharing over the same queue tree (rm/queues.py):
- "fair" (HFS): hierarchical weighted max-min sharing with min shares; a pool starved of its
  min share for Tmin, or of half its fair share for Tfair, gets tasks killed in pools above
  their fair share.
- "capacity" (HADOOP-3445): each queue gets its guarantee while it has demand; idle guarantee
  is lent (up to a lending limit) in proportion to the borrowers' guarantees, never past a
  queue's max; a lender that wants it back gets it within its reclaim timeout. Inside a queue
  with a user limit and a reclaim timeout, a user below its floor gets it back the same way
  from the users holding more than their allocation.

Pure: time comes only from ``Snapshot.now``; the only state is per-queue and per-user timers.
"""
from __future__ import annotations

import heapq
import math
import operator
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from .queues import Limits, QueueSpec, QueueTree

EPS = 1e-9


@dataclass(frozen=True, slots=True)
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


# ---- pure helpers -------------------------------------------------------------------------
def water_fill(capacity: float, demands, weights=None, floors=None) -> np.ndarray:
    """Weighted max-min split of ``capacity``: each gets clip(weight * L, floor, demand) for the
    one level L at which the total is min(capacity, total demand). Floors (capped by demand)
    are met first; if they alone exceed the capacity they are scaled down together."""
    d = np.maximum(np.asarray(demands, dtype=float), 0.0)
    n = d.size
    cap = max(0.0, float(capacity))
    if n == 0:
        return np.zeros(0)
    if d.sum() <= cap:
        return d.copy()
    w = np.ones(n) if weights is None else np.maximum(np.asarray(weights, dtype=float), EPS)
    f = np.zeros(n) if floors is None else np.clip(np.asarray(floors, dtype=float), 0.0, d)
    fs = f.sum()
    if fs >= cap:
        return f * (cap / fs) if fs > 0 else np.zeros(n)
    # The total g(L) = sum clip(w L, f, d) is piecewise linear in L: its slope rises by w_i at
    # f_i / w_i and falls by w_i at d_i / w_i. Walk the sorted breakpoints to the one passing
    # the capacity and interpolate: O(n log n), no loop over jobs.
    x = np.concatenate([f / w, d / w])
    s = np.concatenate([w, -w])
    o = np.argsort(x, kind="stable")
    x, s = x[o], s[o]
    slope = np.cumsum(s)
    g = fs + np.concatenate([[0.0], np.cumsum(slope[:-1] * np.diff(x))])
    k = int(np.searchsorted(g, cap, side="left"))
    k = min(max(k, 1), len(x) - 1)
    level = x[k - 1] + (cap - g[k - 1]) / max(slope[k - 1], EPS)
    return np.clip(w * level, f, d)


def _effective_demand(tree: QueueTree, lim: dict[str, Limits], leaf_demand: dict[str, float]) -> dict[str, float]:
    """Demand a queue can use: its leaves' demand, capped by every max on the way up."""
    eff: dict[str, float] = {}
    for q in reversed(tree.nodes()):            # children before parents
        d = leaf_demand.get(q.path, 0.0) if q.is_leaf else sum(eff[c.path] for c in q.children)
        eff[q.path] = min(max(0.0, d), lim[q.path].max)
    return eff


def _sum_up(tree: QueueTree, share: dict[str, float]) -> dict[str, float]:
    for q in reversed(tree.nodes()):
        if q.children:
            share[q.path] = sum(share[c.path] for c in q.children)
    return share


def fair_shares(tree: QueueTree, capacity: float, leaf_demand: dict[str, float]) -> dict[str, float]:
    """HFS: at each level the parent's share is water-filled over its children by weight, each
    child's floor being min(guarantee, demand); a parent's share is the sum of its children's."""
    lim = tree.resolve(capacity)
    eff = _effective_demand(tree, lim, leaf_demand)
    share = {tree.root.path: min(max(0.0, capacity), eff[tree.root.path])}
    for q in tree.nodes():
        if q.children:
            d = np.array([eff[c.path] for c in q.children])
            floors = np.minimum([lim[c.path].guarantee for c in q.children], d)
            got = water_fill(share[q.path], d, [c.weight for c in q.children], floors)
            share.update(zip((c.path for c in q.children), got.tolist()))
    return _sum_up(tree, share)


def capacity_shares(tree: QueueTree, capacity: float, leaf_demand: dict[str, float]) -> dict[str, float]:
    """HADOOP-3445: each queue first gets min(guarantee, demand). The pool others may borrow is
    the capacity nobody guarantees plus idle guarantee up to each idle queue's lending limit;
    it goes to queues with unmet demand in proportion to their guarantees (water-filled, so what
    a queue capped by its max or demand cannot take goes to the others), and what is left to
    queues without a guarantee by weight. Children share their parent's allocation the same way."""
    lim = tree.resolve(capacity)
    # What each queue needs from its parent: its demand, plus the idle guarantee its children
    # may not lend (held back inside it, so not lendable from it either), capped by its max.
    need: dict[str, float] = {}
    locked: dict[str, float] = {}
    for q in reversed(tree.nodes()):
        n = leaf_demand.get(q.path, 0.0) if q.is_leaf else sum(need[c.path] + locked[c.path] for c in q.children)
        lq = lim[q.path]
        need[q.path] = min(max(0.0, n), lq.max)
        idle = lq.guarantee - min(lq.guarantee, need[q.path])
        locked[q.path] = max(0.0, idle - lq.lend)
    root = tree.root.path
    if tree.root.is_leaf:
        return {root: min(max(0.0, float(capacity)), need[root])}
    share = {root: max(0.0, float(capacity))}
    for q in tree.nodes():
        if not q.children:
            continue
        kids = [c.path for c in q.children]
        have = share[q.path]
        g = np.array([lim[c].guarantee for c in kids])
        d = np.array([need[c] for c in kids])
        base = np.minimum(g, d)
        if base.sum() > have:                   # cannot happen with a consistent tree; be safe
            base *= have / base.sum()
        pool = max(0.0, have - base.sum() - sum(locked[c] for c in kids))
        want = d - base
        extra = np.zeros(len(kids))
        first = (g > 0) & (want > EPS)
        if pool > EPS and first.any():
            extra[first] = water_fill(pool, want[first], g[first])
        left = pool - extra.sum()
        rest = (g <= 0) & (want > EPS)
        if left > EPS and rest.any():
            extra[rest] = water_fill(left, want[rest], [q.children[i].weight for i in np.flatnonzero(rest)])
        share.update(zip(kids, (base + extra).tolist()))
    return _sum_up(tree, share)


SHARE_FUNCTIONS = {"fair": fair_shares, "capacity": capacity_shares}


def _fifo(share: float, d: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """Earlier jobs (lower rank) take all they can use; the next gets what is left."""
    o = np.argsort(rank, kind="stable")
    ds = d[o]
    out = np.empty_like(d)
    out[o] = np.clip(share - (np.cumsum(ds) - ds), 0.0, ds)
    return out


def _by_order(order: str, share: float, d: np.ndarray, w: np.ndarray, rank: np.ndarray) -> np.ndarray:
    return _fifo(share, d, rank) if order == "fifo" else water_fill(share, d, w)


def _user_floors(q: QueueSpec, share: float, d: np.ndarray, rank: np.ndarray, users: np.ndarray):
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
    return codes, _fifo(share, np.minimum(frac * share, demand_u), first_u), inv


def _split(q: QueueSpec, share: float, d: np.ndarray, w: np.ndarray, rank: np.ndarray,
           users: np.ndarray) -> np.ndarray:
    """split_in_queue over arrays; ``rank``: each job's place in queue order; ``users``: codes."""
    d = np.maximum(d, 0.0)
    share = min(max(0.0, share), float(d.sum()))
    if d.size == 0 or share <= 0:
        return np.zeros(d.size)
    if q.user_limit <= 0:
        return _by_order(q.order, share, d, w, rank)
    _, floor_u, inv = _user_floors(q, share, d, rank, users)
    act = d > 0
    a1 = np.zeros(d.size)
    idx_act = np.flatnonzero(act)
    o = np.lexsort((rank[idx_act], inv))                # by user, then queue order
    bounds = np.flatnonzero(np.diff(inv[o])) + 1
    for u, grp in enumerate(np.split(idx_act[o], bounds)):
        if floor_u[u] > 0:
            a1[grp] = _by_order(q.order, floor_u[u], d[grp], w[grp], rank[grp])
    rest = share - a1.sum()
    if rest > EPS:
        a1 += _by_order(q.order, rest, d - a1, w, rank)
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
    """A leaf's share over its jobs: fifo (earlier jobs take all they can use) or fair (max-min
    by weight), after per-user floors when the queue has a user limit."""
    if not jobs:
        return {}
    d = np.array([j.demand for j in jobs], dtype=float)
    w = np.array([j.weight for j in jobs], dtype=float)
    codes: dict[str, int] = {}
    users = np.array([codes.setdefault(j.user, len(codes)) for j in jobs])
    got = _split(queue, share, d, w, queue_rank(jobs), users)
    return dict(zip((j.job_id for j in jobs), got.tolist()))


def _round(x: np.ndarray, total: int, must: np.ndarray | None = None) -> np.ndarray:
    """round_tokens over arrays; ``must``: jobs that need at least one token."""
    x = np.maximum(np.asarray(x, dtype=float), 0.0)
    total = max(0, int(total))
    base = np.floor(x + 1e-9).astype(np.int64)
    target = min(total, int(math.floor(float(x.sum()) + 1e-6)))
    keep = np.zeros(x.size, dtype=np.int64)             # the least each job may be cut to
    if must is not None and must.any():
        # At most ``total`` jobs can be promised a token (admission keeps this from binding).
        m = np.flatnonzero(must)
        have = m[base[m] > 0][:total]
        lack = m[base[m] == 0][:total - have.size]
        base[lack] = 1
        keep[have] = 1
        keep[lack] = 1
    extra = int(base.sum()) - target
    while extra > 0:                                    # over: take from the largest holders
        elig = np.flatnonzero(base > keep)
        if elig.size == 0:
            break
        top = elig[np.argsort(-base[elig], kind="stable")[:extra]]
        base[top] -= 1
        extra -= top.size
    short = target - int(base.sum())
    if short > 0:                                       # under: largest remainders first
        frac = x - base
        elig = np.flatnonzero(frac > 1e-9)
        top = elig[np.argsort(-frac[elig], kind="stable")[:short]]
        base[top] += 1
    return base


def round_tokens(alloc: dict[int, float], total: int, at_least_one=()) -> dict[int, int]:
    """Whole tokens: floors, then the largest remainders, summing to at most ``total`` (and to
    no more than the floats' sum), none above its float's ceiling, except that each job in
    ``at_least_one`` gets one token while the total allows (taken from the largest holders)."""
    ids = list(alloc)
    x = np.array([alloc[i] for i in ids], dtype=float)
    one = set(at_least_one)
    must = np.array([i in one for i in ids], dtype=bool) if one else None
    return dict(zip(ids, _round(x, total, must).tolist()))


# ---- the policies ---------------------------------------------------------------------------
_FIELDS = operator.attrgetter("weight", "demand", "running", "admitted", "priority", "submitted_at",
                              "job_id", "queue", "user")


class SharingPolicy:
    name = "base"

    def __init__(self, tree: QueueTree) -> None:
        self.tree = tree
        self._leaves = tree.leaves()
        self._leaf_of: dict[str, int] = {}              # queue name a job gives -> leaf index
        self._index = {q.path: i for i, q in enumerate(self._leaves)}
        self._shares = SHARE_FUNCTIONS[tree.sharing]
        self.last_deficit = 0.0                         # CPUs asked back in the last round (queues' and users')

    def _leaf_index(self, name: str) -> int:
        i = self._leaf_of.get(name)
        if i is None:
            i = self._leaf_of[name] = self._index[self.tree.leaf(name).path]
        return i

    def leaf_shares(self, capacity: float, leaf_demand: np.ndarray) -> dict[str, float]:
        return self._shares(self.tree, capacity, {q.path: float(v) for q, v in zip(self._leaves, leaf_demand)})

    # The RM's one call -------------------------------------------------------------------
    def allocate(self, snap: Snapshot) -> Allocation:
        jobs = snap.jobs
        n, L = len(jobs), len(self._leaves)
        # One pass over the job objects; everything after works on columns.
        rows = list(map(_FIELDS, jobs))
        cols = np.array([r[:7] for r in rows], dtype=float).reshape(n, 7)
        w, d, running = np.maximum(cols[:, 0], EPS), np.maximum(cols[:, 1], 0.0), cols[:, 2]
        admitted = cols[:, 3] > 0
        rank = np.empty(n, dtype=np.int64)
        rank[np.lexsort((cols[:, 6], cols[:, 5], -cols[:, 4]))] = np.arange(n)
        leaf_of, index = self._leaf_of, self._leaf_index
        leaf = np.array([leaf_of[r[7]] if r[7] in leaf_of else index(r[7]) for r in rows], dtype=np.int64)
        ucodes: dict[str, int] = {}
        users = np.array([ucodes.setdefault(r[8], len(ucodes)) for r in rows], dtype=np.int64)
        total = int(math.floor(max(0.0, snap.capacity) + 1e-9))
        needs = d > 0

        newly = self._admit(snap, leaf, users, rank, d, needs, admitted, total)
        adm = admitted.copy()
        adm[newly] = True

        # Shares from the admitted jobs' demand, then each leaf's share over its jobs.
        leaf_demand = np.bincount(leaf[adm], weights=d[adm], minlength=L).astype(float)
        shares = self.leaf_shares(snap.capacity, leaf_demand)
        x = np.zeros(n)
        strict = np.zeros(n, dtype=bool)          # jobs of FIFO leaves: no token of right
        for li, q in enumerate(self._leaves):
            m = np.flatnonzero(adm & (leaf == li))
            if m.size:
                x[m] = _split(q, shares[q.path], d[m], w[m], rank[m], users[m])
                strict[m] = q.order == "fifo"
        # In a FIFO queue the jobs ahead take all they can use and a job left nothing waits:
        # one just admitted goes back to the line, one already running keeps its tasks but is
        # granted no token (Hadoop's FIFO gives the next slot to the head of the line).
        starved = strict & (x <= EPS) & needs
        if starved.any():
            back = [i for i in newly if starved[i]]
            if back:
                newly = [i for i in newly if not starved[i]]
                adm[back] = False
                x[back] = 0.0
        ai = np.flatnonzero(adm)
        got = _round(x[ai], total, (needs & ~starved)[ai])
        grant = np.zeros(n, dtype=np.int64)
        grant[ai] = got
        ids = [r[6] for r in rows]

        lim = self.tree.resolve(snap.capacity)
        holding = np.bincount(leaf, weights=np.where(adm, running, 0.0), minlength=L).astype(float)
        asks, next_run, starving = self._starvation(snap.now, lim, leaf_demand, holding, shares)
        asks = [(want, within, -1, -1) for want, within in asks]
        u_asks, u_next, u_spare = self._user_asks(snap.now, leaf, users, list(ucodes), adm, d, x, running, rank, shares)
        if u_next is not None:
            next_run = u_next if next_run is None else min(next_run, u_next)
        over = self._over(lim, holding, shares)
        reclaim = self._victims(asks + u_asks, over, u_spare, leaf, users, adm, running, grant, jobs, rank, ids)

        positions: dict[int, tuple[str, int]] = {}
        seen = [0] * L
        waiting = np.flatnonzero(~adm)
        for i in waiting[np.argsort(rank[waiting], kind="stable")].tolist():
            seen[leaf[i]] += 1
            positions[ids[i]] = (self._leaves[leaf[i]].path, seen[leaf[i]])
        return Allocation(tokens=dict(zip((ids[i] for i in ai.tolist()), got.tolist())),
                          admit=[ids[i] for i in newly], reclaim=reclaim, next_run_s=next_run,
                          shares=shares, positions=positions, starving=starving)

    # Admission ---------------------------------------------------------------------------
    def _admit(self, snap, leaf, users, rank, d, needs, admitted, total) -> list[int]:
        """Waiting jobs in queue order, within each leaf's running-job and per-user limits, while
        every admitted job with demand can still hold one token. When slots are short the leaf
        with the fewest admitted jobs per core of share goes first."""
        L = len(self._leaves)
        waiting = np.flatnonzero(~admitted)
        if waiting.size == 0:
            return []
        waiting = waiting[np.argsort(rank[waiting], kind="stable")]
        count = np.bincount(leaf[admitted], minlength=L)
        holders = np.bincount(leaf[admitted & needs], minlength=L).tolist()
        free = total - sum(holders)
        U = int(users.max()) + 1
        cand: list[np.ndarray] = []
        for l, q in enumerate(self._leaves):
            mine = waiting[leaf[waiting] == l]
            if q.max_jobs_per_user is not None and mine.size:
                # A user at its limit waits; the next user's job may go (HADOOP-3445).
                per_user = np.bincount(users[admitted & (leaf == l)], minlength=U).tolist()
                keep = []
                for i, u in zip(mine.tolist(), users[mine].tolist()):
                    if per_user[u] < q.max_jobs_per_user:
                        per_user[u] += 1
                        keep.append(i)
                mine = np.array(keep, dtype=np.int64)
            if q.max_running_jobs is not None:
                mine = mine[:max(0, q.max_running_jobs - int(count[l]))]
            # Jobs with demand past the free slots could not be admitted this round anyway.
            mine = mine[~needs[mine] | (np.cumsum(needs[mine]) <= free)]
            cand.append(mine)
        wanting = sum(int(needs[c].sum()) for c in cand)
        if wanting <= free:                             # room for all: queue order
            out = np.concatenate(cand)
            return out[np.argsort(rank[out], kind="stable")].tolist()
        # Shares as if every candidate were admitted decide which leaf gets scarce slots.
        dem = np.bincount(leaf[admitted], weights=d[admitted], minlength=L).astype(float)
        dem += np.array([float(d[c].sum()) for c in cand])
        sh = self.leaf_shares(snap.capacity, dem)
        share = [max(sh[q.path], EPS) for q in self._leaves]
        heap = [((holders[l] + 1) / share[l], l, 0) for l in range(L) if cand[l].size]
        heapq.heapify(heap)
        out: list[int] = []
        while heap:
            _, l, k = heapq.heappop(heap)
            i = int(cand[l][k])
            if needs[i]:
                if free <= 0:
                    continue        # this leaf's next job needs a slot: it waits, in order
                free -= 1
                holders[l] += 1
            out.append(i)
            if k + 1 < cand[l].size:
                heapq.heappush(heap, ((holders[l] + 1) / share[l], l, k + 1))
        return out

    # Give-backs ----------------------------------------------------------------------------
    def _starvation(self, now, lim, leaf_demand, holding, shares):
        """-> (asks: (CPUs wanted back, within_s) per starving leaf, next_run_s, starving)."""
        raise NotImplementedError

    def _over(self, lim, holding, shares) -> list[tuple[int, float]]:
        """Leaves that may give back, in the order to take from them, with how much each may."""
        raise NotImplementedError

    def _users_reclaim(self, q: QueueSpec) -> bool:
        """Whether users of leaf ``q`` get their floor back by give-backs (and keep their allocation)."""
        return False

    def _user_asks(self, now, leaf, users, names, adm, d, x, running, rank, shares):
        """-> (asks: (CPUs wanted back, within_s, leaf, user) per starving user, next_run_s,
        leaf -> CPUs each user holds above its allocation, for leaves whose users reclaim)."""
        return [], None, {}

    def _victim_key(self, jobs, rank, idx: np.ndarray):
        """The order to take from the jobs ``idx`` of one leaf (an argsort of idx)."""
        raise NotImplementedError

    def _victims(self, asks, over, user_spare, leaf, users, adm, running, grant, jobs, rank, ids) -> list[Reclaim]:
        """Take what is asked for, earliest deadline first: a starving leaf's ask (leaf -1) from
        the leaves over their share, never below it; a starving user's from the users of its
        own leaf over their allocation, the most over first. In a leaf in ``user_spare`` no
        give-back takes a user below its allocation, and no job gives more than it runs above
        its new grant. A job hit by several asks owes their sum by the earliest deadline, in one
        Reclaim; kill lines round the kills down, so no more than asked is ever killed."""
        self.last_deficit = sum(a[0] for a in asks)
        if not asks:
            return []
        cut: dict[int, float] = {}
        when: dict[int, float] = {}
        spare = dict(over)
        room = np.where(adm, np.maximum(running - grant, 0.0), 0.0).tolist()
        leaf_l, user_l = leaf.tolist(), users.tolist()
        order: dict[int, list[int]] = {}
        givers: dict[int, list[list[int]]] = {}

        def in_order(li):       # the leaf's jobs that may give back, in the order to take them
            if li not in order:
                m = np.flatnonzero(leaf == li)
                m = m[np.asarray(room)[m] > EPS]
                order[li] = m[self._victim_key(jobs, rank, m)].tolist()
            return order[li]

        def take(idx, want, within):
            got = 0.0
            for i in idx:
                us = user_spare.get(leaf_l[i])
                c = min(want - got, room[i], us[user_l[i]] if us is not None else math.inf)
                if c <= EPS:
                    continue
                room[i] -= c
                if us is not None:
                    us[user_l[i]] -= c
                cut[i] = cut.get(i, 0.0) + c
                when[i] = min(when.get(i, within), within)
                got += c
                if want - got <= EPS:
                    break
            return got

        for want, within, li, _ in sorted(asks, key=lambda a: a[1]):
            if li < 0:
                for lo, _ in over:
                    if want <= EPS:
                        break
                    if spare[lo] > EPS:
                        got = take(in_order(lo), min(want, spare[lo]), within)
                        spare[lo] -= got
                        want -= got
                continue
            if li not in givers:    # the leaf's users over their allocation, the most over first
                us, mine = user_spare[li], defaultdict(list)
                for i in in_order(li):
                    mine[user_l[i]].append(i)
                givers[li] = [mine[v] for v in sorted(mine, key=lambda v: -us[v]) if us[v] > EPS]
            g = givers[li]
            while g and want > EPS:
                got = take(g[0], want, within)
                want -= got
                if want > EPS:
                    g.pop(0)        # it gave all it could
        out = []
        for i, c in cut.items():
            line = max(int(grant[i]), math.ceil(running[i] - c - 1e-9))
            if line < running[i] - EPS:
                out.append(Reclaim(ids[i], line, when[i]))
        return out

    # Invariants ------------------------------------------------------------------------------
    def validate(self, snap: Snapshot, alloc: Allocation) -> None:
        """Assert the invariants of ``alloc`` (just returned by ``allocate(snap)``): tokens fit
        the cores and give every job with demand one; admission limits; shares sum up the tree,
        stay within demand and max and meet guarantees; kills stay within the deficits (queues'
        and users') and leave every leaf at or above its share, less what its own users are
        short of where users reclaim, and there no user below its allocation; every waiting job
        has a position."""
        byid = {j.job_id: j for j in snap.jobs}
        total = math.floor(max(0.0, snap.capacity) + 1e-9)
        assert len(set(alloc.admit)) == len(alloc.admit)
        assert all(not byid[i].admitted for i in alloc.admit), "admitted a job already running"
        adm = {j.job_id for j in snap.jobs if j.admitted} | set(alloc.admit)
        assert set(alloc.tokens) == adm, "tokens must list exactly the admitted jobs"
        assert all(t >= 0 for t in alloc.tokens.values())
        assert sum(alloc.tokens.values()) <= total, "more tokens than cores"
        holders = [i for i in adm if byid[i].demand > 0]
        fair = [i for i in holders if self.tree.leaf(byid[i].queue).order != "fifo"]
        if len(holders) <= total:      # (a FIFO queue's job may hold none: the jobs ahead take it all)
            assert all(alloc.tokens[i] >= 1 for i in fair), "a job with demand holds no token"
        elif alloc.admit:
            assert all(byid[i].demand <= 0 for i in alloc.admit), "admitted past the token slots"
        for q in self._leaves:                           # limits, where this round admitted jobs
            mine = [i for i in adm if self.tree.leaf(byid[i].queue).path == q.path]
            new = [i for i in alloc.admit if self.tree.leaf(byid[i].queue).path == q.path]
            if new and q.max_running_jobs is not None:
                assert len(mine) <= q.max_running_jobs, f"{q.path}: past max_running_jobs"
            if new and q.max_jobs_per_user is not None:
                for u in {byid[i].user for i in new}:
                    assert sum(byid[i].user == u for i in mine) <= q.max_jobs_per_user, f"{q.path}: past max_jobs_per_user"
        lim = self.tree.resolve(snap.capacity)
        tol = 1e-6 * max(1.0, snap.capacity)
        for q in self.tree.nodes():
            if q.children:
                s = sum(alloc.shares[c.path] for c in q.children)
                assert abs(alloc.shares[q.path] - s) <= tol, f"{q.path}: share != sum of children"
            assert alloc.shares[q.path] <= lim[q.path].max + tol, f"{q.path}: share past its max"
        assert alloc.shares[self.tree.root.path] <= snap.capacity + tol
        for q in self._leaves:                           # demand caps and guarantees (min shares)
            d = sum(byid[i].demand for i in adm if self.tree.leaf(byid[i].queue).path == q.path)
            assert alloc.shares[q.path] <= d + tol, f"{q.path}: share above its demand"
            assert alloc.shares[q.path] >= min(lim[q.path].guarantee, d) - tol, f"{q.path}: below its guarantee"
        waiting = [j.job_id for j in snap.jobs if j.job_id not in adm]
        assert set(alloc.positions) == set(waiting)
        for q in self._leaves:
            pos = sorted(p for lq, p in alloc.positions.values() if lq == q.path)
            assert pos == list(range(1, len(pos) + 1))
        seen = set()
        kill = defaultdict(float)
        user_kill = defaultdict(float)
        for r in alloc.reclaim:
            assert r.job_id not in seen and r.job_id in adm, "a job reclaimed twice or not running"
            seen.add(r.job_id)
            j = byid[r.job_id]
            assert alloc.tokens[r.job_id] <= r.tokens < j.running, "kill line outside [grant, running)"
            assert r.within_s >= 0
            path = self.tree.leaf(j.queue).path
            kill[path] += j.running - r.tokens
            user_kill[path, j.user] += j.running - r.tokens
        assert sum(kill.values()) <= self.last_deficit + 1e-6, "killed more than the deficits"
        for path, k in kill.items():
            mine = [byid[i] for i in adm if self.tree.leaf(byid[i].queue).path == path]
            held = sum(j.running for j in mine)
            floor = max(alloc.shares[path], lim[path].guarantee if self.tree.sharing == "capacity" else 0.0)
            q = self.tree.get(path)
            if not self._users_reclaim(q):
                assert held - k >= floor - 1e-6, f"{path}: preempted below its share"
                continue
            # Users give back to users of the same leaf: the leaf goes below its share by no more
            # than its users are short of their allocations, and no user below its allocation.
            got = split_in_queue(q, alloc.shares[path], mine)
            alloc_u, held_u = defaultdict(float), defaultdict(float)
            for j in mine:
                alloc_u[j.user] += got[j.job_id]
                held_u[j.user] += j.running
            short = sum(max(0.0, alloc_u[u] - held_u[u]) for u in held_u)
            assert k <= max(0.0, held - floor) + short + 1e-6, f"{path}: preempted below its share"
            for u in held_u:
                assert held_u[u] - user_kill[path, u] >= min(held_u[u], alloc_u[u]) - 1e-6, \
                    f"{path}: user {u} preempted below its allocation"
        assert alloc.next_run_s is None or alloc.next_run_s > 0


class FairSharing(SharingPolicy):
    """HFS pools: min shares first, then weighted max-min; kills after Tmin / Tfair."""
    name = "fair"

    def __init__(self, tree: QueueTree) -> None:
        super().__init__(tree)
        self._since: dict[tuple[str, str], float] = {}   # (leaf, "min"|"fair") -> starved since

    def _starvation(self, now, lim, leaf_demand, holding, shares):
        asks, next_run, starving = [], None, {}
        for li, q in enumerate(self._leaves):
            d, h = float(leaf_demand[li]), float(holding[li])
            targets = {"min": (min(lim[q.path].guarantee, d), q.min_share_timeout_s),
                       "fair": (min(shares[q.path], d), q.fair_share_timeout_s)}
            want, longest = 0.0, 0.0
            for kind, (target, timeout) in targets.items():
                limit = target if kind == "min" else target / 2      # HFS: below half its fair share
                key = (q.path, kind)
                if not (d > EPS and h < limit - EPS):
                    self._since.pop(key, None)
                    continue
                since = self._since.setdefault(key, now)
                longest = max(longest, float(now - since))
                if timeout is None:
                    continue
                # Past its timeout it is owed the full target every round until it has it (the RM
                # asks no job again before what it killed has been heard of, and a job yields
                # only to work that waits for the room: asked again, it kills no more than that)
                if now - since >= timeout - EPS:
                    want = max(want, target - h)           # brought up to the full target
                left = since + timeout - now
                if left > EPS:
                    next_run = left if next_run is None else min(next_run, left)
            starving[q.path] = longest
            if want > EPS:
                asks.append((want, 0.0))
        return asks, next_run, starving

    def _over(self, lim, holding, shares):
        # Never a leaf at or below its fair share; the one most over it first.
        ex = [(li, float(holding[li]) - shares[q.path]) for li, q in enumerate(self._leaves)]
        return sorted((e for e in ex if e[1] > EPS), key=lambda e: (-e[1], e[0]))

    def _victim_key(self, jobs, rank, idx):
        # Lowest priority first, then the most recently submitted.
        pri = np.array([jobs[i].priority for i in idx.tolist()], dtype=float)
        return np.lexsort((-rank[idx], pri))


class CapacitySharing(SharingPolicy):
    """HADOOP-3445 queues: guarantees, lending within limits, reclaim within a timeout."""
    name = "capacity"

    def __init__(self, tree: QueueTree) -> None:
        super().__init__(tree)
        self._since: dict[str, float] = {}               # leaf -> below its guarantee since
        self._user_since: dict[tuple[str, str], float] = {}     # (leaf, user) -> below its floor since

    def _starvation(self, now, lim, leaf_demand, holding, shares):
        # A leaf's timeout runs from when it is short of its guarantee with work to do, whether
        # or not the RM has heard yet who borrows it (what jobs hold, it hears from heartbeats, a
        # little late); a give-back asks only leaves above their guarantee (_over), so one with
        # nobody to take from kills nothing.
        asks, next_run, starving = [], None, {}
        for li, q in enumerate(self._leaves):
            d, h = float(leaf_demand[li]), float(holding[li])
            target = min(lim[q.path].guarantee, d)
            if not (d > EPS and h < target - EPS):
                self._since.pop(q.path, None)
                starving[q.path] = 0.0
                continue
            since = self._since.setdefault(q.path, now)
            starving[q.path] = float(now - since)
            if q.reclaim_timeout_s is None:
                continue                                   # tokens are cut; nothing is killed
            within = max(0.0, since + q.reclaim_timeout_s - now)
            asks.append((target - h, within))
            if within > EPS:
                next_run = within if next_run is None else min(next_run, within)
        return asks, next_run, starving

    def _users_reclaim(self, q):
        return q.user_limit > 0 and q.reclaim_timeout_s is not None

    def _user_asks(self, now, leaf, users, names, adm, d, x, running, rank, shares):
        # HADOOP-3445: "a user's limit can dynamically change depending on how many users have
        # submitted jobs. This needs to be handled in a way similar to how we handle excess
        # capacity between queues." A user's target is its floor as granted (so no kill is
        # asked for capacity its tokens could not use); it is short only while another user of
        # the leaf holds more than its allocation (as a leaf only while another borrows).
        asks, next_run, spare, since = [], None, {}, {}
        U = len(names)
        for li, q in enumerate(self._leaves):
            if not self._users_reclaim(q):
                continue
            m = np.flatnonzero(adm & (leaf == li))
            if m.size == 0:
                continue
            held = np.bincount(users[m], weights=running[m], minlength=U)
            over = held - np.bincount(users[m], weights=x[m], minlength=U)
            spare[li] = np.maximum(over, 0.0)
            if not (over > EPS).any():
                continue
            codes, floor, _ = _user_floors(q, shares[q.path], d[m], rank[m], users[m])
            for u, short in zip(codes.tolist(), (floor - held[codes]).tolist()):
                if short <= EPS:
                    continue
                key = (q.path, names[u])
                start = since[key] = self._user_since.get(key, now)
                within = max(0.0, start + q.reclaim_timeout_s - now)
                asks.append((short, within, li, u))
                if within > EPS:
                    next_run = within if next_run is None else min(next_run, within)
        self._user_since = since                         # a user no longer short starts afresh
        return asks, next_run, spare

    def _over(self, lim, holding, shares):
        # Only leaves running on borrowed capacity, never below their guarantee or share; the
        # one most over its guarantee first.
        out = []
        for li, q in enumerate(self._leaves):
            h, g = float(holding[li]), lim[q.path].guarantee
            ex = h - max(shares[q.path], g)
            if ex > EPS:
                out.append((li, ex, h - g))
        return [(li, ex) for li, ex, _ in sorted(out, key=lambda e: (-e[2], e[0]))]

    def _victim_key(self, jobs, rank, idx):
        # Most recently submitted first (the JM kills its most recently started tasks).
        sub = np.array([jobs[i].submitted_at for i in idx.tolist()], dtype=float)
        return np.lexsort((-rank[idx], -sub))


POLICIES: dict[str, type[SharingPolicy]] = {"fair": FairSharing, "capacity": CapacitySharing}


def make_sharing_policy(tree: QueueTree) -> SharingPolicy:
    return POLICIES[tree.sharing](tree)
