"""Capacity sharing (HADOOP-3445): each queue gets its guarantee while it has demand; idle
guarantee is lent (up to a lending limit) in proportion to the borrowers' guarantees, never
past a queue's max; a lender that wants it back gets it within its reclaim timeout. Inside a
queue with a user limit and a reclaim timeout, a user below its floor gets it back the same way
from the users holding more than their allocation."""
from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from apollo.core.compiled import mypyc_attr
from apollo.core.nonzero import count_nonzero

from .queue_order import split_in_queue, user_floors
from .share_kind import SharingKind
from .share_math import EPS, sum_up, water_fill
from .sharing_types import Allocation, Ask, Owed, Round, Snapshot, sooner

if TYPE_CHECKING:
    from .queues import Limits, QueueSpec, QueueTree


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
        if pool > EPS and count_nonzero(first):
            extra[first] = water_fill(pool, want[first], g[first])
        left = pool - extra.sum()
        rest = (g <= 0) & (want > EPS)
        if left > EPS and count_nonzero(rest):
            extra[rest] = water_fill(left, want[rest], [q.children[i].weight for i in np.flatnonzero(rest)])
        share.update(zip(kids, (base + extra).tolist()))
    return sum_up(tree, share)


@mypyc_attr(allow_interpreted_subclasses=True)
class CapacitySharing(SharingKind):
    """HADOOP-3445 queues: guarantees, lending within limits, reclaim within a timeout."""
    name: ClassVar[str] = "capacity"
    default_order: ClassVar[str] = "fifo"          # capacity queues run their jobs FIFO

    def __init__(self, tree: QueueTree) -> None:
        super().__init__(tree)
        self._since: dict[str, float] = {}               # leaf -> below its guarantee since
        self._user_since: dict[tuple[str, str], float] = {}     # (leaf, user) -> below its floor since

    def shares(self, capacity: float, leaf_demand: dict[str, float]) -> dict[str, float]:
        return capacity_shares(self.tree, capacity, leaf_demand)

    def owed(self, r: Round) -> Owed:
        out = self._queues_owed(r)
        self._users_owed(r, out)
        return out

    def _queues_owed(self, r: Round) -> Owed:
        # A leaf's timeout runs from when it is short of its guarantee with work to do, whether
        # or not the RM has heard yet who borrows it (what jobs hold, it hears from heartbeats, a
        # little late); a give-back asks only leaves above their guarantee (over), so one with
        # nobody to take from kills nothing.
        out = Owed()
        now = r.now
        for li, q in enumerate(self._leaves):
            d, h = float(r.leaf_demand[li]), float(r.holding[li])
            target = min(r.limits[q.path].guarantee, d)
            if not (d > EPS and h < target - EPS):
                self._since.pop(q.path, None)
                out.starving[q.path] = 0.0
                continue
            since = self._since.setdefault(q.path, now)
            out.starving[q.path] = float(now - since)
            if q.reclaim_timeout_s is None:
                continue                                   # tokens are cut; nothing is killed
            within = max(0.0, since + q.reclaim_timeout_s - now)
            out.asks.append(Ask(target - h, within))
            if within > EPS:
                out.next_run_s = sooner(out.next_run_s, within)
        return out

    def users_reclaim(self, q: QueueSpec) -> bool:
        return q.user_limit > 0 and q.reclaim_timeout_s is not None

    def _users_owed(self, r: Round, out: Owed) -> None:
        # HADOOP-3445: "a user's limit can dynamically change depending on how many users have
        # submitted jobs. This needs to be handled in a way similar to how we handle excess
        # capacity between queues." A user's target is its floor as granted (so no kill is
        # asked for capacity its tokens could not use); it is short only while another user of
        # the leaf holds more than its allocation (as a leaf only while another borrows).
        since: dict[tuple[str, str], float] = {}
        now, users, U = r.now, r.user, len(r.user_names)
        for li, q in enumerate(self._leaves):
            timeout = q.reclaim_timeout_s
            if timeout is None or not self.users_reclaim(q):
                continue
            m = np.flatnonzero(r.admitted & (r.leaf == li))
            if m.size == 0:
                continue
            held = np.bincount(users[m], weights=r.running[m], minlength=U)
            over = held - np.bincount(users[m], weights=r.allocation[m], minlength=U)
            out.user_spare[li] = np.maximum(over, 0.0)
            if not count_nonzero(over > EPS):
                continue
            codes, floor, _ = user_floors(q, r.shares[q.path], r.demand[m], r.rank[m], users[m])
            for u, short in zip(codes.tolist(), (floor - held[codes]).tolist()):
                if short <= EPS:
                    continue
                key = (q.path, r.user_names[u])
                start = since[key] = self._user_since.get(key, now)
                within = max(0.0, start + timeout - now)
                out.asks.append(Ask(short, within, li, u))
                if within > EPS:
                    out.next_run_s = sooner(out.next_run_s, within)
        self._user_since = since                         # a user no longer short starts afresh

    def floor(self, share: float, limits: Limits) -> float:
        # Only leaves running on borrowed capacity give back, never below their guarantee.
        return max(share, limits.guarantee)

    def over(self, r: Round) -> list[tuple[int, float]]:
        # The one most over its guarantee first.
        out = []
        for li, q in enumerate(self._leaves):
            h, g = float(r.holding[li]), r.limits[q.path].guarantee
            ex = h - self.floor(r.shares[q.path], r.limits[q.path])
            if ex > EPS:
                out.append((li, ex, h - g))
        return [(li, ex) for li, ex, _ in sorted(out, key=lambda e: (-e[2], e[0]))]

    def victim_order(self, r: Round, idx: np.ndarray) -> np.ndarray:
        # Most recently submitted first (the JM kills its most recently started tasks).
        return np.lexsort((-r.rank[idx], -r.submitted_at[idx]))

    def check(self, snap: Snapshot, alloc: Allocation) -> None:
        """Where users reclaim, they give back to users of the same leaf: the leaf goes below its
        floor by no more than its users are short of their allocations, and no user goes below
        its allocation."""
        byid = {j.job_id: j for j in snap.jobs}
        kill: dict[str, float] = defaultdict(float)
        user_kill: dict[tuple[str, str], float] = defaultdict(float)
        for rc in alloc.reclaim:
            j = byid[rc.job_id]
            path = self.tree.leaf(j.queue).path
            kill[path] += j.running - rc.tokens
            user_kill[path, j.user] += j.running - rc.tokens
        lim = self.tree.resolve(snap.capacity)
        for path, k in kill.items():
            q = self.tree.get(path)
            if not self.users_reclaim(q):
                continue
            mine = [j for j in snap.jobs if j.job_id in alloc.tokens and self.tree.leaf(j.queue).path == path]
            held = sum(j.running for j in mine)
            floor = self.floor(alloc.shares[path], lim[path])
            got = split_in_queue(q, alloc.shares[path], mine)
            alloc_u: dict[str, float] = defaultdict(float)
            held_u: dict[str, float] = defaultdict(float)
            for j in mine:
                alloc_u[j.user] += got[j.job_id]
                held_u[j.user] += j.running
            short = sum(max(0.0, alloc_u[u] - held_u[u]) for u in held_u)
            assert k <= max(0.0, held - floor) + short + 1e-6, f"{path}: preempted below its share"
            for u in held_u:
                assert held_u[u] - user_kill[path, u] >= min(held_u[u], alloc_u[u]) - 1e-6, \
                    f"{path}: user {u} preempted below its allocation"
