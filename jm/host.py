"""A JM host: one actor that carries the JMs of many jobs and their shared cluster view.

The host creates a JM when the RM admits a job (StartJob), routes each
message and timer to its JM by job id, folds every matrix it hears of into
the shared ViewCache, and drops a JM once its job has finished.
"""
from __future__ import annotations

import numpy as np

from apollo.core.effects import CancelTimer, Log, Send, SetTimer, Start, Timer
from apollo.core.lifecycle import TaskState
from apollo.core.messages import (CancelJob, ClusterView, Holding, HostReport, JobDone, KillTask, ReclaimTokens,
                             ReleaseJob, ReportAck, StartJob, StatusBatch, TokenGrant)

from .interest import ViewInterest
from .report_rows import ReportRows
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
        self._progress_sent: dict[int, int] = {}   # job -> tasks done as last reported to the RM
        # (duplicates run: a job's queued tasks may move to a server the view shows idle)
        self.interest = ViewInterest(config.profile.corrections and config.attempts.dup_factor > 0)
        # Each job's HostReport row (token seq, demand, CPUs in use), in job order, as of its last
        # report: remade only for jobs given a stimulus since (a JM's state moves only then).
        self._rows = ReportRows()
        self._unreported: set[int] = set()     # jobs given a stimulus since the last report

    def handle(self, event, now: float, rng) -> list:
        t = type(event)
        if t is StatusBatch:
            return self._on_statuses((event,), now, rng)
        if t is list:
            return self._on_statuses(event, now, rng)
        if t is ClusterView:
            try:
                lost = self.view.apply_view(event, now)
            except ValueError as e:
                return [Log("warn", (str(e),))]
            if lost is None:
                return []        # a delta this host cannot apply: the next view repairs it
            if len(lost):
                return self._view_to_all(now, rng, lost)
            return self._view_to_asked(now, rng)
        if t is Timer:
            if event.key == "report":
                return self._host_report()
            job_id, key = event.key
            return self._route(job_id, Timer(key), now, rng)
        if t is StartJob:
            return self._start(event, now, rng)
        if t is TokenGrant or t is CancelJob or t is ReclaimTokens or t is Holding:
            return self._route(event.job_id, event, now, rng)
        if t is ReleaseJob:
            return self._release(event, now)
        if t is ReportAck:
            self._rows.ack(event.seq)
            return []
        if t is Start:
            return self._host_report()
        return [Log("warn", (f"jm host ignored {t.__name__}",))]

    def _touch(self, job_id: int) -> None:
        """A job is given a stimulus: its state may move (the view's index and its report row
        look at it again)."""
        self.interest.touch(job_id)
        self._unreported.add(job_id)

    def _view_to_all(self, now: float, rng, lost: np.ndarray) -> list:
        """Servers were lost: every job looks for its attempts there."""
        out: list = []
        touch = self._touch
        for job_id, jm in list(self.jms.items()):
            touch(job_id)
            out.extend(self._wrap(job_id, jm.on_view(now, rng, lost)))
            self._reap(job_id, jm)
        return out

    def _view_to_asked(self, now: float, rng) -> list:
        """The jobs the view can give anything to do (jm.interest), in job order, each asked."""
        out: list = []
        jms, interest = self.jms, self.interest
        asked, first_idle = interest.to_ask(jms, now)
        idle_at = interest.order[first_idle] if first_idle is not None else None
        order = interest.order
        for job_id in asked:
            if idle_at is not None and order[job_id] > idle_at:
                # (where the first job with nothing of its own to do looked at the view's idle
                # servers, found once per view: found at the same point as when it was asked)
                self.view.look_for_idle(now)
                idle_at = None
            jm = jms[job_id]
            if jm.wants_view(now):
                self._touch(job_id)
                out.extend(self._wrap(job_id, jm.on_view(now, rng)))
                self._reap(job_id, jm)
        if idle_at is not None:
            self.view.look_for_idle(now)
        return out

    def _on_statuses(self, batches, now: float, rng) -> list:
        """Status batches, in arrival order (one, or several a runtime collected): each one's
        reading is folded into the view, then the batch goes to its JM."""
        out: list = []
        view, jms = self.view, self.jms
        # (ViewInterest.touch and _touch, as set adds: one report per task comes this way. Called
        # on their objects, not as bound methods kept in locals: compiled, these are C calls, and
        # a bound method is a Python call that parses its arguments)
        touched, unreported = self.interest.touched, self._unreported
        b: StatusBatch           # (typed: compiled, its fields are read as struct members)
        for b in batches:
            view.apply_row(b.server, b.matrix, b.matrix_time, b.time, now, b.grow)
            job_id = b.job_id
            jm = jms.get(job_id)
            if jm is None:
                out += self._orphan_reports(b)
                continue
            # (what _route does, for the host's most frequent event: one report per task)
            touched.add(job_id)
            unreported.add(job_id)
            r = jm.on_status(b, now, rng)
            if r:
                out += self._wrap(job_id, r)
            if jm.finished:
                self._reap(job_id, jm)
        return out

    def _orphan_reports(self, b: StatusBatch) -> list:
        """Reports for a job this host no longer runs: attempts of a job that finished here are
        still queued or running (their kill was lost): kill them again."""
        if b.job_id not in self.finished:
            return []
        live = (int(TaskState.DISPATCHED), int(TaskState.RUNNING))
        return [Send(f"pn:{b.server}", KillTask(r.job_id, r.task, r.attempt)) for r in b.reports if r.state in live]

    def _start(self, msg: StartJob, now: float, rng) -> list:
        jm = self.jms.get(msg.job_id)
        if jm is not None:
            # the RM re-offered a job we run (its restart, or our answer was lost): a token grant
            return self._route(msg.job_id, TokenGrant(msg.job_id, msg.tokens, msg.seq), now, rng)
        if msg.job_id in self.finished:
            return [Send(self.cfg.rm, self.finished[msg.job_id])]
        # (submitted_at is on the RM's clock: on ours, as far as the RM's views tell)
        jm = JmState(msg.job_id, msg.spec, msg.tokens, msg.submitted_at + self.view.rm_clock.get(0), self.cfg,
                     self.view, msg.reply_to,
                     seq=msg.seq, generation=msg.generation, done=msg.done, clones=msg.clones,
                     clone_cpu=msg.clone_cpu, clones_low=msg.clones_low)
        job_id = msg.job_id
        self.jms[job_id] = jm
        self.interest.started(job_id)
        self._rows.add(job_id)                  # (its place in job order)
        self._unreported.add(job_id)
        self.started += 1
        out = self._wrap(msg.job_id, jm.start(now, rng))
        self._reap(msg.job_id, jm)
        return out

    def _release(self, msg: ReleaseJob, now: float) -> list:
        """The RM no longer places this job here: drop its JM (killing its attempts if the job is
        over; leaving them if another host adopted it)."""
        jm = self.jms.pop(msg.job_id, None)
        if jm is None:
            return []
        self._gone(msg.job_id)
        out = jm.release(msg.kill, now)
        jm.close()
        return self._wrap(msg.job_id, out) + [Log("released", (msg.job_id, now, msg.kill))]

    def _host_report(self) -> list:
        """Every host_report_s: the jobs this host runs, each with the token seq its JM last
        heard, its demand and CPUs in use, as a delta since the report the RM acknowledged
        (jm/report_rows.py), and the done bitmaps of jobs that progressed (rows remade for the
        jobs given a stimulus since the last report only)."""
        jms, sent, rows = self.jms, self._progress_sent, self._rows
        progressed: list[int] = []
        for job_id in self._unreported:
            jm = jms.get(job_id)
            if jm is None:
                continue
            demand, in_use = jm.demand_report()
            rows.set(job_id, jm.token_seq, demand, in_use)
            if jm.done != sent.get(job_id, 0):
                sent[job_id] = jm.done
                progressed.append(job_id)
        self._unreported.clear()
        if len(progressed) > 1:
            progressed.sort(key=self.interest.order.__getitem__)     # (in job order)
        seq, base, (jobs, seqs, demands, in_uses), ended = rows.report()
        return [Send(self.cfg.rm, HostReport(self.cfg.host, jobs, seqs, demands, in_uses,
                                             np.asarray(progressed, dtype=np.int64),
                                             [jms[j].done_bitmap() for j in progressed], self.view.seq,
                                             seq, base, ended, len(rows.slot), rows.digest)),
                SetTimer(self.cfg.host_report_s, "report")]

    def _route(self, job_id: int, event, now: float, rng) -> list:
        jm = self.jms.get(job_id)
        if jm is None:
            return []   # a job that already finished: late reports are expected
        self._touch(job_id)
        out = self._wrap(job_id, jm.handle(event, now, rng))
        self._reap(job_id, jm)
        return out

    def _reap(self, job_id: int, jm: JmState) -> None:
        if jm.finished:
            del self.jms[job_id]
            self._gone(job_id)
            jm.close()
            self.finished[job_id] = JobDone(job_id, not jm.failed_reason, jm.failed_reason, jm.finished_at,
                                            jm.done)

    def _gone(self, job_id: int) -> None:
        """A job left this host (finished, or released)."""
        self._progress_sent.pop(job_id, None)
        self.interest.gone(job_id)
        self._rows.remove(job_id)
        self._unreported.discard(job_id)

    def validate(self) -> None:
        for jm in self.jms.values():
            jm.validate()
        self.interest.validate(self.jms)
        self._rows.validate(list(self.jms))
        for job_id, jm in self.jms.items():
            if job_id not in self._unreported:
                assert self._rows.row(job_id) == (jm.token_seq, *jm._report()), "a job's report row out of date"
                assert self._progress_sent.get(job_id, 0) == jm.done, "a job's progress not reported"

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
