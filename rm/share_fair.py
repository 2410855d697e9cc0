"""Fair sharing (HFS pools): hierarchical weighted max-min sharing with min shares. A pool
starved of its min share for Tmin, or of half its fair share for Tfair, gets tasks killed in
the pools above their fair share."""
from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import numpy as np

from apollo.core.compiled import mypyc_attr

from .share_kind import SharingKind
from .share_math import EPS, sum_up, water_fill
from .sharing_types import Ask, Owed, Round, sooner

if TYPE_CHECKING:
    from .queues import Limits, QueueTree


def effective_demand(tree: QueueTree, lim: dict[str, Limits], leaf_demand: dict[str, float]) -> dict[str, float]:
    """Demand a queue can use: its leaves' demand, capped by every max on the way up."""
    eff: dict[str, float] = {}
    for q in reversed(tree.nodes()):            # children before parents
        d = leaf_demand.get(q.path, 0.0) if q.is_leaf else sum(eff[c.path] for c in q.children)
        eff[q.path] = min(max(0.0, d), lim[q.path].max)
    return eff


def fair_shares(tree: QueueTree, capacity: float, leaf_demand: dict[str, float]) -> dict[str, float]:
    """HFS: at each level the parent's share is water-filled over its children by weight, each
    child's floor being min(guarantee, demand); a parent's share is the sum of its children's."""
    lim = tree.resolve(capacity)
    eff = effective_demand(tree, lim, leaf_demand)
    share = {tree.root.path: min(max(0.0, capacity), eff[tree.root.path])}
    for q in tree.nodes():
        if q.children:
            d = np.array([eff[c.path] for c in q.children])
            floors = np.minimum([lim[c.path].guarantee for c in q.children], d)
            got = water_fill(share[q.path], d, [c.weight for c in q.children], floors)
            share.update(zip((c.path for c in q.children), got.tolist()))
    return sum_up(tree, share)


@mypyc_attr(allow_interpreted_subclasses=True)
class FairSharing(SharingKind):
    """HFS pools: min shares first, then weighted max-min; kills after Tmin / Tfair."""
    name: ClassVar[str] = "fair"
    default_order: ClassVar[str] = "fair"          # HFS pools share among their jobs fairly

    def __init__(self, tree: QueueTree) -> None:
        super().__init__(tree)
        self._since: dict[tuple[str, str], float] = {}   # (leaf, "min"|"fair") -> starved since

    def shares(self, capacity: float, leaf_demand: dict[str, float]) -> dict[str, float]:
        return fair_shares(self.tree, capacity, leaf_demand)

    def owed(self, r: Round) -> Owed:
        out = Owed()
        now = r.now
        for li, q in enumerate(self._leaves):
            d, h = float(r.leaf_demand[li]), float(r.holding[li])
            targets = {"min": (min(r.limits[q.path].guarantee, d), q.min_share_timeout_s),
                       "fair": (min(r.shares[q.path], d), q.fair_share_timeout_s)}
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
                    out.next_run_s = sooner(out.next_run_s, left)
            out.starving[q.path] = longest
            if want > EPS:
                out.asks.append(Ask(want, 0.0))
        return out

    # over: the default, never a leaf at or below its fair share; the one most over it first.

    def victim_order(self, r: Round, idx: np.ndarray) -> np.ndarray:
        # Lowest priority first, then the most recently submitted.
        return np.lexsort((-r.rank[idx], r.priority[idx]))
