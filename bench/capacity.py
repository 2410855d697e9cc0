"""Capacity queues (HADOOP-3445): a lender gets its guarantee back within its reclaim timeout.

Two queues sharing the cluster by capacity, 70% and 30% (examples/queues/capacity-70-30.toml:
queue b may lend its whole guarantee, wants it back within ``reclaim_timeout_s`` = 10 s, and has
a user limit of 50%). Queue a's long job (tasks of about ``task_s``) starts on an idle cluster
and borrows b's idle 30%. Later two users submit a job each to queue b. The RM admits them at
once and cuts a's tokens in the same round; a's queued attempts wait behind b's, and from the
deadline a's running attempts yield to b's waiting tasks at their servers (docs/sharing.md),
whatever profile placed them. Measured, the same way simulated and live: seconds from b's
jobs' arrival until b holds 95% of its guarantee; a's tasks killed against the minimum (what
b is short when its timeout expires, in tasks); whether each of b's two users held at least
its user-limit floor (50% of what b holds, less one task) whenever both had work, but for
stretches no longer than the timeout + 2 s (the guarantee's own allowance: a task queued
behind another at a server waits for it).

``--size paper`` (the default simulated): 100 servers x 2 cores, tasks of ~60 s, b at 60 s.
``--size live`` (``--live``'s default): 16 servers x 2 cores, tasks of ~30 s, b at 8 s, about a
minute on a live local cluster. ``--live`` runs it on one; without, the simulator runs it
(with the live cluster's cadences for ``--size live``, so the two can be put side by side).

JSON: {"scheduler", "mode", "size", "reclaim_timeout_s", "guarantee_back_after_s",
"tasks_killed", "tasks_killed_minimum", "opportunistic_preempted", "user_limit_held",
"user_short_longest_s", "guarantee_cores", "user_limit", "series": {...}}.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from apollo.core.spec import JobSpec, StageSpec
from apollo.tools.cli.options import Parser, count

from .common import axes, save_plot, write_json
from .sharing import Scenario, back_after, longest_below, run_live, run_sim, short_at

QUEUES = Path(__file__).resolve().parent.parent / "examples" / "queues" / "capacity-70-30.toml"
SIZES = {   # servers, cores, a's task_s, a's tasks, each b user's tasks, b's arrival, horizon
    "paper": dict(servers=100, racks=5, cores=2.0, task_s=60.0, a_tasks=4000, b_tasks=400, arrive=60.0, horizon=60.0),
    "live": dict(servers=16, racks=4, cores=2.0, task_s=30.0, a_tasks=96, b_tasks=10, arrive=8.0, horizon=30.0),
}


def scenario(size: str, seed: int, queues: str = str(QUEUES)) -> Scenario:
    z = SIZES[size]
    rng = np.random.default_rng(seed)

    def job(name, queue, user, n, at, mean_s):
        j = JobSpec(name, [StageSpec("work", n, mean_s * rng.lognormal(0.0, 0.3, size=n), cpu=1.0, mem_gb=1.0)],
                    arrival_s=at)
        j.queue, j.user = queue, user
        return j
    t, at = z["task_s"], z["arrive"]
    jobs = [job("a-batch", "a", "ops", z["a_tasks"], 0.0, t),
            job("b-alice", "b", "alice", z["b_tasks"], at, t / 2),
            job("b-bob", "b", "bob", z["b_tasks"], at + 0.5, t / 2)]
    return Scenario(f"capacity-70-30-{size}", Path(queues).read_text(), jobs, measured={1, 2}, borrowers={0},
                    horizon_s=z["horizon"], servers=z["servers"], racks=z["racks"], cores=z["cores"])


def measure(scn: Scenario, run, scheduler: str, size: str) -> dict:
    tree = scn.tree
    guarantee = tree.resolve(scn.capacity)["b"].guarantee
    timeout = tree.get("b").reclaim_timeout_s
    user_floor = tree.get("b").user_limit
    back, times, b = back_after(run, {1, 2}, guarantee, scn.horizon_s)
    killed, opp = run.kills(scn.borrowers)
    alice, bob = run.held({1}, times), run.held({2}, times)
    both = (times >= run.arrive + min(back, scn.horizon_s)) & (b > 0)
    floor = min(user_floor, 0.5) * b - 1.0
    short = max(longest_below(times, ~both | (alice >= floor)), longest_below(times, ~both | (bob >= floor)))
    return {"scheduler": scheduler, "mode": run.mode, "size": size, "reclaim_timeout_s": timeout,
            "guarantee_back_after_s": back, "tasks_killed": killed,
            "tasks_killed_minimum": short_at(run, {1, 2}, guarantee, timeout),
            "opportunistic_preempted": opp,
            "user_limit_held": bool(both.any()) and short <= timeout + 2.0, "user_short_longest_s": short,
            "guarantee_cores": guarantee, "user_limit": user_floor,
            "series": {"t": (times - run.arrive)[::10].round(2).tolist(), "b": b[::10].tolist(),
                       "alice": alice[::10].tolist(), "bob": bob[::10].tolist()}}


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="apollo bench capacity", description=__doc__.split("\n\n")[0])
    p.add_argument("--scheduler", default="apollo", help="the profile (default: apollo)")
    p.add_argument("--live", action="store_true", help="run it on a live local cluster (about a minute)")
    p.add_argument("--size", choices=sorted(SIZES), help="paper (simulated default) or live (--live's default)")
    p.add_argument("--queues", default=str(QUEUES), help="the queue file (TOML)")
    p.add_argument("--seed", type=count(0), default=1, help="the random seed (default 1)")
    p.add_argument("--json", help="write the results (report JSON) here")
    p.add_argument("--plot", metavar="PNG", help="write a plot (PNG) here")
    a = p.parse_args(argv)
    size = a.size or ("live" if a.live else "paper")
    scn = scenario(size, a.seed, a.queues)
    run = run_live(scn, a.scheduler) if a.live else run_sim(scn, a.scheduler, a.seed, live_cadence=size == "live")
    out = measure(scn, run, a.scheduler, size)
    print(f"{a.scheduler} ({out['mode']}, {size} size): queue b ({out['guarantee_cores']:g} cores guaranteed, "
          f"reclaim timeout {out['reclaim_timeout_s']:g} s) held its guarantee {out['guarantee_back_after_s']:.1f} s "
          f"after its jobs arrived; {out['tasks_killed']} of queue a's tasks killed (minimum "
          f"{out['tasks_killed_minimum']}); user limit {out['user_limit']:.0%} held: {out['user_limit_held']} "
          f"(longest short {out['user_short_longest_s']:.1f} s)")
    write_json(out, a.json)
    if a.plot:
        fig, ax = axes()
        s = out["series"]
        ax.plot(s["t"], s["b"], label="queue b")
        ax.plot(s["t"], s["alice"], label="b: user alice", linestyle="--")
        ax.plot(s["t"], s["bob"], label="b: user bob", linestyle="--")
        ax.axhline(out["guarantee_cores"], color="gray", linestyle=":", label="b's guarantee")
        ax.axvline(out["reclaim_timeout_s"], color="red", linestyle=":", label="reclaim timeout")
        ax.set_xlabel("seconds since queue b's jobs arrived")
        ax.set_ylabel("cores held")
        ax.set_title(f"Capacity queues 70/30 ({a.scheduler}, {out['mode']}): b reclaims its guarantee")
        ax.legend(fontsize=8)
        save_plot(fig, a.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
