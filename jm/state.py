"""The Job Manager: one per job; plans where the job's tasks run.

Pure state machine. The JM keeps the job's DAG and every task's lifecycle
(apollo.lifecycle), a ready list ordered by priority (stage critical path,
then larger input first), and on every change runs a scheduling pass:
candidate sets -> estimation -> the placement policy (stable matching for
Apollo; greedy, random and FIFO as baselines) -> dispatch in order of
quality while tokens last, then as opportunistic tasks up to the job's
allowance. Failed tasks are retried elsewhere; a task out of retries fails
the job.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from apollo.cluster import REMOTE, IoModel, Topology, locality_of
from apollo.effects import Log, Send, SetTimer, Timer
from apollo.lifecycle import AttemptKind, TaskState, step
from apollo.messages import (CancelJob, DemoteTask, Dispatch, Holding, JobDemand, JobDone, KillTask, ProbeJob,
                             StatusBatch, ProbeTask, ReclaimTokens, TaskReport, TaskSpec, TokenGrant, UpgradeTask,
                             YieldJob)
from apollo.shapes import GRID, ShapeGrid
from apollo.spec import JobSpec

from . import estimate as est
from .attempts import EXTRA_BIT, ExtraAttempts
from .matching import UNMATCHED
from .policies import Profile, profile as find_profile
from .policies.batch import Batch
from .policies.opportunistic import random_idle
from .policies.pipeline import place, place_one

S = TaskState
# Plain ints for the hot paths (enum attribute access is slow); same values as TaskState.
PENDING, READY, DISPATCHED, RUNNING, DONE, FAILED, KILLED = (
    int(S.PENDING), int(S.READY), int(S.DISPATCHED), int(S.RUNNING), int(S.DONE), int(S.FAILED), int(S.KILLED))
DUPLICATE, CLONE = int(AttemptKind.DUPLICATE), int(AttemptKind.CLONE)
KEEP_ALL = 2 ** 31 - 1      # ReclaimTokens.keep of a give-back called off
INF = float("inf")


@dataclass(slots=True)
class JmConfig:
    topology: Topology
    policy: str = "apollo"           # a profile's name (jm.policies.PROFILES)
    io: IoModel = field(default_factory=IoModel)
    estimate: est.EstimateConfig = field(default_factory=est.EstimateConfig)
    grid: ShapeGrid = GRID
    max_batch: int = 2000
    # Apollo matches up to this many ready tasks per free token and dispatches the best
    # matches (least time lost first): with tokens freeing one at a time, this is what lets the
    # JM pick the task whose data sits on the server that just freed up, rather than the next
    # task in line wherever it can go. 1 = match only as many tasks as there are tokens.
    lookahead: int = 8
    # ...but a task passed over for this long goes first, in priority order (as in delay
    # scheduling): otherwise the task that never finds a good server ends last and holds up
    # its stage and everything downstream of it.
    patience_s: float = 2.0
    # Apollo defers a task rather than queue it where it would cost this much more than an idle
    # server reading its input remotely: the token is better spent on a server that is free,
    # and the task is matched again in the next batch or pass. <= 0: never defer.
    defer_s: float = 1.0
    # Corrections (Apollo, section 3.4; jm/attempts.py). Duplicate scheduling: a queued first
    # attempt whose expected or elapsed wait is "significantly" above the decision's or its
    # stage's average (above dup_factor x it + dup_slack_s) is placed again, and a server that
    # would start it that much sooner gets a duplicate; the first of the two to start wins.
    dup_factor: float = 2.0
    dup_slack_s: float = 1.0
    # Straggler copies: a running first attempt not done straggler_after x its expected time
    # (+ slack) after its expected start is asked for its progress; if its time left is above
    # copy_factor x what a copy elsewhere would take (+ slack), a copy starts on a free token.
    copies: bool = True
    # Dolly's delay assignment: a cloned stage's clones run on after the first wins (more copies
    # of its output), and the clones of the stage reading it wait for copies (jm/attempts.py).
    delay_assignment: bool = True
    straggler_after: float = 2.0
    straggler_slack_s: float = 1.0
    copy_factor: float = 2.0
    # Watchdog (every policy): an attempt not heard of for 2 x (expected wait + runtime) plus
    # this is probed at its server; one the server does not know (a lost Dispatch, or a report
    # lost with a connection) is placed again. <= 0: never.
    probe_slack_s: float = 30.0
    # Pipelining (Apollo): a token may keep short tasks queued at a server behind the one it
    # runs, up to pipeline_s of expected work per token (at most max_pipeline tasks), so the
    # next task starts the moment the last one ends instead of a JM round trip later (Ray
    # pipelines tasks to a leased worker the same way). Tasks longer than pipeline_s get one
    # task per token, as before. <= 0: never.
    pipeline_s: float = 0.05
    max_pipeline: int = 32
    max_batches_per_pass: int = 64
    # Place a batch of one task through jm.single's plain floats rather than numpy; the same answer.
    # Off: always the vectorised path (the tests hold the two to each other).
    single_fast_path: bool = True
    max_rounds: int = 64
    per_rack: int = 2
    retry_s: float = 0.5
    # Delay scheduling (a filter some profiles compose): W1, how long a job waits for a
    # node-local slot, and W2, how long more for a rack-local one (the HFS paper's Fig. 11 ran
    # with W1 = 5 s; its sensitivity study shows 5 s is enough for ~100% node locality).
    delay_node_s: float = 5.0
    delay_rack_s: float = 5.0
    opportunistic: bool = True        # where the profile's gate allows: dispatch beyond tokens as opportunistic
    opportunistic_factor: float = 1.0  # allowance = factor * tokens
    rm: str = "rm"
    host: str = "jmhost"              # the address of the JM host carrying the JMs (PNs report there)
    host_report_s: float = 1.0        # the host tells the RM its jobs this often (HostReport)
    # A JM adopting a job (its host died) asks every PN for the job's attempts and waits this
    # long for the answers before it places anything.
    adopt_wait_s: float = 0.2
    # Coalesce scheduling passes: a status change arms a zero-delay "sched" timer instead of
    # scheduling inline, so every report that arrives before it fires (in the live runtime: the
    # rest of the same network read) shares one pass and one batch. Off by default (the
    # simulator and the unit tests see a pass per message); the live cluster turns it on.
    coalesce: bool = False
    profile: Profile = field(init=False)     # what ``policy`` names

    def __post_init__(self) -> None:
        self.profile = find_profile(self.policy)


_PN_ADDRESSES: list[str] = []


def pn_address(server: int) -> str:
    """"pn:S", made once per server: a fresh string per dispatch costs its formatting and then
    its hashing wherever it is routed (a string keeps its hash)."""
    a = _PN_ADDRESSES
    if server >= len(a):
        a.extend(f"pn:{i}" for i in range(len(a), server + 1))
    return a[server]


RECENT_KEPT = 32    # a stage's last finished tasks' times kept for the straggler baseline (a median)


class Stage:
    __slots__ = ("index", "spec", "offset", "n", "parents", "children", "remaining", "est_runtime",
                 "obs_n", "obs_sum", "reps", "in_bytes", "shape", "priority", "ready", "released", "declared",
                 "mean_in", "recent", "wait_sum", "wait_n", "baseline")

    def __init__(self, index: int, spec, offset: int) -> None:
        self.index = index
        self.spec = spec
        self.offset = offset
        self.n = spec.tasks
        self.parents: list[int] = []
        self.children: list[int] = []
        self.remaining = spec.tasks
        self.declared = spec.estimate_s        # the spec's own estimate, counted as one observation
        self.est_runtime = self.declared
        self.obs_n = 0
        self.obs_sum = 0.0
        self.reps: np.ndarray | None = None
        if spec.input_bytes is None:
            self.in_bytes = np.zeros(spec.tasks)
            self.mean_in = 0.0
        else:
            self.in_bytes = spec.input_bytes
            self.mean_in = float(np.add.reduce(self.in_bytes, dtype=np.float64)) / spec.tasks if spec.tasks else 0.0
        self.shape = 0
        self.priority = 0.0
        self.ready: deque[int] = deque()
        self.released = False
        self.recent: list[float] = []
        self.baseline: float | None = None     # the straggler baseline, made from ``recent`` when asked
        self.wait_sum = 0.0          # expected queue waits of its dispatched first attempts
        self.wait_n = 0

    def observe(self, compute_s: float) -> None:
        """Refine the runtime estimate from a finished task (the declared estimate counts once)."""
        self.obs_n += 1
        self.obs_sum += compute_s
        self.est_runtime = (self.declared + self.obs_sum) / (1 + self.obs_n)
        rec = self.recent
        rec.append(compute_s)
        if len(rec) > RECENT_KEPT:
            del rec[0]
        self.baseline = None


class JmState(ExtraAttempts):
    # (slots: ~2,300 JMs live at once at 20,000 servers, and a status report touches a dozen
    # of a JM's fields; in the object itself they share a few cache lines)
    __slots__ = ("_bw", "_cpu_of", "_fail_rate", "_fail_seen", "_in_bytes", "_last_report", "_now",
                 "_opp_active", "_retry_pending", "_sched_armed", "_sent", "_stage_order", "_watch_at",
                 "cfg", "done", "failed_reason", "failures", "finished", "finished_at", "job_id", "locality",
                 "n", "outstanding_opp", "queued_seen", "reply_to", "server", "spec", "stage_of", "stages", "_prof",
                 "_fstates", "_keep", "_yield_at", "_marked", "_demoting", "waiting",
                 "submitted_at", "tokens", "used_tokens", "view", "ready_t", "dispatch_t", "start_t",
                 "passed_at", "exp_wait", "last_heard", "est_sent", "attempt", "state", "opp",
                 "token_seq", "generation", "_adopting", "_done_init",
                 "extra", "_extra_n", "_dup_done", "check_t", "clones", "clone_cpu", "clones_low", "clone_used", "_clone_wait",
                 "_copies", "_copy_gaps", "_won_at", "_clones_sent")

    def __init__(self, job_id: int, spec: JobSpec, tokens: int, submitted_at: float,
                 config: JmConfig, view, reply_to: str = "", seq: int = 0, generation: int = 0,
                 done: bytes = b"", clones: int = 1, clone_cpu: float = 0.0, clones_low: bool = False) -> None:
        self.job_id = job_id
        self.extra: dict = {}                   # task -> its extra attempts (jm/attempts.py)
        self._extra_n: dict[int, int] = {}
        self._dup_done: dict[int, int] = {}     # task -> its first attempt the triggers looked at
        self.clones = clones                    # Dolly: attempts per task (1: not cloned) ...
        self.clone_cpu = clone_cpu              # ... within this many CPUs of the clone budget ...
        self.clones_low = clones_low            # ... at low priority (opportunistic at the PNs)
        self.clone_used = 0.0
        self._clone_wait: list[int] = []        # downstream tasks whose clones wait for copies
        self._copies: dict[int, int] = {}       # task -> copies of its output (finished attempts)
        self._copy_gaps: list[float] = []       # first to second copy of a task's output (omega)
        self._won_at: dict[int, float] = {}
        self._clones_sent: dict[int, int] = {}  # task -> its attempts so far as clones count them
        self.token_seq = seq                    # the seq of the last token message applied
        self.generation = generation            # > 0: adopting the job from a dead JM host
        self._adopting = False                  # waiting for the PNs' Holding answers
        self._done_init = done                  # tasks finished under an earlier home (packbits)
        self.spec = spec
        self.tokens = tokens
        self.submitted_at = submitted_at
        self.cfg = config
        self.view = view
        self.reply_to = reply_to
        self._prof = prof = config.profile
        self._fstates = prof.new_states()       # each filter's memory of this job
        self._keep = KEEP_ALL                   # CPUs a give-back lets it keep (ReclaimTokens.keep)
        self._yield_at = INF                    # ...and when its attempts yield, if it holds more
        self._marked: set[int] = set()          # servers told the job yields there (YieldJob)
        self._demoting: set[int] = set()        # tasks whose queued attempt a DemoteTask is out for
        topo = config.topology
        self.stages: list[Stage] = []
        offset = 0
        names = {}
        for i, s in enumerate(spec.stages):
            st = Stage(i, s, offset)
            names[s.name] = i
            st.parents = [names[d] for d in s.depends_on]
            for p in st.parents:
                self.stages[p].children.append(i)
            if s.dataset is not None:
                st.reps = topo.replicas(s.dataset, np.arange(s.tasks)).astype(np.int64)
            st.shape = config.grid.index(s.cpu, s.mem_gb)
            self.stages.append(st)
            offset += s.tasks
        n = offset
        self.n = n
        self._cpu_of = np.array([st.spec.cpu for st in self.stages])
        self._bw = config.io.bandwidths()
        if len(self.stages) == 1:      # (the common case, without numpy's concatenate and repeat)
            self._in_bytes = self.stages[0].in_bytes
            self.stage_of = np.zeros(n, dtype=np.int32)
        else:
            self._in_bytes = np.concatenate([st.in_bytes for st in self.stages]) if self.stages else np.zeros(0)
            self.stage_of = np.arange(len(self.stages), dtype=np.int32).repeat([s.n for s in self.stages])
        # Per-task columns, carved out of three blocks (a JM of a small job is made in a few
        # allocations, not fifteen: job start-up is on every job's critical path).
        f64 = np.zeros((8, n))
        (self.ready_t, self.dispatch_t, self.exp_wait, self.last_heard, self.est_sent, self.start_t,
         self.passed_at, self.check_t) = f64
        f64[5] = -1.0
        f64[6:] = np.inf
        # check_t: when a running first attempt is looked at as a straggler; passed_at: when
        # lookahead first passed the task over
        # exp_wait: queue wait expected when the task was sent; last_heard: the attempt's last
        # report (or its dispatch); est_sent: runtime (with I/O) expected when it was sent
        i32 = np.zeros((2, n), dtype=np.int32)
        self.attempt, self.failures = i32
        # Attempt numbers start above every earlier home's (whose attempts may still be at PNs).
        if generation:
            self.attempt[:] = generation << 16
        i8 = np.zeros((5, n), dtype=np.int8)
        self.state, self.locality = i8[0], i8[1]
        self.opp, self.queued_seen = i8[2].view(bool), i8[3].view(bool)   # queued_seen: reported queued
        self.waiting = i8[4].view(bool)         # its PN said it is queued, and no start since
        if PENDING:
            self.state[:] = PENDING
        self.locality[:] = REMOTE
        self.server = np.full(n, -1, dtype=np.int64)
        self._sent: list[TaskSpec | None] = [None] * n   # each task's last attempt as sent
        self._watch_at = np.inf                 # no queued task can be overdue before then
        self.used_tokens = 0.0
        self.outstanding_opp = 0.0
        self._opp_active: set[int] = set()     # opportunistic attempts dispatched or running
        self._sched_armed = False              # coalesce: a "sched" timer is pending
        self.done = 0
        self.finished = False
        self.failed_reason = ""
        self._fail_rate: np.ndarray | None = None
        self._fail_seen: dict[int, int] = {}
        self._retry_pending = False
        self._last_report: tuple | None = None  # (demand, CPUs in use) as the RM last heard them
        self._prioritise()

    # ---- setup ---------------------------------------------------------------
    def _prioritise(self) -> None:
        """Stage priority = its runtime estimate plus the longest chain below it (critical path)."""
        if len(self.stages) == 1:      # (no chain below it: + 0.0, as the loop adds, the same float)
            self.stages[0].priority = self.stages[0].est_runtime + 0.0
            self._stage_order = [0]
            return
        for st in reversed(self.stages):
            below = max((self.stages[c].priority for c in st.children), default=0.0)
            st.priority = st.est_runtime + below
        self._stage_order = sorted(range(len(self.stages)), key=lambda i: -self.stages[i].priority)

    def _release_stage(self, st: Stage, now: float) -> None:
        st.released = True
        ids = st.offset + (-st.in_bytes).argsort(kind="stable")  # larger input first
        if st.remaining < st.n:        # an adopted job: tasks done under an earlier home stay done
            ids = ids[self.state[ids] != DONE]
            self.state[ids] = READY
            self.ready_t[ids] = now
        else:
            self.state[st.offset:st.offset + st.n] = int(S.READY)
            self.ready_t[st.offset:st.offset + st.n] = now
        st.ready.extend(ids.tolist())

    # ---- event entry -----------------------------------------------------------
    def start(self, now: float, rng) -> list:
        out: list = [Log("job_started", (self.job_id, now))]
        if self._done_init:
            self._mark_done(self._done_init)
        for st in self.stages:
            if st.remaining and all(self.stages[p].remaining == 0 for p in st.parents):
                self._release_stage(st, now)
        if self.generation:
            # Adopting: the PNs say which attempts of the job they hold before anything is placed.
            self._adopting = True
            probe = ProbeJob(self.job_id, self.generation, self.cfg.host)
            out += [Send(f"pn:{s}", probe) for s in np.flatnonzero(self.view.alive).tolist()]
            out.append(SetTimer(self.cfg.adopt_wait_s, "adopted"))
            return out
        if self.done == self.n:
            self._finish(True, "", now, out)
            return out
        self._schedule(now, rng, out)
        return out

    def _mark_done(self, bitmap: bytes) -> None:
        """Tasks an earlier home of the job finished (as the RM stored them): done, not re-run."""
        done = np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8), count=self.n).astype(bool)
        for t in np.flatnonzero(done).tolist():
            st = self.stages[self.stage_of.item(t)]
            self.state[t] = DONE
            st.remaining -= 1
            self.done += 1

    def done_bitmap(self) -> bytes:
        return np.packbits(self.state == DONE).tobytes()

    def demand_report(self) -> tuple[int, int]:
        """(CPUs it could use, CPUs in use): what HostReport carries."""
        return self._report()

    def release(self, kill: bool, now: float) -> list:
        """The RM moved the job off this host (``kill``: the job is over; else another host
        adopted it and its attempts are that host's now)."""
        out: list = []
        if kill and not self.finished:
            for t in np.flatnonzero((self.state == DISPATCHED) | (self.state == RUNNING)).tolist():
                out.append(Send(f"pn:{int(self.server[t])}", KillTask(self.job_id, t, int(self.attempt[t]))))
            for t in list(self.extra):
                self._kill_extras(t, now, out, outcome="killed")
        self.finished = True
        return out

    def _on_holding(self, msg: Holding, now: float, rng, out: list) -> None:
        """A PN's attempts of this job, asked for when adopting it: each becomes this JM's own
        (its slot counted, its reports heard) unless the task is done or has another attempt
        already, in which case it is killed; attempts that ended there count as their reports."""
        server = msg.server
        for spec, rep in zip(msg.tasks, msg.reports):
            self._adopt(spec, rep, server, now, rng, out)
        for rep in msg.ended:
            t = rep.task
            if rep.state == DONE and 0 <= t < self.n and self.state.item(t) != DONE:
                self._adopt(self._spec_for(t, rep.attempt), rep, server, now, rng, out)

    def _spec_for(self, t: int, attempt: int) -> TaskSpec:
        st = self.stages[self.stage_of.item(t)]
        spec = st.spec
        i = t - st.offset
        return TaskSpec(self.job_id, t, attempt, st.index, spec.cpu, spec.mem_gb, float(spec.durations_s[i]),
                        float(st.in_bytes[i]), REMOTE, st.est_runtime, False, spec.command, spec.env, spec.cwd,
                        spec.timeout_s, spec.command is not None)

    def _adopt(self, spec: TaskSpec, rep: TaskReport, server: int, now: float, rng, out: list) -> None:
        t = spec.task
        if not 0 <= t < self.n or spec.job_id != self.job_id:
            return
        cur = self.state.item(t)
        ended = rep.state == DONE
        if cur in (DISPATCHED, RUNNING) and spec.attempt == self.attempt.item(t):
            self._on_reports([rep], server, now, rng, out)      # ours already (a repeated answer)
            return
        if cur == DONE or (cur in (DISPATCHED, RUNNING) and not ended):
            if not ended:
                out.append(Send(f"pn:{server}", KillTask(self.job_id, t, spec.attempt)))
            return
        if cur in (DISPATCHED, RUNNING):          # our own attempt runs too, but this one is done
            out.append(Send(f"pn:{int(self.server[t])}", KillTask(self.job_id, t, int(self.attempt[t]))))
            self._attempt_over(t, now, out, "requeue", "superseded", blame=False, outcome="superseded")
        if self.state.item(t) != READY:
            return                                # (pending: its stage is not released; cannot be)
        st = self.stages[self.stage_of.item(t)]
        st.ready.remove(t)
        self.state[t] = step(READY, "dispatch")
        self.attempt[t] = spec.attempt           # (its next attempt is numbered above the base again)
        self.server[t] = server
        self.opp[t] = False
        self.used_tokens += spec.cpu
        self.dispatch_t[t] = now
        self.last_heard[t] = now
        self.exp_wait[t] = 0.0
        self.est_sent[t] = spec.est_runtime_s
        self.locality[t] = spec.locality
        self.queued_seen[t] = False
        self.waiting[t] = False
        self._sent[t] = spec
        if self.cfg.probe_slack_s > 0:
            self._watch_at = min(self._watch_at, float(self._silence_limits(t)))
        out.append(Log("adopted", (self.job_id, t, spec.attempt, server)))
        self._on_reports([rep], server, now, rng, out)

    def on_status(self, b: StatusBatch, now: float, rng) -> list:
        """A status batch: ``handle``'s path for one, without its dispatch on the event's type
        (a host routes one per finished task)."""
        out: list = []
        if not self.finished:
            self._on_reports(b.reports, b.server, now, rng, out)
        return out

    def handle(self, event, now: float, rng) -> list:
        if self.finished:
            return []
        t = type(event)
        out: list = []
        if t is StatusBatch:
            self._on_reports(event.reports, event.server, now, rng, out)
        elif t is TokenGrant:
            if event.seq and event.seq <= self.token_seq:
                return out          # a duplicate, or overtaken by a newer one
            self.token_seq = event.seq or self.token_seq
            self.tokens = event.tokens
            self._demote_beyond_tokens(out)
            self._schedule(now, rng, out)
        elif t is Holding:
            self._on_holding(event, now, rng, out)
        elif t is ReclaimTokens:
            if event.seq and event.seq <= self.token_seq:
                return out
            self.token_seq = event.seq or self.token_seq
            self.tokens = event.tokens
            self._keep = event.keep
            was = self._yield_at
            self._yield_at = INF if event.keep >= KEEP_ALL else now + event.within_s
            if event.within_s > 0 and event.keep < KEEP_ALL:
                out.append(SetTimer(event.within_s, "reclaim"))
            self._demote_beyond_tokens(out)
            self._sync_yield(now, out, resend=abs(self._yield_at - was) > 1e-6)
            self._schedule(now, rng, out)
        elif t is Timer:
            if event.key == "reclaim":
                # the deadline: every server is told again (a lost word costs no more than this)
                self._sync_yield(now, out, resend=True)
            elif event.key == "retry":
                self._retry_pending = False
                self._schedule(now, rng, out)
            elif event.key == "sched":
                self._sched_armed = False
                self._schedule(now, rng, out)
            elif event.key == "clones":
                self._release_clones(now, rng, out, final=True)
            elif event.key == "adopted":
                self._adopting = False
                if self.done == self.n:
                    self._finish(True, "", now, out)
                else:
                    self._schedule(now, rng, out)
        elif t is CancelJob:
            self._finish(False, "cancelled", now, out)
        return out

    # ---- giving back (docs/sharing.md) -------------------------------------------
    def _max_depth(self) -> int:
        """Attempts one token may have out (pipelined short tasks: several, queued behind it)."""
        return max((self._depth(st) for st in self.stages), default=1)

    def _demote_beyond_tokens(self, out: list) -> None:
        """The job holds fewer tokens than its regular attempts: those its PNs said are queued
        wait as opportunistic ones (DemoteTask), the most recently sent first, until the rest fit
        in its tokens. (One queued for less than PnConfig.queued_report_s is not known queued:
        it goes when its PN says so.)"""
        excess = self.used_tokens - self.tokens * self._max_depth()
        if excess <= 1e-9:
            return
        cpu_of = self._cpu_of
        for t in self._demoting:
            excess -= cpu_of.item(self.stage_of.item(t))
        if excess <= 1e-9:
            return
        cand = np.flatnonzero(self.waiting & ~self.opp & (self.state == DISPATCHED))
        for t in cand[np.argsort(-self.dispatch_t[cand], kind="stable")].tolist():
            if excess <= 1e-9:
                break
            if t in self._demoting or (self.extra and t in self.extra):
                continue          # (one with a duplicate out: that one may start any moment, as it is)
            self._demoting.add(t)
            excess -= cpu_of.item(self.stage_of.item(t))
            out.append(Send(pn_address(self.server.item(t)), DemoteTask(self.job_id, t, self.attempt.item(t))))

    def _swap_queued_for_running(self, out: list) -> None:
        """A token is better spent on an attempt that runs than on one that waits: while an
        opportunistic attempt of the job runs and a regular one waits in a queue (as its PN
        said), the waiting one is demoted (DemoteTask), and the token it gives back upgrades
        the running one (_upgrade). What the job holds then is what it runs."""
        st = self.state
        cpu_of, stage_of = self._cpu_of, self.stage_of
        running = sum(cpu_of.item(stage_of.item(t)) for t in self._opp_active if st.item(t) == RUNNING) - \
            sum(cpu_of.item(stage_of.item(t)) for t in self._demoting)       # (demotions already out)
        if running <= 1e-9:
            return
        cand = np.flatnonzero(self.waiting & ~self.opp & (st == DISPATCHED))
        for t in cand[np.argsort(-self.dispatch_t[cand], kind="stable")].tolist():
            if running <= 1e-9:
                break
            if t in self._demoting or (self.extra and t in self.extra):
                continue
            self._demoting.add(t)
            running -= cpu_of.item(stage_of.item(t))
            out.append(Send(pn_address(self.server.item(t)), DemoteTask(self.job_id, t, self.attempt.item(t))))

    def _sync_yield(self, now: float, out: list, resend: bool = False) -> None:
        """While a give-back's kill line is below what the job holds, every server where its
        regular attempts are knows the job yields there from the deadline (YieldJob): regular
        work of others waiting for their room there takes it then, whichever server it waits
        at, and no more than waits. When the job is back within the line, they are told."""
        over = self._yield_at < INF and self.used_tokens > max(self._keep, self.tokens) * self._max_depth() + 1e-9
        if over:
            if self._marked and not resend:
                return
            st = self.state
            act = ((st == DISPATCHED) | (st == RUNNING)) & ~self.opp
            servers = set(self.server[act].tolist())
            for e in (x for ex in self.extra.values() for x in ex):
                servers.add(e.server)
            after = max(0.0, self._yield_at - now)
            for s in sorted(servers if resend else servers - self._marked):
                out.append(Send(pn_address(s), YieldJob(self.job_id, after)))
            self._marked |= servers
        elif self._marked:
            for s in sorted(self._marked):
                out.append(Send(pn_address(s), YieldJob(self.job_id, -1.0)))
            self._marked = set()
            if self.used_tokens <= self._keep * self._max_depth():
                self._yield_at = INF         # the give-back is done

    def wants_view(self, now: float) -> bool:
        """Whether a new cluster view gives this JM anything to do (it has tasks waiting to be
        placed, a demand the RM has not heard, or queued tasks that may be overdue)."""
        return self._has_ready() or self._report() != self._last_report or now >= self._watch_at or \
            (self.clone_cpu > 0 and self._clones_needed() < self.clone_cpu) or self._idle_room_for_queued(now)

    def _idle_room_for_queued(self, now: float) -> bool:
        """Whether tasks of this job wait in queues (as their PNs said) while the view shows an
        idle server: fresh information that may make one of them worth moving (a duplicate)."""
        return self._prof.corrections and self.cfg.dup_factor > 0 and self.view.has_idle(now) and \
            bool(self.waiting.any())

    def _deadlines(self, ids):
        """When a task reported queued has waited "significantly" long (Apollo's third duplicate
        trigger: above its decision's wait and its stage's average); ``ids``: a task or an array."""
        cfg = self.cfg
        avg = np.array([st.wait_sum / st.wait_n if st.wait_n else 0.0 for st in self.stages])[self.stage_of[ids]]
        return self.dispatch_t[ids] + cfg.dup_factor * np.maximum(self.exp_wait[ids], avg) + cfg.dup_slack_s

    def _silence_limits(self, ids):
        """When an attempt not heard of since is probed."""
        return self._silence_limit(self.last_heard[ids], self.exp_wait[ids], self.est_sent[ids])

    def _silence_limit(self, heard, exp_wait, est_runtime):
        """... from when it was last heard of, its expected wait and its runtime with I/O."""
        return heard + 2.0 * (exp_wait + est_runtime) + self.cfg.probe_slack_s

    def _check_active(self, now: float, rng, out: list) -> None:
        """Look again at queued tasks that have waited significantly long (duplicate triggers),
        ask for the progress of running ones past their expected time (straggler copies), probe
        attempts not heard of for too long (see JmConfig); note when the next check is due."""
        cfg = self.cfg
        st = self.state
        act = np.flatnonzero((st == DISPATCHED) | (st == RUNNING))
        inf = np.full(len(act), np.inf)
        dups = self._prof.corrections and cfg.dup_factor > 0
        dup_due = np.where(self.queued_seen[act] & (st[act] == DISPATCHED), self._deadlines(act), inf) \
            if dups else inf
        probe_due = self._silence_limits(act) if cfg.probe_slack_s > 0 else inf
        check_due = self.check_t[act]
        late_dup = dup_due <= now
        late_check = (check_due <= now) & ~late_dup
        late_probe = (probe_due <= now) & ~late_dup & ~late_check
        for t in act[late_probe].tolist():
            out.append(Send(f"pn:{int(self.server[t])}", ProbeTask(self.job_id, t, int(self.attempt[t]),
                                                                   cfg.host)))
        self.last_heard[act[late_probe]] = now
        if late_check.any():
            self._probe_stragglers(act[late_check], now, out)
        self.queued_seen[act[late_dup]] = False         # one look per attempt
        rest = ~late_dup
        silent = self._silence_limits(act) if cfg.probe_slack_s > 0 else inf   # (last_heard as updated)
        # next: a trigger, a straggler check, or silence, of every active attempt (those whose
        # duplicate trigger fires now may still go silent)
        nxt = np.minimum(np.minimum(dup_due[rest], self.check_t[act[rest]]), silent[rest])
        self._watch_at = min(float(nxt.min()) if len(nxt) else np.inf,
                             float(silent[late_dup].min()) if late_dup.any() else np.inf)
        for t in act[late_dup].tolist():
            self._consider_duplicate(t, now, rng, out, None)

    def on_view(self, now: float, rng, lost: np.ndarray | None = None) -> list:
        """The host's view changed: recover tasks on ``lost`` servers (dead or restarted),
        reschedule, report demand."""
        if self.finished:
            return []
        out: list = []
        if self.extra and lost is not None and len(lost):
            self._extras_on(lost, now, out)
        if lost is not None and len(lost):
            act = (self.state == S.DISPATCHED) | (self.state == S.RUNNING)
            ids = np.flatnonzero(act & np.isin(self.server, lost))
            srv = self.server[ids]
            gone = ~self.view.alive[srv] | (self.view.boot_times[srv] > self.dispatch_t[ids])
            for t in ids[gone].tolist():
                self._attempt_over(t, now, out, "fail", f"server {int(self.server[t])} lost", blame=False)
                if self.finished:
                    return out
        if now >= self._watch_at:
            self._check_active(now, rng, out)
        if self._idle_room_for_queued(now):
            # the longest waiting first, no more of them than there are idle servers to go to
            queued = np.flatnonzero(self.waiting & (self.state == DISPATCHED))
            queued = queued[np.argsort(self.dispatch_t[queued], kind="stable")]
            for t in queued[:len(self.view.idle_servers(now))].tolist():
                self._consider_duplicate(t, now, rng, out, None, idle=True)
        self._schedule(now, rng, out)
        report = self._report()
        clone_left = self._clones_needed() if self.clone_cpu > 0 else -1.0
        if report != self._last_report or clone_left < self.clone_cpu:
            self._last_report = report
            if clone_left >= 0:
                self.clone_cpu = clone_left        # what the RM is told it may take back
            out.append(Send(self.cfg.rm, JobDemand(self.job_id, *report, clone_left, self.token_seq)))
        return out

    def _report(self) -> tuple[int, int]:
        """What the RM's sharing plane hears of this job from its JM: (CPUs it could use, CPUs its
        regular attempts have out, queued or running: the most it can be running; the RM keeps a
        queue's max with it). What it does run, the RM hears from the PNs: a PN reports a task
        that starts at once only when it ends, so a JM cannot tell a running attempt from a
        queued one."""
        return self._demand(), int(np.ceil(self.used_tokens / self._max_depth() - 1e-9))

    def _demand(self) -> int:
        """CPUs this job could use now: ready plus outstanding tasks."""
        ready = sum(len(st.ready) * st.spec.cpu for st in self.stages)
        return int(round(ready + self.used_tokens + self.outstanding_opp))

    # ---- status ----------------------------------------------------------------
    def _on_reports(self, reports: list[TaskReport], server: int, now: float, rng, out: list) -> None:
        changed = False
        shift = self.view.pn_clocks.get(server)     # + shift: the PN's times on our clock
        n = self.n
        sent, state = self._sent, self.state
        for r in reports:
            t = r.task
            if not 0 <= t < n:
                continue  # a stranger
            spec = sent[t]
            # (.item: a plain Python number, without making a numpy scalar first)
            cur = state.item(t)
            if spec is None or r.attempt != spec.attempt or (cur != DISPATCHED and cur != RUNNING):
                if self.extra:
                    e = self._find_extra(t, r.attempt)
                    if e is not None:
                        if self._on_extra_report(t, e, r, server, now, out, shift):
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
                self.last_heard[t] = now
                if cur == DISPATCHED:
                    if r.detail == "demoted":
                        self._demoted(t, now, out)
                        changed = True
                        continue
                    if r.detail == "queued" and not self._prof.matcher.leaves_queued():
                        # a slot scheduler's task found its slot gone: placed again, now
                        out.append(Send(pn_address(server), KillTask(self.job_id, t, r.attempt)))
                        self._attempt_over(t, now, out, "requeue", "moved", blame=False, outcome="moved")
                        changed = True
                        continue
                    self.waiting[t] = True
                    if self.used_tokens > self.tokens:
                        self._demote_beyond_tokens(out)
                if cur == DISPATCHED and self._prof.corrections and self.cfg.dup_factor > 0:
                    # fresh news of a queued task: Apollo's duplicate triggers, now and later
                    self.queued_seen[t] = True
                    self._watch_at = min(self._watch_at, float(self._deadlines(t)))
                    if r.t_end > 0.0:        # the start its PN plans for it
                        self._consider_duplicate(t, now, rng, out, r.t_end + shift - self.dispatch_t.item(t))
                if r.detail == "probed" and self.check_t.item(t) == np.inf and self.cfg.copies and \
                        self._prof.corrections:     # a straggler check found it still queued: later
                    self.check_t[t] = now + self.cfg.straggler_slack_s + self.exp_wait.item(t)
                    self._watch_at = min(self._watch_at, self.check_t.item(t))
            elif rs == RUNNING:
                self.last_heard[t] = now
                if cur == DISPATCHED:        # else already known (a probe's answer): news only
                    state[t] = step(cur, "start")
                    self.waiting[t] = False
                    self.start_t[t] = r.t_start + shift
                    if self.extra and t in self.extra:    # duplicates are discarded when one starts
                        self._kill_extras(t, now, out, only=DUPLICATE)
                if r.detail == "probed" and self.check_t.item(t) == np.inf and self.cfg.copies and \
                        self._prof.corrections:
                    self._consider_copy(t, r, now, rng, out, shift)
            elif rs == FAILED:
                self.start_t[t] = r.t_start + shift
                self._attempt_over(t, now, out, "fail", r.detail or f"exit code {r.exit_code}",
                                   blame=True, t_end=r.t_end + shift)
                changed = True
            elif rs == READY or rs == KILLED:
                # preempted, refused, unknown there, or killed by someone else (an earlier home
                # of the job, whose kill was late): no fault of the task
                self.start_t[t] = r.t_start + shift
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
        if self._clone_wait and changed:
            self._release_clones(now, rng, out, final=False)
        if changed and (self._marked or self._yield_at < INF):
            self._sync_yield(now, out)        # (before any new dispatch: the PNs hear it first)
        # (a pass only when it may place something: most reports end a task of a stage with
        # nothing left to place, and a pass for nothing was a timer event per task)
        if changed and not self._adopting and (self.outstanding_opp or self._has_ready()):
            if not self.cfg.coalesce:
                self._schedule(now, rng, out)
            elif not self._sched_armed:
                self._sched_armed = True
                out.append(SetTimer(0.0, "sched"))

    def _demoted(self, t: int, now: float, out: list) -> None:
        """Its PN made ``t``'s queued regular attempt an opportunistic one (the job held more
        than its tokens): it counts against the opportunistic allowance now, and gets a token
        again, like any opportunistic attempt, when one frees (_upgrade)."""
        self._demoting.discard(t)
        self.waiting[t] = False
        if self.opp.item(t):
            return
        cpu = self._cpu_of.item(self.stage_of.item(t))
        self.used_tokens -= cpu
        self.outstanding_opp += cpu
        self.opp[t] = True
        self._opp_active.add(t)
        out.append(Log("demoted", (self.job_id, t)))

    def _free_slot(self, t: int, cpu: float) -> bool:
        """Give back the slot of ``t``'s active attempt (a token, or opportunistic allowance);
        True if the attempt was opportunistic."""
        self.waiting[t] = False
        if self._demoting:
            self._demoting.discard(t)
        if self._opp_active and t in self._opp_active:
            self.outstanding_opp -= cpu
            self._opp_active.discard(t)
            return True
        self.used_tokens -= cpu
        return False

    def _log_attempt(self, t: int, outcome: str, t_end: float, out: list) -> None:
        """The record of ``t``'s attempt, read off the per-task columns."""
        st = self.stages[self.stage_of.item(t)]
        self._record(st, t, self.attempt.item(t), self.server.item(t), self.locality.item(t),
                     self.start_t.item(t), t_end, outcome, self.opp.item(t), out)

    def _record(self, st: "Stage", t: int, attempt: int, server: int, loc: int, t_start: float,
                t_end: float, outcome: str, opp: bool, out: list, kind: int = 0,
                dispatch_t: float | None = None) -> None:
        """An ended attempt, for the report (columns: apollo.report A_*)."""
        out.append(Log("attempt", (self.job_id, st.index, t - st.offset, attempt, server, loc,
                                   self.ready_t.item(t), self.dispatch_t.item(t) if dispatch_t is None else dispatch_t,
                                   t_start, float(t_end), outcome, opp, st.spec.cpu, st.reps is not None, kind)))

    def _task_done(self, t: int, cur: int, spec: TaskSpec, r: TaskReport, server: int, now: float, out: list,
                   shift: float = 0.0) -> None:
        """Attempt ``spec`` of task ``t`` (in state ``cur``) succeeded on ``server``. Every
        completion runs this: it reads the attempt's own TaskSpec (what the JM sent) rather than
        a dozen per-task columns, each a cache miss of its own in a cluster-sized run."""
        st = self.stages[spec.stage]
        self.state[t] = step(cur, "finish")
        opp = self._free_slot(t, spec.cpu)
        loc = spec.locality
        self._record(st, t, spec.attempt, server, loc, r.t_start + shift, r.t_end + shift, "done", opp, out,
                     spec.kind)
        if self.extra and t in self.extra:       # the first to finish wins
            if self.clones > 1 and st.children and self.cfg.delay_assignment:
                # (its clones run on: more copies of its output for the downstream clones)
                self._won_at[t] = now
                for e in list(self.extra[t]):
                    if e.kind != CLONE:
                        self._end_extra(t, e, "kill", "lost", now, out)
            else:
                self._kill_extras(t, now, out)
        st.observe(max(0.0, (r.t_end - r.t_start) - self.cfg.io.io_time(spec.input_bytes, loc)))
        self.done += 1
        st.remaining -= 1
        if st.remaining == 0:
            for c in st.children:
                ch = self.stages[c]
                if not ch.released and all(self.stages[p].remaining == 0 for p in ch.parents):
                    self._release_stage(ch, now)
        if self.done == self.n:
            self._finish(True, "", now, out)

    def _attempt_over(self, t: int, now: float, out: list, event: str, detail: str, blame: bool,
                      t_end: float | None = None, outcome: str = "") -> None:
        """An attempt ended without success: retry the task elsewhere, or give up on the job."""
        self.state[t] = step(int(self.state[t]), event)
        was_opp = self._free_slot(t, self.stages[self.stage_of.item(t)].spec.cpu)
        self._log_attempt(t, outcome or ("preempted" if event == "requeue" else "failed"),
                          now if t_end is None else t_end, out)
        srv = int(self.server[t])
        if blame:
            self.failures[t] += 1
            self._note_failure(srv)
        if self.extra and t in self.extra:
            # Another attempt of the task lives: it carries on as the first (the running one first).
            ex = self.extra[t]
            e = next((x for x in ex if x.state == RUNNING), ex[0])
            self._promote(t, e, now, was_opp, out)
            return
        st = self.stages[self.stage_of[t]]
        if event == "fail":
            if self.failures[t] > self.spec.max_retries:
                self.state[t] = step(int(self.state[t]), "give_up")
                self._finish(False, f"task {st.spec.name}[{t - st.offset}] failed {int(self.failures[t])} "
                                    f"times; last: {detail}", now, out)
                return
            self.state[t] = step(int(self.state[t]), "retry")
        n = self._extra_n.get(t) if self._extra_n else None
        if n is not None:
            # the task had extra attempts: the next first attempt is numbered above all of them
            # (ended ones' reports may still come), and later extras above it in turn
            self._extra_n[t] = n + 1
            self.attempt[t] = max(self.attempt.item(t), (self.generation << 16) | EXTRA_BIT | n)
        st.ready.appendleft(t)    # retries go first

    def _note_failure(self, server: int) -> None:
        if server < 0:
            return
        if self._fail_rate is None:
            self._fail_rate = np.zeros(self.cfg.topology.servers)
        k = self._fail_seen.get(server, 0) + 1
        self._fail_seen[server] = k
        self._fail_rate[server] = 1.0 - 0.5 ** k   # each failure there halves our trust in it

    def _finish(self, ok: bool, reason: str, now: float, out: list) -> None:
        if self.finished:
            return
        self.finished = True
        self.finished_at = now
        self.failed_reason = reason if not ok else ""
        for t in list(self.extra):
            self._kill_extras(t, now, out, outcome="killed")
        # (every task done: no first attempt is out; spared a scan of the columns on every job's end)
        act = np.flatnonzero((self.state == DISPATCHED) | (self.state == RUNNING)).tolist() if self.done < self.n else []
        for t in act:
            out.append(Send(f"pn:{int(self.server[t])}", KillTask(self.job_id, t, int(self.attempt[t]))))
            self.state[t] = step(int(self.state[t]), "kill")
            self._log_attempt(t, "killed", now, out)   # (what a cancelled job ran shows in the records)
        for s in sorted(self._marked):
            out.append(Send(pn_address(s), YieldJob(self.job_id, -1.0)))
        self._marked = set()
        done = JobDone(self.job_id, ok, reason, now, self.done)
        if self.reply_to:
            # Straight to the submitter, first: the RM is not on the critical path of a job's
            # completion (it forwards its own copy later, in case this one is lost; submitters
            # take the first).
            out.append(Send(self.reply_to, done))
        out.append(Send(self.cfg.rm, done))
        out.append(Log("job_done", (self.job_id, ok, self.submitted_at, now, self.n, reason)))

    # ---- scheduling ------------------------------------------------------------
    def _pop_ready(self, k: int) -> list[int]:
        got: list[int] = []
        for i in self._stage_order:
            q = self.stages[i].ready
            while q and len(got) < k:
                got.append(q.popleft())
            if len(got) >= k:
                break
        return got

    def _push_back(self, ids) -> None:
        for t in list(ids)[::-1]:
            self.stages[self.stage_of[t]].ready.appendleft(t)

    def _schedule(self, now: float, rng, out: list) -> None:
        if self._marked:
            # a job back within its give-back's line says so before it sends anything new: a
            # PN must not take its new attempts for yielding ones
            self._sync_yield(now, out)
        cfg = self.cfg
        if (not self._has_ready() and not self.outstanding_opp) or self._adopting:
            return
        prof = self._prof
        gate = prof.gate
        allow_opp = cfg.opportunistic and gate.opportunistic
        placed_total = 0
        blocked = False
        if self._opp_active and self.waiting.any():
            self._swap_queued_for_running(out)
        if self.outstanding_opp > 0 and self.tokens - self.used_tokens >= 1:
            self._upgrade(now, out)
        depth = max((self._depth(st) for st in self.stages if st.ready), default=1)
        if depth > 1 and self.used_tokens > self.tokens * depth / 2 and not self.outstanding_opp:
            # Pipelined short tasks: refill once half the pipeline has drained, not after every
            # report. The servers still hold half of it queued meanwhile, so none goes idle,
            # and a pass places many tasks instead of one or two.
            return
        # Stable matching places at most one task per server slot per batch (one slot, or
        # ``depth`` for pipelined tasks): a larger batch would only cost rows pushed back unmatched.
        cap = min(cfg.max_batch, max(1, self.view.alive_count) * depth) if prof.matcher.one_per_slot \
            else cfg.max_batch
        one_by_one = cfg.single_fast_path and prof.matcher.single
        for _ in range(cfg.max_batches_per_pass):
            reg_room = self.tokens * depth - self.used_tokens
            # (opportunistic tasks only go to idle servers: with none, no batch is matched for them)
            opp_room = (cfg.opportunistic_factor * max(self.tokens, 1) - self.outstanding_opp) \
                if allow_opp and self.view.has_idle(now) else 0.0
            room = int(max(reg_room, 0) + max(opp_room, 0))
            if room <= 0:
                break
            want = room * cfg.lookahead if gate.lookahead else room
            bound = prof.matcher.batch_bound(self.view, self._least_ready_cpu()) if prof.matcher.bounded else None
            if bound is not None:
                if bound <= 0:
                    blocked = True      # a slot scheduler on a full cluster: no batch to build
                    break
                want = min(want, bound * cfg.lookahead if gate.lookahead else bound)
            batch = self._pop_ready(min(want, cap))
            if not batch:
                break
            if len(batch) == 1 and one_by_one:
                # (the same steps as below for a batch of one, in plain numbers: a small job's
                # start is on its critical path, and numpy's per-call cost is most of it)
                t = batch[0]
                srv1, wait1, where1 = self._place_one(t, now, rng)
                if srv1 == UNMATCHED:
                    self._push_back(batch)
                    blocked = True
                    break
                if not self._dispatch_one(t, srv1, wait1, where1, now, opp_room, out, rng):
                    self.passed_at[t] = min(self.passed_at.item(t), now)
                    self._push_back(batch)
                    break
                placed_total += 1
                continue
            ids = np.asarray(batch, dtype=np.int64)
            servers, wait, where = self._place(ids, now, rng)
            ok = servers != UNMATCHED
            if not ok.any():
                self._push_back(batch)
                blocked = True
                break
            placed = ids[ok]
            # Dispatch in order of quality while tokens last: least time lost for Apollo's
            # lookahead, else lowest expected wait first.
            if len(placed) == 1:
                order: Any = slice(None)        # (one task: no order to find)
            elif cfg.lookahead > 1 and gate.lookahead:
                order = self._quality_order(placed, wait[ok], where[ok], now)
            else:
                order = wait[ok].argsort(kind="stable")
            placed, psrv = placed[order], servers[ok][order]
            n_placed = self._dispatch(placed, psrv, wait[ok][order], where[ok][order], now, opp_room, out, rng)
            if n_placed < len(batch):    # the rest go back in their priority order
                sent = set(placed[:n_placed].tolist())
                rest = [t for t in batch if t not in sent]
                self.passed_at[rest] = np.minimum(self.passed_at[rest], now)
                self._push_back(rest)
            placed_total += n_placed
            if n_placed == 0:
                break
            if not ok.all():
                blocked = True
        if placed_total:
            out.append(Log("decisions", (placed_total,)))
        # Tasks a filter held back to be matched again on the next view or status report (which
        # is when the picture can change) need no poll; otherwise a blocked job polls, and
        # profiles that poll always do.
        if (prof.polls or (blocked and not any(f.rematches_on_news(cfg) for f in prof.filters))) \
                and self._has_ready() and not self._retry_pending:
            self._retry_pending = True
            poll = prof.poll_s or cfg.retry_s
            # ...or sooner, when a filter holding tasks back will let them go
            for f, st in zip(prof.filters, self._fstates):
                if st is not None:
                    w = f.wake_at(st, now, cfg)
                    if w is not None:
                        poll = min(poll, max(w - now, 0.0))
            out.append(SetTimer(poll, "retry"))

    def _quality_order(self, ids: np.ndarray, wait: np.ndarray, where: np.ndarray, now: float) -> np.ndarray:
        """Dispatch order of matched tasks: least time lost first (expected queue wait plus
        the extra input reading time over a node-local read); tasks passed over for
        ``patience_s`` before everything, in priority order."""
        bw = self._bw
        lost = wait + self._in_bytes[ids] * (1.0 / bw[where] - 1.0 / bw[0])
        lost[now - self.passed_at[ids] >= self.cfg.patience_s] = -1.0
        return lost.argsort(kind="stable")

    def _upgrade(self, now: float, out: list) -> None:
        """Freed tokens go first to this job's opportunistic attempts. A running one is upgraded
        (it stops being preemptible: that wastes less than dispatching a new task and losing an
        old one), the oldest first. One still queued is taken back and placed again as a regular
        task, on where it would start soonest (upgraded where it is, it would wait behind that
        server's regular work, however long, while another server may be free)."""
        dt = self.dispatch_t
        st = self.state
        taken = 0.0            # tokens the tasks taken back will use (the pass that follows places them)
        for t in sorted(self._opp_active, key=lambda t: (st[t] != RUNNING, dt[t], t)):
            cpu = self.stages[self.stage_of[t]].spec.cpu
            if self.tokens - self.used_tokens - taken - cpu < -1e-9:
                break
            if st[t] != RUNNING:
                out.append(Send(pn_address(self.server.item(t)), KillTask(self.job_id, t, self.attempt.item(t))))
                self._attempt_over(t, now, out, "requeue", "withdrawn", blame=False, outcome="withdrawn")
                taken += cpu
                continue
            self.opp[t] = False
            self._opp_active.discard(t)
            self.outstanding_opp -= cpu
            self.used_tokens += cpu
            out.append(Send(f"pn:{int(self.server[t])}", UpgradeTask(self.job_id, t, int(self.attempt[t]))))
            out.append(Log("upgraded", (self.job_id, t)))

    def _least_ready_cpu(self) -> float:
        return min((st.spec.cpu for st in self.stages if st.ready), default=0.0)

    def _has_ready(self) -> bool:
        for st in self.stages:
            if st.ready:
                return True
        return False

    def _depth(self, st: Stage) -> int:
        """Tasks of ``st`` one token may have in flight: 1, or more for pipelined short tasks
        (JmConfig.pipeline_s), by the stage's expected time per task with a node-local read."""
        cfg = self.cfg
        if not self._prof.gate.pipelining or cfg.pipeline_s <= 0:
            return 1
        per_task = st.est_runtime + cfg.io.init_s + st.mean_in / self._bw[0]
        if per_task >= cfg.pipeline_s:
            return 1
        return int(min(cfg.max_pipeline, 1 + cfg.pipeline_s // max(per_task, 1e-6)))

    def _place(self, ids: np.ndarray, now: float, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Server per task (UNMATCHED: not this pass), the expected wait and the locality there:
        the profile's candidates, filters and matcher (jm.policies.pipeline)."""
        cfg = self.cfg
        prof = self._prof
        m = prof.matcher
        if len(ids) == 1 and cfg.single_fast_path and m.single:
            srv, wait, where = self._place_one(int(ids[0]), now, rng)
            return np.array([srv], dtype=np.int64), np.array([wait]), np.array([where])
        sidx = self.stage_of[ids]
        reps, in_bytes, runtime, shape, cpu = self._task_columns(ids, sidx)
        b = Batch(now, self.view, cfg, ids, sidx, reps, in_bytes, runtime, shape, cpu,
                  self._batch_depth(sidx) if m.one_per_slot else 1, reps[:, 0] >= 0)
        return place(b, prof, self._fstates, self._fail_rate, rng)

    def _place_one(self, t: int, now: float, rng) -> tuple[int, float, int]:
        """_place for one task (cfg.single_fast_path, a matcher whose answer for one task is its
        cheapest candidate), in plain numbers: (server or UNMATCHED, expected wait, locality)."""
        si = self.stage_of.item(t)
        st = self.stages[si]
        local = t - st.offset
        reps1 = st.reps[local].tolist() if st.reps is not None else [-1, -1, -1]
        b = Batch(now, self.view, self.cfg, (t,), (si,), None, float(st.in_bytes.item(local)), st.est_runtime,
                  st.shape, st.spec.cpu, 1, reps1[0] >= 0)
        return place_one(b, self._prof, self._fstates, self._fail_rate, rng, reps1)

    def _batch_depth(self, sidx: np.ndarray) -> int:
        """Tasks one server may take in a batch: the smallest pipelining depth among its stages
        (what pipelined short tasks add to each other's wait there is at most pipeline_s)."""
        if len(self.stages) == 1:
            return self._depth(self.stages[0])
        return int(np.array([self._depth(st) for st in self.stages])[sidx].min())

    def _task_columns(self, ids: np.ndarray, sidx: np.ndarray):
        """Per task of ``ids``: replica servers (-1: none), input bytes, runtime estimate, grid
        shape index and CPUs, gathered from the tasks' stages."""
        B = len(ids)
        if len(self.stages) == 1:               # the common case: no per-stage masks
            st = self.stages[0]
            local = ids - st.offset
            reps = st.reps[local] if st.reps is not None else np.full((B, 3), -1, dtype=np.int64)
            return (reps, st.in_bytes[local], np.full(B, st.est_runtime), np.full(B, st.shape, dtype=np.int64),
                    np.full(B, st.spec.cpu))
        reps = np.full((B, 3), -1, dtype=np.int64)
        in_bytes = np.empty(B)
        runtime = np.empty(B)
        shape = np.empty(B, dtype=np.int64)
        cpu = np.empty(B)
        for i, st in enumerate(self.stages):
            m = sidx == i
            if not m.any():
                continue
            local = ids[m] - st.offset
            if st.reps is not None:
                reps[m] = st.reps[local]
            in_bytes[m] = st.in_bytes[local]
            runtime[m] = st.est_runtime
            shape[m] = st.shape
            cpu[m] = st.spec.cpu
        return reps, in_bytes, runtime, shape, cpu

    def _dispatch_one(self, t: int, s: int, wait: float, where: int, now: float, opp_room: float, out: list,
                      rng) -> bool:
        """_dispatch for one task, in plain numbers: the same state and effects (tests hold the
        two to each other). A task that would go opportunistically, a job with a stateful
        filter or with clones goes the general way. Returns whether it went out."""
        cfg = self.cfg
        si = self.stage_of.item(t)
        st = self.stages[si]
        spec = st.spec
        cpu = spec.cpu
        reg_room = (self.tokens - self.used_tokens) + self.tokens * (self._depth(st) - 1)
        if cpu > reg_room + 1e-9 or self._prof.stateful or self.clones > 1:
            return self._dispatch(np.array([t], dtype=np.int64), np.array([s], dtype=np.int64), np.array([wait]),
                                  np.array([where]), now, opp_room, out, rng) > 0
        if self.state.item(t) != READY:
            step(self.state.item(t), "dispatch")     # raises IllegalTransition
        self.used_tokens += cpu
        a = self.attempt.item(t)
        a = (max(a, self.generation << 16) if self.generation else a) + 1
        self.attempt[t] = a
        self.state[t] = DISPATCHED
        self.server[t] = s
        self.opp[t] = False
        self.dispatch_t[t] = now
        self.exp_wait[t] = wait
        self.queued_seen[t] = False
        self.waiting[t] = False
        self.last_heard[t] = now
        self.passed_at[t] = np.inf
        self.start_t[t] = -1.0
        self.locality[t] = where
        local = t - st.offset
        in_bytes = float(st.in_bytes.item(local))
        est_rt = st.est_runtime + cfg.io.init_s + in_bytes / self._bw.item(where)
        self.view.record_dispatch(s, est_rt * cpu / cfg.topology.cores, cpu, now)
        self.est_sent[t] = est_rt
        if cfg.probe_slack_s > 0:
            self._watch_at = min(self._watch_at, float(self._silence_limit(now, wait, est_rt)))
        st.wait_sum += wait
        st.wait_n += 1
        if cfg.copies and self._prof.corrections:
            chk = float(self._next_check(now, wait, est_rt + (self._straggler_baseline(st) - st.est_runtime)))
            self.check_t[t] = chk
            self._watch_at = min(self._watch_at, chk)
        self._sent[t] = task = TaskSpec(self.job_id, t, a, si, cpu, spec.mem_gb, float(spec.durations_s.item(local)),
                                        in_bytes, where, est_rt, False, spec.command, spec.env, spec.cwd,
                                        spec.timeout_s, spec.command is not None)
        out.append(Send(pn_address(s), Dispatch(self.job_id, [task], cfg.host)))
        return True

    def _dispatch(self, ids: np.ndarray, srv: np.ndarray, wait: np.ndarray, where: np.ndarray, now: float,
                  opp_room: float, out: list, rng=None) -> int:
        """Send placed tasks (in quality order) while tokens last, then as opportunistic tasks
        to servers expected to be idle now; returns how many of ``ids`` went out (a prefix)."""
        cfg = self.cfg
        cores = cfg.topology.cores
        stages = self.stages
        single = len(stages) == 1
        m = len(ids)
        cpu = np.full(m, stages[0].spec.cpu) if single else self._cpu_of[self.stage_of[ids]]
        # Regular while the tokens last (times the task's pipelining depth), then opportunistic
        # while the allowance lasts and the server is idle; the batch stops at the first task
        # that is neither.
        free = self.tokens - self.used_tokens
        if single:
            extra = self.tokens * (self._depth(stages[0]) - 1)
        else:
            depth = np.array([self._depth(st) for st in stages])
            extra = self.tokens * (depth[self.stage_of[ids]] - 1)
        reg_room = free + extra        # a scalar, or per task
        if m <= 64:   # the same prefixes as the numpy form below, without its per-call cost
            cpu_l = cpu.tolist()
            lims = [reg_room + 1e-9] * m if single else (reg_room + 1e-9).tolist()
            acc, n_reg = 0.0, 0
            for x, lim in zip(cpu_l, lims):
                acc += x
                if acc > lim:
                    break
                n_reg += 1
            acc, n_opp, lim = 0.0, 0, opp_room + 1e-9
            for x in cpu_l[n_reg:]:
                acc += x
                if acc > lim:
                    break
                n_opp += 1
        else:
            reg = cpu.cumsum() <= reg_room + 1e-9
            n_reg = int(reg.argmin()) if not reg.all() else m
            rest_cpu = cpu[n_reg:].cumsum()
            opp_ok = rest_cpu <= opp_room + 1e-9
            n_opp = int(opp_ok.argmin()) if not opp_ok.all() else len(opp_ok)
        if n_opp:
            # Opportunistic tasks go to idle servers drawn at random (jm/policies/opportunistic.py),
            # not where the matching put them
            picks = random_idle(self.view, cpu[n_reg:n_reg + n_opp], now, rng)
            n_opp = len(picks)
            if n_opp:
                srv, wait, where = srv.copy(), wait.copy(), where.copy()
                rack_of = cfg.topology.rack_of
                for k, s in enumerate(picks.tolist()):
                    t = int(ids[n_reg + k])
                    st = stages[self.stage_of.item(t)]
                    srv[n_reg + k] = s
                    wait[n_reg + k] = 0.0
                    where[n_reg + k] = locality_of(s, st.reps[t - st.offset] if st.reps is not None else None,
                                                   rack_of)
        n = n_reg + n_opp
        if n == 0:
            return 0
        ids, srv, cpu, where = ids[:n], srv[:n], cpu[:n], where[:n]
        cur = self.state[ids]
        if (cur != READY).any():
            bad = int(ids[np.flatnonzero(cur != READY)[0]])
            step(int(self.state[bad]), "dispatch")     # raises IllegalTransition
        if self._prof.stateful:
            for f, fs in zip(self._prof.filters, self._fstates):
                if fs is not None:
                    f.dispatched(fs, where[:n], now)
        self.used_tokens += float(cpu[:n_reg].sum())
        self.outstanding_opp += float(cpu[n_reg:].sum())
        if self.generation:     # above the attempts of earlier homes, adopted ones included
            self.attempt[ids] = np.maximum(self.attempt[ids], self.generation << 16) + 1
        else:
            self.attempt[ids] += 1
        self.state[ids] = DISPATCHED
        self.server[ids] = srv
        self.opp[ids[:n_reg]] = False
        if n > n_reg:
            self.opp[ids[n_reg:]] = True
            self._opp_active.update(ids[n_reg:].tolist())
        self.dispatch_t[ids] = now
        self.exp_wait[ids] = wait[:n]
        self.queued_seen[ids] = False
        self.waiting[ids] = False
        self.last_heard[ids] = now
        self.passed_at[ids] = np.inf
        self.start_t[ids] = -1.0
        self.locality[ids] = where
        bw = self._bw
        if single:
            st = stages[0]
            sidx: Any = None
            est_rt = st.est_runtime + cfg.io.init_s + st.in_bytes[ids - st.offset] / bw[where]
        else:
            sidx = self.stage_of[ids]
            est_rt = np.empty(n)
            for i, st in enumerate(stages):
                mk = sidx == i
                if mk.any():
                    local = ids[mk] - st.offset
                    est_rt[mk] = st.est_runtime + cfg.io.init_s + st.in_bytes[local] / bw[where[mk]]
        self.view.record_dispatches(srv, est_rt * cpu / cores, cpu, now)
        self.est_sent[ids] = est_rt
        if cfg.probe_slack_s > 0:       # (heard of now, the columns just set)
            self._watch_at = min(self._watch_at, float(self._silence_limit(now, wait[:n], est_rt).min()))
        w = wait[:n]
        if single:
            st = stages[0]
            st.wait_sum += float(w.sum())
            st.wait_n += n
        else:
            k = len(stages)
            ws, wn = np.bincount(sidx, weights=w, minlength=k).tolist(), np.bincount(sidx, minlength=k).tolist()
            for i, st in enumerate(stages):
                st.wait_sum += ws[i]
                st.wait_n += wn[i]
        if cfg.copies and self._prof.corrections:
            # looked at as a possible straggler once well past the time its stage normally takes
            if single:
                gap = self._straggler_baseline(stages[0]) - stages[0].est_runtime
            else:
                gap = np.array([self._straggler_baseline(st) - st.est_runtime for st in stages])[sidx]
            chk = self._next_check(now, w, est_rt + gap)
            self.check_t[ids] = chk
            self._watch_at = min(self._watch_at, float(chk.min()))
        by_server: dict[int, list] = {}
        job_id = self.job_id
        sent = self._sent
        opp = [False] * n_reg + [True] * (n - n_reg)
        if single:
            st = stages[0]
            spec = st.spec
            local = ids - st.offset
            c, mem, cmd, env, cwd, tmo = spec.cpu, spec.mem_gb, spec.command, spec.env, spec.cwd, spec.timeout_s
            limit = cmd is not None
            for t, s, loc, rt, o, a, d, b in zip(ids.tolist(), srv.tolist(), where.tolist(), est_rt.tolist(),
                                                 opp, self.attempt[ids].tolist(),
                                                 spec.durations_s[local].astype(float, copy=False).tolist(),
                                                 st.in_bytes[local].astype(float, copy=False).tolist()):
                sent[t] = task = TaskSpec(job_id, t, a, 0, c, mem, d, b, loc, rt, o, cmd, env, cwd, tmo, limit)
                q = by_server.get(s)
                if q is None:
                    by_server[s] = [task]
                else:
                    q.append(task)
        else:
            for t, s, loc, rt, o, a, si in zip(ids.tolist(), srv.tolist(), where.tolist(), est_rt.tolist(),
                                               opp, self.attempt[ids].tolist(), sidx.tolist()):
                st = stages[si]
                spec = st.spec
                i = t - st.offset
                sent[t] = task = TaskSpec(
                    job_id, t, a, si, spec.cpu, spec.mem_gb, float(spec.durations_s[i]),
                    float(st.in_bytes[i]), loc, rt, o, spec.command, spec.env, spec.cwd, spec.timeout_s,
                    spec.command is not None)
                by_server.setdefault(s, []).append(task)
        for s, tasks in by_server.items():
            out.append(Send(pn_address(s), Dispatch(self.job_id, tasks, cfg.host)))
        if self.clones > 1:
            self._send_clones(ids.tolist(), now, rng, out)
        return n

    # ---- invariants ------------------------------------------------------------
    def validate(self) -> None:
        act = (self.state == S.DISPATCHED) | (self.state == S.RUNNING)
        cpu = np.array([self.stages[i].spec.cpu for i in self.stage_of]) if self.n else np.zeros(0)
        extra_tok, extra_clone, extra_opp = self._extra_counts()
        for t in self.extra:
            assert self.finished or act[t] or (self.state[t] == S.DONE and self.clones > 1), \
                "a task with extra attempts has no first attempt"
        assert abs(extra_clone - self.clone_used) < 1e-6, "clone accounting broken"
        assert self.clone_used <= self.clone_cpu + 1e-6, "clones beyond the job's clone grant"
        assert abs(cpu[act & ~self.opp].sum() + extra_tok - self.used_tokens) < 1e-6, "token accounting broken"
        assert abs(cpu[act & self.opp].sum() + extra_opp - self.outstanding_opp) < 1e-6, \
            "opportunistic accounting broken"
        if not self.finished:
            assert self._opp_active == set(np.flatnonzero(act & self.opp).tolist()), "opportunistic set out of sync"
        assert self.done == int((self.state == S.DONE).sum())
        assert self.finished or not (self.waiting & ~act).any(), "a task waiting at a PN with no attempt out"
        assert all(act[t] and not self.opp[t] for t in self._demoting) or self.finished, \
            "a demotion out for an attempt that is not a regular one"
        assert not self._marked or self._yield_at < INF, "servers told to yield without a give-back"
        queued = sorted(t for st in self.stages for t in st.ready)
        assert queued == np.flatnonzero(self.state == S.READY).tolist(), "ready list out of sync"
