"""SlotOffers: Hadoop's heartbeat-driven assignment, as the fair scheduler does it.

Hadoop does not search the cluster for a good slot for a task: a node reports a free slot
and the scheduler gives it to the job at the head of its order, which runs the task whose
input is closest to that node (node-local, then rack-local, then any). Here the free slots a
JM sees (its view, less its own sends) are offered in a random order, as heartbeats would
bring them; each goes to the batch's closest task, in priority order among equals. With no
filter this takes whatever slot comes first, which is why small jobs rarely read locally
(the head-of-line problem of the HFS paper); with delay scheduling, tasks not allowed at a
slot's locality pass it by, so the job takes a local slot when one comes up.
"""
from __future__ import annotations

import numpy as np

from apollo.core.cluster import REMOTE
from apollo.core.nonzero import count_nonzero

from ..stable_matching import UNMATCHED
from .batch import Batch
from .matchers import SlotMatcher


class SlotOffers(SlotMatcher):
    name = "slot-offers"

    def candidates(self, b: Batch, rng):
        view = b.view
        alive = np.flatnonzero(view.alive)
        if len(alive) == 0:
            return None
        free = view.free_cpu_reported(alive)
        offered = alive[free >= 1.0 - 1e-9]
        if len(offered) == 0:
            return None
        offered = offered[rng.permutation(len(offered))].astype(np.int64)
        cand = np.broadcast_to(offered, (len(b), len(offered)))
        return cand, np.ones(cand.shape, dtype=bool)

    def match(self, b: Batch):
        B = len(b)
        srv = np.full(B, UNMATCHED, dtype=np.int64)
        where = np.full(B, REMOTE)
        offered = b.cand[0]
        free = b.view.free_cpu_reported(offered)
        cpu = np.broadcast_to(np.asarray(b.cpu, dtype=float), (B,))
        # a task's preference at a slot: its locality there, then its place in the batch
        key = np.where(b.valid, b.loc.astype(np.int64) * B + np.arange(B)[:, None], np.iinfo(np.int64).max)
        open_ = np.ones(B, dtype=bool)
        # only slots some task of the batch may take (with delay scheduling holding out for a
        # node-local slot, a few of the hundreds offered)
        for j in np.flatnonzero(b.valid.any(axis=0) & (free >= 1.0 - 1e-9)).tolist():
            while free[j] >= 1.0 - 1e-9 and count_nonzero(open_):
                col = np.where(open_ & (cpu <= free[j] + 1e-9), key[:, j], np.iinfo(np.int64).max)
                t = int(col.argmin())
                if col[t] == np.iinfo(np.int64).max:
                    break              # nothing of this batch may take this slot: pass it by
                srv[t] = offered[j]
                where[t] = b.loc[t, j]
                free[j] -= cpu[t]
                open_[t] = False
            if not count_nonzero(open_):
                break
        return srv, np.zeros(B), where
