"""Matchers: given a batch's candidates (and their costs), pick a server per task.

- StableMatching (Apollo): deferred acceptance over estimated costs; a server takes up to
  ``per_server`` tasks of a batch.
- GreedyMatching: each task in priority order takes its cheapest server, updating as it goes.
- RandomPlacement: any live server, at random (a baseline; no candidates, no costs).
- FreeSlot (Hadoop's FIFO and the fair scheduler): a task goes only where a slot is free now,
  node-local first, then rack-local, then any lightly loaded server.

Each subclasses jm.policies.base.Matcher (the contract, and what a matcher may say about
itself: its capabilities are methods there). ``match`` returns (servers, waits, localities);
waits/localities None: read them off the candidate the server was (the pipeline does).
"""
from __future__ import annotations

import math
from collections import Counter

import numpy as np

from apollo.core.cluster import REMOTE
from apollo.core.compiled import mypyc_attr
from apollo.core.nonzero import count_nonzero

from .. import estimate as est
from ..stable_matching import UNMATCHED, greedy_match, seat_match, stable_match
from .base import Matcher
from .batch import Batch


def _picked(servers: list[int]) -> "Counter[int] | None":
    """How many times each server of ``servers`` is chosen, or None when every one differs
    (np.unique's count costs ~60 us on a batch of 50; a set answers the usual "every one
    differs" in ~3 us)."""
    if len(set(servers)) == len(servers):
        return None
    return Counter(servers)


@mypyc_attr(allow_interpreted_subclasses=True)
class StableMatching(Matcher):
    name = "stable-matching"

    def picks_cheapest_alone(self) -> bool:
        return True              # deferred acceptance with one proposer: its first choice

    def places_one_per_slot(self) -> bool:
        return True

    def match(self, b: Batch):
        C, cand = b.C, b.cand
        cap = b.per_server
        # When no server is the cheapest of more tasks than it takes, deferred acceptance ends
        # in its first round with each task holding its first proposal: that is the stable
        # matching, and needs no rounds (always so for a batch of one task).
        rows = np.arange(len(cand))
        best = C.argmin(axis=1)             # the first cheapest, as a stable argsort's
        srv = cand[rows, best]
        fin = np.isfinite(C[rows, best])
        pick = srv[fin]
        rounds = b.cfg.placement.max_rounds
        if rounds >= 1:
            counts = _picked(pick.tolist())
            most = max(counts.values()) if counts is not None else 1
            if most <= cap:
                return (np.where(fin, srv, UNMATCHED), np.where(fin, b.W[rows, best], 0.0),
                        np.where(fin, b.loc[rows, best], REMOTE))
            if counts is not None and most <= rounds and _seats_hold_first_choices(b, srv, fin, counts, most):
                # (what the seats' rounds would end in, without them: the pipeline reads the waits
                # and localities at the servers, as after the seats)
                return np.where(fin, srv, UNMATCHED).astype(np.int64), None, None
        return _match_seats(b, cap)


def _seats_hold_first_choices(b: Batch, srv: np.ndarray, fin: np.ndarray, counts: "Counter[int]", most: int) -> bool:
    """Whether the seats (``_match_seats``) would give every task its first choice: so when each
    server chosen first by several tasks has, for each of them, a seat at no extra wait per
    chooser (as many tasks of its size as it can start at once, and seats enough). The
    choosers then take its seats 0, 1, ... in turn, each at its own cheapest cost (a loser's
    next proposal is the same server's next seat, tied with the one lost and first in its
    order), and nobody else proposes there. A batch of tasks whose data-local servers happen to
    coincide (two of 50 tasks on one server: most batches at scale) is then placed without the
    rounds over 4x the candidates."""
    Q = max(1, int(b.topology.cores))
    if Q == 1 or most > Q:
        return False
    # (the seats' prices, on the crowded tasks' first choices only, one by one on Python numbers:
    # two to four tasks, where a dozen numpy calls cost more than the tasks)
    view, now, cores = b.view, b.now, b.topology.cores
    cpu_of, runtime_of = b.cpu, b.runtime
    for i, (s, ok) in enumerate(zip(srv.tolist(), fin.tolist())):
        if not ok or counts[s] < 2:
            continue
        cpu: float = cpu_of.item(i)
        runtime: float = runtime_of.item(i)
        if not math.isfinite(runtime * cpu / cores):
            return False
        q = view.free_cpu_one(s, now) / cpu + 1e-9
        seats = q if not math.isfinite(q) else q // 1.0       # (np.floor: an inf stays inf)
        if not (seats if not seats < 1.0 else 1.0) >= counts[s]:
            return False
    return True


def _match_seats(b: Batch, cap: int):
    """Stable matching where each server is a few seats: tasks of one batch that would all
    rather go to the same server are not turned away after the first (to a worse server, or to
    the next batch) but take its next seats, each priced with the wait the batch-mates before
    it add there: none while the server has a core free for each, then the occupancy per core
    of one more task each (what the greedy matcher charges too). A server has as many seats
    as it has cores: more tasks than that from one batch would all queue there. The wait
    returned is the server's own reading, as on the fast path: the seat's price is this
    batch's guess, and the duplicate triggers look again at a task whose PN then plans a
    much later start."""
    C, cand = b.C, b.cand
    B, K = cand.shape
    Q = max(1, int(b.topology.cores))
    if Q == 1:
        return stable_match(cand, C, b.cfg.placement.max_rounds, capacity=cap), None, None
    free = np.floor(b.view.free_cpu(cand.ravel(), b.now).reshape(B, K) / b.cpu[:, None] + 1e-9)
    srv, _ = seat_match(cand, C, b.runtime * b.cpu / b.topology.cores, free, Q, b.cfg.placement.max_rounds, cap)
    return srv, None, None      # (the pipeline reads each task's wait and locality there)


@mypyc_attr(allow_interpreted_subclasses=True)
class GreedyMatching(Matcher):
    name = "greedy"

    def picks_cheapest_alone(self) -> bool:
        return True

    def match(self, b: Batch):
        return greedy_match(b.cand, b.C, load=b.runtime * b.cpu / b.topology.cores), None, None


@mypyc_attr(allow_interpreted_subclasses=True)
class RandomPlacement(Matcher):
    name = "random"

    def uses_estimates(self) -> bool:
        return False

    def candidates(self, b: Batch, rng):
        alive = np.flatnonzero(b.view.alive)
        if len(alive) == 0:
            return None
        srv = alive[rng.integers(0, len(alive), size=len(b))].astype(np.int64)
        return srv[:, None], np.ones((len(b), 1), dtype=bool)

    def match(self, b: Batch):
        srv = np.where(b.valid[:, 0], b.cand[:, 0], UNMATCHED)
        return srv, np.zeros(len(b)), b.loc[:, 0].astype(np.int64) if b.valid.all() else \
            np.where(b.valid[:, 0], b.loc[:, 0], REMOTE)


@mypyc_attr(allow_interpreted_subclasses=True)
class SlotMatcher(Matcher):
    """A slot scheduler's matcher: a task goes only to a slot free now, as its server reported
    it; no estimates."""

    def uses_estimates(self) -> bool:
        return False

    def has_batch_bound(self) -> bool:
        return True

    def leaves_queued(self) -> bool:
        return False

    def batch_bound(self, view, cpu: float) -> int | None:
        return view.free_slots_reported(cpu)


@mypyc_attr(allow_interpreted_subclasses=True)
class FreeSlot(SlotMatcher):
    name = "free-slot"

    def match(self, b: Batch):
        view = b.view
        B = len(b.cand)
        srv = np.full(B, UNMATCHED, dtype=np.int64)
        where = np.full(B, REMOTE)
        light = view.lightly_loaded
        # What each server that could come up has free, in one pass over the view: as reported,
        # less this host's sends since (a task running past its estimate must not have the next
        # one queue behind it, which a slot scheduler never does); dead servers have nothing.
        servers = np.unique(np.concatenate((b.cand[b.valid], light)))
        got = np.where(view.alive[servers], view.free_cpu_reported(servers), 0.0)
        cpu = np.broadcast_to(np.asarray(b.cpu, dtype=float), (B,)).tolist()
        if len(got) == 0 or got.max() < min(cpu) - 1e-9:
            return srv, np.zeros(B), where             # nothing free anywhere (a full cluster)
        free = dict(zip(servers.tolist(), got.tolist()))
        any_ok = [True] * B if b.max_loc is None else np.broadcast_to(b.max_loc >= REMOTE, (B,)).tolist()
        light_l = light.tolist()
        for i, (row, ok, lrow) in enumerate(zip(b.cand.tolist(), b.valid.tolist(), b.loc.tolist())):
            need = cpu[i]
            choice = -1
            for level in (0, 1, 2):
                for s, v, l in zip(row, ok, lrow):
                    if v and l == level and free[s] >= need:
                        choice = s
                        break
                if choice >= 0:
                    break
            if choice < 0 and any_ok[i]:
                for s in light_l:
                    if free[s] >= need:
                        choice = s
                        break
            if choice >= 0:
                srv[i] = choice
                free[choice] -= need
        ok = srv != UNMATCHED
        if count_nonzero(ok):
            where[ok] = est.localities(srv[ok, None], b.reps[ok], b.topology.rack_of)[:, 0]
        return srv, np.zeros(B), where


