"""How fast a pool gets its fair share back, with and without preemption (HFS Fig. 11 style).

The HFS paper's hierarchical-scheduling run: one pool's long job holds the whole cluster; 57 s
in, a second pool submits a long job and reaches its fair share, half the cluster, in 17 s by
waiting for tasks to end. Here: two fair pools of equal weight; pool 1's job starts at 0 with
tasks of ``task_s`` (lognormal jitter, so that they end spread out as in a job several waves
old); pool 2's job arrives later. Measured, the same way simulated and live: seconds from pool
2's arrival until it holds 95% of its fair share, without preemption (it waits for pool 1's
tasks to end) and with HFS preemption (pool 2's fair-share timeout Tfair = ``--tfair``: below
half its fair share that long, pool 1 yields to it at its servers, no more than it needs;
docs/sharing.md); pool 1's tasks killed against the minimum (what pool 2 is short of its fair
share when Tfair expires).

``--size paper`` (the default simulated): 100 servers x 2 cores, tasks of ~25 s, pool 2 at
57 s. ``--size live`` (``--live``'s default): 16 servers x 2 cores, tasks of ~20 s, pool 2 at
8 s, about a minute per run on a live local cluster (two runs). ``--live`` runs it on one.

JSON: {"scheduler", "mode", "size", "task_s", "tfair_s", "to_fair_share_s": {"preemption",
"no_preemption"}, "tasks_killed": {...}, "tasks_killed_minimum", "series": {...}}.
"""
from __future__ import annotations

import sys

import numpy as np

from apollo.core.spec import JobSpec, StageSpec
from apollo.tools.cli.options import Parser, count, positive

from .common import axes, save_plot, write_json
from .sharing import Scenario, back_after, run_live, run_sim, short_at

# (live: pool 2's job is two waves on its fair share, so that it ends soon after the horizon: a
# run measures what a job's finished attempts say, and a job cancelled runs on unrecorded)
SIZES = {
    "paper": dict(servers=100, racks=5, cores=2.0, task_s=25.0, tasks=(12000, 12000), arrive=57.0, horizon=90.0),
    "live": dict(servers=16, racks=4, cores=2.0, task_s=20.0, tasks=(200, 32), arrive=8.0, horizon=30.0),
}


def scenario(size: str, seed: int, tfair: float | None, task_s: float | None = None) -> Scenario:
    z = SIZES[size]
    t = task_s or z["task_s"]
    rng = np.random.default_rng(seed)
    jobs = []
    for (pool, at), n in zip((("pool1", 0.0), ("pool2", z["arrive"])), z["tasks"]):
        j = JobSpec(f"long-{pool}", [StageSpec("map", n, t * rng.lognormal(0.0, 0.35, size=n), cpu=1.0, mem_gb=1.0)],
                    arrival_s=at)
        j.queue = pool
        jobs.append(j)
    timeout = f"\nfair_share_timeout_s = {tfair:g}" if tfair is not None else ""
    tree = f'sharing = "fair"\n[queues.pool1]\nweight = 1\n[queues.pool2]\nweight = 1{timeout}\n'
    return Scenario(f"two-pools-{size}", tree, jobs, measured={1}, borrowers={0}, horizon_s=z["horizon"],
                    servers=z["servers"], racks=z["racks"], cores=z["cores"])


def one(preempt: bool, a, size: str) -> dict:
    scn = scenario(size, a.seed, a.tfair if preempt else None, a.task_s)
    run = run_live(scn, a.scheduler) if a.live else run_sim(scn, a.scheduler, a.seed, live_cadence=size == "live")
    fair = scn.capacity / 2
    back, times, got = back_after(run, {1}, fair, scn.horizon_s, step=0.1)
    killed, opp = run.kills(scn.borrowers)
    return {"to_fair_share_s": back, "tasks_killed": killed, "opportunistic_preempted": opp,
            "minimum": short_at(run, {1}, fair, a.tfair), "mode": run.mode,
            "t": (times - run.arrive)[::10].round(1).tolist(), "pool2_share": (got / (2 * fair))[::10].round(3).tolist()}


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="apollo bench fairshare", description=__doc__.split("\n\n")[0])
    p.add_argument("--scheduler", default="apollo", help="the profile (default: apollo)")
    p.add_argument("--live", action="store_true", help="run it on a live local cluster (about a minute a run)")
    p.add_argument("--size", choices=sorted(SIZES), help="paper (simulated default) or live (--live's default)")
    p.add_argument("--task-s", type=positive, help="pool 1's task length (default: the size's)")
    p.add_argument("--tfair", type=positive, default=5.0, help="pool 2's fair-share timeout")
    p.add_argument("--seed", type=count(0), default=1, help="the random seed (default 1)")
    p.add_argument("--json", help="write the results (report JSON) here")
    p.add_argument("--plot", metavar="PNG", help="write a plot (PNG) here")
    a = p.parse_args(argv)
    size = a.size or ("live" if a.live else "paper")
    with_, without = one(True, a, size), one(False, a, size)
    task_s = a.task_s or SIZES[size]["task_s"]
    out = {"scheduler": a.scheduler, "mode": with_["mode"], "size": size, "task_s": task_s, "tfair_s": a.tfair,
           "to_fair_share_s": {"preemption": with_["to_fair_share_s"], "no_preemption": without["to_fair_share_s"]},
           "tasks_killed": {"preemption": with_["tasks_killed"], "no_preemption": without["tasks_killed"]},
           "tasks_killed_minimum": with_["minimum"],
           "opportunistic_preempted": {"preemption": with_["opportunistic_preempted"],
                                       "no_preemption": without["opportunistic_preempted"]},
           "paper": {"to_fair_share_s": 17.0, "task_s": 25.0},
           "series": {"t": with_["t"], "preemption": with_["pool2_share"], "no_preemption": without["pool2_share"]}}
    print(f"{a.scheduler} ({out['mode']}, {size} size): pool 2 holds its fair share "
          f"{out['to_fair_share_s']['preemption']:.1f} s after arriving with preemption (Tfair {a.tfair:g} s, "
          f"{with_['tasks_killed']} tasks killed, minimum {with_['minimum']}), "
          f"{out['to_fair_share_s']['no_preemption']:.1f} s without; tasks of ~{task_s:g} s (paper: 17 s)")
    write_json(out, a.json)
    if a.plot:
        fig, ax = axes()
        s = out["series"]
        ax.plot(s["t"], [x * 100 for x in s["preemption"]], label=f"with preemption (Tfair {a.tfair:g} s)")
        ax.plot(s["t"], [x * 100 for x in s["no_preemption"]], label="without")
        ax.axhline(50, color="gray", linestyle=":", label="fair share")
        ax.set_xlabel("seconds since pool 2's job arrived")
        ax.set_ylabel("pool 2's share of the cluster (%)")
        ax.set_title(f"A pool reaching its fair share ({a.scheduler}, {out['mode']}, tasks ~{task_s:g} s)")
        ax.legend()
        save_plot(fig, a.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
