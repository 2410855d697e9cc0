"""A task attempt as a Process Node holds it (queued, running), and the small helpers on its spec."""
from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass

from apollo.core.cluster import IoModel
from apollo.core.messages import TaskReport, TaskSpec

from .config import INF, NEVER_S, PnConfig
from .queue import release_waits


@dataclass(slots=True, init=False)
class Attempt:
    spec: TaskSpec
    state: int                       # a TaskState's value (compiled, a C integer: no int() per report)
    queued_at: float
    started_at: float
    reported: bool                   # its JM was told it is queued (so is told when it starts)
    slowdown: float                  # drawn from the straggler model when it starts

    # (written out: compiled, a dataclass's generated __init__ stays a Python function; one
    # Attempt is made per task, apollo.core.effects)
    def __init__(self, spec: TaskSpec, state: int, queued_at: float, started_at: float = -1.0,
                 reported: bool = False, slowdown: float = 1.0) -> None:
        self.spec = spec
        self.state = state
        self.queued_at = queued_at
        self.started_at = started_at
        self.reported = reported
        self.slowdown = slowdown


def as_regular(s: TaskSpec) -> TaskSpec:
    """``s`` as a regular (non-opportunistic) attempt: ``dataclasses.replace`` at a fraction of
    its cost (a new message: the original may be shared with its sender in one process)."""
    return TaskSpec(s.job_id, s.task, s.attempt, s.stage, s.cpu, s.mem_gb, s.duration_s, s.input_bytes,
                    s.locality, s.est_runtime_s, False, s.command, s.env, s.cwd, s.timeout_s, s.mem_limit,
                    s.kind)


def as_opportunistic(s: TaskSpec) -> TaskSpec:
    """``s`` as an opportunistic attempt (a demoted one)."""
    return TaskSpec(s.job_id, s.task, s.attempt, s.stage, s.cpu, s.mem_gb, s.duration_s, s.input_bytes,
                    s.locality, s.est_runtime_s, True, s.command, s.env, s.cwd, s.timeout_s, s.mem_limit,
                    s.kind)


def weighted_pick(w: list[float], rng) -> int:
    """Index drawn with probability proportional to ``w``: ``rng.choice(len(w), p=w/sum(w))``
    (one uniform draw against the normalised cumulative weights) without numpy's per-call cost."""
    total = sum(w)
    cdf = list(itertools.accumulate(x / total for x in w))
    last = cdf[-1]
    return min(bisect.bisect_right(cdf, rng.random() * last), len(w) - 1)


_IDLE_READINGS: dict = {}


def idle_reading(cfg: "PnConfig") -> list[float]:
    """The reading of a server with nothing running or queued (shared; readings are never
    changed in place)."""
    key = (cfg.cores, cfg.mem_gb, cfg.grid.cpu, cfg.grid.mem)
    w = _IDLE_READINGS.get(key)
    if w is None:
        w = _IDLE_READINGS[key] = release_waits(0.0, cfg.cores, cfg.mem_gb, [], cfg.grid.cpu, cfg.grid.mem, NEVER_S)
    return w


def held_by_job(running: "dict[tuple, Attempt]") -> tuple[list[int], list[float]]:
    """The jobs with regular attempts running and the CPUs each holds (what a heartbeat tells
    the RM jobs hold; opportunistic attempts hold nothing: docs/sharing.md)."""
    jobs: list[int] = []
    cpus: list[float] = []
    for a in running.values():
        s = a.spec
        if s.opportunistic:
            continue
        j = s.job_id
        if j in jobs:
            cpus[jobs.index(j)] += s.cpu
        else:
            jobs.append(j)
            cpus.append(s.cpu)
    return jobs, cpus


def end_of(ended: "list[TaskReport]", key: tuple) -> "TaskReport | None":
    """How attempt ``key`` ended, if it is among the lately ended (newest first)."""
    job, task, attempt = key
    for r in reversed(ended):
        if r.attempt == attempt and r.task == task and r.job_id == job:
            return r
    return None


def progress(a: "Attempt", now: float, io: IoModel) -> float:
    """How far a running attempt is (0-1): a synthetic task by its modelled time (its compute
    time stretched by its slowdown, plus start-up and input I/O); a command's is unknown (-1:
    its JM judges it by elapsed time)."""
    s = a.spec
    if s.command is not None or a.started_at < 0:
        return -1.0
    total = s.duration_s * a.slowdown + io.io_time(s.input_bytes, s.locality)
    return min(1.0, (now - a.started_at) / total) if total > 0 else 1.0


def room(running: "dict[tuple, Attempt]", free_c: float, free_m: float, cfg: PnConfig, yielding: dict[int, float],
         now: float, include_opportunistic: bool) -> tuple[float, float, list, float, float]:
    """(free cpu, free memory, releases, next, grow) of a server now: the room free now and the
    (expected end, cpu, mem) of the running tasks that hold theirs, in time order; running
    opportunistic tasks count as free unless asked.

    A task past its runtime estimate is expected to run on (PnConfig.overrun_factor of its age):
    its end moves with time, as does an opportunistic task's advertised end (free within
    opportunistic_room_s, whenever asked, which receivers count down to free). ``grow`` says
    how the reading planned on this room moves after ``now`` until ``next``, when a task's
    planned end passes: -1.0, its waits count down (every end is fixed); else every wait above
    zero grows by ``grow`` per second (the overrun factor: a task overran). Exact for a wait on
    overrunning ends alone; a wait on a fixed end that a moving one masks is over-estimated until
    ``next``, when the PN plans and reports again.
    So a receiver extrapolates the reading and a PN whose tasks overrun need not report again
    while nothing changes (each task's planned end is one report, not one every few seconds)."""
    rel = []
    overrun = cfg.overrun_factor
    opp_room = cfg.opportunistic_room_s
    nxt = INF
    grow = -1.0
    for a in running.values():
        s = a.spec
        if s.opportunistic and not include_opportunistic:
            free_c += s.cpu
            free_m += s.mem_gb
            continue
        planned = a.started_at + s.est_runtime_s
        if planned <= now:
            end = now + overrun * (now - a.started_at) + 1e-3
            moves = overrun
        else:
            end, moves = planned, -1.0
        capped = False
        if s.opportunistic and now + opp_room < end:
            # Advertised as free within opportunistic_room_s (PnConfig.advertise_opportunistic), and
            # counted down to free by the receivers from there: a server holding only
            # opportunistic work reads as free, as a slot scheduler may use it. No report is
            # due for it: a plan at any later time would say "free within opportunistic_room_s"
            # again, at most that much from what the receivers hold.
            end, moves, capped = now + opp_room, -1.0, True
        if yielding and not s.opportunistic and s.job_id in yielding:
            # its room is regular work's from the job's deadline on (free now, once it passed)
            at = yielding[s.job_id]
            if at <= now + 1e-9:
                free_c += s.cpu
                free_m += s.mem_gb
                continue
            if at < end:
                end, moves = at, -1.0
        if moves < 0.0:
            if end < nxt and not capped:
                nxt = end
        elif moves > grow:
            grow = moves
        rel.append((end, s.cpu, s.mem_gb))
    if len(rel) > 1:
        rel.sort()
    return free_c, free_m, rel, nxt, grow
