"""Long simulated spans: the heavy-tailed long-task workload of issue 30, timed per simulated hour.

A workload of long tasks (median ``task_s`` 600 s, Pareto job sizes) keeps few decisions per
simulated second while every periodic message (JM hosts' reports of each live job, the RM's
views, idle PNs' liveness heartbeats) keeps firing, so the simulator's speed here follows
simulated time x state rather than the decisions made. Per cluster size (racks: one per 50
servers, as ``apollo simulate``) this runs ``apollo simulate WORKLOAD --load 0.95 --seed 3`` and
reports decisions per wall second, tasks, simulated and wall seconds, and wall seconds per
simulated hour and per simulated day (the run's own ratio, extrapolated). ``--max-sim-hours``
stops a run early: what it reached is reported, and the per-hour figure still holds.

Messages go through the msgpack round trip as in ``apollo simulate`` (``--no-wire`` skips it, as
``bench scale`` does). ``--native auto|on|off`` as ``bench scale``: the compiled kernel and PN
(apollo.tools.native) when they can be built.
"""
from __future__ import annotations

import sys
import time

from apollo.tools import native
from apollo.tools.cli.options import Parser, count, listing, positive
from apollo.tools.simulate import SimConfig, run_simulation
from apollo.workloads import load_workload

from .common import ensure_native, write_json

WORKLOAD = "heavytail:jobs=3000,task_s=600,max_tasks=5000,alpha=1.0"
DEFAULT_SERVERS = (1000, 12500)
LOAD = 0.95
SEED = 3
SERVERS_PER_RACK = 50                       # apollo simulate's default racks


def run_one(servers: int, jobs: int | None = None, max_sim_hours: float | None = None,
            wire: bool = True, workload: str = WORKLOAD, seed: int = SEED, load: float = LOAD) -> dict:
    """One simulated run at ``servers``; its figures as a dict (the JSON's per-size row)."""
    work = load_workload(workload, seed=seed, cluster_servers=servers).first(jobs)
    cfg = SimConfig(servers=servers, racks=max(1, servers // SERVERS_PER_RACK), seed=seed, wire=wire,
                    max_sim_s=max_sim_hours * 3600.0 if max_sim_hours else float("inf"))
    work.scaled_to_load(load, cfg.servers * cfg.cores)
    t0 = time.perf_counter()
    report = run_simulation(work, cfg)
    total_wall = time.perf_counter() - t0
    wall, sim = report["throughput"]["wall_s"], report["sim_time_s"]
    per_sim_s = wall / sim if sim > 0 else float("nan")
    return {"servers": servers, "tasks": report["tasks"]["completed"], "jobs": report["jobs"]["submitted"],
            "jobs_completed": report["jobs"]["completed"], "sim_s": sim, "wall_s": wall,
            "setup_and_report_wall_s": total_wall - wall,
            "decisions_per_wall_s": report["throughput"]["decisions_per_wall_s"],
            "wall_s_per_sim_hour": per_sim_s * 3600.0, "wall_s_per_sim_day": per_sim_s * 86400.0,
            "stopped_early": report["jobs"]["completed"] < report["jobs"]["submitted"]}


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="apollo bench longspan", description=__doc__.split("\n\n")[0])
    p.add_argument("--servers", type=listing(count(1)), default=DEFAULT_SERVERS,
                   help="comma-separated sizes (default 1000,12500)")
    p.add_argument("--jobs", type=count(1), default=None, help="take the first K jobs (default: all 3,000)")
    p.add_argument("--max-sim-hours", type=positive, default=None, metavar="H",
                   help="stop each run after H simulated hours (the figures are of what it reached)")
    p.add_argument("--no-wire", action="store_true", help="skip the msgpack round trip of messages")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--native", choices=("auto", "on", "off"), default="auto",
                   help="the compiled kernel and PN (apollo.tools.native): auto uses them when they can be built")
    a = p.parse_args(argv)
    ensure_native("longspan", a.native, sys.argv[1:] if argv is None else argv)
    sizes = list(a.servers)
    print(f"{WORKLOAD} --load {LOAD} --seed {SEED}" + (f", first {a.jobs} jobs" if a.jobs else "")
          + (f", at most {a.max_sim_hours:g} simulated h" if a.max_sim_hours else ""))
    print("compiled kernel and PN (apollo.tools.native)" if native.loaded() else "interpreted modules")
    print(f"{'servers':>8} {'tasks':>8} {'sim s':>9} {'wall s':>8} {'decisions/wall s':>17} "
          f"{'wall s/sim h':>13} {'wall s/sim day':>15}")
    rows = []
    for n in sizes:
        r = run_one(n, a.jobs, a.max_sim_hours, wire=not a.no_wire)
        rows.append(r)
        print(f"{n:>8} {r['tasks']:>8} {r['sim_s']:>9.0f} {r['wall_s']:>8.1f} {r['decisions_per_wall_s']:>17.0f} "
              f"{r['wall_s_per_sim_hour']:>13.1f} {r['wall_s_per_sim_day']:>15.0f}"
              + ("  (stopped early)" if r["stopped_early"] else ""), flush=True)
    out = {"workload": WORKLOAD, "load": LOAD, "seed": SEED, "jobs": a.jobs, "max_sim_hours": a.max_sim_hours,
           "wire": not a.no_wire, "native": native.loaded(), "servers": sizes,
           **{k: [r[k] for r in rows] for k in ("decisions_per_wall_s", "wall_s_per_sim_hour", "wall_s_per_sim_day",
                                                 "sim_s", "wall_s", "tasks")},
           "runs": rows}
    write_json(out, a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
