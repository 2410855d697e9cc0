"""A task's extra attempts: Apollo's duplicates, straggler copies and Dolly's clones.

A task has one *first* attempt at a time, kept in the JM's per-task columns
(jm/state.py: the hot path, one attempt per task, costs nothing more), and any
number of extra attempts beside it, kept here as ``Extra`` rows: a table that
is empty for almost every task. Each attempt, first or extra, moves through
the one transition table (apollo.lifecycle); the first of a task's attempts to
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

from typing import TYPE_CHECKING, Any

import numpy as np

from apollo.effects import Log, Send, SetTimer
from apollo.lifecycle import AttemptKind, TaskState, step
from apollo.cluster import NODE, REMOTE, locality_of
from apollo.messages import Dispatch, KillTask, ProbeTask, TaskSpec, UpgradeTask

from .matching import UNMATCHED
from .policies.opportunistic import random_idle

if TYPE_CHECKING:
    from .state import Stage

S = TaskState
DISPATCHED, RUNNING, DONE, READY = int(S.DISPATCHED), int(S.RUNNING), int(S.DONE), int(S.READY)
DUPLICATE, COPY, CLONE = int(AttemptKind.DUPLICATE), int(AttemptKind.COPY), int(AttemptKind.CLONE)
HOLD_NONE, HOLD_TOKEN, HOLD_CLONE, HOLD_OPP = 0, 1, 2, 3
EXTRA_BIT = 0x8000     # extra attempts are numbered apart from first ones (generation << 16 above)


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


def _median(xs: list[float]) -> float:
    """numpy.median of a short list, the same float (the mean of the middle two is (a + b) / 2
    there too), without numpy's ~20 us per call: a stage's baseline is remade per finished task."""
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


class ExtraAttempts:
    """JmState's extra attempts (a mixin: the methods need the JM's columns)."""
    __slots__ = ()
    # The JM's fields these methods use (JmState sets them; declared here for the type checker
    # and for mypyc, which compiles both classes: apollo.native).
    _bw: Any
    _watch_at: float
    _clone_wait: list[int]
    _clones_sent: dict[int, int]
    _copies: dict[int, int]
    _copy_gaps: list[float]
    _dup_done: dict[int, int]
    _extra_n: dict[int, int]
    _demoting: set
    _in_bytes: Any
    _opp_active: set[int]
    _sent: list
    _won_at: dict[int, float]
    attempt: Any
    cfg: Any
    check_t: Any
    clone_cpu: Any
    clone_used: Any
    clones: Any
    clones_low: Any
    dispatch_t: Any
    est_sent: Any
    exp_wait: Any
    extra: dict
    finished: Any
    generation: Any
    job_id: Any
    last_heard: Any
    locality: Any
    opp: Any
    outstanding_opp: Any
    queued_seen: Any
    waiting: Any
    server: Any
    stage_of: Any
    stages: list[Stage]
    start_t: Any
    state: Any
    tokens: Any
    used_tokens: Any
    view: Any

    # ---- making them -----------------------------------------------------------
    def _send_extra(self, t: int, kind: int, server: int, wait: float, where: int, now: float, out: list,
                    hold: int, trigger: str = "", read_scale: float = 1.0, dispatch: bool = True) -> Extra:
        """Send an extra attempt of ``t`` to ``server`` (``where``: its locality there;
        ``read_scale``: its input read slower by this factor, a contended copy)."""
        st = self.stages[self.stage_of.item(t)]
        spec = st.spec
        i = t - st.offset
        # (above the first attempt's number too, when that is a former extra one that took over)
        cur = self.attempt.item(t)
        n = max(self._extra_n.get(t, 0), cur & (EXTRA_BIT - 1) if cur & EXTRA_BIT else 0) + 1
        self._extra_n[t] = n
        attempt = (self.generation << 16) | EXTRA_BIT | (n & (EXTRA_BIT - 1))
        cfg = self.cfg
        in_bytes = float(st.in_bytes[i]) * read_scale
        est_rt = st.est_runtime + cfg.io.init_s + in_bytes / float(self._bw[where])
        # (a duplicate runs as its first attempt does: it stands in for it, holding its slot, a
        # token or the opportunistic allowance; an opportunistic one's must not take a core from
        # regular work)
        low = hold == HOLD_OPP or (hold == HOLD_CLONE and self.clones_low) or \
            (kind == DUPLICATE and (self.opp.item(t) or t in self._demoting))
        ts = TaskSpec(self.job_id, t, attempt, st.index, spec.cpu, spec.mem_gb, float(spec.durations_s[i]),
                      in_bytes, int(where), est_rt, low,
                      spec.command, spec.env, spec.cwd,
                      spec.timeout_s, spec.command is not None, kind)
        e = Extra(kind, ts, int(server), now, float(wait), hold, trigger)
        if hold == HOLD_TOKEN:
            self.used_tokens += spec.cpu
        elif hold == HOLD_CLONE:
            self.clone_used += spec.cpu
        elif hold == HOLD_OPP:
            self.outstanding_opp += spec.cpu
        self.extra.setdefault(t, []).append(e)
        self.view.record_dispatches(np.array([int(server)]), np.array([est_rt * spec.cpu / cfg.topology.cores]),
                                    np.array([spec.cpu]), now)
        if dispatch:
            out.append(Send(f"pn:{int(server)}", Dispatch(self.job_id, [ts], cfg.host)))
        return e

    def _place_extra(self, t: int, now: float, rng, avoid: set) -> tuple[int, float, int]:
        """Where an extra attempt of ``t`` would go now: (server or UNMATCHED, wait, locality),
        never a server in ``avoid`` (where the task has attempts already)."""
        alive = self.view.alive
        away = np.fromiter(avoid, dtype=np.int64, count=len(avoid))
        was = alive[away].copy()
        alive[away] = False          # (for this placement only: they cost infinity)
        try:
            srv, wait, where = self._place(np.array([t], dtype=np.int64), now, rng)
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
        st = self.stages[self.stage_of.item(t)]
        for s in random_idle(self.view, np.full(3, st.spec.cpu), now, rng).tolist():
            if s not in avoid:
                reps = st.reps[t - st.offset] if st.reps is not None else None
                return s, 0.0, locality_of(s, reps, self.cfg.topology.rack_of)
        return self._place_extra(t, now, rng, avoid)

    def _servers_of(self, t: int) -> set:
        got = {self.server.item(t)}
        for e in self.extra.get(t, ()):
            got.add(e.server)
        return got

    # ---- Apollo's duplicate scheduling -------------------------------------------
    def _consider_duplicate(self, t: int, now: float, rng, out: list, new_wait: float | None,
                            idle: bool = False) -> None:
        """Fresh news of ``t``'s first attempt, queued at its server (``new_wait``: the wait
        its PN now plans for it, None if the news is only the time gone by). Apollo's three
        triggers, each "significantly" (JmConfig.dup_factor x + dup_slack_s): (i) the updated
        expected wait against the one the decision used; (ii) it against the stage's average;
        (iii) the wait so far against that average. A trigger re-runs the placement; a server
        that would start and read the task significantly sooner gets a duplicate. ``idle``: the
        news is a server idle now (the view's); the placement is re-run without a trigger, and
        only a duplicate sent counts as this attempt's one re-run."""
        if t in self.extra or self._dup_done.get(t) == self.attempt.item(t):
            return
        if idle:
            self._try_duplicate(t, now, rng, out, new_wait, "idle_server")
            return
        cfg = self.cfg
        st = self.stages[self.stage_of.item(t)]
        avg = st.wait_sum / st.wait_n if st.wait_n else 0.0
        elapsed = now - self.dispatch_t.item(t)
        decided = self.exp_wait.item(t)
        f, slack = cfg.dup_factor, cfg.dup_slack_s
        upd = max(new_wait, elapsed) if new_wait is not None else max(decided, elapsed)
        if new_wait is not None and upd > f * decided + slack:
            trigger = "wait_above_decision"
        elif upd > f * avg + slack:
            trigger = "wait_above_stage"
        elif elapsed > f * avg + slack:
            trigger = "elapsed_above_stage"
        else:
            return
        self._dup_done[t] = self.attempt.item(t)       # one placement re-run per first attempt
        out.append(Log("dup_trigger", (self.job_id, t, trigger)))
        self._try_duplicate(t, now, rng, out, new_wait, trigger)

    def _try_duplicate(self, t: int, now: float, rng, out: list, new_wait: float | None, trigger: str) -> None:
        """Re-run ``t``'s placement; a server that would start and read it significantly sooner,
        about now, gets a duplicate."""
        cfg = self.cfg
        st = self.stages[self.stage_of.item(t)]
        avg = st.wait_sum / st.wait_n if st.wait_n else 0.0
        elapsed = now - self.dispatch_t.item(t)
        decided = self.exp_wait.item(t)
        f, slack = cfg.dup_factor, cfg.dup_slack_s
        upd = max(new_wait, elapsed) if new_wait is not None else max(decided, elapsed)
        s, wait, where = self._place_extra(t, now, rng, self._servers_of(t))
        if s == UNMATCHED:
            return
        io = cfg.io
        in_b = float(self._in_bytes[t])
        # The wait left here: what the PN plans, or (no plan heard) as long again as it is late
        # already (waits are heavy-tailed: the later a task is, the longer it is likely to be).
        left = max(upd - elapsed, elapsed - decided) if new_wait is None else max(upd - elapsed, 0.0)
        here = left + io.io_time(in_b, self.locality.item(t))
        there = wait + io.io_time(in_b, where)
        if there + slack >= here or f * there > here or wait > slack:
            # not significantly better, or it would queue there: a duplicate holds nothing, and
            # queued it is a phantom in that server's queue, making every JM's view of the
            # server worse until it is killed
            return
        self._dup_done[t] = self.attempt.item(t)
        self._send_extra(t, DUPLICATE, s, wait, where, now, out, HOLD_NONE, trigger)
        out.append(Log("duplicate", (self.job_id, t, trigger)))

    # ---- straggler copies ----------------------------------------------------------
    def _straggler_baseline(self, st) -> float:
        """What a task of ``st`` normally takes (compute), judged by its peers as Apollo, LATE
        and Mantri judge stragglers: the median of its finished tasks (a median: the stragglers
        looked for must not set it), or before any finished, the stage's declared mean. A stage
        of one task has no peers and no baseline (inf): its declared "mean" would be that very
        task's own time, which no real scheduler knows before it runs."""
        if st.n < 2:
            return np.inf
        if st.baseline is None:      # (once per finished task of the stage, not per dispatch)
            obs = st.recent
            st.baseline = _median(obs + [st.declared]) if obs else st.declared
        return st.baseline

    def _next_check(self, now: float, wait, est_rt):
        """When a running first attempt is first looked at as a possible straggler (inf: never,
        a task without peers)."""
        cfg = self.cfg
        return now + wait + cfg.straggler_after * est_rt + cfg.straggler_slack_s

    def _probe_stragglers(self, ids: np.ndarray, now: float, out: list) -> None:
        """Ask the PNs how far these attempts are (they answer with a progress report)."""
        host = self.cfg.host
        for t in ids.tolist():
            out.append(Send(f"pn:{self.server.item(t)}", ProbeTask(self.job_id, t, self.attempt.item(t), host)))
        self.check_t[ids] = np.inf       # until the answer comes

    def _consider_copy(self, t: int, r, now: float, rng, out: list, shift: float) -> None:
        """A progress report of ``t``'s running first attempt: its time left from its rate of
        progress (a command's, whose progress is unknown, from its time so far); a copy
        elsewhere that would finish significantly sooner (JmConfig.copy_factor) is started if
        the job has a token free for it. Else it is looked at again later."""
        cfg = self.cfg
        st = self.stages[self.stage_of.item(t)]
        started = r.t_start + shift
        elapsed = max(now - started, 1e-6)
        p = r.progress
        base = self._straggler_baseline(st)
        if base == np.inf:
            return
        if p > 0.0:
            left = elapsed * (1.0 - p) / p
        elif p == 0.0:
            left = np.inf
        else:
            left = max(base - elapsed, 0.5 * elapsed)
        again = now + max(cfg.straggler_slack_s, 0.5 * min(left, base))
        cpu = st.spec.cpu
        if self.tokens - self.used_tokens >= cpu - 1e-9:
            hold = HOLD_TOKEN
        elif cfg.opportunistic_factor * max(self.tokens, 1) - self.outstanding_opp >= cpu - 1e-9:
            hold = HOLD_OPP
        else:
            hold = HOLD_NONE
        if hold == HOLD_NONE or (t in self.extra and not self._all_behind(t, now, base)):
            self.check_t[t] = again
            self._watch_at = min(self._watch_at, again)
            return
        s, wait, where = self._place_extra(t, now, rng, self._servers_of(t))
        copy_time = wait + base + cfg.io.io_time(float(self._in_bytes[t]), where) if s != UNMATCHED else np.inf
        if left > cfg.copy_factor * copy_time + cfg.straggler_slack_s:
            self._send_extra(t, COPY, s, wait, where, now, out, hold, "straggler")
            out.append(Log("copy", (self.job_id, t, float(left), float(copy_time))))
        else:
            self.check_t[t] = again
            self._watch_at = min(self._watch_at, again)

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
    def _send_clones(self, ids: list, now: float, rng, out: list) -> None:
        """Clones of tasks just dispatched (a cloned job): ``clones - 1`` more of each, on
        servers other than the task's, while the job's clone grant lasts; those of a stage that
        reads other stages' outputs wait for copies of them (delay assignment)."""
        now_ids = []
        scale: dict[int, float] = {}
        for t in ids:
            st = self.stages[self.stage_of.item(t)]
            if st.parents and self.cfg.delay_assignment:
                if not self._clone_wait:
                    out.append(SetTimer(self._omega(st), "clones"))
                self._clone_wait.append(t)
            else:
                now_ids.append(t)
                if st.parents:      # without delay assignment: every clone shares the first copy
                    scale[t] = float(self.clones)
        if now_ids:
            self._dispatch_clones(now_ids, now, rng, out, scale)

    def _omega(self, st) -> float:
        """How long a downstream clone waits for an exclusive copy (Dolly's omega, by its
        cost-benefit analysis): the wait w that minimises the clone's expected read, over the
        gaps seen between a task's first and its second copy (inf: none came) as samples of when
        a copy arrives: a copy by w costs its arrival plus an exclusive read (r / B), none costs w
        plus a read shared by two (2 r / B). With no samples yet, the break-even wait: one
        exclusive read, what sharing would add (waiting that long costs at most 1.5x the best
        choice, whenever the copy comes). The read is at the bandwidth the clone will get: an
        upstream output is on another server (remote; node-local only for a stage reading a
        dataset of its own)."""
        gaps = self._copy_gaps
        excl = st.mean_in / float(self._bw[REMOTE if st.reps is None else NODE])
        if not gaps:
            return excl
        g = np.array(gaps)
        best, best_cost = 0.0, 2 * excl
        for w in np.unique(g[np.isfinite(g)]).tolist():
            cost = float(np.where(g <= w, g + excl, w + 2 * excl).mean())
            if cost < best_cost - 1e-12:
                best, best_cost = w, cost
        return best

    def _copies_of_inputs(self, st) -> list[int]:
        """Copies of each output ``st`` reads (it reads all of its parents' tasks' outputs): the
        finished attempts of each."""
        return [self._copies.get(t, 1) for p in st.parents
                for t in range(self.stages[p].offset, self.stages[p].offset + self.stages[p].n)] or [1]

    def _release_clones(self, now: float, rng, out: list, final: bool) -> None:
        """Send the waiting downstream clones that have an exclusive copy to read (``final``: omega
        is up: the upstream clones still running are killed, their copies too late, and the
        waiting clones go, the later ones reading shared copies)."""
        if not self._clone_wait:
            return
        if final:
            self._kill_lingering(now, out)
        waiting, exclusive, shared = [], {}, []
        scale: dict[int, float] = {}
        inputs: dict[int, list] = {}        # stage -> copies of each output it reads
        c = self.clones
        for t in self._clone_wait:
            if self.state.item(t) == DONE or self.finished:
                continue
            si = self.stage_of.item(t)
            cps = inputs.get(si)
            if cps is None:
                cps = inputs[si] = self._copies_of_inputs(self.stages[si])
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
        self._clone_wait = waiting + [t for t in short if t not in waiting and not final]

    def _kill_lingering(self, now: float, out: list) -> None:
        """Upstream clones whose readers have all been released: their copies are not needed."""
        for t in list(self.extra):
            if self.state.item(t) == DONE and all(self.stages[c].released for c in
                                                  self.stages[self.stage_of.item(t)].children):
                if self._won_at.pop(t, None) is not None:
                    self._copy_gaps.append(np.inf)      # no second copy came in time
                self._kill_extras(t, now, out)

    def _dispatch_clones(self, ids: list, now: float, rng, out: list, scale: dict,
                         upto: dict | None = None) -> list:
        """Clones of ``ids`` (the k-th of each while k < ``upto[t]``, default all of them), read
        slower by ``scale[t]`` (readers per copy); returns the tasks the grant left short."""
        by_server: dict[int, list] = {}
        short: list = []
        sent = self._clones_sent
        for k in range(1, self.clones):
            for t in ids:
                if sent.get(t, 1) > k or (upto is not None and k >= upto[t]):
                    continue
                cpu = self.stages[self.stage_of.item(t)].spec.cpu
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
            out.append(Send(f"pn:{s}", Dispatch(self.job_id, specs, self.cfg.host)))
        return short

    def _clones_needed(self) -> float:
        """CPUs of the clone grant this job may still use: its unfinished tasks' clones (or those
        running, if more)."""
        left = 0.0
        for st in self.stages:
            left += st.remaining * st.spec.cpu
        return min(self.clone_cpu, max((self.clones - 1) * left, self.clone_used))

    # ---- news of an extra attempt --------------------------------------------------
    def _find_extra(self, t: int, attempt: int) -> Extra | None:
        for e in self.extra.get(t, ()):
            if e.spec.attempt == attempt:
                return e
        return None

    def _on_extra_report(self, t: int, e: Extra, r, server: int, now: float, out: list, shift: float) -> bool:
        """A report about extra attempt ``e`` of ``t``; True if the task is done now."""
        rs = r.state
        cur = self.state.item(t)
        if cur == DONE:            # a clone kept running for its copy of the output
            if rs == RUNNING and e.state == DISPATCHED:
                e.state = step(e.state, "start")
                e.start_t = r.t_start + shift
            elif rs == DONE:
                if e.state == DISPATCHED:
                    e.start_t = r.t_start + shift
                self._copies[t] = self._copies.get(t, 1) + 1
                if self._copies[t] == 2 and t in self._won_at:
                    self._copy_gaps.append(max(0.0, now - self._won_at.pop(t)))
                self._end_extra(t, e, "finish", "copy", now, out, kill=False, t_end=r.t_end + shift)
                return True        # (news for the clones waiting downstream)
            elif rs != RUNNING:
                self._end_extra(t, e, "fail" if rs == S.FAILED else "kill", "lost", now, out, kill=False,
                                t_end=r.t_end + shift)
            return False
        if rs == RUNNING or (rs == DONE and e.state == DISPATCHED):
            if e.state == DISPATCHED:
                e.state = step(e.state, "start")
                e.start_t = r.t_start + shift
            if e.kind == DUPLICATE and rs == RUNNING:
                if cur == DISPATCHED:        # it started first: the duplicate wins the race
                    self._promote(t, e, now, self._end_first(t, now, out), out)
                    self._kill_extras(t, now, out, only=DUPLICATE)
                else:                        # the first started too: keep the first
                    self._end_extra(t, e, "kill", "lost", now, out)
                return False
        if rs == DONE:
            was_opp = self._end_first(t, now, out) if cur == DISPATCHED or cur == RUNNING else False
            self._promote(t, e, now, was_opp)
            self._task_done(t, self.state.item(t), e.spec, r, server, now, out, shift)
            return True
        if rs == S.FAILED:
            self._note_failure(server)
            self._end_extra(t, e, "fail", "failed", now, out, kill=False, t_end=r.t_end + shift)
        elif rs == READY or rs == S.KILLED:
            self._end_extra(t, e, "requeue" if rs == READY else "kill", "preempted" if rs == READY else "lost",
                            now, out, kill=False, t_end=r.t_end + shift)
        return False

    # ---- ending them -------------------------------------------------------------------
    def _release_hold(self, e: Extra) -> None:
        if e.hold == HOLD_TOKEN:
            self.used_tokens -= e.spec.cpu
        elif e.hold == HOLD_CLONE:
            self.clone_used -= e.spec.cpu
        elif e.hold == HOLD_OPP:
            self.outstanding_opp -= e.spec.cpu

    def _end_extra(self, t: int, e: Extra, event: str, outcome: str, now: float, out: list,
                   kill: bool = True, t_end: float | None = None) -> None:
        if kill:
            out.append(Send(f"pn:{e.server}", KillTask(self.job_id, t, e.spec.attempt)))
        e.state = step(e.state, event)
        self._release_hold(e)
        st = self.stages[self.stage_of.item(t)]
        self._record(st, t, e.spec.attempt, e.server, e.spec.locality, e.start_t, now if t_end is None else t_end,
                     outcome, False, out, e.kind, e.dispatch_t)
        ex = self.extra[t]
        ex.remove(e)
        if not ex:
            del self.extra[t]

    def _kill_extras(self, t: int, now: float, out: list, only: int | None = None, outcome: str = "lost") -> None:
        for e in list(self.extra.get(t, ())):
            if only is None or e.kind == only:
                self._end_extra(t, e, "kill", outcome, now, out)

    def _end_first(self, t: int, now: float, out: list, outcome: str = "lost") -> bool:
        """Kill ``t``'s first attempt: another attempt of the task won (the task's columns then
        take that one). True if it was opportunistic."""
        cur = self.state.item(t)
        out.append(Send(f"pn:{self.server.item(t)}", KillTask(self.job_id, t, self.attempt.item(t))))
        self.state[t] = step(cur, "kill")
        was_opp = self._free_slot(t, self.stages[self.stage_of.item(t)].spec.cpu)
        self._log_attempt(t, outcome, now, out)
        return was_opp

    def _promote(self, t: int, e: Extra, now: float, was_opp: bool, out: list | None = None) -> None:
        """Extra attempt ``e`` becomes ``t``'s first (whose attempt has just ended and freed its
        slot, opportunistic if ``was_opp``): it takes over that slot, a token or the
        opportunistic allowance, and gives back what it held itself. ``out``: the attempt runs
        on (an opportunistic one taking a token is upgraded at its PN)."""
        ex = self.extra[t]
        ex.remove(e)
        if not ex:
            del self.extra[t]
        self._release_hold(e)
        cpu = e.spec.cpu
        if was_opp:
            self.outstanding_opp += cpu
            self._opp_active.add(t)
            self.opp[t] = True
        else:
            self.used_tokens += cpu
            if e.spec.opportunistic and out is not None:
                # a low-priority attempt takes over a token: it must not be preempted any more
                out.append(Send(f"pn:{e.server}", UpgradeTask(self.job_id, t, e.spec.attempt)))
            self.opp[t] = False
        spec = e.spec
        self.attempt[t] = spec.attempt
        self.server[t] = e.server
        self.state[t] = e.state
        self.locality[t] = spec.locality
        self.dispatch_t[t] = e.dispatch_t
        self.start_t[t] = e.start_t
        self.exp_wait[t] = e.exp_wait
        self.last_heard[t] = now
        self.est_sent[t] = spec.est_runtime_s
        self.queued_seen[t] = False
        self.waiting[t] = False
        self.check_t[t] = np.inf
        self._sent[t] = spec
        if self.cfg.probe_slack_s > 0:
            # probed if silent too long, like any first attempt (its end's report may be lost)
            self._watch_at = min(self._watch_at, float(self._silence_limits(t)))

    def _extras_on(self, lost: np.ndarray, now: float, out: list) -> None:
        """Extra attempts on servers that died or restarted: gone, no fault of the task."""
        lost_set = set(lost.tolist())
        view = self.view
        for t in list(self.extra):
            for e in list(self.extra.get(t, ())):
                if e.server in lost_set and (not view.alive[e.server] or view.boot_times[e.server] > e.dispatch_t):
                    self._end_extra(t, e, "fail", "failed", now, out, kill=False)

    def _extra_counts(self) -> tuple[float, float, float]:
        """(CPUs extra attempts hold of the job's tokens, of its clone grant, of its opportunistic
        allowance): for validate()."""
        tok = clo = opp = 0.0
        for t, ex in self.extra.items():
            assert self.state[t] != DONE or self.clones > 1, \
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
