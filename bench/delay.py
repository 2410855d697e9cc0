"""Delay scheduling's locality, as in the HFS paper (Zaharia et al., EuroSys 2010).

Fig. 15 style: node locality of small jobs' map tasks against the node wait W1 (0, 0.5, 1, 2,
5, 10 s). The paper ran 200 jobs of 4 (and of 12) maps on EC2 with 50 jobs active at any time
and no rack information; it saw 5% / 11% node locality without waiting, 68% / 80% at 1 s and
nearly 100% at 5 s. Here: 100 servers of two cores, one slot per core (two map slots per node,
Hadoop's default), in one rack (so the only levels are node-local and anywhere), a closed loop
of 50 jobs in flight, each job reading its own input file (one 128 MiB block per map, 3
replicas) with map compute times drawn lognormally around the median ``--task-s``. Delay
scheduling is added to each profile of ``--scheduler``: by default hfs-delay (the paper's
setting: free slots offered as heartbeats bring them, each taken by the job at the head of the
line: the head-of-line problem delay scheduling fixes) and apollo (whose estimates prefer a
local server already: delay scheduling adds the last few points).

Table 4 style: 3-map and 10-map jobs on the same 100 servers in 4 racks, without delay
scheduling (W1 = W2 = 0) and with it (W1 = W2 = 15 s, the paper's setting); paper: 2% -> 75%
(3 maps) and 37% -> 99% (10 maps) node locality.

JSON: {"scheduler", "wait_s", "node_locality" (mean of the two job sizes), "node_locality_by_maps",
"table4": {"maps", "without_delay", "with_delay"}} (fractions) of the first profile, and each
profile's under "by_scheduler".
"""
from __future__ import annotations

import sys

import numpy as np

from apollo.tools.simulate import SimConfig, run_simulation
from apollo.core.spec import JobSpec, StageSpec, Workload
from apollo.tools.cli.options import Parser, count, number, positive

from .common import axes, save_plot, write_json

BLOCK = 128 * 2 ** 20
WAITS = (0.0, 0.5, 1.0, 2.0, 5.0, 10.0)


def small_jobs(maps: int, jobs: int, task_s: float, seed: int) -> Workload:
    """``jobs`` jobs of ``maps`` map tasks, each over its own input file."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(jobs):
        dur = task_s * rng.lognormal(0.0, 0.3, size=maps)
        out.append(JobSpec(f"filter-{maps}-{i}", [StageSpec("map", maps, dur, cpu=1.0, mem_gb=1.0,
                                                            input_bytes=np.full(maps, float(BLOCK)),
                                                            dataset=f"input-{seed}-{maps}-{i}")]))
    return Workload(f"smallfilter:{maps}maps", out)


def node_locality(maps: int, w1: float, w2: float, racks: int, a, scheduler: str) -> float:
    cfg = SimConfig(servers=a.servers, racks=racks, cores=a.cores, mem_gb=8.0, scheduler=scheduler,
                    seed=a.seed, wire=False, concurrent_jobs=a.active, delay=(w1, w2))
    r = run_simulation(small_jobs(maps, a.jobs, a.task_s, a.seed), cfg)
    if r["jobs"]["completed"] != a.jobs:
        raise RuntimeError(f"{maps}-map jobs with W1={w1}: {r['jobs']['completed']}/{a.jobs} completed")
    return r["locality"]["node"]


def curves(a, scheduler: str) -> dict:
    """The locality figures of one profile with delay scheduling added to it."""
    by_maps = {}
    for maps in (4, 12):
        by_maps[maps] = [node_locality(maps, w, w, 1, a, scheduler) for w in WAITS]
        print(f"{scheduler}: {maps:>2}-map jobs, node locality by W1: " +
              "  ".join(f"{w:g}s {x:.0%}" for w, x in zip(WAITS, by_maps[maps])), flush=True)
    table = {"maps": [3, 10], "without_delay": [], "with_delay": []}
    for maps in table["maps"]:
        table["without_delay"].append(node_locality(maps, 0.0, 0.0, 4, a, scheduler))
        table["with_delay"].append(node_locality(maps, 15.0, 15.0, 4, a, scheduler))
        print(f"{scheduler}: table 4, {maps:>2}-map jobs: node locality {table['without_delay'][-1]:.0%} without "
              f"delay scheduling, {table['with_delay'][-1]:.0%} with W1 = W2 = 15 s", flush=True)
    return {"wait_s": list(WAITS), "node_locality": [float(np.mean(x)) for x in zip(*by_maps.values())],
            "node_locality_by_maps": {str(k): v for k, v in by_maps.items()}, "table4": table}


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="apollo bench delay", description=__doc__.split("\n\n")[0])
    p.add_argument("--servers", type=count(1), default=100, help="servers in the simulated cluster (default 100)")
    p.add_argument("--cores", type=number(1), default=2.0, help="slots (cores) per server")
    p.add_argument("--jobs", type=count(1), default=200, help="the workload's first K jobs (default 200)")
    p.add_argument("--active", type=count(1), default=50, help="jobs in flight (a closed loop)")
    p.add_argument("--task-s", type=positive, default=10.0, help="median map compute time")
    p.add_argument("--scheduler", default="hfs-delay,apollo",
                   help="the profiles delay scheduling is added to, comma-separated (the first one's figures are "
                        "the JSON's top level: by default the paper's slot scheduler, then apollo)")
    p.add_argument("--seed", type=count(0), default=1, help="the random seed (default 1)")
    p.add_argument("--json", help="write the results (report JSON) here")
    p.add_argument("--plot", metavar="PNG", help="write a plot (PNG) here")
    a = p.parse_args(argv)
    names = [x for x in a.scheduler.split(",") if x]
    runs = {name: curves(a, name) for name in names}
    out = {"scheduler": names[0], **runs[names[0]], "by_scheduler": runs,
           "paper": {"fig15": {"4": {"0": 0.05, "1": 0.68, "5": 1.0}, "12": {"0": 0.11, "1": 0.80, "5": 1.0}},
                     "table4": {"without_delay": [0.02, 0.37], "with_delay": [0.75, 0.99]}},
           "setup": {k: getattr(a, k) for k in ("servers", "cores", "jobs", "active", "task_s", "seed")}}
    write_json(out, a.json)
    if a.plot:
        plot(out, a.plot)
    return 0


def plot(r: dict, png: str) -> None:
    fig, (ax, bx) = axes((10, 4), ncols=2)
    for k, v in r["node_locality_by_maps"].items():
        ax.plot(r["wait_s"], [x * 100 for x in v], marker="o", label=f"{k}-map jobs")
    ax.set_xlabel("node locality wait W1 (s)")
    ax.set_ylabel("node-local map tasks (%)")
    ax.set_ylim(0, 105)
    ax.set_title("Delay scheduling: locality vs wait (HFS Fig. 15)")
    ax.legend()
    t = r["table4"]
    x = np.arange(len(t["maps"]))
    bx.bar(x - 0.2, [v * 100 for v in t["without_delay"]], 0.4, label="without delay scheduling")
    bx.bar(x + 0.2, [v * 100 for v in t["with_delay"]], 0.4, label="with (W1 = W2 = 15 s)")
    bx.set_xticks(x, [f"{m} maps" for m in t["maps"]])
    bx.set_ylabel("node-local map tasks (%)")
    bx.set_title("Small jobs (HFS Table 4)")
    bx.set_ylim(0, 125)
    bx.legend(loc="upper center", ncol=2, fontsize=8)
    save_plot(fig, png)


if __name__ == "__main__":
    sys.exit(main())
