"""The sharing plane on a live cluster (real processes on 127.0.0.1): admission waits with a
place in line, an unknown queue refused, and a queue taking its guarantee back by preemption."""
import asyncio
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from apollo import Client
from apollo.tools.livecluster import down, up
from apollo.tools.replay import read_events
from apollo.core.records import A_JOB, A_OPP, A_OUTCOME
from apollo.runtime.live import run
from apollo.core.spec import JobSpec, StageSpec
from helpers import await_until, wait_until

pytestmark = pytest.mark.live


def apollo(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "apollo.tools.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def api(folder, path: str) -> dict:
    """The RM's HTTP face (/api/...) of the cluster in ``folder``."""
    http = json.loads((Path(folder) / "cluster.json").read_text())["http"]
    return json.loads(urllib.request.urlopen(f"http://{http}{path}", timeout=5).read())


def running_tasks(folder) -> int:
    return api(folder, "/api/cluster")["tasks"]["running"]


def job_file(path, name, queue, user, tasks=1, cmd='["sleep", "30"]'):
    path.write_text(f'name = "{name}"\nqueue = "{queue}"\nuser = "{user}"\n'
                    f'[[stage]]\nname = "s"\ntasks = {tasks}\ncommand = {cmd}\n')
    return str(path)


@pytest.mark.slow
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
        # the RM stores the line at its next round
        wait_until(lambda: "waiting for admission in queue batch at position 1"
                   in apollo("job", "1", "--cluster", folder).stdout, 10, "job 1 shown waiting at position 1", 0.2)
        r = apollo("queues", "--cluster", folder)
        line = next(x for x in r.stdout.splitlines() if x.strip().startswith("batch"))
        assert line.split()[5:8] == ["1", "1", "job"], r.stdout           # running 1, waiting 1: job 1
        r = apollo("jobs", "--cluster", folder)
        assert "nope" not in r.stdout, r.stdout                                         # nothing stored for x
        assert r.stdout.count("running") == 1 and r.stdout.count("waiting") == 1, r.stdout
        assert apollo("cancel", "1", "--cluster", folder).returncode == 0          # cancelled while waiting
        assert apollo("cancel", "0", "--cluster", folder).returncode == 0
    finally:
        apollo("cluster", "down", "--cluster", folder)


@pytest.mark.slow
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
                # alice runs on all four cores (bob's idle half is lent)
                await await_until(lambda: running_tasks(folder) == 4, 20, "alice's tasks on all four cores", 0.1)
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
        def killed():
            return [r for r in read_events(folder).attempts if r[A_JOB] == a and r[A_OUTCOME] == "preempted"]
        wait_until(lambda: len(killed()) >= 2, 10, "two of alice's attempts recorded preempted", 0.1)
        assert len(killed()) == 2, killed()        # b was short 2 cores: exactly 2 killed
    finally:
        down(folder)


# ---- the scenarios under the apollo profile (docs/sharing.md) ---------------------------

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "queues"


# The scenarios submit the short job 5 s after the long one (an arrival time, not a wait
# for a condition). Sooner (about 1 s, as soon as the long job runs everywhere) one of the pools
# scenario's 16 tasks was seen to wait behind a large-pool task that no longer yielded once the
# give-back was done, ~60 s (docs/sharing.md, "What is not claimed").
LATE_S = 5.0


def _scenario(tmp_path, queues, big, small):
    """A long job holds the cluster (16 PNs x 2 cores, apollo); then a short one arrives in a
    queue owed a share. -> (seconds the short job took, its JobDone, the RM's records, the short
    job's id, the big job's id, the most CPUs /api/queues showed held)."""
    folder = tmp_path / "c"
    up(folder, pns=16, racks=4, procs=2, cpus=2.0, scheduler="apollo", queues=str(queues), timeout_s=30.0)
    try:
        most = [0.0]

        def poll_held():
            root = next(r for r in api(folder, "/api/queues")["queues"] if r["parent"] is None)
            most[0] = max(most[0], root["holding_cores"])

        async def main():
            async with Client(folder) as c:
                a = await c.submit(big)
                late = time.monotonic() + LATE_S        # the scenario: the short job comes 5 s later
                await await_until(lambda: running_tasks(folder) >= 32, 30, "the long job on every core", 0.2)
                await asyncio.sleep(max(0.0, late - time.monotonic()))
                t0 = time.monotonic()
                b = await c.submit(small)
                assert c.position(b) is None       # admitted at once: its queue holds less than it is owed
                waiting = asyncio.ensure_future(c.wait(b, 60))
                while not waiting.done():
                    await asyncio.get_running_loop().run_in_executor(None, poll_held)
                    await asyncio.sleep(0.5)
                took = time.monotonic() - t0
                c.cancel(a)
                return a, b, waiting.result(), took
        a, b, done, took = run(main())

        def records_of_b():                        # the last records reach the event files
            rec = read_events(folder)
            return rec if sum(r[A_JOB] == b and r[A_OUTCOME] == "done" for r in rec.attempts) >= small.total_tasks \
                else None
        return took, done, wait_until(records_of_b, 10, "the short job's attempts in the event files"), a, b, most[0]
    finally:
        down(folder)


def _job(name, queue, user, n, dur):
    return JobSpec(name, [StageSpec("work", n, np.full(n, float(dur)))], user=user, queue=queue)


@pytest.mark.slow
def test_a_short_job_gets_its_queues_share_under_apollo_within_the_timeouts(tmp_path):
    """The two scenarios, on two clusters at once (16 PNs x 2 cores each, apollo):
    - capacity 70/30: alice's 64 x 60 s tasks in queue a borrow b's 30%; 5 s later bob's 16 x 5 s
      tasks come to queue b (9.6 cores guaranteed, 10 s reclaim timeout): two waves on b's
      guarantee after the timeout, about 20 s (it took 60-66 s before, waiting for alice's tasks);
    - three pools: a large-pool job of 64 x 60 s holds the cluster; 5 s later a small-pool job of
      16 x 5 s arrives: its min share (20%) after Tmin (5 s), its fair share after Tfair (15 s) at
      the latest, about 20 s in all (60-63 s before)."""
    from concurrent.futures import ThreadPoolExecutor
    (tmp_path / "cap").mkdir()
    (tmp_path / "pools").mkdir()
    with ThreadPoolExecutor(2) as pool:
        cap = pool.submit(_scenario, tmp_path / "cap", EXAMPLES / "capacity-70-30.toml",
                          _job("alice-batch", "a", "alice", 64, 60), _job("bob-query", "b", "bob", 16, 5))
        pools = pool.submit(_scenario, tmp_path / "pools", EXAMPLES / "three-pools.toml",
                            _job("etl", "large", "ops", 64, 60), _job("report", "small", "ann", 16, 5))
        (took, done, rec, a, b, most), (took2, done2, _, _, _, most2) = cap.result(), pools.result()
    assert done.ok, done.reason
    assert took < 10 + 2 * 5 + 6, took
    killed = [r for r in rec.attempts if r[A_JOB] == a and r[A_OUTCOME] == "preempted" and not r[A_OPP]]
    # b is 10 cores short at its timeout (9.6 guaranteed): the minimum is 10 kills, and the bound is
    # the minimum + 2, as issue 27 sets it (11 kills were seen once in ~10 runs; the cause of the
    # extra kill is not known yet)
    assert len(killed) <= 10 + 2, len(killed)
    assert most <= 32.0 + 1e-6, most               # held never past the cluster
    assert done2.ok, done2.reason
    assert took2 < 15 + 2 * 5 + 6, took2
    assert most2 <= 32.0 + 1e-6, most2
