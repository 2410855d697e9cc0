"""Small jobs no longer wait behind large ones: fair pools against FIFO on a real trace.

The HFS paper's headline: with FIFO, a small job submitted behind a few huge ones waits for
them; with fair pools (and delay scheduling for locality) it starts at once. Here: a SWIM trace
(default: Facebook 2009, day 0), its first ``--jobs`` jobs on ``--servers`` servers in
``--racks`` racks at ``--load``, the jobs spread over the pools of
``examples/queues/three-pools.toml`` by size (``--assign size``: small <= 20 tasks,
medium <= 500, large), and three schedulers: ``fifo`` (one FIFO queue, free slots),
``hfs-delay`` (the pools, free slots offered as heartbeats bring them, delay scheduling) and
``apollo`` with the pools (Apollo's matching inside the sharing plane).

JSON: {"schedulers", "small_job_mean_s", "job_mean_s", "node_locality", "per_pool": {...}} in
one order, plus each run's report under "reports" (without the per-attempt detail).
"""
from __future__ import annotations

import sys
from pathlib import Path

from apollo.tools.simulate import SimConfig, run_simulation
from apollo.workloads import load_workload
from apollo.workloads.assign import assign
from apollo.tools.cli.options import Parser, count, number
from rm.queues import load_queue_file

from .common import write_json

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT.parent / "shared" / "traces" / "FB-2009_samples_24_times_1hr_0.tsv"
QUEUES = ROOT / "examples" / "queues" / "three-pools.toml"


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="apollo bench pools", description=__doc__.split("\n\n")[0])
    p.add_argument("--trace", default=str(TRACE), help="a SWIM trace")
    p.add_argument("--queues", default=str(QUEUES), help="the queue file (TOML)")
    p.add_argument("--assign", default="size", help="how jobs spread over the queues (apollo simulate --assign) (default size)")
    p.add_argument("--jobs", type=count(1), default=3000, help="the workload's first K jobs (default 3000)")
    p.add_argument("--servers", type=count(1), default=1000, help="servers in the simulated cluster (default 1000)")
    p.add_argument("--racks", type=count(1), default=20, help="racks (default 20)")
    p.add_argument("--load", type=number(0, 10, lo_open=True), default=0.9, help="CPU utilization the arrivals are scaled to (default 0.9)")
    p.add_argument("--seed", type=count(0), default=1, help="the random seed (default 1)")
    p.add_argument("--scheduler", default="apollo", help="the profile compared with fifo and hfs-delay")
    p.add_argument("--schedulers", help="the profiles to run, comma-separated (default: fifo,hfs-delay,SCHEDULER)")
    p.add_argument("--json", help="write the results (report JSON) here")
    a = p.parse_args(argv)
    tree = load_queue_file(a.queues)
    leaves = [q.path for q in tree.leaves()]
    rows = []
    names = (a.schedulers or ",".join(dict.fromkeys(["fifo", "hfs-delay", a.scheduler]))).split(",")
    for name in names:
        wl = load_workload(a.trace, seed=a.seed, cluster_servers=a.servers).first(a.jobs)
        wl.scaled_to_load(a.load, a.servers * 4.0)
        pooled = name != "fifo"           # FIFO is the one queue the paper compares against
        if pooled:
            assign(wl, leaves, a.assign, seed=a.seed)
        cfg = SimConfig(servers=a.servers, racks=a.racks, scheduler=name, seed=a.seed, wire=False,
                        queues=tree if pooled else None)
        r = run_simulation(wl, cfg)
        rows.append((name, r))
        print(f"{name:>10}: small jobs {r['small_job_completion_s']['mean']:7.1f} s mean, all jobs "
              f"{r['job_completion_s']['mean']:7.1f} s mean, node locality {r['locality']['node']:.1%}, "
              f"{r['jobs']['completed']}/{r['jobs']['submitted']} jobs, wall {r['throughput']['wall_s']:.0f} s", flush=True)
        if pooled:
            for q, f in r["queues"].items():
                print(f"{'':>12}{q:<8} {f['jobs']:>5} jobs  share {f['share_mean']:.1%} (p5 {f['share_p5']:.1%})  "
                      f"mean {f['job_mean_s']:.1f} s  preempted {f['preempted']}  "
                      f"admission wait p95 {f['admission_wait_s']['p95']:.2f} s", flush=True)
    out = {"schedulers": [n for n, _ in rows],
           "small_job_mean_s": [r["small_job_completion_s"]["mean"] for _, r in rows],
           "job_mean_s": [r["job_completion_s"]["mean"] for _, r in rows],
           "job_p50_s": [r["job_completion_s"]["p50"] for _, r in rows],
           "node_locality": [r["locality"]["node"] for _, r in rows],
           "per_pool": {n: r["queues"] for n, r in rows},
           "setup": {k: getattr(a, k) for k in ("trace", "queues", "assign", "jobs", "servers", "racks", "load", "seed")},
           "reports": {n: r for n, r in rows}}
    write_json(out, a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
