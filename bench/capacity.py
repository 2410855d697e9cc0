"""Capacity queues (HADOOP-3445): a lender gets its guarantee back within its reclaim timeout.

Two queues sharing 100 servers x 2 cores by capacity, 70% and 30%, scheduled by Hadoop-style
slots (the hfs-delay profile: free slots offered as heartbeats bring them; the Capacity
Scheduler is a slot scheduler too)
(examples/queues/capacity-70-30.toml: queue b may lend its whole guarantee, wants it back
within ``reclaim_timeout_s`` = 10 s, and has a user limit of 50%). Queue a's long job (tasks of
about ``--task-s``) starts on an idle cluster and borrows b's idle 30%. At 60 s two users submit
a job each to queue b. The RM cuts a's tokens at once (no new tasks of a start) and, if b
still holds less than its guarantee when the reclaim timeout runs out, kills a's most recently
started tasks, no more than b is short of. Measured: seconds from b's jobs' arrival until b
holds 95% of its guarantee; tasks killed against the minimum (b's shortfall at the deadline,
in tasks); whether each of b's two users held at least its user-limit floor (50% of b's
allocation, less one task) whenever both had work.

JSON: {"reclaim_timeout_s", "guarantee_back_after_s", "tasks_killed", "tasks_killed_minimum",
"user_limit_held", "series": {...}}.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

from apollo.records import A_END, A_JOB, A_OUTCOME
from apollo.simulate import SimConfig
from apollo.spec import JobSpec, StageSpec, Workload
from rm.queues import load_queue_file

from .common import axes, first_time, held, preempted, run, save_plot, write_json

QUEUES = Path(__file__).resolve().parent.parent / "examples" / "queues" / "capacity-70-30.toml"
ARRIVE_S = 60.0


def workload(task_s: float, seed: int) -> Workload:
    rng = np.random.default_rng(seed)

    def job(name, queue, user, n, at, mean_s):
        j = JobSpec(name, [StageSpec("work", n, mean_s * rng.lognormal(0.0, 0.3, size=n), cpu=1.0, mem_gb=1.0)],
                    arrival_s=at)
        j.queue, j.user = queue, user
        return j
    return Workload("capacity-70-30", [job("a-batch", "a", "ops", 4000, 0.0, task_s),
                                       job("b-alice", "b", "alice", 400, ARRIVE_S, task_s / 2),
                                       job("b-bob", "b", "bob", 400, ARRIVE_S + 0.5, task_s / 2)])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="apollo bench capacity", description=__doc__.split("\n\n")[0])
    p.add_argument("--servers", type=int, default=100)
    p.add_argument("--cores", type=float, default=2.0)
    p.add_argument("--task-s", type=float, default=60.0, help="queue a's task length (b's: half)")
    p.add_argument("--queues", default=str(QUEUES))
    p.add_argument("--scheduler", default="hfs-delay", help="the slot scheduler (HADOOP-3445 is one) by default")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json")
    p.add_argument("--plot", metavar="PNG")
    a = p.parse_args(argv)
    tree = load_queue_file(a.queues)
    cap = a.servers * a.cores
    guarantee = tree.resolve(cap)["b"].guarantee
    timeout = tree.get("b").reclaim_timeout_s
    user_floor = tree.get("b").user_limit
    cfg = SimConfig(servers=a.servers, racks=5, cores=a.cores, mem_gb=8.0, scheduler=a.scheduler, seed=a.seed,
                    wire=False, queues=tree)
    end = ARRIVE_S + 60.0
    rec, _, _ = run(cfg, workload(a.task_s, a.seed), until=end + 3 * a.task_s)
    times = np.arange(ARRIVE_S, end, 0.05)
    b = held(rec, {1, 2}, times)
    back = first_time(times, b >= 0.95 * guarantee) - ARRIVE_S
    kills = [r[A_END] for r in rec.attempts if r[A_JOB] == 0 and r[A_OUTCOME] == "preempted"]
    killed = preempted(rec, {0})
    if kills:
        at = min(kills)
        short = guarantee - float(held(rec, {1, 2}, np.array([at - 1e-6]))[0])
        minimum = max(0, math.ceil(short - 1e-9))
    else:
        minimum = 0
    # user limit: while both users have work (the whole window here), each holds at least
    # its floor of what b holds, less one task
    alice, bob = held(rec, {1}, times), held(rec, {2}, times)
    both = (times >= ARRIVE_S + back) & (b > 0)
    floor = min(user_floor, 0.5) * b - 1.0
    user_ok = bool(np.all((alice[both] >= floor[both]) & (bob[both] >= floor[both]))) if both.any() else False
    out = {"reclaim_timeout_s": timeout, "guarantee_back_after_s": back, "tasks_killed": killed,
           "tasks_killed_minimum": minimum, "user_limit_held": user_ok, "guarantee_cores": guarantee,
           "user_limit": user_floor,
           "series": {"t": (times - ARRIVE_S)[::10].round(2).tolist(), "b": b[::10].tolist(),
                      "alice": alice[::10].tolist(), "bob": bob[::10].tolist()}}
    print(f"queue b ({guarantee:g} cores guaranteed, reclaim timeout {timeout:g} s) held its guarantee "
          f"{back:.1f} s after its jobs arrived; {killed} of queue a's tasks killed (minimum {minimum}); "
          f"user limit {user_floor:.0%} held: {user_ok}")
    write_json(out, a.json)
    if a.plot:
        fig, ax = axes()
        s = out["series"]
        ax.plot(s["t"], s["b"], label="queue b")
        ax.plot(s["t"], s["alice"], label="b: user alice", linestyle="--")
        ax.plot(s["t"], s["bob"], label="b: user bob", linestyle="--")
        ax.axhline(guarantee, color="gray", linestyle=":", label="b's guarantee")
        ax.axvline(timeout, color="red", linestyle=":", label="reclaim timeout")
        ax.set_xlabel("seconds since queue b's jobs arrived")
        ax.set_ylabel("cores held")
        ax.set_title("Capacity queues 70/30: b reclaims its guarantee")
        ax.legend(fontsize=8)
        save_plot(fig, a.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
