"""Apollo's deferral: while some server is idle, a task does not queue behind others.

While the host knows of idle servers (lightly loaded ones with a CPU free now, as far as it
knows), a task's two lightly loaded candidates are drawn from those: the idle server is one
of its options, priced like any other (its remote read included), and the matcher weighs it
against waiting for a local one. A token is never left idle to wait for a free server the
JM could have named now. (Holding the task back instead, to be matched again at the next
view ~1 s later among two more random picks of the whole list, held 9% of FB-2009's one-task
jobs at load 0.85 for 0.8 s (median), and half of them still queued afterwards: 3.5 s
against 1.6 s for the others; that was apollo's loss to greedy on the median job.)

A task whose options all still cost more than reading its input remotely on an idle server
(plus PlacementConfig.defer_s) stays in the ready list: the token is better spent on a server that
is free, and the task is matched again in the next batch or pass, which is when the picture
can change (so the job does not poll for it).
"""
from __future__ import annotations

import numpy as np

from apollo.core.compiled import mypyc_attr
from apollo.core.nonzero import count_nonzero

from .base import Filter
from .batch import Batch, Cut


@mypyc_attr(allow_interpreted_subclasses=True)
class Deferral(Filter):
    name = "deferral"

    def uses_estimates(self) -> bool:
        return True              # its cut is on the expected completion E

    def rematches_on_news(self, cfg) -> bool:
        """Whether a task this filter holds back is looked at again on the next status or view
        (else the job polls)."""
        return cfg.placement.defer_s > 0

    def light_pool(self, b: Batch):
        """Where the lightly loaded candidates are drawn from: the idle servers, if any are known."""
        if b.cfg.placement.defer_s <= 0:
            return None
        idle = b.view.idle_servers(b.now)
        return idle if len(idle) else None

    def cut(self, b: Batch, state) -> Cut | None:
        cfg = b.cfg
        if cfg.placement.defer_s <= 0:
            return None
        ec, io = cfg.estimate, cfg.io
        doubt = ec.stale_penalty * min(max(b.now - b.view.time, 0.0), ec.max_stale_s)  # the idle server's
        # reading is as old as the view
        # (no task reads input: start-up alone, the same floats as init_s + 0 / bandwidth)
        start = io.init_s + b.in_bytes / io.remote_bytes_per_s if count_nonzero(b.in_bytes) else io.init_s
        limit = start + b.runtime + cfg.placement.defer_s + doubt
        view, now = b.view, b.now
        return Cut("E", limit, lambda: view.has_idle(now))
