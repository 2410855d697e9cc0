"""Who gives back what is owed: the same taking for every sharing kind, over the kind's answer
(what is owed, the leaves over their share, the order to take from a leaf's jobs)."""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Callable

import numpy as np

from .share_math import EPS
from .sharing_types import Owed, Reclaim, Round

VictimOrder = Callable[[Round, np.ndarray], np.ndarray]


def take_back(owed: Owed, over: list[tuple[int, float]], r: Round, grant: np.ndarray, ids: list[int],
              victim_order: VictimOrder) -> list[Reclaim]:
    """Take what is asked for, earliest deadline first: a starving leaf's ask (leaf -1) from
    the leaves ``over`` their share, never below it; a starving user's from the users of its
    own leaf over their allocation, the most over first. In a leaf in ``owed.user_spare`` no
    give-back takes a user below its allocation, and no job gives more than it runs above
    its new grant. A job hit by several asks owes their sum by the earliest deadline, in one
    Reclaim; kill lines round the kills down, so no more than asked is ever killed."""
    user_spare = {li: s.tolist() for li, s in owed.user_spare.items()}
    running = r.running
    cut: dict[int, float] = {}
    when: dict[int, float] = {}
    spare = dict(over)
    room = np.where(r.admitted, np.maximum(running - grant, 0.0), 0.0).tolist()
    leaf_l, user_l = r.leaf.tolist(), r.user.tolist()
    order: dict[int, list[int]] = {}
    givers: dict[int, list[list[int]]] = {}

    def in_order(li):       # the leaf's jobs that may give back, in the order to take them
        if li not in order:
            m = np.flatnonzero(r.leaf == li)
            m = m[np.asarray(room)[m] > EPS]
            order[li] = m[victim_order(r, m)].tolist()
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

    for want, within, li, _ in sorted(owed.asks, key=lambda a: a[1]):
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
