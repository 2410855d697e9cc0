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


def run_cell(name: str, load: float, scheduler: str, seed: int) -> dict:
    src, jobs, servers, racks = WORKLOADS[name]
    path = shared_trace(src[6:]) if src.startswith("trace:") else src
    wl = load_workload(path, seed=seed, cluster_servers=servers).first(jobs)
    wl.scaled_to_load(load, servers * 4.0)
    return run_simulation(wl, SimConfig(servers=servers, racks=racks, scheduler=scheduler, seed=seed, wire=False))


def strip(report: dict) -> str:
    r = dict(report)
    r.pop("throughput", None)
    return json.dumps(r, sort_keys=True)


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="apollo bench compare", description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated workloads: trace files or generators (default: the comparison table's)")
    p.add_argument("--loads", type=listing(number(0, 10, lo_open=True)), default=[0.7, 0.85, 0.95], 
                   help="comma-separated CPU loads, each in (0, 10] (default 0.7,0.85,0.95)")
    p.add_argument("--schedulers", type=listing(tuple(PROFILES)), default=["apollo", "greedy", "fifo", "sparrow"], 
                   help="comma-separated profiles (default apollo,greedy,fifo,sparrow)")
    p.add_argument("--seed", type=count(0), default=3, help="the random seed (default 3)")
    p.add_argument("--json", help="write the results (report JSON) here")
    a = p.parse_args(argv)
    names = [w for w in a.workloads.split(",") if w]
    for w in names:
        if w not in WORKLOADS:
            raise SystemExit(f"unknown workload {w!r}; choose from {', '.join(WORKLOADS)}")
    loads = list(a.loads)
    scheds = list(a.schedulers)
    rows = []
    print(f"{'workload':<12} {'load':>5} {'scheduler':<9} {'mean s':>8} {'p50 s':>7} {'p95 s':>8} {'node loc':>9}")
    first = None
    for w in names:
        for load in loads:
            for s in scheds:
                r = run_cell(w, load, s, a.seed)
                if first is None:
                    first = (w, load, s, strip(r))
                j = r["job_completion_s"]
                row = {"workload": w, "load": load, "scheduler": s, "mean": j["mean"], "p50": j["p50"],
                       "p95": j["p95"], "node_locality": r["locality"]["node"],
                       "jobs_completed": r["jobs"]["completed"], "jobs": r["jobs"]["submitted"]}
                rows.append(row)
                print(f"{w:<12} {load:>5.2f} {s:<9} {row['mean']:>8.2f} {row['p50']:>7.2f} {row['p95']:>8.1f} "
                      f"{row['node_locality']:>9.1%}", flush=True)
    again = strip(run_cell(first[0], first[1], first[2], a.seed))
    deterministic = again == first[3]
    cells = {(r["workload"], r["load"], r["scheduler"]): r for r in rows}
    wins = {"mean": [], "p50": []}
    for w in names:
        for load in loads:
            ap, gr = cells.get((w, load, "apollo")), cells.get((w, load, "greedy"))
            if ap and gr:
                for k in wins:
                    wins[k].append(ap[k] <= gr[k] * 1.0 + 1e-9)
    out = {"rows": rows, "apollo_at_least_greedy": {k: all(v) for k, v in wins.items()},
           "apollo_at_least_greedy_cells": {k: f"{sum(v)}/{len(v)}" for k, v in wins.items()},
           "deterministic": deterministic,
           "setup": {"seed": a.seed, "workloads": {w: WORKLOADS[w] for w in names}, "loads": loads}}
    print(f"apollo <= greedy: mean in {out['apollo_at_least_greedy_cells']['mean']} cells, "
          f"p50 in {out['apollo_at_least_greedy_cells']['p50']}; seeded run repeated: "
          f"{'identical report' if deterministic else 'REPORTS DIFFER'}")
    write_json(out, a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
