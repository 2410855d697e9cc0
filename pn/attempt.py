"""A task attempt as a Process Node holds it (queued, running), and the small helpers on its spec."""
from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass

from apollo.core.cluster import IoModel
from apollo.core.lifecycle import TaskState
from apollo.core.messages import TaskReport, TaskSpec

from .config import NEVER_S, PnConfig
from .queue import release_waits


@dataclass(slots=True)
class Attempt:
    spec: TaskSpec
    state: TaskState
    queued_at: float
    started_at: float = -1.0
    reported: bool = False           # its JM was told it is queued (so is told when it starts)
    slowdown: float = 1.0            # drawn from the straggler model when it starts


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
