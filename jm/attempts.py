"""A job's attempts beyond the one per task: Apollo's duplicates, straggler copies and
Dolly's clones; and what becomes of a first attempt that ends without success (another
attempt takes over, or the task is retried, or the job fails), and opportunistic upgrade.

A task has one *first* attempt at a time, kept in the task table's columns
(jm/tasks.py: the hot path, one attempt per task, costs nothing more), and any
number of extra attempts beside it, kept here as ``Extra`` rows: a table that
is empty for almost every task. Each attempt, first or extra, moves through
the one transition table (apollo.core.lifecycle); the first of a task's attempts to
finish wins, the rest are killed at their PNs and recorded as "lost".

What each extra attempt holds:
- a DUPLICATE (Apollo, section 3.4: the first is queued somewhere much worse
  than expected) holds nothing: the two are never meant to run together, and
  the one that starts first wins (the other is killed on the news);
- a COPY of a straggler (it runs beside the first) holds one of the job's
  tokens if one is free, else part of its opportunistic allowance (then it runs
  at low priority, preemptible, as opportunistic tasks do): copies only ever
  use what the job was given;
- a CLONE (Dolly) holds part of the job's clone grant, which the RM took out
  of the cluster's clone budget when it admitted the job.

Delay assignment (Dolly, section 4): the clones of a task whose stage feeds
another are not killed when the first of them wins: each that finishes is one
more copy of the task's output. The downstream tasks' first attempts start at
once (each reads the first copy); their clones wait up to omega for a copy of
every upstream output of their own (exclusive), then start anyway and read a
copy shared with the clones before them (contended: that much slower). Omega is
what contention would add to the read (a read shared by two at half the
bandwidth takes one exclusive read longer), so waiting never costs more than
it saves; the upstream clones still running then are killed.

When the first attempt ends without success while an extra one lives, the
extra one becomes the first (it takes over the first's token or
opportunistic allowance) instead of the task being placed again.
"""
from __future__ import annotations

from typing import Any, Final

import numpy as np

from apollo.core.effects import Log, Send, SetTimer
from apollo.core.lifecycle import TaskState, step
from apollo.core.cluster import NODE, REMOTE, locality_of
from apollo.core.messages import Dispatch, KillTask, TaskReport, TaskSpec, UpgradeTask
from apollo.core.nonzero import count_nonzero

from .config import JmConfig
from .stable_matching import UNMATCHED
from .placement import Placement
from .policies.opportunistic import random_idle
from .tasks import CLONE, COPY, DISPATCHED, DONE, DUPLICATE, READY, RUNNING, Stage, TaskTable, pn_address
from .watchdog import Watchdog

S = TaskState
HOLD_NONE: Final = 0
HOLD_TOKEN: Final = 1
HOLD_CLONE: Final = 2
HOLD_OPP: Final = 3
# what a report of an extra attempt means (on_extra_report)
NO_NEWS: Final = 0
NEWS: Final = 1
WON: Final = 2
EXTRA_BIT: Final = 0x8000     # extra attempts are numbered apart from first ones (generation << 16 above)


class Extra:
    """One extra attempt of a task."""
    __slots__ = ("kind", "spec", "server", "state", "dispatch_t", "start_t", "exp_wait", "hold", "trigger")

    def __init__(self, kind: int, spec: TaskSpec, server: int, now: float, wait: float, hold: int,
                 trigger: str) -> None:
        self.kind = kind
        self.spec = spec
        self.server = server
        self.state = step(S.READY, "dispatch")
        self.dispatch_t = now
        self.start_t = -1.0
        self.exp_wait = wait
        self.hold = hold
        self.trigger = trigger


class Attempts:
    """A job's extra attempts, and what becomes of a first attempt that ends without success."""
    __slots__ = ("tasks", "placement", "watchdog", "cfg", "view", "job_id", "max_retries", "corrections",
                 "extra", "extra_n", "dup_done", "clones", "clone_cpu", "clones_low", "clone_used", "clone_wait",
                 "copies", "copy_gaps", "won_at", "clones_sent")

    def __init__(self, tasks: TaskTable, placement: Placement, watchdog: Watchdog, config: JmConfig, view: Any,
                 max_retries: int, clones: int, clone_cpu: float, clones_low: bool) -> None:
        self.tasks = tasks
        self.placement = placement
        self.watchdog = watchdog
        self.cfg = config
        self.view = view
        self.job_id = tasks.job_id
        self.max_retries = max_retries
        self.corrections: bool = config.profile.corrections     # Apollo's: duplicates and straggler copies
        self.extra: dict[int, list[Extra]] = {}   # task -> its extra attempts
        self.extra_n: dict[int, int] = {}
        self.dup_done: dict[int, int] = {}     # task -> its first attempt the triggers looked at
        self.clones = clones                    # Dolly: attempts per task (1: not cloned) ...
        self.clone_cpu = clone_cpu              # ... within this many CPUs of the clone budget ...
        self.clones_low = clones_low            # ... at low priority (opportunistic at the PNs)
        self.clone_used = 0.0
        self.clone_wait: list[int] = []         # downstream tasks whose clones wait for copies
        self.copies: dict[int, int] = {}        # task -> copies of its output (finished attempts)
        self.copy_gaps: list[float] = []        # first to second copy of a task's output (omega)
        self.won_at: dict[int, float] = {}
        self.clones_sent: dict[int, int] = {}   # task -> its attempts so far as clones count them

    # ---- making them -----------------------------------------------------------
    def _send_extra(self, t: int, kind: int, server: int, wait: float, where: int, now: float, out: list,
                    hold: int, trigger: str = "", read_scale: float = 1.0, dispatch: bool = True) -> Extra:
        """Send an extra attempt of ``t`` to ``server`` (``where``: its locality there;
        ``read_scale``: its input read slower by this factor, a contended copy)."""
        tk = self.tasks
        st = tk.stages[tk.stage_of.item(t)]
        spec = st.spec
        i = t - st.offset
        # (above the first attempt's number too, when that is a former extra one that took over)
        cur = tk.attempt.item(t)
        n = max(self.extra_n.get(t, 0), cur & (EXTRA_BIT - 1) if cur & EXTRA_BIT else 0) + 1
        self.extra_n[t] = n
        attempt = (tk.generation << 16) | EXTRA_BIT | (n & (EXTRA_BIT - 1))
        cfg = self.cfg
        in_bytes = float(st.in_bytes[i]) * read_scale
        est_rt = st.est_runtime + cfg.io.init_s + in_bytes / float(tk.bw[where])
        # (a duplicate runs as its first attempt does: it stands in for it, holding its slot, a
        # token or the opportunistic allowance; an opportunistic one's must not take a core from
        # regular work)
        low = hold == HOLD_OPP or (hold == HOLD_CLONE and self.clones_low) or \
            (kind == DUPLICATE and (tk.opp.item(t) or t in tk.demoting))
        ts = TaskSpec(tk.job_id, t, attempt, st.index, spec.cpu, spec.mem_gb, float(spec.durations_s[i]),
                      in_bytes, int(where), est_rt, low,
                      spec.command, spec.env, spec.cwd,
                      spec.timeout_s, spec.command is not None, kind)
        e = Extra(kind, ts, int(server), now, float(wait), hold, trigger)
        if hold == HOLD_TOKEN:
            tk.used_tokens += spec.cpu
        elif hold == HOLD_CLONE:
            self.clone_used += spec.cpu
        elif hold == HOLD_OPP:
            tk.outstanding_opp += spec.cpu
        self.extra.setdefault(t, []).append(e)
        self.view.record_dispatches(np.array([int(server)]), np.array([est_rt * spec.cpu / cfg.topology.cores]),
                                    np.array([spec.cpu]), now)
        if dispatch:
            out.append(Send(f"pn:{int(server)}", Dispatch(tk.job_id, [ts], cfg.host)))
        return e

    def _place_extra(self, t: int, now: float, rng, avoid: set) -> tuple[int, float, int]:
        """Where an extra attempt of ``t`` would go now: (server or UNMATCHED, wait, locality),
        never a server in ``avoid`` (where the task has attempts already)."""
        alive = self.view.alive
        away = np.fromiter(avoid, dtype=np.int64, count=len(avoid))
        was = alive[away].copy()
        alive[away] = False          # (for this placement only: they cost infinity)
        try:
            srv, wait, where = self.placement.place(np.array([t], dtype=np.int64), now, rng)
        finally:
            alive[away] = was
        s = int(srv[0])
        if s == UNMATCHED or s in avoid:
            return UNMATCHED, 0.0, 0
        return s, float(wait[0]), int(where[0])

    def _place_low(self, t: int, now: float, rng, avoid: set) -> tuple[int, float, int]:
        """Where a low-priority (opportunistic) clone of ``t`` goes: as any opportunistic attempt,
        a server drawn at random among those idle now (it runs only in idle room, so a server
        with a short regular queue is no better than a busy one), never one in ``avoid``; where
        none is idle, where a regular one would go."""
        tk = self.tasks
        st = tk.stages[tk.stage_of.item(t)]
        for s in random_idle(self.view, np.full(3, st.spec.cpu), now, rng).tolist():
            if s not in avoid:
                reps = st.reps[t - st.offset] if st.reps is not None else None
                return s, 0.0, locality_of(s, reps, self.cfg.topology.rack_of)
        return self._place_extra(t, now, rng, avoid)

    def _servers_of(self, t: int) -> set:
        tk = self.tasks
        got = {tk.server.item(t)}
        for e in self.extra.get(t, ()):
            got.add(e.server)
        return got

    # ---- Apollo's duplicate scheduling -------------------------------------------
    def consider_duplicate(self, t: int, now: float, rng, out: list, new_wait: float | None,
                            idle: bool = False) -> None:
        """Fresh news of ``t``'s first attempt, queued at its server (``new_wait``: the wait
        its PN now plans for it, None if the news is only the time gone by). Apollo's three
        triggers, each "significantly" (AttemptsConfig.dup_factor x + dup_slack_s): (i) the updated
        expected wait against the one the decision used; (ii) it against the stage's average;
        (iii) the wait so far against that average. A trigger re-runs the placement; a server
        that would start and read the task significantly sooner gets a duplicate. ``idle``: the
        news is a server idle now (the view's); the placement is re-run without a trigger, and
        only a duplicate sent counts as this attempt's one re-run."""
        tk = self.tasks
        if t in self.extra or self.dup_done.get(t) == tk.attempt.item(t):
            return
        if idle:
            self._try_duplicate(t, now, rng, out, new_wait, "idle_server")
            return
        cfg = self.cfg
        st = tk.stages[tk.stage_of.item(t)]
        avg = st.wait_sum / st.wait_n if st.wait_n else 0.0
        elapsed = now - tk.dispatch_t.item(t)
        decided = tk.exp_wait.item(t)
        f, slack = cfg.attempts.dup_factor, cfg.attempts.dup_slack_s
        upd = max(new_wait, elapsed) if new_wait is not None else max(decided, elapsed)
        if new_wait is not None and upd > f * decided + slack:
            trigger = "wait_above_decision"
        elif upd > f * avg + slack:
            trigger = "wait_above_stage"
        elif elapsed > f * avg + slack:
            trigger = "elapsed_above_stage"
        else:
            return
        self.dup_done[t] = tk.attempt.item(t)       # one placement re-run per first attempt
        out.append(Log("dup_trigger", (tk.job_id, t, trigger)))
        self._try_duplicate(t, now, rng, out, new_wait, trigger)

    def _try_duplicate(self, t: int, now: float, rng, out: list, new_wait: float | None, trigger: str) -> None:
        """Re-run ``t``'s placement; a server that would start and read it significantly sooner,
        about now, gets a duplicate."""
        tk = self.tasks
        cfg = self.cfg
        st = tk.stages[tk.stage_of.item(t)]
        avg = st.wait_sum / st.wait_n if st.wait_n else 0.0
        elapsed = now - tk.dispatch_t.item(t)
        decided = tk.exp_wait.item(t)
        f, slack = cfg.attempts.dup_factor, cfg.attempts.dup_slack_s
        upd = max(new_wait, elapsed) if new_wait is not None else max(decided, elapsed)
        s, wait, where = self._place_extra(t, now, rng, self._servers_of(t))
        if s == UNMATCHED:
            return
        io = cfg.io
        in_b = float(tk.in_bytes[t])
        # The wait left here: what the PN plans, or (no plan heard) as long again as it is late
        # already (waits are heavy-tailed: the later a task is, the longer it is likely to be).
        left = max(upd - elapsed, elapsed - decided) if new_wait is None else max(upd - elapsed, 0.0)
        here = left + io.io_time(in_b, tk.locality.item(t))
        there = wait + io.io_time(in_b, where)
        if there + slack >= here or f * there > here or wait > slack:
            # not significantly better, or it would queue there: a duplicate holds nothing, and
            # queued it is a phantom in that server's queue, making every JM's view of the
            # server worse until it is killed
            return
        self.dup_done[t] = tk.attempt.item(t)
        self._send_extra(t, DUPLICATE, s, wait, where, now, out, HOLD_NONE, trigger)
        out.append(Log("duplicate", (tk.job_id, t, trigger)))

    # ---- straggler copies ----------------------------------------------------------
    def consider_copy(self, t: int, r, now: float, rng, out: list, shift: float) -> None:
        """A progress report of ``t``'s running first attempt: its time left from its rate of
        progress (a command's, whose progress is unknown, from its time so far); a copy
        elsewhere that would finish significantly sooner (AttemptsConfig.copy_factor) is started if
        the job has a token free for it. Else it is looked at again later."""
        tk = self.tasks
        cfg = self.cfg
        st = tk.stages[tk.stage_of.item(t)]
        started = r.t_start + shift
        elapsed = max(now - started, 1e-6)
        p = r.progress
        base = st.straggler_baseline()
        if base == np.inf:
            return
        if p > 0.0:
            left = elapsed * (1.0 - p) / p
        elif p == 0.0:
            left = np.inf
        else:
            left = max(base - elapsed, 0.5 * elapsed)
        again = now + max(cfg.attempts.straggler_slack_s, 0.5 * min(left, base))
        cpu = st.spec.cpu
        if tk.tokens - tk.used_tokens >= cpu - 1e-9:
            hold = HOLD_TOKEN
        elif cfg.dispatch.opportunistic_factor * max(tk.tokens, 1) - tk.outstanding_opp >= cpu - 1e-9:
            hold = HOLD_OPP
        else:
            hold = HOLD_NONE
        if hold == HOLD_NONE or (t in self.extra and not self._all_behind(t, now, base)):
            tk.check_t[t] = again
            self.watchdog.note(again)
            return
        s, wait, where = self._place_extra(t, now, rng, self._servers_of(t))
        copy_time = wait + base + cfg.io.io_time(float(tk.in_bytes[t]), where) if s != UNMATCHED else np.inf
        if left > cfg.attempts.copy_factor * copy_time + cfg.attempts.straggler_slack_s:
            self._send_extra(t, COPY, s, wait, where, now, out, hold, "straggler")
            out.append(Log("copy", (tk.job_id, t, float(left), float(copy_time))))
        else:
            tk.check_t[t] = again
            self.watchdog.note(again)

    def _all_behind(self, t: int, now: float, base: float) -> bool:
        """Whether every extra attempt of ``t`` is a clone running for longer than its stage's
        baseline: a cloned task whose every attempt straggles (Dolly leaves that chance, its
        epsilon) gets a straggler copy like any other task; one whose clone may still be on
        time, or that has a copy or duplicate already, does not."""
        for e in self.extra[t]:
            if e.kind != CLONE or e.start_t < 0 or now - e.start_t <= base:
                return False
        return True

    # ---- Dolly's clones ---------------------------------------------------------------
    def send_clones(self, ids: list, now: float, rng, out: list) -> None:
        """Clones of tasks just dispatched (a cloned job): ``clones - 1`` more of each, on
        servers other than the task's, while the job's clone grant lasts; those of a stage that
        reads other stages' outputs wait for copies of them (delay assignment)."""
        tk = self.tasks
        now_ids = []
        scale: dict[int, float] = {}
        for t in ids:
            st = tk.stages[tk.stage_of.item(t)]
            if st.parents and self.cfg.attempts.delay_assignment:
                if not self.clone_wait:
                    out.append(SetTimer(self._omega(st), "clones"))
                self.clone_wait.append(t)
            else:
                now_ids.append(t)
                if st.parents:      # without delay assignment: every clone shares the first copy
                    scale[t] = float(self.clones)
        if now_ids:
            self._dispatch_clones(now_ids, now, rng, out, scale)

    def _omega(self, st: Stage) -> float:
        """How long a downstream clone waits for an exclusive copy (Dolly's omega, by its
        cost-benefit analysis): the wait w that minimises the clone's expected read, over the
        gaps seen between a task's first and its second copy (inf: none came) as samples of when
        a copy arrives: a copy by w costs its arrival plus an exclusive read (r / B), none costs w
        plus a read shared by two (2 r / B). With no samples yet, the break-even wait: one
        exclusive read, what sharing would add (waiting that long costs at most 1.5x the best
        choice, whenever the copy comes). The read is at the bandwidth the clone will get: an
        upstream output is on another server (remote; node-local only for a stage reading a
        dataset of its own)."""
        tk = self.tasks
        gaps = self.copy_gaps
        excl = st.mean_in / float(tk.bw[REMOTE if st.reps is None else NODE])
        if not gaps:
            return excl
        g = np.array(gaps)
        best, best_cost = 0.0, 2 * excl
        for w in np.unique(g[np.isfinite(g)]).tolist():
            cost = float(np.where(g <= w, g + excl, w + 2 * excl).mean())
            if cost < best_cost - 1e-12:
                best, best_cost = w, cost
        return best

    def _copies_of_inputs(self, st: Stage) -> list[int]:
        """Copies of each output ``st`` reads (it reads all of its parents' tasks' outputs): the
        finished attempts of each."""
        tk = self.tasks
        return [self.copies.get(t, 1) for p in st.parents
                for t in range(tk.stages[p].offset, tk.stages[p].offset + tk.stages[p].n)] or [1]

    def release_clones(self, now: float, rng, out: list, final: bool) -> None:
        """Send the waiting downstream clones that have an exclusive copy to read (``final``: omega
        is up: the upstream clones still running are killed, their copies too late, and the
        waiting clones go, the later ones reading shared copies)."""
        tk = self.tasks
        if not self.clone_wait:
            return
        if final:
            self._kill_lingering(now, out)
        waiting, exclusive, shared = [], {}, []
        scale: dict[int, float] = {}
        inputs: dict[int, list] = {}        # stage -> copies of each output it reads
        c = self.clones
        for t in self.clone_wait:
            if tk.state.item(t) == DONE:
                continue
            si = tk.stage_of.item(t)
            cps = inputs.get(si)
            if cps is None:
                cps = inputs[si] = self._copies_of_inputs(tk.stages[si])
            copies = min(min(cps), c)
            exclusive[t] = copies           # clones 1 .. copies - 1 have a copy of every output
            if copies < c:
                if final:
                    # The rest share: an output with k copies is read by ceil(c / k) readers a
                    # copy, at that fraction of the bandwidth; the outputs are equal parts of
                    # the input, so only the part with few copies reads slower.
                    shared.append(t)
                    scale[t] = sum(-(-c // min(k, c)) for k in cps) / len(cps)
                else:
                    waiting.append(t)
        if not waiting:
            self._kill_lingering(now, out)
        short = []
        if exclusive:
            short = self._dispatch_clones(list(exclusive), now, rng, out, {}, upto=exclusive)
        if shared:
            self._dispatch_clones(shared, now, rng, out, scale)
        # (clones the grant could not hold yet, upstream clones still running: they wait too)
        self.clone_wait = waiting + [t for t in short if t not in waiting and not final]

    def _kill_lingering(self, now: float, out: list) -> None:
        """Upstream clones whose readers have all been released: their copies are not needed."""
        tk = self.tasks
        for t in list(self.extra):
            if tk.state.item(t) == DONE and all(tk.stages[c].released for c in
                                                  tk.stages[tk.stage_of.item(t)].children):
                if self.won_at.pop(t, None) is not None:
                    self.copy_gaps.append(np.inf)      # no second copy came in time
                self.kill_extras(t, now, out)

    def _dispatch_clones(self, ids: list, now: float, rng, out: list, scale: dict,
                         upto: dict | None = None) -> list:
        """Clones of ``ids`` (the k-th of each while k < ``upto[t]``, default all of them), read
        slower by ``scale[t]`` (readers per copy); returns the tasks the grant left short."""
        tk = self.tasks
        by_server: dict[int, list] = {}
        short: list = []
        sent = self.clones_sent
        for k in range(1, self.clones):
            for t in ids:
                if sent.get(t, 1) > k or (upto is not None and k >= upto[t]):
                    continue
                cpu = tk.stages[tk.stage_of.item(t)].spec.cpu
                if self.clone_used + cpu > self.clone_cpu + 1e-9:
                    short.append(t)
                    continue
                place = self._place_low if self.clones_low else self._place_extra
                s, wait, where = place(t, now, rng, self._servers_of(t))
                if s == UNMATCHED:
                    continue
                # the first clone reads the first copy; the others share copies when there are
                # fewer copies than clones (scale: readers per copy)
                e = self._send_extra(t, CLONE, s, wait, where, now, out, HOLD_CLONE, "clone",
                                     read_scale=scale.get(t, 1.0), dispatch=False)
                sent[t] = k + 1
                by_server.setdefault(s, []).append(e.spec)
        for s, specs in by_server.items():
            out.append(Send(f"pn:{s}", Dispatch(tk.job_id, specs, self.cfg.host)))
        return short

    def clones_needed(self) -> float:
        """CPUs of the clone grant this job may still use: its unfinished tasks' clones (or those
        running, if more)."""
        tk = self.tasks
        left = 0.0
        for st in tk.stages:
            left += st.remaining * st.spec.cpu
        return min(self.clone_cpu, max((self.clones - 1) * left, self.clone_used))

    # ---- news of an extra attempt --------------------------------------------------
    def find_extra(self, t: int, attempt: int) -> Extra | None:
        for e in self.extra.get(t, ()):
            if e.spec.attempt == attempt:
                return e
        return None

    def on_extra_report(self, t: int, e: Extra, r: TaskReport, server: int, now: float, out: list,
                        shift: float) -> int:
        """A report about extra attempt ``e`` of ``t``: NO_NEWS, NEWS (a copy of a finished
        task's output: news for the clones waiting downstream), or WON (``e`` finished first: it
        is the task's first attempt now, and the JM completes the task with it)."""
        tk = self.tasks
        rs = r.state
        cur = tk.state.item(t)
        if cur == DONE:            # a clone kept running for its copy of the output
            if rs == RUNNING and e.state == DISPATCHED:
                e.state = step(e.state, "start")
                e.start_t = r.t_start + shift
            elif rs == DONE:
                if e.state == DISPATCHED:
                    e.start_t = r.t_start + shift
                self.copies[t] = self.copies.get(t, 1) + 1
                if self.copies[t] == 2 and t in self.won_at:
                    self.copy_gaps.append(max(0.0, now - self.won_at.pop(t)))
                self.end_extra(t, e, "finish", "copy", now, out, kill=False, t_end=r.t_end + shift)
                return NEWS
            elif rs != RUNNING:
                self.end_extra(t, e, "fail" if rs == S.FAILED else "kill", "lost", now, out, kill=False,
                                t_end=r.t_end + shift)
            return NO_NEWS
        if rs == RUNNING or (rs == DONE and e.state == DISPATCHED):
            if e.state == DISPATCHED:
                e.state = step(e.state, "start")
                e.start_t = r.t_start + shift
            if e.kind == DUPLICATE and rs == RUNNING:
                if cur == DISPATCHED:        # it started first: the duplicate wins the race
                    self.promote(t, e, now, self._end_first(t, now, out), out)
                    self.kill_extras(t, now, out, only=DUPLICATE)
                else:                        # the first started too: keep the first
                    self.end_extra(t, e, "kill", "lost", now, out)
                return NO_NEWS
        if rs == DONE:
            was_opp = self._end_first(t, now, out) if cur == DISPATCHED or cur == RUNNING else False
            self.promote(t, e, now, was_opp)
            return WON
        if rs == S.FAILED:
            self.placement.note_failure(server)
            self.end_extra(t, e, "fail", "failed", now, out, kill=False, t_end=r.t_end + shift)
        elif rs == READY or rs == S.KILLED:
            self.end_extra(t, e, "requeue" if rs == READY else "kill", "preempted" if rs == READY else "lost",
                            now, out, kill=False, t_end=r.t_end + shift)
        return NO_NEWS

    # ---- ending them -------------------------------------------------------------------
    def _release_hold(self, e: Extra) -> None:
        tk = self.tasks
        if e.hold == HOLD_TOKEN:
            tk.used_tokens -= e.spec.cpu
        elif e.hold == HOLD_CLONE:
            self.clone_used -= e.spec.cpu
        elif e.hold == HOLD_OPP:
            tk.outstanding_opp -= e.spec.cpu

    def end_extra(self, t: int, e: Extra, event: str, outcome: str, now: float, out: list,
                   kill: bool = True, t_end: float | None = None) -> None:
        tk = self.tasks
        if kill:
            out.append(Send(f"pn:{e.server}", KillTask(tk.job_id, t, e.spec.attempt)))
        e.state = step(e.state, event)
        self._release_hold(e)
        st = tk.stages[tk.stage_of.item(t)]
        tk.record(st, t, e.spec.attempt, e.server, e.spec.locality, e.start_t, now if t_end is None else t_end,
                     outcome, False, out, e.kind, e.dispatch_t)
        ex = self.extra[t]
        ex.remove(e)
        if not ex:
            del self.extra[t]

    def kill_extras(self, t: int, now: float, out: list, only: int | None = None, outcome: str = "lost") -> None:
        for e in list(self.extra.get(t, ())):
            if only is None or e.kind == only:
                self.end_extra(t, e, "kill", outcome, now, out)

    def _end_first(self, t: int, now: float, out: list, outcome: str = "lost") -> bool:
        """Kill ``t``'s first attempt: another attempt of the task won (the task's columns then
        take that one). True if it was opportunistic."""
        tk = self.tasks
        out.append(Send(f"pn:{tk.server.item(t)}", KillTask(tk.job_id, t, tk.attempt.item(t))))
        tk.move(t, "kill")
        was_opp = tk.free_slot(t, tk.stages[tk.stage_of.item(t)].spec.cpu)
        tk.log_attempt(t, outcome, now, out)
        return was_opp

    def promote(self, t: int, e: Extra, now: float, was_opp: bool, out: list | None = None) -> None:
        """Extra attempt ``e`` becomes ``t``'s first (whose attempt has just ended and freed its
        slot, opportunistic if ``was_opp``): it takes over that slot, a token or the
        opportunistic allowance, and gives back what it held itself. ``out``: the attempt runs
        on (an opportunistic one taking a token is upgraded at its PN)."""
        tk = self.tasks
        ex = self.extra[t]
        ex.remove(e)
        if not ex:
            del self.extra[t]
        self._release_hold(e)
        cpu = e.spec.cpu
        if was_opp:
            tk.outstanding_opp += cpu
            tk.opp_active.add(t)
            tk.opp[t] = True
        else:
            tk.used_tokens += cpu
            if e.spec.opportunistic and out is not None:
                # a low-priority attempt takes over a token: it must not be preempted any more
                out.append(Send(f"pn:{e.server}", UpgradeTask(tk.job_id, t, e.spec.attempt)))
            tk.opp[t] = False
        spec = e.spec
        tk.attempt[t] = spec.attempt
        tk.server[t] = e.server
        # (no transition: the task's first attempt is another attempt now, which moved through
        # the table on its own, as an Extra)
        tk.state[t] = e.state
        tk.locality[t] = spec.locality
        tk.dispatch_t[t] = e.dispatch_t
        tk.start_t[t] = e.start_t
        tk.exp_wait[t] = e.exp_wait
        tk.last_heard[t] = now
        tk.est_sent[t] = spec.est_runtime_s
        tk.queued_seen[t] = False
        tk.waiting[t] = False
        tk.check_t[t] = np.inf
        tk.sent[t] = spec
        if self.cfg.watchdog.probe_slack_s > 0:
            # probed if silent too long, like any first attempt (its end's report may be lost)
            self.watchdog.note(float(self.watchdog.silence_limits(t)))

    # ---- a first attempt that ends without success -----------------------------------
    def attempt_over(self, t: int, now: float, out: list, event: str, detail: str, blame: bool,
                     t_end: float | None = None, outcome: str = "") -> str:
        """``t``'s first attempt ended without success (``event``: "fail" or "requeue"): another
        attempt of the task carries on as the first, or the task is ready again (retries go
        first). Returns why the job fails ("": it carries on): the task is out of retries."""
        tk = self.tasks
        tk.move(t, event)
        was_opp = tk.free_slot(t, tk.stages[tk.stage_of.item(t)].spec.cpu)
        tk.log_attempt(t, outcome or ("preempted" if event == "requeue" else "failed"),
                       now if t_end is None else t_end, out)
        srv = int(tk.server[t])
        if blame:
            tk.failures[t] += 1
            self.placement.note_failure(srv)
        if self.extra and t in self.extra:
            # Another attempt of the task lives: it carries on as the first (the running one first).
            ex = self.extra[t]
            e = next((x for x in ex if x.state == RUNNING), ex[0])
            self.promote(t, e, now, was_opp, out)
            return ""
        st = tk.stages[tk.stage_of[t]]
        if event == "fail":
            if tk.failures[t] > self.max_retries:
                tk.move(t, "give_up")
                return f"task {st.spec.name}[{t - st.offset}] failed {int(tk.failures[t])} times; last: {detail}"
            tk.move(t, "retry")
        n = self.extra_n.get(t) if self.extra_n else None
        if n is not None:
            # the task had extra attempts: the next first attempt is numbered above all of them
            # (ended ones' reports may still come), and later extras above it in turn
            self.extra_n[t] = n + 1
            tk.attempt[t] = max(tk.attempt.item(t), (tk.generation << 16) | EXTRA_BIT | n)
        st.ready.appendleft(t)    # retries go first
        return ""

    def upgrade(self, now: float, out: list) -> None:
        """Freed tokens go first to this job's opportunistic attempts. A running one is upgraded
        (it stops being preemptible: that wastes less than dispatching a new task and losing an
        old one), the oldest first. One still queued is taken back and placed again as a regular
        task, on where it would start soonest (upgraded where it is, it would wait behind that
        server's regular work, however long, while another server may be free)."""
        tk = self.tasks
        dt = tk.dispatch_t
        st = tk.state
        taken = 0.0            # tokens the tasks taken back will use (the pass that follows places them)
        for t in sorted(tk.opp_active, key=lambda t: (st[t] != RUNNING, dt[t], t)):
            cpu = tk.stages[tk.stage_of[t]].spec.cpu
            if tk.tokens - tk.used_tokens - taken - cpu < -1e-9:
                break
            if st[t] != RUNNING:
                out.append(Send(pn_address(tk.server.item(t)), KillTask(tk.job_id, t, tk.attempt.item(t))))
                self.attempt_over(t, now, out, "requeue", "withdrawn", blame=False, outcome="withdrawn")
                taken += cpu
                continue
            tk.opp[t] = False
            tk.opp_active.discard(t)
            tk.outstanding_opp -= cpu
            tk.used_tokens += cpu
            out.append(Send(f"pn:{int(tk.server[t])}", UpgradeTask(tk.job_id, t, int(tk.attempt[t]))))
            out.append(Log("upgraded", (tk.job_id, t)))

    # ---- news of idle servers and lost ones ----------------------------------------------
    def idle_room_for_queued(self, now: float) -> bool:
        """Whether tasks of this job wait in queues (as their PNs said) while the view shows an
        idle server: fresh information that may make one of them worth moving (a duplicate)."""
        return self.corrections and self.cfg.attempts.dup_factor > 0 and self.view.has_idle(now) and \
            bool(count_nonzero(self.tasks.waiting))

    def duplicates_for_idle(self, now: float, rng: Any, out: list) -> None:
        """The view shows idle servers while tasks wait in queues: the longest waiting first, no
        more of them than there are idle servers to go to, may move there (a duplicate)."""
        tk = self.tasks
        queued = np.flatnonzero(tk.waiting & (tk.state == DISPATCHED))
        queued = queued[np.argsort(tk.dispatch_t[queued], kind="stable")]
        for t in queued[:len(self.view.idle_servers(now))].tolist():
            self.consider_duplicate(t, now, rng, out, None, idle=True)

    def extras_on(self, lost: np.ndarray, now: float, out: list) -> None:
        """Extra attempts on servers that died or restarted: gone, no fault of the task."""
        lost_set = set(lost.tolist())
        view = self.view
        for t in list(self.extra):
            for e in list(self.extra.get(t, ())):
                if e.server in lost_set and (not view.alive[e.server] or view.boot_times[e.server] > e.dispatch_t):
                    self.end_extra(t, e, "fail", "failed", now, out, kill=False)

    def extra_counts(self) -> tuple[float, float, float]:
        """(CPUs extra attempts hold of the job's tokens, of its clone grant, of its opportunistic
        allowance): for validate()."""
        tk = self.tasks
        tok = clo = opp = 0.0
        for t, ex in self.extra.items():
            assert tk.state[t] != DONE or self.clones > 1, \
                "a done task's extra attempts live on outside delay assignment"
            for e in ex:
                assert e.state in (DISPATCHED, RUNNING), "an ended extra attempt is still listed"
                if e.hold == HOLD_TOKEN:
                    tok += e.spec.cpu
                elif e.hold == HOLD_CLONE:
                    clo += e.spec.cpu
                elif e.hold == HOLD_OPP:
                    opp += e.spec.cpu
        return tok, clo, opp
