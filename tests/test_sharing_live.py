"""The sharing plane on a live cluster (real processes on 127.0.0.1): admission waits with a
place in line, an unknown queue refused, and a queue taking its guarantee back by preemption."""
import asyncio
import subprocess
import sys
import time

import numpy as np

from apollo import Client
from apollo.livecluster import down, up
from apollo.replay import read_events
from apollo.records import A_JOB, A_OUTCOME
from apollo.runtime.live import run
from apollo.spec import JobSpec, StageSpec


def apollo(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "apollo.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def job_file(path, name, queue, user, tasks=1, cmd='["sleep", "30"]'):
    path.write_text(f'name = "{name}"\nqueue = "{queue}"\nuser = "{user}"\n'
                    f'[[stage]]\nname = "s"\ntasks = {tasks}\ncommand = {cmd}\n')
    return str(path)


def test_admission_waits_with_its_place_and_an_unknown_queue_is_refused(tmp_path):
    folder = str(tmp_path / "c")
    queues = tmp_path / "q.toml"
    queues.write_text('sharing = "capacity"\n[queues.batch]\nguarantee = "50%"\nmax_running_jobs = 1\n'
                      '[queues.adhoc]\nguarantee = "50%"\n')
    r = apollo("cluster", "up", "--cluster", folder, "--pns", "4", "--racks", "2", "--procs", "1",
               "--queues", str(queues))
    assert r.returncode == 0, r.stderr
    try:
        r = apollo("submit", "--cluster", folder, job_file(tmp_path / "x.toml", "x", "nope", "ann"))
        assert r.returncode != 0 and "unknown queue 'nope'" in r.stderr and "batch" in r.stderr, r.stdout + r.stderr
        assert "Traceback" not in r.stderr
        r = apollo("submit", "--cluster", folder, job_file(tmp_path / "a.toml", "first", "batch", "ann"))
        assert "submitted job 0" in r.stdout and "waiting" not in r.stdout, r.stdout + r.stderr
        r = apollo("submit", "--cluster", folder, job_file(tmp_path / "b.toml", "second", "batch", "bob"))
        assert "submitted job 1" in r.stdout and "waiting in queue batch at position 1" in r.stdout, r.stdout
        deadline = time.monotonic() + 10
        while True:          # the RM stores the line at its next round
            r = apollo("job", "1", "--cluster", folder)
            if "waiting for admission in queue batch at position 1" in r.stdout or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert "waiting for admission in queue batch at position 1" in r.stdout, r.stdout + r.stderr
        r = apollo("queues", "--cluster", folder)
        line = next(x for x in r.stdout.splitlines() if x.strip().startswith("batch"))
        assert line.split()[4:7] == ["1", "1", "job"], r.stdout           # running 1, waiting 1: job 1
        r = apollo("jobs", "--cluster", folder)
        assert "nope" not in r.stdout and r.stdout.count("running") == 2, r.stdout     # nothing stored for x
        assert apollo("cancel", "1", "--cluster", folder).returncode == 0          # cancelled while waiting
        assert apollo("cancel", "0", "--cluster", folder).returncode == 0
    finally:
        apollo("cluster", "down", "--cluster", folder)


def test_a_queue_takes_its_guarantee_back_by_preemption(tmp_path):
    """Two users in two capacity queues of 2 cores each on 4: alice's long tasks borrow bob's
    idle half; bob's queue gets it back within its 1 s reclaim timeout by killing the two
    most recently started of alice's tasks (no more), and bob's short job finishes long before
    alice's tasks would have."""
    folder = tmp_path / "c"
    queues = tmp_path / "q.toml"
    queues.write_text('sharing = "capacity"\n[queues.a]\nguarantee = "50%"\n'
                      '[queues.b]\nguarantee = "50%"\nreclaim_timeout_s = 1\n')
    up(folder, pns=4, racks=2, procs=1, cpus=1.0, scheduler="hfs-delay", queues=str(queues), timeout_s=30.0)
    try:
        alice = JobSpec("alice-batch", [StageSpec("work", 8, np.full(8, 60.0))], user="alice", queue="a")
        bob = JobSpec("bob-query", [StageSpec("work", 2, np.full(2, 1.0))], user="bob", queue="b")

        async def main():
            async with Client(folder) as c:
                a = await c.submit(alice)
                await asyncio.sleep(2.0)     # alice runs on all four cores (bob's idle half is lent)
                t0 = time.monotonic()
                b = await c.submit(bob)
                done = await c.wait(b, 30)
                took = time.monotonic() - t0
                c.cancel(a)
                return a, b, done, took
        a, b, done, took = run(main())
        assert done.ok, done.reason
        # 1 s reclaim timeout + 1 s tasks (+ start-up and the RM's rounds): far below alice's 60 s
        assert took < 10.0, took
        deadline = time.monotonic() + 10
        while True:
            killed = [r for r in read_events(folder).attempts if r[A_JOB] == a and r[A_OUTCOME] == "preempted"]
            if len(killed) >= 2 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert len(killed) == 2, killed            # b was short 2 cores: exactly 2 killed
    finally:
        down(folder)
