"""The sharing benches' common ground: a scenario (a queue tree, a cluster, jobs arriving at set
times) run the same way simulated or on a live local cluster, and measured the same way, from
the run's attempt records (docs/sharing.md says what the figures mean).

A live run starts a cluster (`apollo cluster up` with the scenario's queue file), submits each
job at its arrival time, waits until the measured jobs are done (or the horizon has passed),
cancels the rest, reads the cluster's event records and stops it. Times are then on the
cluster's clock, with the measured side's arrival at its first job's submission, as the RM
recorded it. A simulated run may use the live cluster's cadences (``like_live``: heartbeats,
views and host reports as often as the live processes send them), so that the two agree on
what they can.
"""
from __future__ import annotations

import asyncio
import math
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from apollo.core.records import A_CPU, A_END, A_JOB, A_OPP, A_OUTCOME, A_START, Recorder
from apollo.tools.simulate import SimConfig, build
from apollo.core.spec import JobSpec, Workload
from rm.queues import QueueTree


@dataclass
class Scenario:
    name: str
    tree_text: str                  # the queue file (TOML): a live cluster reads it from a file
    jobs: list[JobSpec]             # each with arrival_s, queue and user
    measured: set[int]              # indices of the jobs whose queue's share is measured
    borrowers: set[int]             # indices of the jobs whose kills are counted
    horizon_s: float                # measured this long after the measured side arrives
    servers: int = 100
    racks: int = 5
    cores: float = 2.0
    mem_gb: float = 8.0

    @property
    def tree(self) -> QueueTree:
        return QueueTree.parse_text(self.tree_text, source=self.name)

    @property
    def capacity(self) -> float:
        return self.servers * self.cores

    @property
    def arrive_s(self) -> float:
        return min(self.jobs[i].arrival_s for i in self.measured)


@dataclass
class Run:
    """A run's records, with its jobs' ids and the measured side's arrival on the run's clock."""
    rec: Recorder
    ids: list[int]                  # scenario index -> job id
    arrive: float
    mode: str                       # "sim" | "live"
    extra: dict = field(default_factory=dict)

    def jobs(self, indices) -> set[int]:
        return {self.ids[i] for i in indices}

    def held(self, indices, times: np.ndarray) -> np.ndarray:
        """CPUs the regular attempts of the jobs ``indices`` ran on at each of ``times``."""
        return held(self.rec, self.jobs(indices), times)

    def kills(self, indices) -> tuple[int, int]:
        """(regular attempts preempted, opportunistic ones) of the jobs ``indices``."""
        jobs = self.jobs(indices)
        rows = [r for r in self.rec.attempts if r[A_JOB] in jobs and r[A_OUTCOME] == "preempted"]
        return sum(1 for r in rows if not r[A_OPP]), sum(1 for r in rows if r[A_OPP])


def held(rec, jobs: set[int], times: np.ndarray) -> np.ndarray:
    """CPUs that regular attempts of ``jobs`` held (started, not ended) at each of ``times``."""
    rows = np.array([(r[A_START], r[A_END], r[A_CPU]) for r in rec.attempts
                     if r[A_JOB] in jobs and r[A_START] >= 0 and not r[A_OPP]], dtype=float).reshape(-1, 3)
    if len(rows) == 0:
        return np.zeros(len(times))
    on = (rows[:, 0][None, :] <= times[:, None]) & (times[:, None] < rows[:, 1][None, :])
    return (on * rows[:, 2][None, :]).sum(axis=1)


def like_live(cfg: SimConfig) -> SimConfig:
    """``cfg`` with the live cluster's cadences (apollo.tools.process): PNs re-report within 0.2 s of a
    change, the RM spreads its view every 0.25 s, JM hosts report
    every 0.25 s, and Apollo's JMs may dispatch opportunistic tasks."""
    from apollo.tools.process import HOST_DEAD_AFTER_S, HOST_REPORT_S, LIVE_PN, VIEW_INTERVAL_S
    return replace(cfg, heartbeat_s=LIVE_PN["heartbeat_s"],
                   view_interval_s=VIEW_INTERVAL_S, host_report_s=HOST_REPORT_S,
                   host_dead_after_s=HOST_DEAD_AFTER_S, opportunistic=True)


def run_sim(scn: Scenario, scheduler: str, seed: int = 1, live_cadence: bool = False) -> Run:
    cfg = SimConfig(servers=scn.servers, racks=scn.racks, cores=scn.cores, mem_gb=scn.mem_gb, scheduler=scheduler,
                    seed=seed, wire=False, queues=scn.tree)
    if live_cadence:
        cfg = like_live(cfg)
    rt, rec, _, _ = build(cfg, Workload(scn.name, scn.jobs))
    last = max(j.arrival_s for j in scn.jobs)
    rt.run(until=max(last, scn.arrive_s + scn.horizon_s) + 1.0)
    # attempts still running then are recorded as they end: run on until the measured jobs end
    rt.run(until=scn.arrive_s + scn.horizon_s + 4 * _longest(scn))
    return Run(rec, list(range(len(scn.jobs))), scn.arrive_s, "sim")


def _longest(scn: Scenario) -> float:
    return max(float(np.max(s.durations_s)) for j in scn.jobs for s in j.stages if s.tasks)


def run_live(scn: Scenario, scheduler: str, folder: Path | None = None, procs: int = 2) -> Run:
    """The scenario on a live local cluster (started here and stopped after)."""
    from apollo.tools.livecluster import down, up
    from apollo.tools.replay import read_events
    tmp = None
    if folder is None:
        tmp = tempfile.TemporaryDirectory(prefix="apollo-bench-")
        folder = Path(tmp.name) / "cluster"
    folder.mkdir(parents=True, exist_ok=True)
    qfile = folder.parent / f"{scn.name}-queues.toml"
    qfile.write_text(scn.tree_text)
    up(folder, pns=scn.servers, racks=scn.racks, procs=procs, cpus=scn.cores, mem_gb=scn.mem_gb,
       scheduler=scheduler, queues=str(qfile), timeout_s=60.0)
    try:
        ids = asyncio.run(_drive(folder, scn))
        time.sleep(0.5)                         # the last records reach the event files
        rec = read_events(folder)
    finally:
        down(folder)
        if tmp is not None:
            tmp.cleanup()
    submitted = {r[0]: r[1] for r in rec.submitted}
    arrive = min(submitted[ids[i]] for i in scn.measured)
    return Run(rec, ids, arrive, "live")


async def _drive(folder: Path, scn: Scenario) -> list[int]:
    from apollo.tools.client import Client
    order = sorted(range(len(scn.jobs)), key=lambda i: scn.jobs[i].arrival_s)
    ids = [-1] * len(scn.jobs)
    async with Client(folder) as c:
        start = time.monotonic()
        for i in order:
            delay = scn.jobs[i].arrival_s - (time.monotonic() - start)
            if delay > 0:
                await asyncio.sleep(delay)
            ids[i] = await c.submit(scn.jobs[i])
        end = start + scn.arrive_s + scn.horizon_s
        try:
            await asyncio.wait_for(asyncio.gather(*(c.wait(ids[i]) for i in scn.measured)),
                                   max(1.0, end - time.monotonic()))
        except asyncio.TimeoutError:
            pass
        left = end - time.monotonic()
        if left > 0:                            # measured to the horizon in either case
            await asyncio.sleep(left)
        for i in order:
            c.cancel(ids[i])
        await asyncio.sleep(1.0)                # the cancels land (their attempts' records too)
    return ids


# ---- the figures -------------------------------------------------------------------------
def first_time(times: np.ndarray, ok: np.ndarray) -> float:
    i = np.flatnonzero(ok)
    return float(times[i[0]]) if len(i) else float("inf")


def back_after(run: Run, indices, target: float, horizon_s: float, step: float = 0.05) -> tuple[float, np.ndarray,
                                                                                                  np.ndarray]:
    """Seconds from the measured side's arrival until ``indices`` hold 95% of ``target`` CPUs
    (inf: not within the horizon); with the sample times and holdings."""
    times = run.arrive + np.arange(0.0, horizon_s, step)
    h = run.held(indices, times)
    return first_time(times, h >= 0.95 * target - 1e-9) - run.arrive, times, h


def short_at(run: Run, indices, target: float, after_s: float) -> int:
    """Whole CPUs ``indices`` are short of ``target`` ``after_s`` after arriving: what a give-back
    at that moment must kill at the least (docs/sharing.md)."""
    at = run.arrive + after_s - 1e-6
    got = float(run.held(indices, np.array([at]))[0])
    return max(0, math.ceil(target - got - 1e-9))


def longest_below(times: np.ndarray, ok: np.ndarray) -> float:
    """The longest stretch of ``times`` where ``ok`` is False (seconds)."""
    best = cur = 0.0
    step = float(times[1] - times[0]) if len(times) > 1 else 0.0
    for x in ok.tolist():
        cur = 0.0 if x else cur + step
        best = max(best, cur)
    return best
