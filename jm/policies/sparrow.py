"""Sparrow's batch sampling (Ousterhout et al., SOSP'13): for a batch of m tasks,
probe d x m servers (d = 2) drawn at random among the live ones, and place the m tasks on the
m least loaded of them, one task per server. A batch of one task is per-task sampling: the
less loaded of two random servers (the power of two choices).

The probe's answer. The simulator has no probe RPC. Instead, a probe is answered from the
host's view, which is what a probe would have fetched: the server's wait-time matrix, counted
down since it was read, aged, and raised by this host's own sends since then (jm.estimate's
W, so the pipeline computes it: ``uses_estimates``). That is the expected wait for the task's
shape. Sparrow's probes report a queue length, which counts tasks. Apollo's PNs report time,
which is the queue length weighted by what is queued. A server the task's shape can never fit,
or a dead one, does not answer. Locality and runtime are not weighed, as in Sparrow.

Sparrow's late binding cannot be done without new messages. In Sparrow, a probe
leaves a reservation in the worker's queue. When the reservation reaches the front, the worker
asks the scheduler for a task, and the scheduler hands tasks to the first m to ask and cancels
the rest. Here a Dispatch (apollo.core.messages) carries bound TaskSpecs, and a PN (pn.state) queues
only those. A PN talks to a JM only with StatusBatch (about attempts it holds) and Holding (the
answer to ProbeJob), so it cannot hold a reservation or ask for work. The nearest thing the
protocol has is extra attempts: they report their start, and the JM kills those that lost the
race (KillTask). That is cancellation of duplicates, not late binding: copies may start on two
servers before the kill arrives, and a matcher cannot send copies. Late binding would take:
- a Reserve message, JM -> PN (job, shape, count, reply_to);
- a reservation entry in the PN's queue, planned in its wait-time matrix as a task of that
  shape;
- a GetTask message, PN -> JM, when the reservation reaches the front;
- the JM's answer: a Dispatch of its next ready task, or a new cancel message once the job's
  tasks are all out;
- on the JM, a table of open reservations; and one more round trip before each start.
"""
from __future__ import annotations

import numpy as np

from apollo.core.cluster import REMOTE

from ..stable_matching import UNMATCHED
from .base import Matcher
from .batch import Batch

INF = float("inf")


class BatchSampling(Matcher):
    name = "batch-sampling"

    def __init__(self, probes: int = 2) -> None:
        self.probes = probes        # d: servers probed per task of the batch

    def places_one_per_slot(self) -> bool:
        return True                 # one task per probed server: a batch beyond the live servers is wasted

    def candidates(self, b: Batch, rng):
        """The same d x m probed servers for every task of the batch (fewer when fewer are alive)."""
        alive = np.flatnonzero(b.view.alive)
        if len(alive) == 0:
            return None
        probed = rng.choice(alive, size=min(self.probes * len(b), len(alive)), replace=False).astype(np.int64)
        cand = np.broadcast_to(probed, (len(b), len(probed)))
        return cand, np.ones(cand.shape, dtype=bool)

    def match(self, b: Batch):
        """Tasks in priority order, each on the least loaded probed server not taken yet."""
        B, K = b.cand.shape
        load = np.where(b.valid & np.isfinite(b.C), b.W, INF)    # (no answer: dead, never fits, cut)
        srv = np.full(B, UNMATCHED, dtype=np.int64)
        wait, where = np.zeros(B), np.full(B, REMOTE)
        if (load == load[0]).all():
            # Every task sees the same answers (one shape, no cut): the m least loaded, in order.
            order = load[0].argsort(kind="stable")[:B]
            rows = np.arange(len(order))
            ok = np.isfinite(load[0, order])
            rows, cols = rows[ok], order[ok]
        else:
            taken = np.zeros(K, dtype=bool)
            picked = []
            for i in range(B):
                j = int(np.where(taken, INF, load[i]).argmin())
                if load[i, j] < INF and not taken[j]:
                    taken[j] = True
                    picked.append((i, j))
            rows = np.array([i for i, _ in picked], dtype=np.int64)
            cols = np.array([j for _, j in picked], dtype=np.int64)
        srv[rows] = b.cand[rows, cols]
        wait[rows] = b.W[rows, cols]
        where[rows] = b.loc[rows, cols]
        return srv, wait, where
