"""Deterministic simulation testing: `apollo chaos --seeds N [--start S] [--json PATH]`.

Each seed is a short simulated cluster run with faults drawn from the seed: PN, RM and JM host
crashes (and restarts), message loss (up to 5%), duplication, reordering (network jitter far
above the base latency), a rack cut off for a while, slow servers and failing tasks. Every
actor's ``validate()`` runs after every event (the RM's asserts that granted tokens never exceed
the cluster's cores). At the end:

- every submitted job completed, or failed with a reason a user can read;
- no result counted twice: a completed job's JM counted each of its tasks once, and the report
  counts at most one successful attempt per task;
- nothing is left running or queued at any PN once every job has ended (after a drain);
- the seed run a second time gives the identical report (the determinism check).

A failing seed names the one command that replays it. Seeds run in parallel processes.
"""
from __future__ import annotations

import json
import os
import random
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from apollo.runtime.sim import NetModel, Partition
from apollo.tools.simulate import SimConfig, build, run_report
from apollo.workloads import load_workload

DRAIN_S = 900.0         # after the last job's end: time for orphaned attempts to end or be killed
MAX_SIM_S = 20000.0     # a run still going by then has hung


@dataclass
class Plan:
    """One seed's cluster, workload and faults."""
    seed: int
    workload: str
    servers: int
    racks: int
    cfg: SimConfig
    faults: Counter = field(default_factory=Counter)


def plan(seed: int) -> Plan:
    r = random.Random(seed)
    servers = r.randint(8, 24)
    racks = r.choice([2, 3, 4])
    kind = r.choice(["heavytail", "dag", "smalljobs"])
    jobs = r.randint(6, 16)
    workload = f"{kind}:jobs={jobs}"
    faults: Counter = Counter()
    loss = r.choice([0.0, r.uniform(0.0, 0.05)])
    dup = r.choice([0.0, r.uniform(0.0, 0.03)])
    jitter = r.choice([0.0002, r.uniform(0.001, 0.02)])   # far above the 0.5 ms latency: reordering
    faults["loss"] += loss > 0
    faults["duplication"] += dup > 0
    faults["reordering"] += jitter > 0.0002
    horizon = 60.0 + jobs * 4.0
    crashes = []
    for _ in range(r.randint(0, 3)):
        crashes.append((r.uniform(1.0, horizon), r.randrange(servers), r.uniform(1.0, 60.0)))
        faults["pn_crash"] += 1
    if r.random() < 0.4:
        crashes.append((r.uniform(1.0, horizon), "rm", r.uniform(1.0, 40.0)))
        faults["rm_crash"] += 1
    if r.random() < 0.4:
        crashes.append((r.uniform(1.0, horizon), f"jm:{r.randrange(2)}", r.uniform(1.0, 60.0)))
        faults["jm_host_crash"] += 1
    partitions = []
    if r.random() < 0.3:
        rack = r.randrange(racks)
        inside = frozenset(f"pn:{s}" for s in range(servers) if s % racks == rack)
        t = r.uniform(1.0, horizon)
        partitions.append(Partition(t, t + r.uniform(5.0, 40.0), inside))
        faults["partition"] += 1
    slow = r.choice([0.0, 0.0, r.uniform(0.05, 0.2)])
    fail = r.choice([0.0, 0.0, r.uniform(0.0, 0.03)])
    faults["slow_servers"] += slow > 0
    faults["task_failures"] += fail > 0
    cfg = SimConfig(servers=servers, racks=racks, cores=4.0, mem_gb=16.0, scheduler=r.choice(["apollo", "greedy"]),
                    seed=seed, net=NetModel(jitter_s=jitter, loss=loss, dup=dup), crashes=crashes,
                    partitions=partitions, slow_fraction=slow, fail_prob=fail, jm_hosts=2, check=True,
                    keepalive_timeout_s=15.0, repeat_after_s=5.0, heartbeat_s=1.0, max_sim_s=MAX_SIM_S)
    return Plan(seed, workload, servers, racks, cfg, +faults)      # (+: the kinds that occur)


def run_seed(seed: int) -> tuple[dict, str]:
    """One run of ``seed``: (its report, why it failed or "")."""
    p = plan(seed)
    w = load_workload(p.workload, seed=seed, cluster_servers=p.servers)
    rt, rec, client, meta = build(p.cfg, w)
    try:
        rt.run(until=p.cfg.max_sim_s)
    except AssertionError as e:
        return {}, f"invariant broken at t={rt.now:.3f}: {e or 'assertion'}"
    report = run_report(p.cfg, w, rt, rec, meta, wall_s=0.0)
    why = _check_answers(client, w)
    if not why:
        end = rt.now
        client.expected = float("inf")       # it stops the run when every job has ended: not now
        rt.stopped = False
        try:
            rt.run(until=end + DRAIN_S)
        except AssertionError as e:
            return report, f"invariant broken while draining at t={rt.now:.3f}: {e or 'assertion'}"
        why = _check_after(rt, rec, report, client, w)
    return report, why


def _check_answers(client, w) -> str:
    n = len(w.jobs)
    missing = [i for i in range(n) if i not in client.results and i not in client.refused]
    if missing:
        return f"{len(missing)} of {n} jobs never ended (first: job {missing[0]})"
    for i, d in client.results.items():
        if not d.ok and not d.reason:
            return f"job {i} failed without a reason"
        if d.ok and d.tasks_done and d.tasks_done != w.jobs[i].total_tasks:
            return f"job {i} completed with {d.tasks_done} of {w.jobs[i].total_tasks} task results"
    return ""


def _check_after(rt, rec, report, client, w) -> str:
    for addr, slot in rt.slots.items():
        pn = slot.actor
        if addr.startswith("pn:") and slot.up and (pn.running or pn.queue or pn.opp_queue):
            held = len(pn.running) + len(pn.queue) + len(pn.opp_queue)
            return f"{addr} still holds {held} attempts {DRAIN_S:.0f} s after every job ended"
    ok_tasks = sum(w.jobs[i].total_tasks for i, d in client.results.items() if d.ok)
    if report["tasks"]["completed"] > ok_tasks + sum(
            w.jobs[i].total_tasks for i, d in client.results.items() if not d.ok):
        return f"{report['tasks']['completed']} task results counted for {ok_tasks} tasks"
    return ""


def _comparable(report: dict) -> str:
    r = dict(report)
    r.pop("throughput", None)
    return json.dumps(r, sort_keys=True, default=float)


def check_seed(seed: int) -> dict:
    """Run ``seed`` twice; the outcome as a JSON-able dict."""
    p = plan(seed)
    a, why = run_seed(seed)
    if not why:
        b, why_b = run_seed(seed)
        if why_b:
            why = f"second run differs: {why_b}"
        elif _comparable(a) != _comparable(b):
            why = "not deterministic: the two runs' reports differ"
    return {"seed": seed, "why": why, "faults": dict(p.faults), "replay": f"apollo chaos --seeds 1 --start {seed}"}


def task_share(seeds: int, start: int, index: int, tasks: int) -> list[int]:
    """The seeds task ``index`` of ``tasks`` runs in a sweep over a cluster (every ``tasks``-th,
    so that slow seeds spread evenly)."""
    return list(range(start + index, start + seeds, tasks))


def summary(seeds: int, results: list[dict], wall_s: float) -> dict:
    """The run's JSON: {seeds, passed, failed, wall_s, faults}, whatever ran the seeds."""
    faults: Counter = Counter()
    for r in results:
        faults.update(r["faults"])
    failed = [{k: r[k] for k in ("seed", "why", "replay")} for r in results if r["why"]]
    return {"seeds": seeds, "passed": seeds - len(failed), "failed": failed,
            "wall_s": wall_s, "faults": dict(sorted(faults.items()))}


def run_chaos(seeds: int, start: int = 0, workers: int | None = None, progress=None,
              ids: "list[int] | None" = None) -> dict:
    """Check seeds ``start`` .. ``start + seeds - 1`` (or exactly ``ids``) in ``workers``
    processes; ``progress`` is called with each seed's outcome as it comes."""
    t0 = time.perf_counter()
    workers = workers or min(os.cpu_count() or 1, 8)
    results = []
    ids = range(start, start + seeds) if ids is None else ids
    seeds = len(ids)
    if workers > 1 and seeds > 1:
        with ProcessPoolExecutor(workers) as pool:
            for r in pool.map(check_seed, ids, chunksize=max(1, min(16, seeds // (workers * 4) or 1))):
                results.append(r)
                if progress:
                    progress(r)
    else:
        for s in ids:
            r = check_seed(s)
            results.append(r)
            if progress:
                progress(r)
    return summary(seeds, results, time.perf_counter() - t0)
