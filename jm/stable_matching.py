"""Assignment of a batch of tasks to servers.

Inputs are dense per-task candidate rows: ``cand[b, k]`` is the k-th candidate
server of task b and ``cost[b, k]`` its estimated cost (inf: not a candidate).
A row must not repeat a server (callers mark repeats inf).

Stable matching is Apollo's variant of deferred acceptance: every unmatched
task proposes to its cheapest server not yet tried; a server holding several
proposals keeps the task with the largest *saving* (how much worse off the
task would be at its best other option) and rejects the rest; rejected tasks
propose again. Savings are fixed per (task, server), so the result is stable:
no task prefers a server whose kept task has a smaller saving there. Each
server gets at most one task per batch (``capacity`` tasks, for pipelined short tasks: the
hospitals/residents form, where a server keeps its ``capacity`` proposals with the largest
savings); ``max_rounds`` bounds the work.
"""
from __future__ import annotations

import math

import numpy as np

UNMATCHED = -1
_SAVING_CAP = 1e12   # a task with a single option: losing it costs "everything"


def savings(cost: np.ndarray, defer: np.ndarray | None = None) -> np.ndarray:
    """saving[b, k] = (task b's best alternative: another candidate, or deferring) - cost[b, k]."""
    B, K = cost.shape
    if K == 1:
        sav = np.where(np.isfinite(cost), _SAVING_CAP, -np.inf)
        if defer is not None:
            sav = np.where(np.isfinite(cost), np.minimum(sav, defer[:, None] - cost), -np.inf)
        return sav
    two = np.argpartition(cost, 1, axis=1)[:, :2]
    rows = np.arange(B)
    c0 = cost[rows, two[:, 0]]
    c1 = cost[rows, two[:, 1]]
    swap = c1 < c0
    best_k = np.where(swap, two[:, 1], two[:, 0])
    best = np.minimum(c0, c1)
    second = np.maximum(c0, c1)
    alt = np.where(np.arange(K)[None, :] == best_k[:, None], second[:, None], best[:, None])
    if defer is not None:
        alt = np.minimum(alt, defer[:, None])
    with np.errstate(invalid="ignore"):
        sav = np.where(np.isfinite(alt), alt - cost, _SAVING_CAP)
    return np.where(np.isfinite(cost), sav, -np.inf)


def stable_match(cand: np.ndarray, cost: np.ndarray, max_rounds: int = 32,
                 defer: np.ndarray | None = None, capacity: int = 1) -> np.ndarray:
    """Server per task (UNMATCHED if none this batch); each server takes up to ``capacity``.

    ``defer[b]`` (optional) is what task b expects to pay by waiting for the next
    batch instead: it never proposes to a server costing more than that, and its
    saving anywhere is measured against deferring too. Without it every task
    takes some server if any is left, however poor.
    """
    B, K = cost.shape
    if B == 0 or K == 0:
        return np.full(B, UNMATCHED, dtype=np.int64)
    if defer is not None:
        cost = np.where(cost <= defer[:, None], cost, np.inf)
    order = cost.argsort(axis=1, kind="stable")
    n_opts = np.add.reduce(np.isfinite(cost), axis=1).tolist()
    got = _propose(cand, cost, order, n_opts, max_rounds, capacity, None if defer is None else defer.tolist())
    return np.array(got, dtype=np.int64)


def _propose(cand: np.ndarray, cost: np.ndarray, order: np.ndarray, n_opts: list[int], max_rounds: int,
             capacity: int, defer: list[float] | None) -> list[int]:
    """The rounds of deferred acceptance: the server each task holds at the end (UNMATCHED:
    none).

    In a round every free task proposes to the next server of its ``order``; a server that
    got proposals keeps, of them and the tasks it held, the ``capacity`` with the largest
    savings there (ties: the lower task id) and rejects the rest, which move one server on.
    A loop over the proposals themselves, not numpy calls per round: a batch of 50 tasks
    makes a few dozen proposals, where each round of array calls cost ~30 us whatever its
    size; and a saving is worked out only where a server must choose, once per proposal.
    (Items read where needed: converting the arrays to lists first cost more than the loop
    at scale. Rounds as rounds, so that ``max_rounds`` cuts where it always has.)"""
    B = len(n_opts)
    ptr = [0] * B                       # position in the task's order: proposed to, or held
    holds = [False] * B
    sav = [math.nan] * B                # saving at its position (nan: not worked out yet)
    held: dict[int, list[int]] = {}     # server -> tasks holding it
    free = [b for b in range(B) if n_opts[b] > 0]
    rounds = 0
    while free and rounds < max_rounds:
        rounds += 1
        asked: dict[int, list[int]] = {}
        for b in free:
            s = cand.item(b, order.item(b, ptr[b]))
            if s in asked:
                asked[s].append(b)
            else:
                asked[s] = [b]
        free = []
        for s, props in asked.items():
            keep = held.get(s)
            if keep is not None:
                props.extend(keep)
            if len(props) > capacity:
                for b in props:
                    if sav[b] != sav[b]:
                        sav[b] = _saving(cost, order, b, ptr[b], defer)
                if capacity == 1:       # (the one with the largest saving, the lowest id of ties)
                    win = props[0]
                    for b in props:
                        if sav[b] > sav[win] or (sav[b] == sav[win] and b < win):
                            win = b
                    lost = [b for b in props if b != win]
                    props = [win]
                else:
                    ranked = sorted([(-sav[b], b) for b in props])
                    props = [b for _, b in ranked[:capacity]]
                    lost = [b for _, b in ranked[capacity:]]
                for b in lost:
                    holds[b] = False
                    ptr[b] += 1
                    sav[b] = math.nan
                    if ptr[b] < n_opts[b]:
                        free.append(b)
            for b in props:
                holds[b] = True
            held[s] = props
    return [cand.item(b, order.item(b, ptr[b])) if holds[b] else UNMATCHED for b in range(B)]


def _saving(cost: np.ndarray, order: np.ndarray, b: int, p: int, defer: list[float] | None) -> float:
    """``savings(cost, defer)`` of task ``b``'s ``p``-th cheapest candidate (a finite one), from
    its order: its best alternative (its cheapest other candidate, or deferring) less this
    cost. (Tied best costs give the same alternative whichever of them counts as the best.)"""
    c: float = cost.item(b, order.item(b, p))
    if cost.shape[1] == 1:
        return _SAVING_CAP if defer is None else min(_SAVING_CAP, defer[b] - c)
    alt: float = cost.item(b, order.item(b, 1 if p == 0 else 0))
    if defer is not None:
        alt = min(alt, defer[b])
    return alt - c if math.isfinite(alt) else _SAVING_CAP


def seat_match(cand: np.ndarray, cost: np.ndarray, load: np.ndarray, free: np.ndarray, seats: int,
               max_rounds: int = 32, capacity: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Stable matching where each server is ``seats`` seats and the q-th seat of server
    ``cand[b, k]`` costs task b ``cost[b, k]`` plus ``load[b]`` for each batch-mate it waits
    behind there: ``max(0, q + 1 - max(free[b, k], 1))`` of them (``free``: tasks of b's size
    the server can start at once). Returns (server or UNMATCHED, seat) per task; the matching is
    stable over the seats (``seat_costs``)."""
    cx, Cx = seat_costs(cand, cost, load, free, seats)
    got = stable_match(cx, Cx, max_rounds, capacity=capacity)
    ok = got != UNMATCHED
    return np.where(ok, got // seats, UNMATCHED), np.where(ok, got % seats, 0)


def seat_costs(cand: np.ndarray, cost: np.ndarray, load: np.ndarray, free: np.ndarray,
               seats: int) -> tuple[np.ndarray, np.ndarray]:
    """(seat ids, seat costs), each [B, K * seats]: seat q of server s is s * seats + q."""
    B, K = cand.shape
    q = np.arange(seats)[None, None, :]
    ahead = np.maximum(q + 1 - np.maximum(free, 1.0)[:, :, None], 0.0)
    return ((cand[:, :, None] * seats + q).reshape(B, K * seats),
            (cost[:, :, None] + ahead * load[:, None, None]).reshape(B, K * seats))


def greedy_match(cand: np.ndarray, cost: np.ndarray, load: np.ndarray | None = None) -> np.ndarray:
    """Each task in row order takes its cheapest candidate; a taken server's cost for later
    tasks rises by ``load[b]`` (the taker's expected occupancy), updating as it goes."""
    B, K = cost.shape
    result = np.full(B, UNMATCHED, dtype=np.int64)
    added: dict[int, float] = {}
    for b in range(B):
        row = cost[b]
        if added:
            row = row + np.array([added.get(int(s), 0.0) for s in cand[b]])
        k = int(np.argmin(row))
        if not np.isfinite(row[k]):
            continue
        s = int(cand[b, k])
        result[b] = s
        added[s] = added.get(s, 0.0) + (float(load[b]) if load is not None else 0.0)
    return result


def is_stable(cand: np.ndarray, cost: np.ndarray, assigned: np.ndarray,
              defer: np.ndarray | None = None, capacity: int = 1) -> bool:
    """No blocking pair: a task that prefers a server over its match, where the server has a
    slot left, or holds a task with a strictly smaller saving."""
    if defer is not None:
        cost = np.where(cost <= defer[:, None], cost, np.inf)
    sav = savings(cost, defer)
    B, K = cost.shape
    held: dict[int, list[float]] = {}
    for b in range(B):
        if assigned[b] != UNMATCHED:
            k = int(np.flatnonzero(cand[b] == assigned[b])[0])
            held.setdefault(int(assigned[b]), []).append(float(sav[b, k]))
    for b in range(B):
        mine = np.inf
        if assigned[b] != UNMATCHED:
            mine = float(cost[b, int(np.flatnonzero(cand[b] == assigned[b])[0])])
        for k in range(K):
            if not np.isfinite(cost[b, k]) or cost[b, k] >= mine:
                continue
            kept = held.get(int(cand[b, k]), [])
            if len(kept) < capacity or min(kept) < sav[b, k]:
                return False
    return True
