"""Replay a workload on a live cluster (`apollo replay`, and the heart of `apollo demo`).

Jobs are submitted at their arrival times divided by ``speedup`` (synthetic
task durations are divided by it too), every job is waited for, and the
report is built from the cluster processes' event files with the same
Recorder and build_report the simulator uses (``"mode": "live"``).
"""
from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from apollo.tools import eventlog
from apollo.tools.client import Client
from apollo.core.records import Recorder
from apollo.tools.report import build_report
from apollo.core.spec import JobSpec, Workload


def _speed_up(job: JobSpec, x: float) -> JobSpec:
    if x == 1.0:
        return job
    for s in job.stages:
        s.durations_s = s.durations_s / x
        if s.input_bytes is not None:
            s.input_bytes = s.input_bytes / x     # I/O time shrinks with the rest
    return job


def read_events(folder: Path, since: float = 0.0) -> Recorder:
    rec = Recorder()
    for _, kind, now, data in eventlog.records(folder):
        rec(kind, tuple(data), now)
    return rec


async def replay(folder: Path, workload: Workload, speedup: float = 1.0, on_progress=None,
                 timeout_s: float = 600.0) -> tuple[dict, Recorder]:
    folder = Path(folder).expanduser()
    info = json.loads((folder / "cluster.json").read_text())
    eventlog.empty(folder)       # this run's records only
    jobs = [_speed_up(j, speedup) for j in workload.jobs]
    total_tasks = sum(j.total_tasks for j in jobs)
    state = {"submitted": 0, "done": 0, "failed": 0, "tasks_done": 0, "total_jobs": len(jobs),
             "total_tasks": total_tasks}
    t0 = time.perf_counter()
    async with Client(folder) as c:
        def done(ev):
            state["done"] += 1
            state["failed"] += 0 if ev.ok else 1
            state["tasks_done"] += ev.tasks_done
            if on_progress:
                on_progress(state)
        c.inbox.on_done = done
        ids = []
        start = time.perf_counter()
        for j in jobs:
            delay = j.arrival_s / speedup - (time.perf_counter() - start)
            if delay > 0:
                await asyncio.sleep(delay)
            ids.append(await c.submit(j))
            state["submitted"] += 1
            if on_progress:
                on_progress(state)
        await asyncio.wait_for(asyncio.gather(*(c.wait(i) for i in ids)), timeout_s)
    wall = time.perf_counter() - t0
    await asyncio.sleep(0.2)   # let the last records reach the event files
    rec = read_events(folder)
    cfg = info["config"]
    return build_report(
        rec, mode="live",
        workload={"name": workload.name, "jobs": len(jobs), "tasks": total_tasks},
        cluster={"servers": cfg["pns"], "racks": cfg["racks"], "cores_per_server": cfg["cpus"],
                 "mem_gb_per_server": cfg["mem_gb"],
                 "processes": len(info["processes"])},
        scheduler={"name": cfg.get("scheduler", "apollo"), "policies": ["stable-matching", "tokens:even"],
                   "config": {"speedup": speedup}},
        capacity_cpus=cfg["pns"] * cfg["cpus"], wall_s=wall, sim_time_s=0.0), rec
