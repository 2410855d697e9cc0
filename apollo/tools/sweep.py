"""Sweeps on a live cluster: `apollo chaos --seeds N --cluster DIR` (and `apollo bench compare
--cluster DIR`, bench/compare.py, through ``run_array``).

The seeds become one job of command tasks, a job array: task i of K runs `apollo chaos
--as-task`, which checks every K-th seed from ``start + i`` (apollo.tools.chaos.task_share,
by its APOLLO_TASK_INDEX and APOLLO_TASKS) and prints one JSON line per seed. The cluster
places the tasks like any others, on joined hosts too, and retries an attempt lost with its
PN. Once the job is done, each task's output is read where it ran, over the cluster's own
protocol (apollo.tools.logs), from the attempt whose result counted.

No seed is counted twice: a task's result is taken from one attempt only (a duplicate, or an
attempt before a retry, is ignored), and only for the seeds that task owns; a seed no task
answered for is a failure naming its replay command. The result is the same JSON as a local
run (apollo.tools.chaos.summary), plus the job and the task count.
"""
from __future__ import annotations

import asyncio
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from apollo.core.spec import JobSpec, StageSpec
from apollo.tools.chaos import summary, task_share

SEEDS_PER_TASK = 20       # a task's share: a few seconds to a minute of work, so a lost one costs little
SEED_S = 2.0              # a seed's wall time, checked twice, as the JM's estimate
COLLECT_S = 30.0          # after the job: how long to wait for the records and every task's output
RETRIES = 10              # attempts a task may fail (a PN killed mid-sweep loses its attempts)


def task_count(seeds: int, cores: float, tasks: int | None = None) -> int:
    """Tasks for ``seeds`` seeds: ``tasks`` if given, else about SEEDS_PER_TASK seeds each but
    at least one task per core (never more tasks than seeds)."""
    if tasks is None:
        tasks = max(int(cores), math.ceil(seeds / SEEDS_PER_TASK))
    return max(1, min(seeds, tasks))


def sweep_job(seeds: int, start: int, tasks: int, native: str = "auto") -> JobSpec:
    """The job that runs ``seeds`` seeds from ``start`` over ``tasks`` command tasks (``native``:
    each task's ``--native``)."""
    command = (sys.executable, "-m", "apollo.tools.cli", "chaos", "--seeds", str(seeds), "--start", str(start),
               "--workers", "1", "--native", native, "--as-task")
    per_task = math.ceil(seeds / tasks) * SEED_S
    stage = StageSpec("seeds", tasks, np.full(tasks, per_task), cpu=1.0, mem_gb=1.0, command=command)
    return JobSpec(f"chaos-{start}-{start + seeds - 1}", [stage], max_retries=RETRIES)


CHAOS_KEYS = ("seed", {"why", "faults", "replay"})      # a chaos task's line: its key, what it must carry


def parse_results(data: bytes, owned: list[int], keys: tuple = CHAOS_KEYS) -> dict[int, dict]:
    """The results in a task's output (one JSON object a line), for the keys it owns only
    (anything else is ignored; a key given twice counts once). ``keys``: the field that names a
    result, and the fields a result must have."""
    field, required = keys
    mine = set(owned)
    got: dict[int, dict] = {}
    for line in data.decode("utf-8", "replace").splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if isinstance(r, dict) and r.get(field) in mine and required <= r.keys():
            got.setdefault(r[field], r)
    return got


def chaos_on_cluster(folder: Path, seeds: int, start: int = 0, tasks: int | None = None, progress=None,
                     submit_timeout_s: float = 60.0, native: str = "auto", progress_s: float = 0.0) -> dict:
    """``apollo chaos --seeds N --start S --cluster DIR``: the same JSON as a local run, plus
    the job and its task count (``progress_s``: run_array's)."""
    from apollo.tools.livecluster import read_info
    t0 = time.perf_counter()
    cfg = read_info(folder)["config"]
    k = task_count(seeds, cfg["pns"] * cfg["cpus"], tasks)
    owned = {t: task_share(seeds, start, t, k) for t in range(k)}
    job_id, found = run_array(folder, sweep_job(seeds, start, k, native), owned, CHAOS_KEYS, submit_timeout_s,
                              note=lambda j: print(f"sweep: job {j}, {seeds} seeds over {k} tasks on the cluster "
                                                   f"in {folder}", flush=True), progress_s=progress_s)
    results = []
    for t in range(k):
        for s in owned[t]:
            r = found.get(s) or {"seed": s, "faults": {}, "replay": f"apollo chaos --seeds 1 --start {s}",
                                 "why": f"no result: task seeds:{t} of job {job_id} did not report it "
                                        f"(apollo logs {job_id} --task seeds:{t} --cluster {folder})"}
            results.append(r)
            if progress:
                progress(r)
    out = summary(seeds, results, time.perf_counter() - t0)
    out.update(cluster=str(folder), job=job_id, tasks=k)
    return out


def run_array(folder: Path, spec: JobSpec, owned: dict[int, list[int]], keys: tuple,
              submit_timeout_s: float = 60.0, note=None, progress_s: float = 0.0,
              what: str = "sweep") -> tuple[int, dict[int, dict]]:
    """Run ``spec`` (one stage of command tasks, each printing its results as JSON lines) on
    the cluster in ``folder``, wait for it and gather what each task owns (``collect``):
    (the job's id, results by key). Raises ClusterError if the job fails. ``note(job_id)``
    once it is accepted; every ``progress_s`` (> 0) while it runs, a line saying how far it
    is, headed ``what``."""
    from apollo.runtime.live import run
    return run(_run_array(folder, spec, owned, keys, submit_timeout_s, note, progress_s, what))


async def _run_array(folder: Path, spec: JobSpec, owned: dict[int, list[int]], keys: tuple,
                     submit_timeout_s: float, note, progress_s: float, what: str) -> tuple[int, dict[int, dict]]:
    from apollo.tools.client import Client
    from apollo.tools.livecluster import ClusterError
    async with Client(folder) as c:
        job_id = await c.submit(spec, timeout_s=submit_timeout_s)
        if note:
            note(job_id)
        t0 = time.monotonic()
        ending = asyncio.ensure_future(c.wait(job_id))
        while progress_s > 0 and not ending.done():
            # (a sweep runs for as long as an hour: say how far it is, and whether attempts fail)
            await asyncio.wait({ending}, timeout=progress_s)
            try:
                st = None if ending.done() else c.status(job_id)
            except Exception as e:     # (the folder's store or records unreadable now: no line, the sweep goes on)
                print(f"{what}: job {job_id}: progress unknown ({type(e).__name__}: {e})", flush=True)
                st = None
            if st is not None:
                failed = sum(s.failed_attempts for s in st.stages)
                print(f"{what}: job {job_id}: {st.done}/{st.tasks} tasks done"
                      + (f", {failed} attempts failed" if failed else "")
                      + f", {time.monotonic() - t0:.0f} s", flush=True)
        done = await ending
        if not done.ok:
            raise ClusterError(f"job {job_id} ({spec.name}) failed: {done.reason} "
                               f"(apollo job {job_id} --cluster {folder})")
        return job_id, await collect(c, folder, job_id, spec, owned, keys)


async def collect(c, folder: Path, job_id: int, spec: JobSpec, owned: dict[int, list[int]],
                  keys: tuple = CHAOS_KEYS) -> dict[int, dict]:
    """The results of a finished job array (one stage): task t must report the keys
    ``owned[t]``; each result is taken from the one attempt of its task whose result counted
    (the first done; others done too are duplicates and skipped). Waits up to COLLECT_S for the
    records to say which, and for every task's output to be complete."""
    k = len(owned)
    from apollo.tools.client import EventTail
    from apollo.tools.livecluster import read_info
    from apollo.tools.logs import LogReader, job_attempts, pn_processes
    processes = pn_processes(folder, read_info(folder))
    reader = LogReader(c, processes)
    tail = EventTail(folder)
    records: list = []
    stages = [(s.name, s.tasks) for s in spec.stages]
    found: dict[int, dict] = {}
    complete: set[int] = set()
    deadline = time.monotonic() + COLLECT_S
    while True:
        records += tail.poll()
        listings = await reader.listings(job_id)
        attempts = job_attempts(job_id, stages, records, listings, processes)
        for t in range(k):
            if t in complete:
                continue
            mine = owned[t]
            done = sorted((a for a in attempts.get(t, []) if a.outcome == "done" and a.process),
                          key=lambda a: (a.t_end, a.attempt))
            for a in done[:1]:           # the attempt whose result counted: only that one
                data = b"".join([chunk async for chunk, _ in reader.chunks(a, False)])
                got = parse_results(data, mine, keys)
                if len(got) == len(mine):
                    found.update(got)
                    complete.add(t)
        if len(complete) == k or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.5)
