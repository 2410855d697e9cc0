"""apollo vs greedy vs fifo vs sparrow: job completion (mean, p50, p95) and node locality, on the shared traces
and the generators, at several loads; and whether a seeded run is deterministic.

Each cell is one seeded simulation (``--seed``, default 3). Workloads (name: source, jobs,
servers/racks): fb2009-day0 (SWIM FB-2009 day 0, every job, 1000/20), fb2010 (SWIM FB-2010,
first 3000 jobs, 1000/20), yh1 (the YH1 Hawk/Eagle trace, 1000/20), fb2009-gen (the fb2009
generator, 3000 jobs, 1000/20), heavytail (the heavytail generator, 5000 jobs, 100/5: at 1000
servers its jobs fit in seconds whatever the scheduler). Determinism: the first cell is run
twice and its reports compared, wall-clock figures aside. sparrow is Sparrow's batch sampling
(jm/policies/sparrow.py, docs/policies.md), the decentralized baseline researchers expect.

JSON: {"rows": [{"workload", "load", "scheduler", "mean", "p50", "p95", "node_locality"}],
"apollo_at_least_greedy": {"mean": bool, "p50": bool}, "deterministic": bool, "setup"}.
"""
from __future__ import annotations

import json
import sys

from apollo.tools.simulate import SimConfig, run_simulation
from apollo.workloads import load_workload
from apollo.tools.cli.options import Parser, count, listing, number
from jm.policies import PROFILES

from .common import shared_trace, write_json

WORKLOADS = {
    "fb2009-day0": ("trace:FB-2009_samples_24_times_1hr_0.tsv", None, 1000, 20),
    "fb2010": ("trace:FB-2010_samples_24_times_1hr_withInputPaths_0.tsv", 3000, 1000, 20),
    "yh1": ("trace:YH1_sub.tr", None, 1000, 20),
    "fb2009-gen": ("fb2009:jobs=3000", None, 1000, 20),
    "heavytail": ("heavytail:jobs=5000", None, 100, 5),
}


def run_cell(name: str, load: float, scheduler: str, seed: int, first: int | None = None) -> dict:
    """One cell; ``first``: the workload's first K jobs only (a quick run)."""
    src, jobs, servers, racks = WORKLOADS[name]
    jobs = min(jobs, first) if jobs and first else (jobs or first)
    path = shared_trace(src[6:]) if src.startswith("trace:") else src
    wl = load_workload(path, seed=seed, cluster_servers=servers).first(jobs)
    wl.scaled_to_load(load, servers * 4.0)
    return run_simulation(wl, SimConfig(servers=servers, racks=racks, scheduler=scheduler, seed=seed, wire=False))


def strip(report: dict) -> str:
    r = dict(report)
    r.pop("throughput", None)
    return json.dumps(r, sort_keys=True)


def row_of(w: str, load: float, s: str, r: dict) -> dict:
    j = r["job_completion_s"]
    return {"workload": w, "load": load, "scheduler": s, "mean": j["mean"], "p50": j["p50"],
            "p95": j["p95"], "node_locality": r["locality"]["node"],
            "jobs_completed": r["jobs"]["completed"], "jobs": r["jobs"]["submitted"]}


def digest(report: dict) -> str:
    """A report's identity, wall-clock figures aside (the determinism check)."""
    import hashlib
    return hashlib.sha256(strip(report).encode()).hexdigest()


def print_row(row: dict) -> None:
    print(f"{row['workload']:<12} {row['load']:>5.2f} {row['scheduler']:<9} {row['mean']:>8.2f} {row['p50']:>7.2f} "
          f"{row['p95']:>8.1f} {row['node_locality']:>9.1%}", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="apollo bench compare", description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", type=listing(tuple(WORKLOADS)), default=list(WORKLOADS),
                   help=f"comma-separated workloads (default: all of {', '.join(WORKLOADS)})")
    p.add_argument("--loads", type=listing(number(0, 10, lo_open=True)), default=[0.7, 0.85, 0.95],
                   help="comma-separated CPU loads, each in (0, 10] (default 0.7,0.85,0.95)")
    p.add_argument("--schedulers", type=listing(tuple(PROFILES)), default=["apollo", "greedy", "fifo", "sparrow"],
                   help="comma-separated profiles (default apollo,greedy,fifo,sparrow)")
    p.add_argument("--seed", type=count(0), default=3, help="the random seed (default 3)")
    p.add_argument("--jobs", type=count(1), default=None, help="each workload's first K jobs only (a quick run)")
    p.add_argument("--json", help="write the results (report JSON) here")
    p.add_argument("--cluster", metavar="DIR", help="run each cell as a command task of this live cluster "
                   "(joined hosts take their share) and gather the same JSON")
    p.add_argument("--as-task", action="store_true",
                   help="(what the tasks of a --cluster run execute) the cell APOLLO_TASK_INDEX names, as a JSON line")
    a = p.parse_args(argv)
    names, loads, scheds = list(a.workloads), list(a.loads), list(a.schedulers)
    cells = [(w, load, s) for w in names for load in loads for s in scheds]
    if a.as_task:
        return _one_cell(cells, a.seed, a.jobs)
    print(f"{'workload':<12} {'load':>5} {'scheduler':<9} {'mean s':>8} {'p50 s':>7} {'p95 s':>8} {'node loc':>9}")
    if a.cluster:
        rows, deterministic = _on_cluster(a, cells)
    else:
        rows, first = [], None
        for w, load, s in cells:
            r = run_cell(w, load, s, a.seed, a.jobs)
            first = first or digest(r)
            rows.append(row_of(w, load, s, r))
            print_row(rows[-1])
        deterministic = digest(run_cell(*cells[0], a.seed, a.jobs)) == first
    cells_by = {(r["workload"], r["load"], r["scheduler"]): r for r in rows}
    wins: dict[str, list[bool]] = {"mean": [], "p50": []}
    for w in names:
        for load in loads:
            ap, gr = cells_by.get((w, load, "apollo")), cells_by.get((w, load, "greedy"))
            if ap and gr:
                for k in wins:
                    wins[k].append(ap[k] <= gr[k] * 1.0 + 1e-9)
    out = {"rows": rows, "apollo_at_least_greedy": {k: all(v) for k, v in wins.items()},
           "apollo_at_least_greedy_cells": {k: f"{sum(v)}/{len(v)}" for k, v in wins.items()},
           "deterministic": deterministic,
           "setup": {"seed": a.seed, "workloads": {w: WORKLOADS[w] for w in names}, "loads": loads,
                     **({"jobs": a.jobs} if a.jobs else {})}}
    if a.cluster:
        out["setup"]["cluster"] = a.cluster
    print(f"apollo <= greedy: mean in {out['apollo_at_least_greedy_cells']['mean']} cells, "
          f"p50 in {out['apollo_at_least_greedy_cells']['p50']}; seeded run repeated: "
          f"{'identical report' if deterministic else 'REPORTS DIFFER'}")
    write_json(out, a.json)
    return 0


def _one_cell(cells: list[tuple], seed: int, jobs: int | None) -> int:
    """A task of a --cluster run: cell APOLLO_TASK_INDEX (the last task repeats the first cell:
    the determinism check), one JSON line."""
    import os
    i = int(os.environ.get("APOLLO_TASK_INDEX", "-1"))
    if not 0 <= i <= len(cells):
        print(f"apollo bench compare --as-task: APOLLO_TASK_INDEX {i} is not a cell (0-{len(cells)})", file=sys.stderr)
        return 2
    w, load, s = cells[i % len(cells)]
    r = run_cell(w, load, s, seed, jobs)
    print(json.dumps({"cell": i, "digest": digest(r), "row": row_of(w, load, s, r)}), flush=True)
    return 0


def _on_cluster(a, cells: list[tuple]) -> tuple[list[dict], bool]:
    """Every cell a task of one job on the cluster, plus one repeating the first cell."""
    from pathlib import Path

    import numpy as np

    from apollo.core.spec import JobSpec, StageSpec
    from apollo.tools.sweep import run_array
    n = len(cells) + 1
    command = (sys.executable, "-m", "apollo.tools.cli", "bench", "compare", "--workloads", ",".join(a.workloads),
               "--loads", ",".join(map(str, a.loads)), "--schedulers", ",".join(a.schedulers), "--seed", str(a.seed),
               *(("--jobs", str(a.jobs)) if a.jobs else ()), "--as-task")
    spec = JobSpec(f"compare-seed{a.seed}", [StageSpec("cells", n, np.full(n, CELL_S), cpu=1.0, mem_gb=2.0,
                                                        command=command)], max_retries=10)
    folder = Path(a.cluster).expanduser()
    job_id, found = run_array(folder, spec, {t: [t] for t in range(n)}, ("cell", {"digest", "row"}),
                              note=lambda j: print(f"compare: job {j}, {n} tasks on the cluster in {folder}", flush=True),
                              progress_s=30.0, what="compare")
    missing = [t for t in range(n) if t not in found]
    if missing:
        raise SystemExit(f"apollo bench compare: no result from task(s) {missing} of job {job_id} "
                         f"(apollo logs {job_id} --task cells:{missing[0]} --cluster {folder})")
    rows = [found[t]["row"] for t in range(len(cells))]
    for row in rows:
        print_row(row)
    return rows, found[0]["digest"] == found[n - 1]["digest"]


CELL_S = 120.0     # a cell's wall time, as the JM's estimate (a 1,000-server simulation of ~3,000 jobs)


if __name__ == "__main__":
    sys.exit(main())
