"""The Process Node: one server's local queues and the tasks running on it.

Pure state machine: ``handle(event, now, rng) -> effects``. Regular tasks run
in FIFO order with conservative backfill (pn.queue); opportunistic tasks run
only on resources no regular task is planned onto right now, are picked at
random (weighted towards short ones), and are preempted the moment a regular
task is planned to start and needs their room.

A job asked to give back what it holds beyond its tokens (YieldJob; docs/sharing.md) yields
here: its queued regular attempts wait as opportunistic ones, and from its deadline on its
running regular attempts are preempted, youngest first, for regular work waiting for their
room; until then their room is planned (and advertised) as free at the deadline.
"""
from __future__ import annotations

import numpy as np

from apollo.core.effects import (CancelTimer, Kill, Launch, Log, PeerBack, PeerLost, Send, SetTimer, Start, TaskExited,
                                 Timer)
from apollo.core.lifecycle import TaskState, step
from apollo.core.messages import (DemoteTask, Dispatch, Heartbeat, Holding, KillTask, ProbeJob, ProbeTask, StatusBatch,
                             TaskReport, TaskSpec, UpgradeTask, YieldJob)

from .attempt import (Attempt, as_opportunistic, as_regular, end_of, held_by_job, idle_reading, progress, room,
                      weighted_pick)
from .config import (ABOUT_NOW_S, DISPATCHED, DISPATCHES_KEPT, DONE, ENDED_KEEP, FAILED, INF, JOBS_KEPT, MOVE_AFTER_S,
                     NEVER_S, READY, PnConfig)
from .queue import Profile, release_waits


class PnState:
    # The live runtime may hand this actor several TaskExited at once, as a list (the exits of
    # one event-loop iteration): they share one queue pass and one status batch per job.
    batch_exits = True
    # On PeerBack of the RM (restarted, or a partition healed) it sends its whole state: it
    # reports only on change, so a restarted RM would otherwise never learn of a quiet server.
    watches = ("rm",)
    # (slots: 20,000 of these in a simulation, each touched at random; no per-object dict)
    __slots__ = ("server", "cfg", "boot_time", "queue", "opp_queue", "running", "free_cpu", "free_mem",
                 "_matrix", "_matrix_time", "_grow", "_last_g", "_waits", "_planned_at", "_avail", "_overdue_at",
                 "_last_m", "_last_t", "_hb_due", "_changed", "_quiet_due", "_repeat_due", "_revise_at", "_queued_due",
                 "ended", "jm_at", "_dispatches", "_dispatch_keys", "_jm_default", "_idle_w", "_gcpu", "_gmem", "yielding", "_yield_due",
                 "_early_upgrades")

    def __init__(self, server: int, config: PnConfig) -> None:
        self.server = server
        self.cfg = config
        self.boot_time = 0.0
        self.queue: list[Attempt] = []          # regular, FIFO
        self.opp_queue: list[Attempt] = []
        self.running: dict[tuple, Attempt] = {}
        self.free_cpu = config.cores
        self.free_mem = config.mem_gb
        self._matrix: list | None = None        # cached reading (relative to _matrix_time)
        self._matrix_time = 0.0
        self._grow = -1.0                       # how it moves after that (attempt.room)
        self._waits: list[float] = []           # the last planned waits, from _planned_at
        self._planned_at = 0.0
        self._avail: list[float] | None = None         # absolute start times of the shapes, made on demand
        self._overdue_at = INF                  # when a shape the room does not fit now is due
        self._last_m: list | None = None        # the last planned reading, kept across changes,
        self._last_t = 0.0                      # and when it was planned, and how it moves
        self._last_g = -1.0
        self._hb_due = INF                      # when the armed heartbeat timer fires
        self._changed = True                    # the queues changed since the last heartbeat
        self._quiet_due = INF                   # a running task outlives its plan: report by then
        self._repeat_due = INF                  # the last report goes once more then (repeat_after_s)
        self._revise_at = INF                   # a running task outlives its planned end then
        self._queued_due = INF                  # when the armed "queued" report timer fires
        self.ended: list[TaskReport] = []                 # the latest attempts' ends, oldest first
        self._idle_w: list[float] | None = None            # this server's reading when idle (made once)
        # the grid's sizes, held here: read on every reading (the grid is an interpreted class)
        self._gcpu: tuple[float, ...] = config.grid.cpu
        self._gmem: tuple[float, ...] = config.grid.mem
        self._dispatches: list[int] = []                  # the latest Dispatches' first attempts, as keys
        # (the same keys as a set, searched: a list's search compared every kept key, each a
        # separate object and, 20,000 PNs over, a cache miss of its own)
        self._dispatch_keys: set[int] = set()
        # Where a job's reports go: the first JM host this PN heard of, unless jm_at names another
        # (job -> (JM generation, host)); an entry only for jobs elsewhere keeps a PN of a
        # one-host cluster from keeping one per job it ever ran.
        self.jm_at: dict[int, tuple[int, str]] = {}
        self._jm_default = ""
        # Jobs yielding here (YieldJob): job -> when (on this PN's clock) its running regular
        # attempts start to yield to waiting regular work. Empty but for the length of a give-back.
        self.yielding: dict[int, float] = {}
        self._yield_due = INF                   # when the armed "yield" timer fires
        # Upgrades that came before their attempt's Dispatch (the JM sent both at once and the
        # network reordered them): applied when it comes. A few: they come milliseconds apart.
        self._early_upgrades: list[tuple] = []

    # ---- event entry -------------------------------------------------------
    def handle(self, event, now: float, rng) -> list:
        t = type(event)
        if t is Dispatch:
            return self._on_dispatch(event, now, rng)
        if t is TaskExited:
            return self._on_exit(event, now, rng)
        if t is list:
            return self._on_exits(event, now, rng)
        if t is Timer:
            k = event.key
            if k == "queued":
                return self._report_queued(now)
            if k == "yield":
                return self._yield_now(now, rng)
            self._hb_due = INF                  # (that timer is spent)
            return self._heartbeat(now)
        if t is KillTask:
            return self._on_kill(event, now, rng)
        if t is UpgradeTask:
            return self._on_upgrade(event, now, rng)
        if t is YieldJob:
            return self._on_yield(event, now, rng)
        if t is DemoteTask:
            return self._on_demote(event, now, rng)
        if t is ProbeTask:
            return self._on_probe(event, now)
        if t is ProbeJob:
            return self._on_probe_job(event, now)
        if t is Start:
            self.boot_time = now
            return self._heartbeat(now)
        if t is PeerBack or t is PeerLost:      # (lost: nothing to do until it is back)
            if t is PeerLost or event.address != self.cfg.rm:
                return []
            self._changed = True                # the RM may have lost what we said: all of it again
            return self._heartbeat(now)
        return [Log("warn", (f"pn:{self.server} ignored {t.__name__}",))]

    # ---- handlers ----------------------------------------------------------
    def _on_dispatch(self, msg: Dispatch, now: float, rng) -> list:
        out: list = []
        refused = []
        queued = False
        cfg = self.cfg
        if not msg.tasks:
            return out
        # A duplicate (the network delivered the message twice) comes within milliseconds: it is
        # found among the last few Dispatches by its first attempt, one check per message.
        first = msg.tasks[0]
        # one int per Dispatch, exact (job, task and attempt in disjoint bits); the TaskSpecs
        # themselves would keep ended attempts alive, 20,000 PNs times over
        key = (first.job_id << 64) | (first.task << 32) | first.attempt
        keys = self._dispatch_keys
        if key in keys:
            return out
        seen = self._dispatches
        seen.append(key)
        keys.add(key)
        if len(seen) > 2 * DISPATCHES_KEPT:
            for old in seen[:DISPATCHES_KEPT]:
                keys.discard(old)
            del seen[:DISPATCHES_KEPT]
        if msg.reply_to and msg.reply_to != self._jm_default or msg.job_id in self.jm_at:
            self._reply_to(msg.job_id, msg.tasks[0].attempt >> 16, msg.reply_to)
        started: dict[int, list] = {}
        for spec in msg.tasks:
            if not (0 < spec.cpu <= cfg.cores + 1e-9 and 0 < spec.mem_gb <= cfg.mem_gb + 1e-9):
                refused.append(TaskReport(spec.job_id, spec.task, spec.attempt, int(FAILED),
                                          now, now, -1, f"needs {spec.cpu} cpu/{spec.mem_gb} GB; "
                                          f"server {self.server} has {cfg.cores}/{cfg.mem_gb}"))
                continue
            if self.running and spec.key in self.running:
                continue        # an attempt already running here, sent again: one run of it, not two
            if spec.opportunistic and self._early_upgrades and spec.key in self._early_upgrades:
                self._early_upgrades.remove(spec.key)
                spec = as_regular(spec)
            a = Attempt(spec, DISPATCHED, now)
            if self.yielding and not spec.opportunistic and not spec.kind and spec.job_id in self.yielding:
                # (a Dispatch that overtook the JM's word that its job no longer yields)
                a.spec = spec = as_opportunistic(spec)
                started.setdefault(spec.job_id, []).append(self._demoted_report(a, now))
            if spec.opportunistic:
                self.opp_queue.append(a)
                queued = True
            elif not self.queue and spec.cpu <= self.free_cpu + 1e-9 and spec.mem_gb <= self.free_mem + 1e-9:
                self._start(a, now, rng, out, report=spec.kind != 0, reports=started)   # nothing ahead of it
            else:
                self.queue.append(a)
                self._arm_queued_report(now, out)
                queued = True
        self._matrix = None
        if not (queued or refused or self.opp_queue or started):
            self._changed_now(now, out)      # every task started: nothing to plan or report
            return out
        reports: dict[int, list] = started
        if refused:
            reports.setdefault(msg.job_id, []).extend(refused)
        self._run_queues(now, rng, out, reports)
        self._emit_reports(now, out, reports)
        return out

    def _on_exit(self, ev: TaskExited, now: float, rng) -> list:
        a = self.running.pop(ev.task_key, None)
        if a is None:
            return []  # killed before it exited
        self._release(a)
        a.state = step(a.state, "finish" if ev.ok else "fail")
        s = a.spec
        out: list = []
        rep = TaskReport(s.job_id, s.task, s.attempt, int(a.state), a.started_at, now, ev.exit_code, ev.detail)
        self._ended(ev.task_key, rep)
        reports = {s.job_id: [rep]}
        if self.queue or self.opp_queue:
            self._run_queues(now, rng, out, reports)
        self._emit_reports(now, out, reports)
        return out

    def _on_exits(self, exits: list, now: float, rng) -> list:
        """Several TaskExited at once: release them all, then one queue pass, one report each job."""
        reports: dict[int, list] = {}
        running = self.running
        for ev in exits:
            a = running.pop(ev.task_key, None)
            if a is None:
                continue  # killed before it exited
            self._release(a)
            a.state = step(a.state, "finish" if ev.ok else "fail")
            s = a.spec
            rep = TaskReport(s.job_id, s.task, s.attempt, int(a.state), a.started_at, now, ev.exit_code, ev.detail)
            self._ended(ev.task_key, rep)
            r = reports.get(s.job_id)
            if r is None:
                reports[s.job_id] = [rep]
            else:
                r.append(rep)
        if not reports:
            return []
        out: list = []
        self._run_queues(now, rng, out, reports)
        self._emit_reports(now, out, reports)
        return out

    def _on_kill(self, msg: KillTask, now: float, rng) -> list:
        key = (msg.job_id, msg.task, msg.attempt)
        out: list = []
        a = self.running.pop(key, None)
        if a is not None:
            self._release(a)
            out.append(Kill(key))
        else:
            for q in (self.queue, self.opp_queue):
                for i, x in enumerate(q):
                    if x.spec.key == key:
                        a = q.pop(i)
                        break
                if a is not None:
                    break
        if a is None:
            return out
        a.state = step(a.state, "kill")
        self._matrix = None
        rep = TaskReport(*key, int(a.state), a.started_at, now, -1, "killed")
        self._ended(key, rep)
        reports = {msg.job_id: [rep]}
        self._run_queues(now, rng, out, reports)
        # A kill frees room others are waiting for (a preemption kills several at once): the
        # report carries a reading planned now, not one planned a moment before the last kill.
        self._reading(now)
        self._emit_reports(now, out, reports)
        return out

    def _on_probe(self, msg: ProbeTask, now: float) -> list:
        """A JM has not heard of an attempt for long: say where it is (a lost Dispatch or a lost
        report would otherwise leave it waiting forever)."""
        key = (msg.job_id, msg.task, msg.attempt)
        a = self.running.get(key)
        if a is None:
            a = next((x for q in (self.queue, self.opp_queue) for x in q if x.spec.key == key), None)
        if msg.reply_to:
            self._reply_to(msg.job_id, msg.attempt >> 16, msg.reply_to)
        if a is None:
            rep = end_of(self.ended, key) or TaskReport(*key, int(READY), now, now, -1, "unknown attempt")
        else:
            rep = TaskReport(*key, int(a.state), a.started_at if a.started_at >= 0 else now, 0.0, 0, "probed",
                             progress(a, now, self.cfg.io))
        out: list = []
        self._emit_reports(now, out, {msg.job_id: [rep]})
        return out

    def _on_probe_job(self, msg: ProbeJob, now: float) -> list:
        """A JM adopting the job: the attempts of it held here, and those that ended lately."""
        self._reply_to(msg.job_id, msg.generation, msg.reply_to)
        job = msg.job_id
        tasks, reps = [], []
        for a in [*self.running.values(), *self.queue, *self.opp_queue]:
            s = a.spec
            if s.job_id == job:
                tasks.append(s)
                reps.append(TaskReport(*s.key, int(a.state), a.started_at if a.started_at >= 0 else now, 0.0, 0,
                                       "held"))
        done = int(DONE)
        ended = [r for r in self.ended if r.job_id == job and r.state == done]
        return [Send(msg.reply_to, Holding(job, self.server, tasks, reps, ended))]

    def _reply_to(self, job_id: int, generation: int, host: str) -> None:
        """Where the job's reports go from now: its newest JM home's host."""
        if not host:
            return
        if not self._jm_default:
            self._jm_default = host
        cur = self.jm_at.get(job_id)
        if cur is None:
            if host != self._jm_default or generation:
                self.jm_at[job_id] = (generation, host)
        elif cur[0] <= generation and cur[1] != host:
            self.jm_at[job_id] = (generation, host)

    def _arm_queued_report(self, now: float, out: list) -> None:
        if self._queued_due == INF:
            self._queued_due = now + self.cfg.queued_report_s
            out.append(SetTimer(self.cfg.queued_report_s, "queued"))

    def _report_queued(self, now: float) -> list:
        """Tell JMs which of their tasks are still queued queued_report_s after arriving (so they
        can tell a task stuck in a queue from a running one); re-arm for the next such task."""
        self._queued_due = INF
        wait = self.cfg.queued_report_s
        reports: dict[int, list] = {}
        nxt = INF
        starts = None
        for i, a in enumerate(self.queue):
            if a.reported:
                continue
            if a.queued_at + wait <= now + 1e-9:
                a.reported = True
                s = a.spec
                if starts is None:      # where the plan has it start: fresh news for its JM
                    starts = self._plan(now)[1]
                start = starts[i]
                reports.setdefault(s.job_id, []).append(
                    TaskReport(s.job_id, s.task, s.attempt, int(DISPATCHED), now,
                               start if start < NEVER_S else NEVER_S, 0, "queued"))
            else:
                nxt = min(nxt, a.queued_at + wait)
        out: list = []
        if nxt < INF:
            self._queued_due = nxt
            out.append(SetTimer(nxt - now, "queued"))
        if reports:
            self._emit_reports(now, out, reports)
        return out

    def _on_upgrade(self, msg: UpgradeTask, now: float, rng) -> list:
        """Make an opportunistic attempt regular: no longer preemptible; if still waiting it
        joins the regular FIFO queue."""
        key = (msg.job_id, msg.task, msg.attempt)
        a = self.running.get(key)
        if a is not None:
            a.spec = as_regular(a.spec)
            self._matrix = None
            return []
        for i, x in enumerate(self.opp_queue):
            if x.spec.key == key:
                out: list = []
                reports: dict = {}
                if self.yielding and x.spec.job_id in self.yielding and not x.spec.kind:
                    # (overtook the JM's word that the job no longer yields: still demoted)
                    reports[msg.job_id] = [self._demoted_report(x, now)]
                    self._emit_reports(now, out, reports)
                    return out
                self.opp_queue.pop(i)
                x.spec = as_regular(x.spec)
                self.queue.append(x)
                self._arm_queued_report(now, out)
                self._matrix = None
                self._run_queues(now, rng, out, reports)
                self._emit_reports(now, out, reports)
                return out
        if not any(x.spec.key == key for x in self.queue) and end_of(self.ended, key) is None:
            self._early_upgrades.append(key)          # its Dispatch is still on its way
            if len(self._early_upgrades) > 2 * DISPATCHES_KEPT:
                del self._early_upgrades[:DISPATCHES_KEPT]
        return []

    # ---- give-backs (docs/sharing.md) --------------------------------------------
    def _demoted_report(self, a: Attempt, now: float) -> TaskReport:
        s = a.spec
        return TaskReport(s.job_id, s.task, s.attempt, int(DISPATCHED), now, 0.0, 0, "demoted")

    def _demote_queued(self, job_id: int, now: float, reports: dict) -> None:
        """The job's queued regular first attempts wait as opportunistic ones from now."""
        keep = []
        for a in self.queue:
            s = a.spec
            if s.job_id == job_id and not s.kind:
                a.spec = as_opportunistic(s)
                self.opp_queue.append(a)
                reports.setdefault(job_id, []).append(self._demoted_report(a, now))
            else:
                keep.append(a)
        self.queue = keep

    def _on_demote(self, msg: DemoteTask, now: float, rng) -> list:
        """One regular attempt beyond its job's tokens: if still queued, it waits as an
        opportunistic one; if running (it started before the word came), nothing changes."""
        key = (msg.job_id, msg.task, msg.attempt)
        for i, a in enumerate(self.queue):
            if a.spec.key == key:
                del self.queue[i]
                a.spec = as_opportunistic(a.spec)
                self.opp_queue.append(a)
                reports = {msg.job_id: [self._demoted_report(a, now)]}
                out: list = []
                self._matrix = None
                self._run_queues(now, rng, out, reports)
                self._emit_reports(now, out, reports)
                return out
        return []

    def _on_yield(self, msg: YieldJob, now: float, rng) -> list:
        """The job gives back what it holds beyond its tokens (see the module's docstring)."""
        job = msg.job_id
        out: list = []
        reports: dict[int, list] = {}
        if msg.after_s < 0:
            if self.yielding.pop(job, None) is None:
                return out
        else:
            at = now + msg.after_s
            self.yielding[job] = at
            self._demote_queued(job, now, reports)
            if at > now:
                self._arm_yield(at, now, out)
        self._matrix = None
        self._run_queues(now, rng, out, reports)
        if msg.after_s == 0.0:
            self._move_stuck(now, reports)
        self._emit_reports(now, out, reports)
        if msg.after_s == 0.0:
            self._send_heartbeat(now, out)     # room that is free now: say so at once
        return out

    def _arm_yield(self, at: float, now: float, out: list) -> None:
        if at < self._yield_due:
            self._yield_due = at
            out.append(SetTimer(at - now, "yield"))

    def _yield_now(self, now: float, rng) -> list:
        """A yield deadline came: regular work waiting for the room of yielding attempts takes
        it now, and the RM hears at once (a slot scheduler's JMs look for room in its view)."""
        self._yield_due = INF
        out: list = []
        later = [t for t in self.yielding.values() if t > now + 1e-9]
        if later:
            self._arm_yield(min(later), now, out)
        reports: dict[int, list] = {}
        self._matrix = None
        self._run_queues(now, rng, out, reports)
        self._move_stuck(now, reports)
        self._emit_reports(now, out, reports)
        self._send_heartbeat(now, out)
        return out

    def _move_stuck(self, now: float, reports: dict) -> None:
        """After a give-back's deadline took effect here: first attempts still queued, which the
        room that freed did not start (a task placed ahead of them took it, or it was not theirs
        to take), go back to their JMs to be placed again, on room free elsewhere by now (a
        JM placed them before it knew where that would be)."""
        if not self.queue:
            return
        starts = self._plan(now)[1]
        keep = []
        for a, t in zip(self.queue, starts):
            s = a.spec
            if t > now + MOVE_AFTER_S and not s.kind:
                a.state = step(a.state, "requeue")
                rep = TaskReport(s.job_id, s.task, s.attempt, int(a.state), now, now, -1, "moved")
                self._ended(s.key, rep)
                reports.setdefault(s.job_id, []).append(rep)
            else:
                keep.append(a)
        if len(keep) < len(self.queue):
            self.queue = keep
            self._matrix = None

    def _yields_now(self, a: Attempt, now: float) -> bool:
        """Whether running attempt ``a`` yields its room to waiting regular work now."""
        y = self.yielding
        if not y or a.spec.opportunistic:
            return False
        at = y.get(a.spec.job_id)
        return at is not None and at <= now + 1e-9

    # ---- queue mechanics ---------------------------------------------------
    def _start(self, a: Attempt, now: float, rng, out: list, report: bool, reports: dict | None = None) -> None:
        a.state = step(a.state, "start")
        a.started_at = now
        s = a.spec
        self.running[s.key] = a
        self.free_cpu -= s.cpu
        self.free_mem -= s.mem_gb
        self._matrix = None
        if self.cfg.stragglers.p > 0.0:
            a.slowdown = self.cfg.stragglers.draw(rng)
        out.append(Launch(s, s.locality, a.slowdown))
        # A regular task's JM hears of its start only if it heard it was queued (see
        # PnConfig.queued_report_s); an opportunistic one's always (its JM upgrades running
        # ones first), and an extra attempt's (its JM kills the attempts that lost the race).
        if report and (a.reported or s.opportunistic or s.kind) and reports is not None:
            reports.setdefault(s.job_id, []).append(
                TaskReport(s.job_id, s.task, s.attempt, int(a.state), now, 0.0, 0, ""))

    def _release(self, a: Attempt) -> None:
        self.free_cpu += a.spec.cpu
        self.free_mem += a.spec.mem_gb
        self._matrix = None

    def _plan(self, now: float, include_opportunistic: bool = False,
              room: tuple | None = None) -> tuple[Profile, list[float]]:
        """Plan the regular queue onto the profile of ``room`` (from ``_room``; made if not given)."""
        r = room or self._room(now, include_opportunistic)
        prof = Profile(now, r[0], r[1], r[2])
        starts = []
        inf = INF
        pc = pm = pd = inf        # the last planned task's shape, runtime and start
        pt: float | None = None
        for a in self.queue:
            s = a.spec
            c, m, d = s.cpu, s.mem_gb, s.est_runtime_s
            # A task at least as big and long as the one planned before it cannot start before
            # it: free room only shrank since (queues of like tasks plan in O(n log n), not n^2).
            after: float | None = pt if (c >= pc and m >= pm and d >= pd) else None
            if after == inf:
                t = inf
            else:
                t = prof.earliest_fit(c, m, d, after)
            starts.append(t)
            if t < inf:
                prof.reserve(t, d, c, m)
            pc, pm, pd, pt = c, m, d, t
        return prof, starts

    def _run_queues(self, now: float, rng, out: list, reports: dict) -> None:
        q = self.queue
        if q:
            # Heads of the FIFO that fit in what is free now start now: free resources only grow
            # from here on, so the plan would start them now too. What is left can start now
            # only as a backfill into what is free or held by opportunistic tasks; with nothing
            # that fits there, the plan (a walk over the whole queue) has nothing to find.
            eps = 1e-9
            i = 0
            while i < len(q) and q[i].spec.cpu <= self.free_cpu + eps and q[i].spec.mem_gb <= self.free_mem + eps:
                self._start(q[i], now, rng, out, report=True, reports=reports)
                i += 1
            if i:
                self.queue = q = q[i:]
            fc, fm = self.free_cpu + eps, self.free_mem + eps
            for a in self.running.values():
                if a.spec.opportunistic or self._yields_now(a, now):
                    fc += a.spec.cpu
                    fm += a.spec.mem_gb
            if q and not any(a.spec.cpu <= fc and a.spec.mem_gb <= fm for a in q):
                q = []             # nothing that fits: no plan
        if q:
            _, starts = self._plan(now)
            keep = []
            for a, t in zip(self.queue, starts):
                if t <= now and self._make_room(a.spec, now, out, reports):
                    self._start(a, now, rng, out, report=True, reports=reports)
                else:
                    keep.append(a)
            self.queue = keep
        if self.opp_queue:
            self._run_opportunistic(now, rng, out, reports)

    def _make_room(self, s: TaskSpec, now: float, out: list, reports: dict) -> bool:
        """Preempt opportunistic tasks, then attempts of jobs yielding now (youngest first) until
        the regular task ``s`` fits; whether it does. A duplicate preempts no yielding attempt: a
        kill is for the task's token, its first attempt's (both waiting for yield room at a
        deadline killed twice for one task, docs/sharing.md); it waits for room freed otherwise."""
        if s.cpu <= self.free_cpu + 1e-9 and s.mem_gb <= self.free_mem + 1e-9:
            return True
        victims = sorted((a for a in self.running.values()
                          if a.spec.opportunistic or (not s.kind and self._yields_now(a, now))),
                         key=lambda a: (not a.spec.opportunistic, -a.started_at))
        if s.kind and (s.cpu > self.free_cpu + sum(v.spec.cpu for v in victims) + 1e-9
                       or s.mem_gb > self.free_mem + sum(v.spec.mem_gb for v in victims) + 1e-9):
            return False       # (nothing preempted: no room but a yielding attempt's)
        for v in victims:
            if s.cpu <= self.free_cpu + 1e-9 and s.mem_gb <= self.free_mem + 1e-9:
                break
            vs = v.spec
            del self.running[vs.key]
            self._release(v)
            v.state = step(v.state, "requeue")
            out.append(Kill(vs.key))
            out.append(Log("preempted", (vs.job_id, vs.task, vs.attempt, self.server, now)))
            rep = TaskReport(vs.job_id, vs.task, vs.attempt, int(v.state), v.started_at, now, -1, "preempted")
            self._ended(vs.key, rep)
            reports.setdefault(vs.job_id, []).append(rep)
        return s.cpu <= self.free_cpu + 1e-9 and s.mem_gb <= self.free_mem + 1e-9

    def _run_opportunistic(self, now: float, rng, out: list, reports: dict) -> None:
        # Room now = what no regular task (running or planned to start now) holds: the regular
        # pass just before this started every queued task planned for now, so that is what is free.
        room_c = self.free_cpu
        room_m = self.free_mem
        while self.opp_queue:
            fits = [i for i, a in enumerate(self.opp_queue)
                    if a.spec.cpu <= room_c + 1e-9 and a.spec.mem_gb <= room_m + 1e-9]
            if not fits:
                return
            # Weighted random pick: shorter tasks are likelier (they free the room sooner).
            i = fits[weighted_pick([1.0 / (1.0 + self.opp_queue[i].spec.est_runtime_s) for i in fits], rng)] \
                if len(fits) > 1 else fits[0]
            a = self.opp_queue.pop(i)
            room_c -= a.spec.cpu
            room_m -= a.spec.mem_gb
            self._start(a, now, rng, out, report=True, reports=reports)

    # ---- the wait-time matrix ----------------------------------------------
    def matrix(self, now: float) -> np.ndarray:
        """Expected wait (s) for a new regular task of each grid shape, cpu-major (float32, as
        it goes on the wire)."""
        return np.array(self._reading(now), dtype=np.float32)

    def _reading(self, now: float) -> list[float]:
        """The wait matrix as a list of floats (what heartbeats and status batches carry).

        Planned only when the queues changed; in between, the planned availability
        times stand and the waits shrink as time passes. Plain floats, not an array: a
        reading is made per heartbeat, and numpy's per-call cost on 12 numbers was ~4% of a
        20,000-server run; the receivers store it into their float32 views (the same rounding).
        """
        # (a reading whose waits grow is planned again when asked at another time: the receivers
        # extrapolate it as planning would, attempt.room, so the PN says the same)
        if self._matrix is None or now >= self._revise_at or (self._grow >= 0.0 and now != self._matrix_time):
            cfg = self.cfg
            if not self.running and not self.queue:
                # An empty server (a third of the readings at scale): every shape it can hold
                # starts now, the same reading every time.
                w = self._idle_w
                if w is None:
                    w = self._idle_w = idle_reading(cfg)
                self._revise_at = INF
                self._grow = self._last_g = -1.0
                self._waits, self._planned_at, self._avail = w, now, None
                self._matrix = self._last_m = w
                self._matrix_time = self._last_t = now
                return w
            opp = cfg.advertise_opportunistic
            room = self._room(now, opp)
            # The plan holds (extrapolated by grow) until a running task outlives its planned end.
            self._revise_at = room[3]
            self._grow = self._last_g = room[4]
            if not self.queue:
                # Nothing queued: room only grows as running tasks end (no plan needed).
                w = release_waits(now, room[0], room[1], room[2], self._gcpu, self._gmem, NEVER_S)
            else:
                prof, _ = self._plan(now, opp, room)
                w = [min(x, NEVER_S) for x in prof.wait_matrix(self._gcpu, self._gmem)]
            self._waits, self._planned_at, self._avail = w, now, None
            self._matrix = w
            self._matrix_time = now
            self._last_m, self._last_t = w, now
        elif self._matrix_time != now:
            avail = self._avail
            if avail is None:
                t0 = self._planned_at
                self._avail = avail = [w + t0 for w in self._waits]   # when each shape could start
                # The room is what it was when planned (every change re-plans): the shapes it
                # does not hold now are due when their running tasks are expected to end.
                gcpu, gmem = self._gcpu, self._gmem
                nm = len(gmem)
                fc, fm = self.free_cpu + 1e-9, self.free_mem + 1e-9
                # (a loop: compiled, min() over a generator is a builtin looked up and a
                # generator object made per call)
                over = INF
                for k in range(len(avail)):
                    start = avail[k]
                    if start < over and not (gcpu[k // nm] <= fc and gmem[k % nm] <= fm):
                        over = start
                self._overdue_at = over
            m = [a - now if a > now else 0.0 for a in avail]
            if now >= self._overdue_at:
                # A shape whose planned start has passed, but for which the room is not free:
                # its running tasks overran their estimates. Say "about now", not "now": a slot
                # scheduler must not send a task to queue behind them.
                due = self._overdue_at
                m = [w if w > 0.0 or a < due else ABOUT_NOW_S for w, a in zip(m, avail)]
            self._matrix = m
            self._matrix_time = now
        return self._matrix

    def _room(self, now: float, include_opportunistic: bool) -> tuple[float, float, list, float, float]:
        """The room now, the running tasks' expected ends, and how they move (attempt.room)."""
        return room(self.running, self.free_cpu, self.free_mem, self.cfg, self.yielding, now, include_opportunistic)

    def _heartbeat(self, now: float) -> list:
        """Report to the RM if the queues changed since the last report, a running task outlived
        its planned end (the reading is wrong from then on) or the last report's repeat is due;
        a busy server looks again heartbeat_s later (one timer per report, not per change). A
        quiet one arms nothing: its liveness is its connection's (PeerLost at the RM)."""
        cfg = self.cfg
        out: list = []
        due = min(self._quiet_due, self._repeat_due)
        if self._changed or now >= due - 1e-9:
            self._send_heartbeat(now, out, repeat=not self._changed and now < self._quiet_due - 1e-9)
            due = min(self._quiet_due, self._repeat_due)
            nxt = now + cfg.heartbeat_s if (self.running or self.queue or self.opp_queue) else due
        else:
            nxt = due
        armed = self._hb_due < INF
        self._hb_due = nxt
        if nxt < INF:
            out.append(SetTimer(nxt - now, "hb"))
        elif armed:
            out.append(CancelTimer("hb"))
        return out

    def _send_heartbeat(self, now: float, out: list, repeat: bool = False) -> None:
        """The heartbeat itself: the reading, the counts and what each job's regular attempts
        hold here (the RM's account of what jobs hold; docs/sharing.md). ``repeat``: it says
        again what the last one said (PnConfig.repeat_after_s), and is not repeated itself."""
        cfg = self.cfg
        self._changed = False
        matrix = self._reading(now)
        revise = self._revise_at
        self._quiet_due = INF if revise == INF else now + max(revise - now, cfg.revise_every_s)
        self._repeat_due = now + cfg.repeat_after_s if cfg.repeat_after_s > 0 and not repeat else INF
        jobs, cpus = held_by_job(self.running)
        out.append(Send(cfg.rm, Heartbeat(self.server, self.boot_time, now, matrix, len(self.running),
                                          len(self.queue) + len(self.opp_queue), self.free_cpu, jobs, cpus,
                                          self._grow)))

    def _changed_now(self, now: float, out: list) -> None:
        """The queues changed: make sure the RM hears within heartbeat_s."""
        self._changed = True
        if now + self.cfg.heartbeat_s < self._hb_due:
            self._hb_due = now + self.cfg.heartbeat_s
            out.append(SetTimer(self.cfg.heartbeat_s, "hb"))

    def _emit_reports(self, now: float, out: list, reports: dict) -> None:
        # Every handler that changes the queues ends here.
        self._changed_now(now, out)
        if not reports:
            return
        # Piggyback the last computed reading with its own timestamp rather than re-planning the
        # queue on every report (unless fresh_reports): the heartbeat due within heartbeat_s
        # carries a fresh one.
        m = self._matrix
        if m is not None:
            t, g = self._matrix_time, self._grow
        else:
            m, t, g = self._last_m, self._last_t, self._last_g
            if m is None or (self.cfg.fresh_reports and now - t >= self.cfg.replan_after_s):
                m, t = self._reading(now), now
                g = self._grow
        jm_at = self.jm_at
        default = self._jm_default
        for job_id, reps in reports.items():
            at = jm_at.get(job_id) if jm_at else None
            to = at[1] if at is not None else (default or f"jm:{job_id}")
            out.append(Send(to, StatusBatch(job_id, self.server, reps, m, t, now, g)))

    # ---- what this PN holds and lately ended -------------------------------
    def _ended(self, key: tuple, rep: TaskReport) -> None:
        ended = self.ended
        ended.append(rep)
        if len(ended) > 2 * ENDED_KEEP:
            del ended[:ENDED_KEEP]
            if len(self.jm_at) > JOBS_KEPT:       # jobs no longer here have no reports to send
                here = {r.job_id for r in ended} | {k[0] for k in self.running} | \
                    {a.spec.job_id for q in (self.queue, self.opp_queue) for a in q}
                self.jm_at = {j: v for j, v in self.jm_at.items() if j in here}
            if self.yielding:
                here = {k[0] for k in self.running} | {a.spec.job_id for q in (self.queue, self.opp_queue) for a in q}
                self.yielding = {j: v for j, v in self.yielding.items() if j in here}

    # ---- invariants --------------------------------------------------------
    def validate(self) -> None:
        cfg = self.cfg
        used_c = sum(a.spec.cpu for a in self.running.values())
        used_m = sum(a.spec.mem_gb for a in self.running.values())
        assert abs(used_c + self.free_cpu - cfg.cores) < 1e-6, "cpu accounting broken"
        assert abs(used_m + self.free_mem - cfg.mem_gb) < 1e-6, "memory accounting broken"
        assert self.free_cpu >= -1e-6 and self.free_mem >= -1e-6, "over-committed server"
        for a in self.running.values():
            assert a.state == TaskState.RUNNING
        for a in self.queue + self.opp_queue:
            assert a.state == TaskState.DISPATCHED
        for a in self.queue:
            assert not a.spec.opportunistic, "an opportunistic attempt in the regular queue"
            assert a.spec.kind or a.spec.job_id not in self.yielding, "a yielding job's attempt queued as regular"
        for a in self.opp_queue:
            assert a.spec.opportunistic, "a regular attempt in the opportunistic queue"
        assert self._dispatch_keys == set(self._dispatches), "the Dispatch keys' set and list differ"
