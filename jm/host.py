"""A JM host: one actor that carries the JMs of many jobs and their shared cluster view.

The host creates a JM when the RM admits a job (StartJob), routes each
message and timer to its JM by job id, folds every matrix it hears of into
the shared ViewCache, and drops a JM once its job has finished.
"""
from __future__ import annotations

import numpy as np

from apollo.effects import CancelTimer, Log, Send, SetTimer, Start, Timer
from apollo.messages import CancelJob, ClusterView, JobDone, ReclaimTokens, StartJob, StatusBatch, TokenGrant

from .state import JmConfig, JmState
from .view import ViewCache


class JmHost:
    # Status batches may come as a list of several (a runtime collects those arriving close
    # together, as a busy host reads its sockets): one event for many, each routed to its JM.
    batched = (StatusBatch,)

    def __init__(self, config: JmConfig) -> None:
        self.cfg = config
        self.view = ViewCache(config.topology.servers, config.grid, config.topology.cores)
        self.jms: dict[int, JmState] = {}
        self.started = 0
        # Outcomes of finished jobs: if a restarted RM re-admits one (its JobDone was lost),
        # the answer is repeated instead of running the job again.
        self.finished: dict[int, JobDone] = {}

    def handle(self, event, now: float, rng) -> list:
        t = type(event)
        if t is StatusBatch:
            return self._on_statuses((event,), now, rng)
        if t is list:
            return self._on_statuses(event, now, rng)
        if t is ClusterView:
            view = self.view
            was_alive, was_boot = view.alive.copy(), view.boot_times.copy()
            try:
                view.apply_view(event)
            except ValueError as e:
                return [Log("warn", (str(e),))]
            lost = np.flatnonzero((was_alive & ~view.alive) | (view.boot_times > was_boot))
            out: list = []
            for job_id, jm in list(self.jms.items()):
                if len(lost) or jm.wants_view(now):
                    out.extend(self._wrap(job_id, jm.on_view(now, rng, lost)))
                    self._reap(job_id, jm)
            return out
        if t is Timer:
            job_id, key = event.key
            return self._route(job_id, Timer(key), now, rng)
        if t is StartJob:
            return self._start(event, now, rng)
        if t is TokenGrant or t is CancelJob or t is ReclaimTokens:
            return self._route(event.job_id, event, now, rng)
        if t is Start:
            return []
        return [Log("warn", (f"jm host ignored {t.__name__}",))]

    def _on_statuses(self, batches, now: float, rng) -> list:
        """Status batches, in arrival order (one, or several a runtime collected): each one's
        reading is folded into the view, then the batch goes to its JM."""
        out: list = []
        apply_row = self.view.apply_row
        route = self._route
        for b in batches:
            apply_row(b.server, b.matrix, b.matrix_time)
            r = route(b.job_id, b, now, rng)
            if r:
                out += r
        return out

    def _start(self, msg: StartJob, now: float, rng) -> list:
        if msg.job_id in self.jms:
            return []   # the RM re-admitted a job we already run (it restarted)
        if msg.job_id in self.finished:
            return [Send(self.cfg.rm, self.finished[msg.job_id])]
        jm = JmState(msg.job_id, msg.spec, msg.tokens, msg.submitted_at, self.cfg, self.view, msg.reply_to)
        self.jms[msg.job_id] = jm
        self.started += 1
        out = self._wrap(msg.job_id, jm.start(now, rng))
        self._reap(msg.job_id, jm)
        return out

    def _route(self, job_id: int, event, now: float, rng) -> list:
        jm = self.jms.get(job_id)
        if jm is None:
            return []   # a job that already finished: late reports are expected
        out = self._wrap(job_id, jm.handle(event, now, rng))
        self._reap(job_id, jm)
        return out

    def _reap(self, job_id: int, jm: JmState) -> None:
        if jm.finished:
            del self.jms[job_id]
            self.finished[job_id] = JobDone(job_id, not jm.failed_reason, jm.failed_reason, jm.finished_at,
                                            jm.done)

    def validate(self) -> None:
        for jm in self.jms.values():
            jm.validate()

    @staticmethod
    def _wrap(job_id: int, effects: list) -> list:
        """Scope the JM's timer keys by job so that one host can carry many JMs."""
        for i, e in enumerate(effects):
            te = type(e)
            if te is SetTimer:
                effects[i] = SetTimer(e.delay, (job_id, e.key))
            elif te is CancelTimer:
                effects[i] = CancelTimer((job_id, e.key))
        return effects
