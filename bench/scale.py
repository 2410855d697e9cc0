"""Scheduling at scale: the full Apollo scheduler simulated at growing cluster sizes.

For each cluster size N the `scale` workload offers about one new task per
server per second of simulated time (N tasks/s: 20,000/s at 20,000 servers,
Apollo's production rate) for ``--seconds`` of arrivals, and every job runs to
completion through the real actors (RM, JM host, N PN state objects).
Reported per size: placement decisions per wall second and wall seconds per
task (the whole run: kernel, PNs, RM, JMs). Messages skip the msgpack
round trip here (the simulator's ``wire=False``): every other simulation and
the test suite exercise the codec; this benchmark measures the scheduler.

By default (``--native auto``) the run uses the compiled event kernel and PN
(apollo.tools.native: the same modules built with mypyc, the same results), building
them first if this machine can and they are not built yet, and says which it
ran; ``--native off`` measures the interpreted modules.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from apollo.tools import native

from apollo.tools.simulate import SimConfig, run_simulation
from apollo.workloads import load_workload
from apollo.workloads.assign import assign
from apollo.tools.cli.options import Parser, count, listing, positive
from rm.queues import load_queue_file

from .common import ensure_native

DEFAULT_SERVERS = (100, 1000, 5000, 20000)
SERVERS_PER_RACK = 40


def run_one(servers: int, seconds: float, seed: int = 1, queues: str | None = None, assign_rule: str = "size") -> dict:
    workload = load_workload(f"scale:servers={servers},seconds={seconds}", seed=seed)
    tree = load_queue_file(queues) if queues else None
    if tree is not None:
        assign(workload, [q.path for q in tree.leaves()], assign_rule, seed=seed)
    # (Apollo as it runs: corrections, straggler copies and opportunistic tasks on)
    cfg = SimConfig(servers=servers, racks=max(1, servers // SERVERS_PER_RACK), seed=seed, wire=False, queues=tree,
                    opportunistic=True)
    t0 = time.perf_counter()
    report = run_simulation(workload, cfg)
    total_wall = time.perf_counter() - t0
    tasks = report["tasks"]["completed"]
    return {"servers": servers, "tasks": tasks, "jobs_completed": report["jobs"]["completed"],
            "jobs": report["jobs"]["submitted"], "sim_time_s": report["sim_time_s"],
            "wall_s": report["throughput"]["wall_s"], "setup_and_report_wall_s": total_wall - report["throughput"]["wall_s"],
            "decisions_per_wall_s": report["throughput"]["decisions_per_wall_s"],
            "wall_s_per_task": report["throughput"]["wall_s"] / max(tasks, 1),
            "locality_node": report["locality"]["node"], "task_queue_delay_p95_s": report["task_queue_delay_s"]["p95"]}


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="apollo bench scale", description=__doc__.split("\n\n")[0])
    p.add_argument("--servers", type=listing(count(1)), default=DEFAULT_SERVERS, help="comma-separated sizes")
    p.add_argument("--seconds", type=positive, default=60.0, help="simulated seconds of arrivals")
    p.add_argument("--seed", type=count(0), default=1, help="the random seed (default 1)")
    p.add_argument("--queues", metavar="FILE", help="run inside this queue file's sharing plane")
    p.add_argument("--assign", default="size", help="how jobs spread over the queues (apollo simulate --assign)")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--native", choices=("auto", "on", "off"), default="auto",
                   help="the compiled kernel and PN (apollo.tools.native): auto uses them when they can be built")
    a = p.parse_args(argv)
    ensure_native("scale", a.native, sys.argv[1:] if argv is None else argv)
    sizes = list(a.servers)
    rows = []
    print("compiled kernel and PN (apollo.tools.native)" if native.loaded() else "interpreted modules")
    print(f"{'servers':>8} {'tasks':>9} {'sim s':>7} {'wall s':>8} {'decisions/wall s':>17} {'wall us/task':>13} {'node loc':>9}")
    for n in sizes:
        r = run_one(n, a.seconds, a.seed, a.queues, a.assign)
        rows.append(r)
        print(f"{n:>8} {r['tasks']:>9} {r['sim_time_s']:>7.1f} {r['wall_s']:>8.1f} {r['decisions_per_wall_s']:>17.0f} "
              f"{r['wall_s_per_task'] * 1e6:>13.1f} {r['locality_node']:>9.1%}", flush=True)
        if r["jobs_completed"] != r["jobs"]:
            print(f"  warning: only {r['jobs_completed']} of {r['jobs']} jobs completed", file=sys.stderr)
    out = {"servers": sizes, "queues": a.queues, "native": native.loaded(), "decisions_per_wall_s": [r["decisions_per_wall_s"] for r in rows],
           "wall_s_per_task": [r["wall_s_per_task"] for r in rows], "seconds": a.seconds, "runs": rows}
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2) + "\n")
        print(f"results: {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
