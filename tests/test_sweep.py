"""Sweeps on a live cluster (apollo.tools.sweep): chaos seeds as the tasks of a job array, each
seed counted once, from one attempt, surviving a PN process killed mid-sweep."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections import Counter

import pytest

from apollo.tools.chaos import plan, task_share
from apollo.tools.sweep import parse_results, sweep_job, task_count
from helpers import wait_until


def test_every_seed_belongs_to_exactly_one_task():
    for seeds, start, k in ((1, 0, 1), (10, 5, 3), (100, 1000, 7), (7, 0, 7)):
        owned = [s for t in range(k) for s in task_share(seeds, start, t, k)]
        assert sorted(owned) == list(range(start, start + seeds))


def test_task_count_is_a_share_per_core_at_least_and_never_more_than_the_seeds():
    assert task_count(10, 8) == 8
    assert task_count(3, 8) == 3
    assert task_count(10_000, 8) == 500          # ~20 seeds a task
    assert task_count(100, 8, tasks=4) == 4


def test_a_task_reports_only_the_seeds_it_owns_and_each_once():
    lines = [json.dumps({"seed": s, "why": "", "faults": {}, "replay": "r"}) for s in (3, 5, 3, 99)]
    data = ("\n".join(lines + ["not json", '{"seed": 5}'])).encode()
    got = parse_results(data, [3, 5, 7])
    assert sorted(got) == [3, 5]                 # 99 is another task's; 7 missing; 3 once


def test_the_sweep_job_is_a_job_array_of_chaos_tasks():
    spec = sweep_job(50, 200, 5)
    (stage,) = spec.stages
    assert stage.tasks == 5 and stage.command[-1] == "--as-task" and spec.max_retries >= 5
    assert stage.command[stage.command.index("--seeds") + 1] == "50"


@pytest.mark.live
def test_chaos_on_a_cluster_survives_a_pn_killed_mid_sweep(cluster, tmp_path):
    folder = cluster.up(pns=4, racks=2, procs=2, jm_hosts=1, supervise=True)
    info = json.loads((folder / "cluster.json").read_text())
    pn_pids = [p["pid"] for p in info["processes"] if p["role"] == "pn"]
    seeds, start = 4, 4000
    out = tmp_path / "sweep.json"
    sweep = subprocess.Popen([sys.executable, "-m", "apollo.tools.cli", "chaos", "--seeds", str(seeds), "--start",
                              str(start), "--tasks", str(seeds), "--cluster", str(folder), "--json", str(out),
                              "--progress-s", "0.5"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        def tasks_on(pid: int) -> list[int]:
            r = subprocess.run(["pgrep", "-P", str(pid), "-f", "chaos.*as-task"], capture_output=True, text=True)
            return [int(x) for x in r.stdout.split()]
        busy: list[int] = []
        wait_until(lambda: busy.extend(p for p in pn_pids if tasks_on(p)) or busy, 60,
                   "a sweep task running under a PN process")
        victims = tasks_on(busy[0])
        os.kill(busy[0], signal.SIGKILL)         # the supervisor starts it again; its attempts are lost
        # (its tasks die with it: nothing runs on unseen)
        wait_until(lambda: not any(os.path.exists(f"/proc/{v}") and
                                   "Z" not in open(f"/proc/{v}/stat").read().split()[2] for v in victims),
                   10, "the killed PN process's tasks to die with it")
        text, _ = sweep.communicate(timeout=150)
    finally:
        if sweep.poll() is None:
            sweep.kill()
    assert sweep.returncode == 0, text
    # how far the job was, while it ran (the PN kill alone takes longer than the half second)
    assert re.search(rf"sweep: job \d+: [0-{seeds}]/{seeds} tasks done", text), text
    r = json.loads(out.read_text())
    assert r["seeds"] == seeds and r["passed"] == seeds and r["failed"] == [], r
    # the same JSON as a local run: the faults are those the seeds' plans draw
    want: Counter = Counter()
    for s in range(start, start + seeds):
        want.update(plan(s).faults)
    assert r["faults"] == dict(sorted(want.items()))
    assert r["tasks"] == seeds
    # the comparison bench's cells as tasks of the same cluster (a PN process restarted meanwhile):
    # the JSON of a local run
    args = ["bench", "compare", "--workloads", "heavytail", "--loads", "0.7", "--schedulers", "apollo,greedy",
            "--jobs", "30"]
    # (both at once: each is a few processes waiting on each other most of the time)
    runs = [subprocess.Popen([sys.executable, "-m", "apollo.tools.cli", *args, *extra, "--json",
                              str(tmp_path / f"{where}.json")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
            for where, extra in (("local", []), ("cluster", ["--cluster", str(folder)]))]
    try:
        for run in runs:
            text, _ = run.communicate(timeout=120)
            assert run.returncode == 0, text
    finally:
        for run in runs:
            if run.poll() is None:
                run.kill()
    local, on_cluster = (json.loads((tmp_path / f"{w}.json").read_text()) for w in ("local", "cluster"))
    assert on_cluster["setup"].pop("cluster") == str(folder)
    assert on_cluster == local and local["deterministic"]


@pytest.mark.live
def test_a_command_task_dies_with_its_pn_process(cluster):
    from apollo.core.spec import JobSpec, StageSpec
    from apollo.runtime.live import run
    from apollo.tools.client import Client
    import numpy as np
    folder = cluster.up(pns=1, racks=1, procs=1, jm_hosts=1)
    pn = next(p["pid"] for p in json.loads((folder / "cluster.json").read_text())["processes"] if p["role"] == "pn")

    async def submit():
        async with Client(folder) as c:
            return await c.submit(JobSpec("long", [StageSpec("s", 1, np.full(1, 60.0), command=("sleep", "60"))]))
    run(submit())

    def sleeper() -> list[int]:
        r = subprocess.run(["pgrep", "-P", str(pn), "-x", "sleep"], capture_output=True, text=True)
        return [int(x) for x in r.stdout.split()]
    wait_until(sleeper, 20, "the task's command running under the PN process")
    (task,) = sleeper()
    os.kill(pn, signal.SIGKILL)
    wait_until(lambda: not os.path.exists(f"/proc/{task}") or open(f"/proc/{task}/stat").read().split()[2] == "Z",
               3, "the command to die with its PN process (not run on for 60 s)")
