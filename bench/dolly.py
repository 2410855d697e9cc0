"""Dolly: small jobs' completion under stragglers, with no mitigation, straggler copies, and cloning.

The Dolly paper (Ananthanarayanan et al., NSDI'13) replays the Facebook trace on 150 machines
with stragglers as measured in production (the slowest task of a small job's phase runs a median
6-8x slower than its median task) and compares cloning at a 5% budget with LATE/Mantri-style
speculation: small jobs (bin 1, <= 10 tasks) finish 34-46% sooner, and slowest/median falls
from 8x to 1.06x. Here: FB-2009 day 0 (the SWIM sample of the same trace) at ``--load`` on
``--servers`` servers, each attempt slowed down by Dolly's straggler model
(apollo/core/stragglers.py), under the apollo scheduler in three modes:

- none: no straggler mitigation at all (no copies, no clones);
- copies: the JMs' straggler copies (progress-based, LATE-like: a running task past twice its
  stage's median time is asked its progress; a copy starts where it would finish well sooner);
- dolly: cloning of jobs of <= 10 tasks within a clone budget of ``--beta`` of the cores (copies
  stay on for the jobs that are not cloned).

Figures are pooled over ``--seeds`` seeds (each seed draws its own stragglers and placements),
run ``--workers`` at a time. Six by default: the small-job mean is set by a few dozen long jobs
of 3-10 tasks per seed, and one of them straggling in every attempt moves a seed's figure by
several points (seeds range 36-50% over copies); three seeds left the pooled figure +-2 points.
slowest_over_median: per phase of a small job with at least two tasks, the slowest task's time
(first start of any of its attempts to the end of the one that won) over the median task's,
averaged over phases. extra_resources: CPU-seconds of attempts that lost their race (clones,
copies, duplicates and first attempts killed because another won) over the cluster's
CPU-seconds across the run: the same unit as the budget. extra_over_work: the same CPU-seconds
over those of the attempts that won.

JSON: {"beta", "small_job_mean_s": {"none", "copies", "dolly"}, "slowest_over_median": {...},
"extra_resources", "extra_over_work": {...}, "speedup_over_copies", "setup"}.
"""
from __future__ import annotations

import os
import sys
from concurrent.futures import ProcessPoolExecutor
from collections import defaultdict

import numpy as np

from apollo.core.records import A_CPU, A_END, A_JOB, A_OUTCOME, A_STAGE, A_START, A_TASK
from apollo.tools.report import SMALL_JOB_TASKS
from apollo.tools.simulate import SimConfig
from apollo.core.stragglers import DOLLY
from apollo.workloads import load_workload
from apollo.tools.cli.options import Parser, count, fraction, number

from .common import axes, run, save_plot, shared_trace, write_json

TRACE = "FB-2009_samples_24_times_1hr_0.tsv"
MODES = {"none": {"copies": False, "clone_beta": 0.0},
         "copies": {"copies": True, "clone_beta": 0.0},
         "dolly": {"copies": True, "clone_beta": None}}      # None: --beta


def measure(rec, cores_total: float) -> dict:
    """Small jobs' completion times, slowest/median per phase, and the CPU-seconds lost to races."""
    small = {d[0]: d[3] - d[2] for d in rec.done if d[1] and d[4] <= SMALL_JOB_TASKS}
    first_start: dict = {}
    won_end: dict = {}
    lost = won = 0.0
    t0 = min(s[1] for s in rec.submitted)
    t1 = max(d[3] for d in rec.done)
    for r in rec.attempts:
        key = (r[A_JOB], r[A_STAGE], r[A_TASK])
        ran = max(0.0, r[A_END] - r[A_START]) * r[A_CPU] if r[A_START] >= 0 else 0.0
        if r[A_OUTCOME] == "done":
            won += ran
            won_end.setdefault(key, r[A_END])
        elif r[A_OUTCOME] == "lost":
            lost += ran
        if r[A_START] >= 0 and r[A_JOB] in small:
            first_start[key] = min(first_start.get(key, np.inf), r[A_START])
    phases = defaultdict(list)
    for key, end in won_end.items():
        if key[0] in small and key in first_start:
            phases[key[:2]].append(end - first_start[key])
    ratios = [max(v) / max(float(np.median(v)), 1e-9) for v in phases.values() if len(v) >= 2]
    return {"small": list(small.values()), "ratios": ratios, "lost_cpu_s": lost, "won_cpu_s": won,
            "cluster_cpu_s": cores_total * max(t1 - t0, 1e-9)}


def run_mode(trace: str, servers: int, racks: int, load: float, jobs: int, beta: float, seed: int,
             mode: str) -> dict:
    """One seed of one mode: the measurements of ``measure``."""
    opts = MODES[mode]
    wl = load_workload(trace, seed=seed, cluster_servers=servers).first(jobs)
    cores = 4.0
    # the load is the load the stragglers make: the trace's nominal work is scaled down by the
    # model's mean slowdown (about 2.9x)
    wl.scaled_to_load(load / DOLLY.mean(), servers * cores)
    cfg = SimConfig(servers=servers, racks=racks, cores=cores, seed=seed, wire=False, stragglers=DOLLY,
                    copies=opts["copies"], clone_beta=beta if opts["clone_beta"] is None else opts["clone_beta"])
    rec, _, client = run(cfg, wl)
    if client.finished != len(wl.jobs):
        raise RuntimeError(f"{mode}, seed {seed}: {client.finished}/{len(wl.jobs)} jobs ended")
    return measure(rec, servers * cores)


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="apollo bench dolly", description=__doc__.split("\n\n")[0])
    p.add_argument("--trace", default=None, help=f"a SWIM trace (default: ../shared/traces/{TRACE})")
    p.add_argument("--servers", type=count(1), default=400, help="servers in the simulated cluster (default 400)")
    p.add_argument("--racks", type=count(1), default=8, help="racks (default 8)")
    p.add_argument("--load", type=number(0, 10, lo_open=True), default=0.3,
                   help="the load with stragglers (Dolly clones only below 80%% utilization: at 0.5 FB-2009's big jobs keep the cluster above it a fifth of the time)")
    p.add_argument("--jobs", type=count(1), default=1500, help="the trace's first K jobs")
    p.add_argument("--beta", type=fraction, default=0.05, help="the clone budget, a fraction of the cores")
    p.add_argument("--seeds", type=count(1), default=6, help="seeds per cell (medians are reported) (default 6)")
    p.add_argument("--workers", type=count(1), default=os.cpu_count() or 1, help="simulations run at once")
    p.add_argument("--json", help="write the results (report JSON) here")
    p.add_argument("--plot", metavar="PNG", help="write a plot (PNG) here")
    a = p.parse_args(argv)
    trace = a.trace or shared_trace(TRACE)
    pooled = {m: {"small": [], "ratios": [], "lost_cpu_s": 0.0, "won_cpu_s": 0.0, "cluster_cpu_s": 0.0}
              for m in MODES}
    runs = [(seed, mode) for seed in range(1, a.seeds + 1) for mode in MODES]
    args = [(str(trace), a.servers, a.racks, a.load, a.jobs, a.beta, seed, mode) for seed, mode in runs]
    if a.workers > 1:
        # (separate processes: each simulation is single-threaded and seeded, so the figures are
        # the same as one after the other)
        with ProcessPoolExecutor(max_workers=a.workers) as ex:
            results = list(ex.map(run_mode, *zip(*args)))
    else:
        results = [run_mode(*x) for x in args]
    for (seed, mode), m in zip(runs, results):
        acc = pooled[mode]
        acc["small"] += m["small"]
        acc["ratios"] += m["ratios"]
        for k in ("lost_cpu_s", "won_cpu_s", "cluster_cpu_s"):
            acc[k] += m[k]
        print(f"seed {seed} {mode:>6}: small-job mean {np.mean(m['small']):.2f}s over {len(m['small'])} jobs, "
              f"slowest/median {np.mean(m['ratios']):.2f}, lost {m['lost_cpu_s'] / m['cluster_cpu_s']:.2%} "
              f"of the cluster", flush=True)
    mean = {m: float(np.mean(v["small"])) for m, v in pooled.items()}
    ratio = {m: float(np.mean(v["ratios"])) for m, v in pooled.items()}
    extra = {m: v["lost_cpu_s"] / v["cluster_cpu_s"] for m, v in pooled.items()}
    over_work = {m: v["lost_cpu_s"] / max(v["won_cpu_s"], 1e-9) for m, v in pooled.items()}
    out = {"beta": a.beta, "small_job_mean_s": mean, "slowest_over_median": ratio,
           "extra_resources": extra["dolly"], "extra_resources_by_mode": extra, "extra_over_work": over_work,
           "speedup_over_copies": 1.0 - mean["dolly"] / mean["copies"],
           "speedup_over_none": 1.0 - mean["dolly"] / mean["none"],
           "paper": {"speedup_over_speculation": [0.34, 0.46], "slowest_over_median": {"before": 8.0, "dolly": 1.06},
                     "extra_resources": 0.05},
           "setup": {"trace": str(trace), "servers": a.servers, "racks": a.racks, "load": a.load, "jobs": a.jobs,
                     "seeds": a.seeds, "stragglers": "dolly (apollo/core/stragglers.py)", "scheduler": "apollo"}}
    print(f"small jobs (<= {SMALL_JOB_TASKS} tasks), mean completion: none {mean['none']:.2f}s, "
          f"copies {mean['copies']:.2f}s, dolly {mean['dolly']:.2f}s "
          f"({out['speedup_over_copies']:.0%} faster than copies); slowest/median "
          f"{ratio['none']:.2f} -> {ratio['copies']:.2f} -> {ratio['dolly']:.2f}; "
          f"extra resources {extra['dolly']:.2%} of the cluster (budget {a.beta:.0%})")
    write_json(out, a.json)
    if a.plot:
        plot(out, a.plot)
    return 0


def plot(r: dict, png: str) -> None:
    fig, (ax, bx) = axes((10, 4), ncols=2)
    modes = list(MODES)
    x = np.arange(len(modes))
    ax.bar(x, [r["small_job_mean_s"][m] for m in modes], color=["#999", "#69c", "#2a7"])
    ax.set_xticks(x, ["no mitigation", "straggler copies", f"Dolly (beta {r['beta']:.0%})"])
    ax.set_ylabel("mean completion, jobs of <= 10 tasks (s)")
    ax.set_title("Small jobs under Dolly's stragglers (FB-2009)")
    bx.bar(x, [r["slowest_over_median"][m] for m in modes], color=["#999", "#69c", "#2a7"])
    bx.set_xticks(x, ["none", "copies", "Dolly"])
    bx.set_ylabel("slowest / median task of a phase")
    bx.axhline(1.0, color="k", lw=0.5)
    bx.set_title("Stragglers left")
    save_plot(fig, png)


if __name__ == "__main__":
    sys.exit(main())
