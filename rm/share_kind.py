"""The base of every sharing kind: one round of the capacity plane (admission, tokens,
give-backs) written once, over the rules a kind supplies.

A kind (rm/share_fair.py, rm/share_capacity.py) is a subclass that says:
- ``shares``: each queue's share of the cluster, from the leaves' demand;
- ``owed``: its starvation rule: which leaves (and users) are owed CPUs back, by when, and when
  the next timeout expires;
- ``floor`` and ``over``: what a leaf keeps through give-backs, and the leaves that may give,
  in the order to take from them;
- ``victim_order``: the order to take from one leaf's jobs;
- ``check``: its own invariants, beyond the ones every kind keeps (``validate``).
The hooks read a ``Round`` (named, read-only arrays). A queue's order (fifo | fair) is its own
object (rm/queue_order.py). Pure: time comes only from ``Snapshot.now``; a kind's only state is
its timers.
"""
from __future__ import annotations

import heapq
import math
from collections import defaultdict
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from apollo.core.compiled import mypyc_attr
from apollo.core.nonzero import count_nonzero

from .give_back import take_back
from .queue_order import ORDERS, runs_without_token, split_leaf
from .share_math import EPS, whole_tokens
from .snapshot_columns import SnapshotColumns
from .sharing_types import Allocation, Owed, Round, Snapshot

if TYPE_CHECKING:
    from .queues import Limits, QueueSpec, QueueTree



@mypyc_attr(allow_interpreted_subclasses=True)     # (users add kinds in plain Python)
class SharingKind:
    name: ClassVar[str] = "base"
    default_order: ClassVar[str] = "fair"          # the order of a queue file's queues that name none

    def __init__(self, tree: QueueTree) -> None:
        self.tree = tree
        self._leaves = tree.leaves()
        self._leaf_of: dict[str, int] = {}              # queue name a job gives -> leaf index
        self._index = {q.path: i for i, q in enumerate(self._leaves)}
        self.columns = SnapshotColumns(self._leaf_index)   # the snapshot's, kept from round to round
        self.last_deficit = 0.0                         # CPUs asked back in the last round (queues' and users')

    # ---- the rules a kind supplies -----------------------------------------------------------
    def shares(self, capacity: float, leaf_demand: dict[str, float]) -> dict[str, float]:
        """Every queue's share in cores ("root" too), from each leaf's demand."""
        raise NotImplementedError

    def owed(self, r: Round) -> Owed:
        """The starvation rule: what is owed back this round. Default: nothing, ever."""
        return Owed(starving={q.path: 0.0 for q in self._leaves})

    def floor(self, share: float, limits: Limits) -> float:
        """What a leaf keeps through give-backs: it is over its share above this."""
        return share

    def over(self, r: Round) -> list[tuple[int, float]]:
        """Leaves that may give back, in the order to take from them, with how much each may.
        Default: the one most over its floor first."""
        ex = [(li, float(r.holding[li]) - self.floor(r.shares[q.path], r.limits[q.path]))
              for li, q in enumerate(self._leaves)]
        return sorted((e for e in ex if e[1] > EPS), key=lambda e: (-e[1], e[0]))

    def users_reclaim(self, q: QueueSpec) -> bool:
        """Whether users of leaf ``q`` get their floor back by give-backs (and keep their allocation)."""
        return False

    def victim_order(self, r: Round, idx: np.ndarray) -> np.ndarray:
        """The order to take from the jobs ``idx`` of one leaf (an argsort of idx). Default: the
        latest in queue order first."""
        return np.argsort(-r.rank[idx], kind="stable")

    def check(self, snap: Snapshot, alloc: Allocation) -> None:
        """The kind's own invariants of ``alloc``; ``validate`` has checked the common ones."""

    # ---- one round ------------------------------------------------------------------------
    def _leaf_index(self, name: str) -> int:
        i = self._leaf_of.get(name)
        if i is None:
            i = self._leaf_of[name] = self._index[self.tree.leaf(name).path]
        return i

    def leaf_shares(self, capacity: float, leaf_demand: np.ndarray) -> dict[str, float]:
        return self.shares(capacity, {q.path: float(v) for q, v in zip(self._leaves, leaf_demand)})

    def allocate(self, snap: Snapshot) -> Allocation:
        """The RM's one call."""
        jobs = snap.jobs
        n, L = len(jobs), len(self._leaves)
        # One pass over the job objects (the rows that moved since the last round); everything
        # after works on columns.
        c = self.columns.of(jobs)
        cols, leaf, users, rank, ids = c.cols, c.leaf, c.users, c.rank, c.ids
        w, d, running = np.maximum(cols[:, 0], EPS), np.maximum(cols[:, 1], 0.0), cols[:, 2]
        admitted = cols[:, 3] > 0
        total = int(math.floor(max(0.0, snap.capacity) + 1e-9))
        needs = d > 0

        tokenless = np.array([runs_without_token(q) for q in self._leaves], dtype=bool)[leaf]
        newly = self._admit(snap, leaf, users, rank, d, needs & ~tokenless, admitted, total)
        adm = admitted.copy()
        adm[newly] = True

        # Shares from the admitted jobs' demand, then each leaf's share over its jobs.
        leaf_demand = np.bincount(leaf[adm], weights=d[adm], minlength=L).astype(float)
        shares = self.leaf_shares(snap.capacity, leaf_demand)
        x = np.zeros(n)
        strict = np.zeros(n, dtype=bool)          # jobs promised no token of right
        for li, q in enumerate(self._leaves):
            m = np.flatnonzero(adm & (leaf == li))
            if m.size:
                x[m] = split_leaf(q, shares[q.path], d[m], w[m], rank[m], users[m])
                strict[m] = not ORDERS[q.order].token_of_right
        # Where the order promises no token (FIFO), a job left nothing waits: one just admitted
        # goes back to the line (unless its queue runs jobs without one: runs_without_token),
        # one already running keeps its tasks but is granted no token (Hadoop's FIFO gives the
        # next slot to the head of the line).
        starved = strict & (x <= EPS) & needs
        if count_nonzero(starved):
            back = [i for i in newly if starved[i] and not tokenless[i]]
            if back:
                newly = [i for i in newly if not starved[i]]
                adm[back] = False
                x[back] = 0.0
        ai = np.flatnonzero(adm)
        got = whole_tokens(x[ai], total, (needs & ~starved & ~tokenless)[ai])   # (promised a token)
        grant = np.zeros(n, dtype=np.int64)
        grant[ai] = got

        holding = np.bincount(leaf, weights=np.where(adm, running, 0.0), minlength=L).astype(float)
        r = Round(now=snap.now, limits=self.tree.resolve(snap.capacity), shares=shares, leaf_demand=leaf_demand,
                  holding=holding, leaf=leaf, user=users, user_names=c.user_names, admitted=adm, demand=d,
                  allocation=x, running=running, rank=rank, priority=cols[:, 4], submitted_at=cols[:, 5])
        owed = self.owed(r)
        self.last_deficit = sum(a.want for a in owed.asks)
        reclaim = take_back(owed, self.over(r), r, grant, ids, self.victim_order) if owed.asks else []

        positions: dict[int, tuple[str, int]] = {}
        seen = [0] * L
        waiting = np.flatnonzero(~adm)
        for i in waiting[np.argsort(rank[waiting], kind="stable")].tolist():
            seen[leaf[i]] += 1
            positions[ids[i]] = (self._leaves[leaf[i]].path, seen[leaf[i]])
        at: list[int] = ai.tolist()
        granted: list[int] = got.tolist()
        # (the admitted jobs whose tokens move: the RM tells only those; cols[:, 7] is each job's
        # tokens as its view said)
        moved: list[int] = np.flatnonzero(got != cols[ai, 7]).tolist()
        return Allocation(tokens={ids[i]: g for i, g in zip(at, granted)},
                          admit=[ids[i] for i in newly], reclaim=reclaim, next_run_s=owed.next_run_s,
                          shares=shares, positions=positions, starving=owed.starving,
                          changed=[ids[at[k]] for k in moved])

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
            every = np.concatenate(cand)
            return every[np.argsort(rank[every], kind="stable")].tolist()
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

    # ---- invariants ---------------------------------------------------------------------------
    def validate(self, snap: Snapshot, alloc: Allocation) -> None:
        """Assert the invariants of ``alloc`` (just returned by ``allocate(snap)``): tokens fit
        the cores and give every job with demand one; admission limits; shares sum up the tree,
        stay within demand and max and meet guarantees; kills stay within the deficits (queues'
        and users') and leave every leaf whose users do not reclaim at or above its floor; every
        waiting job has a position. Then the kind's own (``check``)."""
        self.columns.validate(snap.jobs)
        byid = {j.job_id: j for j in snap.jobs}
        leaf_of = {j.job_id: self.tree.leaf(j.queue) for j in snap.jobs}
        total = math.floor(max(0.0, snap.capacity) + 1e-9)
        assert len(set(alloc.admit)) == len(alloc.admit)
        assert all(not byid[i].admitted for i in alloc.admit), "admitted a job already running"
        adm = {j.job_id for j in snap.jobs if j.admitted} | set(alloc.admit)
        assert set(alloc.tokens) == adm, "tokens must list exactly the admitted jobs"
        assert all(t >= 0 for t in alloc.tokens.values())
        assert sum(alloc.tokens.values()) <= total, "more tokens than cores"
        # (jobs of a queue that runs them without a token need no slot: runs_without_token)
        holders = [i for i in adm if byid[i].demand > 0 and not runs_without_token(leaf_of[i])]
        promised = [i for i in holders if ORDERS[leaf_of[i].order].token_of_right]
        if len(holders) <= total:      # (a FIFO queue's job may hold none: the jobs ahead take it all)
            assert all(alloc.tokens[i] >= 1 for i in promised), "a job with demand holds no token"
        elif alloc.admit:
            assert all(byid[i].demand <= 0 or runs_without_token(leaf_of[i]) for i in alloc.admit), \
                "admitted past the token slots"
        for q in self._leaves:                           # limits, where this round admitted jobs
            mine = [i for i in adm if leaf_of[i].path == q.path]
            new = [i for i in alloc.admit if leaf_of[i].path == q.path]
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
            d = sum(byid[i].demand for i in adm if leaf_of[i].path == q.path)
            assert alloc.shares[q.path] <= d + tol, f"{q.path}: share above its demand"
            assert alloc.shares[q.path] >= min(lim[q.path].guarantee, d) - tol, f"{q.path}: below its guarantee"
        waiting = [j.job_id for j in snap.jobs if j.job_id not in adm]
        assert set(alloc.positions) == set(waiting)
        for q in self._leaves:
            pos = sorted(p for lq, p in alloc.positions.values() if lq == q.path)
            assert pos == list(range(1, len(pos) + 1))
        seen = set()
        kill: dict[str, float] = defaultdict(float)
        for r in alloc.reclaim:
            assert r.job_id not in seen and r.job_id in adm, "a job reclaimed twice or not running"
            seen.add(r.job_id)
            j = byid[r.job_id]
            assert alloc.tokens[r.job_id] <= r.tokens < j.running, "kill line outside [grant, running)"
            assert r.within_s >= 0
            kill[leaf_of[r.job_id].path] += j.running - r.tokens
        assert sum(kill.values()) <= self.last_deficit + 1e-6, "killed more than the deficits"
        for path, k in kill.items():
            if self.users_reclaim(self.tree.get(path)):
                continue                                 # the kind's check() says how far
            held = sum(byid[i].running for i in adm if leaf_of[i].path == path)
            assert held - k >= self.floor(alloc.shares[path], lim[path]) - 1e-6, f"{path}: preempted below its share"
        assert alloc.next_run_s is None or alloc.next_run_s > 0
        if alloc.changed is not None:
            assert alloc.changed == [j for j, t in alloc.tokens.items() if t != byid[j].tokens], \
                "the jobs said to move are not those whose tokens moved"
        self.check(snap, alloc)
