"""A job's task table: its stages, the per-task columns of each task's first attempt, the
ready lists, and what the job's attempts hold (tokens, opportunistic allowance).

One row per task, one numpy column per field (a JM of a cluster-sized job keeps 100,000 rows
and a status report touches a few of them). Every change of a task's state goes through the
one transition table (apollo.core.lifecycle.step): ``move`` for one task, ``move_many`` for a
batch. The other parts of the JM (placement, attempts, adoption, the watchdog, the give-back)
read and write these columns; the table itself decides nothing.
"""
from __future__ import annotations

from collections import deque
from typing import Any, Final

import numpy as np

from apollo.core.cluster import REMOTE
from apollo.core.effects import Log
from apollo.core.lifecycle import step
from apollo.core.messages import TaskSpec
from apollo.core.nonzero import count_nonzero
from apollo.core.spec import JobSpec, stage_identity

from .config import JmConfig
from .estimate import bandwidths

# Plain ints for the hot paths (enum attribute access is slow), as literals: compiled, a Final
# literal is a constant wherever it is imported, not a lookup in a module's globals per use.
# The same values as TaskState and AttemptKind (tests/test_jm.py holds them to it).
PENDING: Final = 0
READY: Final = 1
DISPATCHED: Final = 2
RUNNING: Final = 3
DONE: Final = 4
FAILED: Final = 5
KILLED: Final = 6
DUPLICATE: Final = 1
COPY: Final = 2
CLONE: Final = 3
INF: Final = float("inf")
RECENT_KEPT: Final = 32    # a stage's last finished tasks' times kept for the straggler baseline (a median)

_PN_ADDRESSES: list[str] = []


def pn_address(server: int) -> str:
    """"pn:S", made once per server: a fresh string per dispatch costs its formatting and then
    its hashing wherever it is routed (a string keeps its hash)."""
    a = _PN_ADDRESSES
    if server >= len(a):
        a.extend(f"pn:{i}" for i in range(len(a), server + 1))
    return a[server]


def _median(xs: list[float]) -> float:
    """numpy.median of a short list, the same float (the mean of the middle two is (a + b) / 2
    there too), without numpy's ~20 us per call: a stage's baseline is remade per finished task."""
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def filled(n: int, value: Any) -> np.ndarray:
    """np.full(n, value), the same dtype (the value's), read-only: for a few tasks one shared
    array per (size, value), made once (a batch of one task asks several times per pass, and
    jobs of one shape ask the same), without numpy's per-call cost."""
    if not 0 < n <= 16:
        dtype = _DTYPE_OF.get(type(value))
        if dtype is None:
            return np.full(n, value)
        block = np.empty(n, dtype=dtype)     # (np.full's own steps, without its Python wrapper)
        block.fill(value)
        return block
    key = (n, type(value), value)
    got = _FILLED.get(key)
    if got is None:
        if len(_FILLED) > 512:      # (runtime estimates vary: a bounded memo)
            _FILLED.clear()
        got = _FILLED[key] = np.array([value] * n)
        got.flags.writeable = False
    return got


_FILLED: dict[tuple, np.ndarray] = {}
_DTYPE_OF: dict[type, Any] = {float: np.float64, int: np.int64, bool: np.bool_}    # np.full's, of a Python number


_BLANK: dict[int, tuple] = {}
_ZEROS: dict[int, np.ndarray] = {}


def _no_input(n: int) -> np.ndarray:
    """A stage's input bytes when it reads none: zeros, shared and read-only for small stages."""
    got = _ZEROS.get(n)
    if got is None:
        got = np.zeros(n)
        if n > 64:
            return got
        got.flags.writeable = False
        _ZEROS[n] = got
    return got


def _blank_columns(n: int) -> tuple:
    """Fresh per-task column blocks of a job of ``n`` tasks, at their starting values: float64
    (ready_t ... start_t = -1, passed_at and check_t = inf), int32 (attempt, failures, stage_of 0), int8
    (state PENDING, locality REMOTE), bool (opp, queued_seen, waiting), int64 (server -1).
    Copies of blank blocks kept per size (small jobs: the common case)."""
    blank = _BLANK.get(n)
    if blank is None:
        f64 = np.zeros((8, n))
        f64[5] = -1.0
        f64[6:] = np.inf
        i8 = np.zeros((2, n), dtype=np.int8)
        i8[0] = PENDING
        i8[1] = REMOTE
        blank = (f64, np.zeros((3, n), dtype=np.int32), i8, np.zeros((3, n), dtype=bool),
                 np.full(n, -1, dtype=np.int64))
        if n <= 64:
            _BLANK[n] = blank
        else:
            return blank
    return tuple([a.copy() for a in blank])


class Stage:
    __slots__ = ("index", "spec", "offset", "n", "parents", "children", "remaining", "est_runtime",
                 "obs_n", "obs_sum", "reps", "in_bytes", "shape", "priority", "ready", "released", "declared",
                 "mean_in", "recent", "wait_sum", "wait_n", "baseline", "depth")

    def __init__(self, index: int, spec: Any, offset: int) -> None:
        self.index = index
        self.spec = spec
        self.offset = offset
        self.n = spec.tasks
        self.parents: list[int] = []
        self.children: list[int] = []
        self.remaining = spec.tasks
        self.declared: float = spec.estimate_s     # the spec's own estimate, counted as one observation
        self.est_runtime = self.declared
        self.obs_n = 0
        self.obs_sum = 0.0
        self.reps: np.ndarray | None = None
        self.in_bytes: np.ndarray
        if spec.input_bytes is None:
            self.in_bytes = _no_input(spec.tasks)
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
        self.depth = 0               # TaskTable.depth's answer, 0: not known (remade after observe)

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
        self.depth = 0

    def straggler_baseline(self) -> float:
        """What a task of this stage normally takes (compute), judged by its peers as Apollo, LATE
        and Mantri judge stragglers: the median of its finished tasks (a median: the stragglers
        looked for must not set it), or before any finished, the stage's declared mean. A stage
        of one task has no peers and no baseline (inf): its declared "mean" would be that very
        task's own time, which no real scheduler knows before it runs."""
        if self.n < 2:
            return INF
        if self.baseline is None:      # (once per finished task of the stage, not per dispatch)
            obs = self.recent
            self.baseline = _median(obs + [self.declared]) if obs else self.declared
        return self.baseline

    def avg_wait(self) -> float:
        """The mean expected queue wait of the stage's dispatched first attempts."""
        return self.wait_sum / self.wait_n if self.wait_n else 0.0


class TaskTable:
    # (slots: ~2,300 JMs live at once at 20,000 servers, and a status report touches a dozen
    # of a JM's fields; in the object itself they share a few cache lines)
    __slots__ = ("job_id", "cfg", "generation", "stages", "n", "stage_of", "stage_order", "cpu_of", "bw",
                 "in_bytes", "ready_t", "dispatch_t", "exp_wait", "last_heard", "est_sent", "start_t",
                 "passed_at", "check_t", "attempt", "failures", "state", "locality", "opp", "queued_seen",
                 "waiting", "server", "sent", "tokens", "used_tokens", "outstanding_opp", "opp_active",
                 "demoting", "done", "pipelining")

    def __init__(self, job_id: int, spec: JobSpec, tokens: int, config: JmConfig, generation: int) -> None:
        self.job_id = job_id
        self.cfg = config
        self.generation = generation            # > 0: adopting the job from a dead JM host
        self.pipelining: bool = config.profile.gate.pipelining
        self.tokens = tokens
        topo = config.topology
        self.stages: list[Stage] = []
        offset = 0
        names = {}
        for i, s in enumerate(spec.stages):
            st = Stage(i, stage_identity(s, job_id, spec.name, offset), offset)   # (a command's APOLLO_* vars)
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
        self.cpu_of = filled(1, self.stages[0].spec.cpu) if len(self.stages) == 1 else \
            np.array([st.spec.cpu for st in self.stages])       # (read-only)
        self.bw: np.ndarray = bandwidths(config.io)      # (shared, read-only)
        # Per-task columns, carved out of a few blocks copied from blank ones made once per job
        # size (job start-up is on every job's critical path: a copy is one numpy call where
        # making and filling a block is several).
        # check_t: when a running first attempt is looked at as a straggler; passed_at: when
        # lookahead first passed the task over
        # exp_wait: queue wait expected when the task was sent; last_heard: the attempt's last
        # report (or its dispatch); est_sent: runtime (with I/O) expected when it was sent
        f64, i32, i8, flags, server = _blank_columns(n)
        (self.ready_t, self.dispatch_t, self.exp_wait, self.last_heard, self.est_sent, self.start_t,
         self.passed_at, self.check_t) = f64
        self.attempt, self.failures, self.stage_of = i32
        if len(self.stages) == 1:      # (the common case, without numpy's concatenate and repeat)
            self.in_bytes = self.stages[0].in_bytes
        else:
            self.in_bytes = np.concatenate([st.in_bytes for st in self.stages]) if self.stages else np.zeros(0)
            self.stage_of[:] = np.arange(len(self.stages), dtype=np.int32).repeat([s.n for s in self.stages])
        # Attempt numbers start above every earlier home's (whose attempts may still be at PNs).
        if generation:
            self.attempt[:] = generation << 16
        self.state, self.locality = i8
        self.opp, self.queued_seen, self.waiting = flags   # queued_seen: reported queued; waiting:
        # its PN said it is queued, and no start since
        self.server = server
        self.sent: list[TaskSpec | None] = [None] * n   # each task's last attempt as sent
        self.used_tokens = 0.0
        self.outstanding_opp = 0.0
        self.opp_active: set[int] = set()      # opportunistic attempts dispatched or running
        self.demoting: set[int] = set()        # tasks whose queued attempt a DemoteTask is out for
        self.done = 0
        self.stage_order: list[int] = [0]
        self._prioritise()

    def _prioritise(self) -> None:
        """Stage priority = its runtime estimate plus the longest chain below it (critical path)."""
        stages = self.stages
        if len(stages) == 1:      # (no chain below it: + 0.0, as the loop adds, the same float)
            stages[0].priority = stages[0].est_runtime + 0.0
            self.stage_order = [0]
            return
        for st in reversed(stages):
            below = max((stages[c].priority for c in st.children), default=0.0)
            st.priority = st.est_runtime + below
        self.stage_order = sorted(range(len(stages)), key=lambda i: -stages[i].priority)

    # ---- state changes ---------------------------------------------------------------
    def move(self, t: int, event: str) -> int:
        """Task ``t``'s first attempt takes ``event`` (apollo.core.lifecycle; an illegal one raises)."""
        to: int = step(self.state.item(t), event)     # (a TaskState is an int: no int() call)
        self.state[t] = to
        return to

    def move_many(self, ids: np.ndarray, frm: int, event: str) -> None:
        """Tasks ``ids``, each in state ``frm`` (else IllegalTransition), all take ``event``."""
        cur = self.state[ids]
        if count_nonzero(cur != frm):
            step(int(cur[np.flatnonzero(cur != frm)[0]]), event)     # raises IllegalTransition
        self.state[ids] = int(step(frm, event))

    def release_stage(self, st: Stage, now: float) -> None:
        """Its inputs are complete: its tasks are ready, larger input first."""
        st.released = True
        ready = int(step(PENDING, "inputs_ready"))
        a, b = st.offset, st.offset + st.n
        if st.spec.input_bytes is None and st.remaining == st.n:    # no input: in index order
            self.state[a:b] = ready
            self.ready_t[a:b] = now
            st.ready.extend(range(a, b))
            return
        ids = st.offset + (-st.in_bytes).argsort(kind="stable")
        if st.remaining < st.n:        # an adopted job: tasks done under an earlier home stay done
            ids = ids[self.state[ids] != DONE]
            self.state[ids] = ready
            self.ready_t[ids] = now
        else:
            self.state[a:b] = ready
            self.ready_t[a:b] = now
        st.ready.extend(ids.tolist())

    def mark_done(self, bitmap: bytes) -> None:
        """Tasks an earlier home of the job finished (as the RM stored them): done, not re-run."""
        done = np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8), count=self.n).astype(bool)
        for t in np.flatnonzero(done).tolist():
            self.move(t, "done_before")
            self.stages[self.stage_of.item(t)].remaining -= 1
            self.done += 1

    def done_bitmap(self) -> bytes:
        return np.packbits(self.state == DONE).tobytes()

    def active(self) -> np.ndarray:
        """Which tasks have their first attempt out (dispatched or running)."""
        return (self.state == DISPATCHED) | (self.state == RUNNING)

    # ---- the ready lists -------------------------------------------------------------
    def pop_ready(self, k: int) -> list[int]:
        got: list[int] = []
        for i in self.stage_order:
            q = self.stages[i].ready
            while q and len(got) < k:
                got.append(q.popleft())
            if len(got) >= k:
                break
        return got

    def push_back(self, ids: Any) -> None:
        for t in list(ids)[::-1]:
            self.stages[self.stage_of[t]].ready.appendleft(t)

    def has_ready(self) -> bool:
        for st in self.stages:
            if st.ready:
                return True
        return False

    def least_ready_cpu(self) -> float:
        return min((st.spec.cpu for st in self.stages if st.ready), default=0.0)

    # ---- what the job holds ----------------------------------------------------------
    def depth(self, st: Stage) -> int:
        """Tasks of ``st`` one token may have in flight: 1, or more for pipelined short tasks
        (DispatchConfig.pipeline_s), by the stage's expected time per task with a node-local read.
        (Kept on the stage until its estimate changes: a pass asks several times.)"""
        d = st.depth
        if d:
            return d
        cfg = self.cfg
        if not self.pipelining or cfg.dispatch.pipeline_s <= 0:
            d = 1
        else:
            per_task = st.est_runtime + cfg.io.init_s + st.mean_in / self.bw.item(0)
            d = 1 if per_task >= cfg.dispatch.pipeline_s else \
                int(min(cfg.dispatch.max_pipeline, 1 + cfg.dispatch.pipeline_s // max(per_task, 1e-6)))
        st.depth = d
        return d

    def max_depth(self) -> int:
        """Attempts one token may have out (pipelined short tasks: several, queued behind it)."""
        d = 1      # (a loop: compiled, a generator is an object made per call)
        for st in self.stages:
            k = self.depth(st)
            if k > d:
                d = k
        return d

    def demand(self) -> int:
        """CPUs this job could use now: ready plus outstanding tasks."""
        ready = 0.0
        for st in self.stages:
            if st.ready:
                ready += len(st.ready) * st.spec.cpu
        return int(round(ready + self.used_tokens + self.outstanding_opp))

    def free_slot(self, t: int, cpu: float) -> bool:
        """Give back the slot of ``t``'s active attempt (a token, or opportunistic allowance);
        True if the attempt was opportunistic."""
        self.waiting[t] = False
        if self.demoting:
            self.demoting.discard(t)
        if self.opp_active and t in self.opp_active:
            self.outstanding_opp -= cpu
            self.opp_active.discard(t)
            return True
        self.used_tokens -= cpu
        return False

    # ---- records -----------------------------------------------------------------------
    def log_attempt(self, t: int, outcome: str, t_end: float, out: list) -> None:
        """The record of ``t``'s first attempt, read off the per-task columns."""
        st = self.stages[self.stage_of.item(t)]
        self.record(st, t, self.attempt.item(t), self.server.item(t), self.locality.item(t),
                    self.start_t.item(t), t_end, outcome, bool(self.opp.item(t)), out)

    def record(self, st: Stage, t: int, attempt: int, server: int, loc: int, t_start: float,
               t_end: float, outcome: str, opp: bool, out: list, kind: int = 0,
               dispatch_t: float | None = None) -> None:
        """An ended attempt, for the report (columns: apollo.tools.report A_*)."""
        out.append(Log("attempt", (self.job_id, st.index, t - st.offset, attempt, server, loc,
                                   self.ready_t.item(t), self.dispatch_t.item(t) if dispatch_t is None else dispatch_t,
                                   t_start, float(t_end), outcome, opp, st.spec.cpu, st.reps is not None, kind)))

    def spec_for(self, t: int, attempt: int) -> TaskSpec:
        """Task ``t`` as its attempt ``attempt`` would have been sent (no locality known)."""
        st = self.stages[self.stage_of.item(t)]
        spec = st.spec
        i = t - st.offset
        return TaskSpec(self.job_id, t, attempt, st.index, spec.cpu, spec.mem_gb, float(spec.durations_s[i]),
                        float(st.in_bytes[i]), REMOTE, st.est_runtime, False, spec.command, spec.env, spec.cwd,
                        spec.timeout_s, spec.command is not None)
