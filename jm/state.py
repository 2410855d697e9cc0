"""The Job Manager: one per job; plans where the job's tasks run.

Pure state machine, as a router (after Dask's worker state machine): a stimulus comes in
(``handle``: a message or a timer; ``on_status``, ``on_view`` from the host), the parts that
own the job's state move it through the one transition table (apollo.core.lifecycle) and append
the effects (sends, timers, records) to ``out``, which goes back to the runtime; ``validate``
checks the invariants between stimuli. The parts:

- tasks (jm.tasks): the DAG, the per-task columns of each first attempt, the ready lists
  (stage critical path, then larger input first) and what the job holds;
- placement (jm.placement): a scheduling pass, batches placed by the profile's pipeline and
  dispatched in order of quality while tokens last, then as opportunistic tasks;
- attempts (jm.attempts): duplicates, straggler copies, Dolly's clones, opportunistic
  upgrade, and a failed attempt retried elsewhere (a task out of retries fails the job);
- adoption (jm.adoption): a job taken over from a dead JM host;
- the watchdog (jm.watchdog): attempts overdue, silent or straggling;
- the give-back (jm.giveback): a job holding more than the RM now grants it.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from apollo.core.effects import Log, Send, SetTimer, Timer
from apollo.core.messages import (CancelJob, Holding, JobDemand, JobDone, KillTask, ReclaimTokens, StatusBatch, TaskReport,
                             TaskSpec, TokenGrant, YieldJob)
from apollo.core.nonzero import count_nonzero
from apollo.core.spec import JobSpec

from .adoption import Adoption
from .attempts import NEWS, WON, Attempts
from .config import JmConfig
from .giveback import KEEP_ALL, GiveBack
from .placement import Placement
from .tasks import DISPATCHED, DONE, DUPLICATE, CLONE, FAILED, INF, KILLED, READY, RUNNING, TaskTable, pn_address
from .watchdog import Watchdog

__all__ = ["JmConfig", "JmState"]


class JmState:
    # (slots: ~2,300 JMs live at once at 20,000 servers)
    __slots__ = ("job_id", "spec", "cfg", "view", "reply_to", "submitted_at", "token_seq", "finished",
                 "finished_at", "failed_reason", "tasks", "watchdog", "placement", "attempts", "giveback",
                 "adoption", "sched_armed", "last_report", "row", "prof")

    def __init__(self, job_id: int, spec: JobSpec, tokens: int, submitted_at: float,
                 config: JmConfig, view: Any, reply_to: str = "", seq: int = 0, generation: int = 0,
                 done: bytes = b"", clones: int = 1, clone_cpu: float = 0.0, clones_low: bool = False) -> None:
        self.job_id = job_id
        self.spec = spec
        self.cfg = config
        self.view = view
        self.reply_to = reply_to
        self.submitted_at = submitted_at
        self.prof = config.profile
        self.token_seq = seq                    # the seq of the last token message applied
        self.finished = False
        self.finished_at = 0.0
        self.failed_reason = ""
        self.sched_armed = False                # coalesce: a "sched" timer is pending
        self.last_report: tuple | None = None   # (demand, CPUs in use) as the RM last heard them
        # (demand, CPUs in use) as of now, or None: not asked since the last stimulus. The JM's
        # state moves only within a stimulus (start, release, on_status, handle, on_view), each
        # of which drops it first, so the host's reports and views between stimuli reuse one
        # computation (validate checks it against a fresh one).
        self.row: tuple[int, int] | None = None
        self.tasks = tasks = TaskTable(job_id, spec, tokens, config, generation)
        self.watchdog = watchdog = Watchdog(tasks, config)
        self.placement = placement = Placement(tasks, watchdog, config, view, clones)
        self.attempts = attempts = Attempts(tasks, placement, watchdog, config, view, spec.max_retries, clones,
                                            clone_cpu, clones_low)
        if clones > 1:
            # (a cloned job's clones go out with its tasks' dispatch. Only then: the reference
            # makes a cycle, which reference counting alone cannot free when the job ends, so
            # every finished job would wait for the cyclic collector; ``close`` breaks it)
            placement.attempts = attempts
        self.giveback = GiveBack(tasks, attempts)
        self.adoption = Adoption(tasks, attempts, watchdog, config, generation, done)

    def close(self) -> None:
        """The host drops this JM (its job finished, or moved): its parts' references to each
        other go, so that it is freed at once."""
        self.placement.attempts = None

    # ---- what the host reads -----------------------------------------------------------
    @property
    def done(self) -> int:
        """Tasks done."""
        return self.tasks.done

    def done_bitmap(self) -> bytes:
        return self.tasks.done_bitmap()

    def demand_report(self) -> tuple[int, int]:
        """(CPUs it could use, CPUs in use): what HostReport carries; computed once per stimulus
        (asked between stimuli only: the host's reports and views)."""
        row = self.row
        if row is None:
            row = self.row = self._report()
        return row

    def _report(self) -> tuple[int, int]:
        """What the RM's sharing plane hears of this job from its JM: (CPUs it could use, CPUs its
        regular attempts have out, queued or running: the most it can be running; the RM keeps a
        queue's max with it). What it does run, the RM hears from the PNs: a PN reports a task
        that starts at once only when it ends, so a JM cannot tell a running attempt from a
        queued one."""
        tk = self.tasks
        return tk.demand(), math.ceil(tk.used_tokens / tk.max_depth() - 1e-9)     # (a float's: not numpy's)

    def wants_view(self, now: float) -> bool:
        """Whether a new cluster view gives this JM anything to do (it has tasks waiting to be
        placed, a demand the RM has not heard, or queued tasks that may be overdue). The view
        itself is read last, only when nothing of the JM's own says yes (the host relies on
        that: jm.interest)."""
        return self.needs_view() or now >= self.watchdog.watch_at or self.attempts.idle_room_for_queued(now)

    def needs_view(self) -> bool:
        """What of ``wants_view`` follows from the JM's own state alone, and so changes only with
        a stimulus: tasks ready to place, a report the RM has not heard, clone grant to give back."""
        att = self.attempts
        return self.tasks.has_ready() or self.demand_report() != self.last_report or \
            (att.clone_cpu > 0 and att.clones_needed() < att.clone_cpu)

    # ---- stimuli -------------------------------------------------------------------------
    def start(self, now: float, rng: Any) -> list:
        self.row = None
        out: list = [Log("job_started", (self.job_id, now))]
        tk = self.tasks
        if self.adoption.done_init:
            tk.mark_done(self.adoption.done_init)
        for st in tk.stages:
            if st.remaining and all(tk.stages[p].remaining == 0 for p in st.parents):
                tk.release_stage(st, now)
        if self.adoption.begin(self.view, out):
            return out
        if tk.done == tk.n:
            self._finish(True, "", now, out)
            return out
        self._schedule(now, rng, out)
        return out

    def release(self, kill: bool, now: float) -> list:
        """The RM moved the job off this host (``kill``: the job is over; else another host
        adopted it and its attempts are that host's now)."""
        self.row = None
        out: list = []
        tk = self.tasks
        if kill and not self.finished:
            for t in np.flatnonzero(tk.active()).tolist():
                out.append(Send(f"pn:{int(tk.server[t])}", KillTask(self.job_id, t, int(tk.attempt[t]))))
            for t in list(self.attempts.extra):
                self.attempts.kill_extras(t, now, out, outcome="killed")
        self.finished = True
        return out

    def on_status(self, b: StatusBatch, now: float, rng: Any) -> list:
        """A status batch: ``handle``'s path for one, without its dispatch on the event's type
        (a host routes one per finished task)."""
        out: list = []
        if not self.finished:
            self.row = None
            self._on_reports(b.reports, b.server, now, rng, out)
        return out

    def handle(self, event: Any, now: float, rng: Any) -> list:
        if self.finished:
            return []
        self.row = None
        t = type(event)
        out: list = []
        gb = self.giveback
        if t is StatusBatch:
            self._on_reports(event.reports, event.server, now, rng, out)
        elif t is TokenGrant:
            if event.seq and event.seq <= self.token_seq:
                return out          # a duplicate, or overtaken by a newer one
            self.token_seq = event.seq or self.token_seq
            self.tasks.tokens = event.tokens
            gb.demote_beyond_tokens(out)
            self._schedule(now, rng, out)
        elif t is Holding:
            self._on_holding(event, now, rng, out)
        elif t is ReclaimTokens:
            if event.seq and event.seq <= self.token_seq:
                return out
            self.token_seq = event.seq or self.token_seq
            self.tasks.tokens = event.tokens
            moved = gb.reclaim(event, now)
            if event.within_s > 0 and event.keep < KEEP_ALL:
                out.append(SetTimer(event.within_s, "reclaim"))
            gb.demote_beyond_tokens(out)
            gb.sync_yield(now, out, resend=moved)
            self._schedule(now, rng, out)
        elif t is Timer:
            key = event.key
            if key == "reclaim":
                # the deadline: every server is told again (a lost word costs no more than this)
                gb.sync_yield(now, out, resend=True)
            elif key == "retry":
                self.placement.retry_pending = False
                self._schedule(now, rng, out)
            elif key == "sched":
                self.sched_armed = False
                self._schedule(now, rng, out)
            elif key == "clones":
                self.attempts.release_clones(now, rng, out, final=True)
            elif key == "adopted":
                self.adoption.adopting = False
                if self.tasks.done == self.tasks.n:
                    self._finish(True, "", now, out)
                else:
                    self._schedule(now, rng, out)
        elif t is CancelJob:
            self._finish(False, "cancelled", now, out)
        return out

    def on_view(self, now: float, rng: Any, lost: np.ndarray | None = None) -> list:
        """The host's view changed: recover tasks on ``lost`` servers (dead or restarted),
        reschedule, report demand."""
        if self.finished:
            return []
        self.row = None
        out: list = []
        tk, att = self.tasks, self.attempts
        if att.extra and lost is not None and len(lost):
            att.extras_on(lost, now, out)
        if lost is not None and len(lost):
            ids = np.flatnonzero(tk.active() & np.isin(tk.server, lost))
            srv = tk.server[ids]
            gone = ~self.view.alive[srv] | (self.view.boot_times[srv] > tk.dispatch_t[ids])
            for t in ids[gone].tolist():
                self._attempt_over(t, now, out, "fail", f"server {int(tk.server[t])} lost", blame=False)
                if self.finished:
                    return out
        if now >= self.watchdog.watch_at:
            for t in self.watchdog.check(now, out):
                att.consider_duplicate(t, now, rng, out, None)
        if att.idle_room_for_queued(now):
            att.duplicates_for_idle(now, rng, out)
        self._schedule(now, rng, out)
        report = self.row = self._report()      # (nothing below moves it)
        clone_left = att.clones_needed() if att.clone_cpu > 0 else -1.0
        # (clone_left is -1 for a job not cloned: only a cloned job's shrinking grant is news)
        if report != self.last_report or 0 <= clone_left < att.clone_cpu:
            self.last_report = report
            if clone_left >= 0:
                att.clone_cpu = clone_left        # what the RM is told it may take back
            out.append(Send(self.cfg.rm, JobDemand(self.job_id, *report, clone_left, self.token_seq)))
        return out

    def _on_holding(self, msg: Holding, now: float, rng: Any, out: list) -> None:
        """A PN's attempts of this job, asked for when adopting it (jm.adoption)."""
        server = msg.server
        tk, adoption = self.tasks, self.adoption
        for spec, rep in zip(msg.tasks, msg.reports):
            if adoption.adopt(spec, rep, server, now, out):
                self._on_reports([rep], server, now, rng, out)
        for rep in msg.ended:
            t = rep.task
            if rep.state == DONE and 0 <= t < tk.n and tk.state.item(t) != DONE:
                if adoption.adopt(tk.spec_for(t, rep.attempt), rep, server, now, out):
                    self._on_reports([rep], server, now, rng, out)

    # ---- status ----------------------------------------------------------------
    def _on_reports(self, reports: list[TaskReport], server: int, now: float, rng: Any, out: list) -> None:
        changed = False
        shift = self.view.pn_clocks.get(server)     # + shift: the PN's times on our clock
        tk, att, cfg = self.tasks, self.attempts, self.cfg
        n = tk.n
        sent, state = tk.sent, tk.state
        for r in reports:
            t = r.task
            if not 0 <= t < n:
                continue  # a stranger
            spec = sent[t]
            # (.item: a plain Python number, without making a numpy scalar first)
            cur: int = state.item(t)
            if spec is None or r.attempt != spec.attempt or (cur != DISPATCHED and cur != RUNNING):
                if att.extra:
                    e = att.find_extra(t, r.attempt)
                    if e is not None:
                        got = att.on_extra_report(t, e, r, server, now, out, shift)
                        if got == WON:
                            self._task_done(t, state.item(t), e.spec, r, server, now, out, shift)
                        if got == WON or got == NEWS:
                            changed = True
                        if self.finished:
                            return
                        continue
                if r.state == DISPATCHED or r.state == RUNNING:
                    # an attempt we no longer want is still there (a kill was lost): kill it again
                    out.append(Send(f"pn:{server}", KillTask(self.job_id, t, r.attempt)))
                continue
            rs = r.state
            if rs == DONE:
                self._task_done(t, cur, spec, r, server, now, out, shift)
                changed = True
            elif rs == DISPATCHED:       # it had to queue there
                tk.last_heard[t] = now
                if cur == DISPATCHED:
                    if r.detail == "demoted":
                        self.giveback.demoted(t, now, out)
                        changed = True
                        continue
                    if r.detail == "queued" and not self.prof.matcher.leaves_queued():
                        # a slot scheduler's task found its slot gone: placed again, now
                        out.append(Send(pn_address(server), KillTask(self.job_id, t, r.attempt)))
                        self._attempt_over(t, now, out, "requeue", "moved", blame=False, outcome="moved")
                        changed = True
                        continue
                    tk.waiting[t] = True
                    if tk.used_tokens > tk.tokens:
                        self.giveback.demote_beyond_tokens(out)
                if cur == DISPATCHED and self.watchdog.dups:
                    # fresh news of a queued task: Apollo's duplicate triggers, now and later
                    tk.queued_seen[t] = True
                    self.watchdog.note(float(self.watchdog.deadlines(t)))
                    if r.t_end > 0.0:        # the start its PN plans for it
                        att.consider_duplicate(t, now, rng, out, r.t_end + shift - tk.dispatch_t.item(t))
                if r.detail == "probed" and tk.check_t.item(t) == np.inf and cfg.attempts.copies and \
                        self.prof.corrections:     # a straggler check found it still queued: later
                    tk.check_t[t] = now + cfg.attempts.straggler_slack_s + tk.exp_wait.item(t)
                    self.watchdog.note(tk.check_t.item(t))
            elif rs == RUNNING:
                tk.last_heard[t] = now
                if cur == DISPATCHED:        # else already known (a probe's answer): news only
                    tk.move(t, "start")
                    tk.waiting[t] = False
                    tk.start_t[t] = r.t_start + shift
                    if att.extra and t in att.extra:    # duplicates are discarded when one starts
                        att.kill_extras(t, now, out, only=DUPLICATE)
                if r.detail == "probed" and tk.check_t.item(t) == np.inf and cfg.attempts.copies and \
                        self.prof.corrections:
                    att.consider_copy(t, r, now, rng, out, shift)
            elif rs == FAILED:
                tk.start_t[t] = r.t_start + shift
                self._attempt_over(t, now, out, "fail", r.detail or f"exit code {r.exit_code}",
                                   blame=True, t_end=r.t_end + shift)
                changed = True
            elif rs == READY or rs == KILLED:
                # preempted, refused, unknown there, or killed by someone else (an earlier home
                # of the job, whose kill was late): no fault of the task
                tk.start_t[t] = r.t_start + shift
                moved = r.detail == "moved"
                self._attempt_over(t, now, out, "requeue", r.detail, blame=False, t_end=r.t_end + shift,
                                   outcome="lost" if r.detail == "unknown attempt" or rs == KILLED else
                                   "moved" if moved else "")
                # (a task its PN sent back at a give-back's deadline is placed again on the next
                # view, which shows where room freed then: on the view held now it would go
                # where it seemed best before, as like as not behind the same work)
                changed = changed or not moved
            if self.finished:
                return
        if att.clone_wait and changed:
            att.release_clones(now, rng, out, final=False)
        gb = self.giveback
        if changed and (gb.marked or gb.yield_at < INF):
            gb.sync_yield(now, out)        # (before any new dispatch: the PNs hear it first)
        # (a pass only when it may place something: most reports end a task of a stage with
        # nothing left to place, and a pass for nothing was a timer event per task)
        if changed and not self.adoption.adopting and (tk.outstanding_opp or tk.has_ready()):
            if not cfg.dispatch.coalesce:
                self._schedule(now, rng, out)
            elif not self.sched_armed:
                self.sched_armed = True
                out.append(SetTimer(0.0, "sched"))

    def _task_done(self, t: int, cur: int, spec: TaskSpec, r: TaskReport, server: int, now: float, out: list,
                   shift: float = 0.0) -> None:
        """Attempt ``spec`` of task ``t`` (in state ``cur``) succeeded on ``server``. Every
        completion runs this: it reads the attempt's own TaskSpec (what the JM sent) rather than
        a dozen per-task columns, each a cache miss of its own in a cluster-sized run."""
        tk, att = self.tasks, self.attempts
        st = tk.stages[spec.stage]
        tk.move(t, "finish")
        opp = tk.free_slot(t, spec.cpu)
        loc = spec.locality
        tk.record(st, t, spec.attempt, server, loc, r.t_start + shift, r.t_end + shift, "done", opp, out, spec.kind)
        if att.extra and t in att.extra:       # the first to finish wins
            if att.clones > 1 and st.children and self.cfg.attempts.delay_assignment:
                # (its clones run on: more copies of its output for the downstream clones)
                att.won_at[t] = now
                for e in list(att.extra[t]):
                    if e.kind != CLONE:
                        att.end_extra(t, e, "kill", "lost", now, out)
            else:
                att.kill_extras(t, now, out)
        st.observe(max(0.0, (r.t_end - r.t_start) - self.cfg.io.io_time(spec.input_bytes, loc)))
        tk.done += 1
        st.remaining -= 1
        if st.remaining == 0:
            for c in st.children:
                ch = tk.stages[c]
                if not ch.released and all(tk.stages[p].remaining == 0 for p in ch.parents):
                    tk.release_stage(ch, now)
        if tk.done == tk.n:
            self._finish(True, "", now, out)

    def _attempt_over(self, t: int, now: float, out: list, event: str, detail: str, blame: bool,
                      t_end: float | None = None, outcome: str = "") -> None:
        """An attempt ended without success: retry the task elsewhere, or give up on the job."""
        why = self.attempts.attempt_over(t, now, out, event, detail, blame, t_end, outcome)
        if why:
            self._finish(False, why, now, out)

    def _finish(self, ok: bool, reason: str, now: float, out: list) -> None:
        if self.finished:
            return
        self.finished = True
        self.finished_at = now
        self.failed_reason = reason if not ok else ""
        tk = self.tasks
        for t in list(self.attempts.extra):
            self.attempts.kill_extras(t, now, out, outcome="killed")
        # (every task done: no first attempt is out; spared a scan of the columns on every job's end)
        act = np.flatnonzero(tk.active()).tolist() if tk.done < tk.n else []
        for t in act:
            out.append(Send(f"pn:{int(tk.server[t])}", KillTask(self.job_id, t, int(tk.attempt[t]))))
            tk.move(t, "kill")
            tk.log_attempt(t, "killed", now, out)   # (what a cancelled job ran shows in the records)
        gb = self.giveback
        for s in sorted(gb.marked):
            out.append(Send(pn_address(s), YieldJob(self.job_id, -1.0)))
        gb.marked = set()
        done = JobDone(self.job_id, ok, reason, now, tk.done)
        if self.reply_to:
            # Straight to the submitter, first: the RM is not on the critical path of a job's
            # completion (it forwards its own copy later, in case this one is lost; submitters
            # take the first).
            out.append(Send(self.reply_to, done))
        out.append(Send(self.cfg.rm, done))
        out.append(Log("job_done", (self.job_id, ok, self.submitted_at, now, tk.n, reason)))

    # ---- scheduling ------------------------------------------------------------
    def _schedule(self, now: float, rng: Any, out: list) -> None:
        tk, gb = self.tasks, self.giveback
        if gb.marked:
            # a job back within its give-back's line says so before it sends anything new: a
            # PN must not take its new attempts for yielding ones
            gb.sync_yield(now, out)
        if (not tk.has_ready() and not tk.outstanding_opp) or self.adoption.adopting:
            return
        if tk.opp_active and count_nonzero(tk.waiting):
            gb.swap_queued_for_running(out)
        if tk.outstanding_opp > 0 and tk.tokens - tk.used_tokens >= 1:
            self.attempts.upgrade(now, out)
        self.placement.schedule(now, rng, out)

    # ---- invariants ------------------------------------------------------------
    def validate(self) -> None:
        tk, att, gb = self.tasks, self.attempts, self.giveback
        assert self.row is None or self.row == self._report(), "cached report out of date"
        state = tk.state
        act = tk.active()
        cpu = np.array([tk.stages[i].spec.cpu for i in tk.stage_of]) if tk.n else np.zeros(0)
        extra_tok, extra_clone, extra_opp = att.extra_counts()
        for t in att.extra:
            assert self.finished or act[t] or (state[t] == DONE and att.clones > 1), \
                "a task with extra attempts has no first attempt"
        assert abs(extra_clone - att.clone_used) < 1e-6, "clone accounting broken"
        assert att.clone_used <= att.clone_cpu + 1e-6, "clones beyond the job's clone grant"
        assert abs(cpu[act & ~tk.opp].sum() + extra_tok - tk.used_tokens) < 1e-6, "token accounting broken"
        assert abs(cpu[act & tk.opp].sum() + extra_opp - tk.outstanding_opp) < 1e-6, \
            "opportunistic accounting broken"
        if not self.finished:
            assert tk.opp_active == set(np.flatnonzero(act & tk.opp).tolist()), "opportunistic set out of sync"
        assert tk.done == int((state == DONE).sum())
        assert self.finished or not (tk.waiting & ~act).any(), "a task waiting at a PN with no attempt out"
        assert all(act[t] and not tk.opp[t] for t in tk.demoting) or self.finished, \
            "a demotion out for an attempt that is not a regular one"
        assert not gb.marked or gb.yield_at < INF, "servers told to yield without a give-back"
        queued = sorted(t for st in tk.stages for t in st.ready)
        assert queued == np.flatnonzero(state == READY).tolist(), "ready list out of sync"
