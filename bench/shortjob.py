"""A short job behind a long one: does its queue get its share back in time? (issue scenarios)

The two scenarios a new user tries first, on 16 servers x 2 cores, both ways (simulated with the
live cluster's cadences, and ``--live`` on a local cluster):

- ``capacity`` (examples/queues/capacity-70-30.toml): alice's 64 tasks of 60 s in queue a borrow
  b's idle 30%; 5 s later bob's 16 tasks of 5 s come to queue b (9.6 cores guaranteed, reclaim
  timeout 10 s). Due: the timeout, then two 5 s waves on b's guarantee, about 20 s.
- ``pools`` (examples/queues/three-pools.toml): a large-pool job of 64 x 60 s holds the cluster; 5 s
  later a small-pool job of 16 x 5 s arrives (min share 20% after Tmin = 5 s, fair share after
  Tfair = 15 s at the latest).

Measured from the run's records, the same way in both modes: the short job's completion time
(submission to its end), the long job's regular attempts killed, and the minimum (whole cores the
short job's queue is short of its guarantee or min share when its timeout expires,
docs/sharing.md). (That held cores never exceed the cluster's, the live test reads from the RM's
/api/queues: a live run's records do not know when the attempts its final cancel killed started.)

JSON: {"scenario", "scheduler", "mode", "short_job_s", "due_s", "timeout_s", "tasks_killed",
"tasks_killed_minimum", "owed_cores"}.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from apollo.core.spec import JobSpec, StageSpec
from apollo.tools.cli.options import Parser, count

from .common import write_json
from .sharing import Scenario, run_live, run_sim, short_at

QUEUES = Path(__file__).resolve().parent.parent / "examples" / "queues"
# queue file, (long job's queue, user), (short job's queue, user)
SCENARIOS = {
    "capacity": ("capacity-70-30.toml", ("a", "alice"), ("b", "bob")),
    "pools": ("three-pools.toml", ("large", "ops"), ("small", "ann")),
}
LONG, SHORT, LATE_S = (64, 60.0), (16, 5.0), 5.0


def scenario(name: str) -> Scenario:
    qfile, (lq, lu), (sq, su) = SCENARIOS[name]

    def job(title, queue, user, n, dur, at):
        j = JobSpec(title, [StageSpec("work", n, np.full(n, dur), cpu=1.0, mem_gb=1.0)], arrival_s=at)
        j.queue, j.user = queue, user
        return j
    jobs = [job("long", lq, lu, *LONG, 0.0), job("short", sq, su, *SHORT, LATE_S)]
    return Scenario(f"shortjob-{name}", (QUEUES / qfile).read_text(), jobs, measured={1}, borrowers={0},
                    horizon_s=40.0, servers=16, racks=4, cores=2.0)


def measure(name: str, scn: Scenario, run, scheduler: str) -> dict:
    tree = scn.tree
    short_q = scn.jobs[1].queue
    spec = tree.get(short_q)
    owed = tree.resolve(scn.capacity)[short_q].guarantee
    timeout = spec.reclaim_timeout_s if spec.reclaim_timeout_s is not None else spec.min_share_timeout_s
    sid = run.ids[1]
    ends = [d for d in run.rec.done if d[0] == sid]
    took = float(ends[0][3] - ends[0][2]) if ends else float("inf")
    killed, _ = run.kills(scn.borrowers)
    n, dur = SHORT
    waves = int(np.ceil(n / max(1.0, np.floor(owed))))
    return {"scenario": name, "scheduler": scheduler, "mode": run.mode, "short_job_s": took,
            "due_s": float(timeout + waves * dur), "timeout_s": float(timeout), "owed_cores": owed,
            "tasks_killed": killed, "tasks_killed_minimum": short_at(run, {1}, owed, timeout)}


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="apollo bench shortjob", description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", choices=sorted(SCENARIOS), default="capacity", help="which scenario (default capacity)")
    p.add_argument("--scheduler", default="apollo", help="the profile (default: apollo)")
    p.add_argument("--live", action="store_true", help="run it on a live local cluster (about a minute)")
    p.add_argument("--seed", type=count(0), default=1, help="the random seed (default 1)")
    p.add_argument("--json", help="write the results (report JSON) here")
    a = p.parse_args(argv)
    scn = scenario(a.scenario)
    run = run_live(scn, a.scheduler) if a.live else run_sim(scn, a.scheduler, a.seed, live_cadence=True)
    out = measure(a.scenario, scn, run, a.scheduler)
    print(f"{a.scheduler} ({out['mode']}, {a.scenario}): the short job took {out['short_job_s']:.1f} s "
          f"(due about {out['due_s']:g} s: timeout {out['timeout_s']:g} s, then its waves on "
          f"{out['owed_cores']:g} cores); {out['tasks_killed']} of the long job's tasks killed (minimum "
          f"{out['tasks_killed_minimum']})")
    write_json(out, a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
