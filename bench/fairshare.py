"""How fast a pool gets its fair share back, with and without preemption (HFS Fig. 11 style).

The HFS paper's hierarchical-scheduling run: one pool's long job (tasks of about 25 s) holds
the whole cluster; 57 s in, a second pool submits a long job and reaches its fair share,
half the cluster, in 17 s by waiting for tasks to end. Here: 100 servers x 2 slots, two fair
pools of equal weight, the hfs-delay profile; pool 1's job starts at 0 with tasks of ``--task-s``
(lognormal jitter, so that they end spread out as in a job several waves old); pool 2's job
arrives at 57 s. Measured: seconds from pool 2's arrival until it holds 95% of its fair share,
without preemption (it waits for pool 1's tasks to end) and with HFS preemption (pool 2's
fair-share timeout Tfair = ``--tfair``: below half its fair share that long, it kills pool 1's
youngest tasks, no more than it needs).

JSON: {"task_s", "tfair_s", "to_fair_share_s": {"preemption", "no_preemption"},
"tasks_killed": {...}, "series": {...}}.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from apollo.simulate import SimConfig
from apollo.spec import JobSpec, StageSpec, Workload
from rm.queues import QueueTree

from .common import axes, first_time, held, preempted, run, save_plot, write_json

ARRIVE_S = 57.0


def workload(task_s: float, seed: int) -> Workload:
    rng = np.random.default_rng(seed)
    jobs = []
    for i, (pool, at) in enumerate((("pool1", 0.0), ("pool2", ARRIVE_S))):
        n = 12000
        dur = task_s * rng.lognormal(0.0, 0.35, size=n)
        j = JobSpec(f"long-{pool}", [StageSpec("map", n, dur, cpu=1.0, mem_gb=1.0)], arrival_s=at)
        j.queue = pool
        jobs.append(j)
    return Workload("two-pools", jobs)


def one(preempt: bool, a) -> dict:
    pool2 = {"weight": 1}
    if preempt:
        pool2["fair_share_timeout_s"] = a.tfair
    tree = QueueTree.parse({"sharing": "fair", "queues": {"pool1": {"weight": 1}, "pool2": pool2}},
                           source="fairshare bench")
    cfg = SimConfig(servers=a.servers, racks=5, cores=a.cores, mem_gb=8.0, scheduler=a.scheduler, seed=a.seed,
                    wire=False, queues=tree)
    end = ARRIVE_S + a.horizon
    # (run past the window: an attempt is recorded when it ends)
    rec, _, _ = run(cfg, workload(a.task_s, a.seed), until=end + 4 * a.task_s)
    times = np.arange(ARRIVE_S, end, 0.1)
    got = held(rec, {1}, times)
    fair = a.servers * a.cores / 2
    return {"to_fair_share_s": first_time(times, got >= 0.95 * fair) - ARRIVE_S, "tasks_killed": preempted(rec, {0}),
            "t": (times - ARRIVE_S)[::10].round(1).tolist(), "pool2_share": (got / (2 * fair))[::10].round(3).tolist()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="apollo bench fairshare", description=__doc__.split("\n\n")[0])
    p.add_argument("--servers", type=int, default=100)
    p.add_argument("--cores", type=float, default=2.0)
    p.add_argument("--task-s", type=float, default=25.0)
    p.add_argument("--tfair", type=float, default=5.0, help="pool 2's fair-share timeout")
    p.add_argument("--horizon", type=float, default=90.0, help="seconds simulated after pool 2 arrives")
    p.add_argument("--scheduler", default="apollo")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json")
    p.add_argument("--plot", metavar="PNG")
    a = p.parse_args(argv)
    with_, without = one(True, a), one(False, a)
    out = {"task_s": a.task_s, "tfair_s": a.tfair,
           "to_fair_share_s": {"preemption": with_["to_fair_share_s"], "no_preemption": without["to_fair_share_s"]},
           "tasks_killed": {"preemption": with_["tasks_killed"], "no_preemption": without["tasks_killed"]},
           "paper": {"to_fair_share_s": 17.0, "task_s": 25.0},
           "series": {"t": with_["t"], "preemption": with_["pool2_share"], "no_preemption": without["pool2_share"]}}
    print(f"pool 2 holds its fair share {out['to_fair_share_s']['preemption']:.1f} s after arriving with preemption "
          f"(Tfair {a.tfair:g} s, {with_['tasks_killed']} tasks killed), "
          f"{out['to_fair_share_s']['no_preemption']:.1f} s without; tasks of ~{a.task_s:g} s (paper: 17 s)")
    write_json(out, a.json)
    if a.plot:
        fig, ax = axes()
        s = out["series"]
        ax.plot(s["t"], [x * 100 for x in s["preemption"]], label=f"with preemption (Tfair {a.tfair:g} s)")
        ax.plot(s["t"], [x * 100 for x in s["no_preemption"]], label="without")
        ax.axhline(50, color="gray", linestyle=":", label="fair share")
        ax.set_xlabel("seconds since pool 2's job arrived")
        ax.set_ylabel("pool 2's share of the cluster (%)")
        ax.set_title(f"A pool reaching its fair share (tasks ~{a.task_s:g} s)")
        ax.legend()
        save_plot(fig, a.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
