"""Errors a user of the CLI and of apollo.tools.client.Client can act on: one clear line, no traceback.

- no cluster in the folder: every cluster command says so and how to start one;
- a wrong secret: refused at once ("refused our secret (check DIR/secret)"), not after a timeout;
- the RM unreachable (cluster.json there, the RM dead): a retry note on stderr, then exit code 1
  after --timeout.

The CLI runs as a subprocess (`python -m apollo.tools.cli ...`), as a user runs it.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from apollo.tools.client import Client
from apollo.tools.livecluster import ClusterError, read_info
from apollo.runtime.live import run
from apollo.core.spec import JobSpec, StageSpec
from helpers import wait_until
from test_live_cluster import _gone, job_state

CLUSTER_COMMANDS = [
    ["submit", "JOBFILE"], ["jobs"], ["job", "0"], ["cancel", "0"], ["replay", "fb2009", "--jobs", "1"],
    ["queues"], ["dashboard"],
]


def apollo(*args: str, timeout: float = 30) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "apollo.tools.cli", *args], capture_output=True, text=True,
                       timeout=timeout)
    return r, time.monotonic() - t0


def no_traceback(r: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout, r.stderr


@pytest.fixture
def jobfile(tmp_path) -> Path:
    p = tmp_path / "job.toml"
    p.write_text('name = "small"\n[[stage]]\nname = "s"\ntasks = 2\nduration_s = 0.05\n')
    return p


def small(name: str = "small", tasks: int = 2, seconds: float = 0.05) -> JobSpec:
    return JobSpec(name, [StageSpec("work", tasks, np.full(tasks, seconds))])


# ---------------------------------------------------------------------------- no cluster

@pytest.mark.live
@pytest.mark.parametrize("cmd", CLUSTER_COMMANDS, ids=lambda c: c[0])
def test_every_cluster_command_says_there_is_no_cluster_and_how_to_start_one(tmp_path, jobfile, cmd):
    folder = tmp_path / "nothing-here"
    args = [str(jobfile) if a == "JOBFILE" else a for a in cmd]
    r, _ = apollo(*args, "--cluster", str(folder))
    no_traceback(r)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"apollo {cmd[0]}: no cluster in {folder}" in r.stderr, r.stderr
    assert f"apollo cluster up --cluster {folder}" in r.stderr, r.stderr


@pytest.mark.live
@pytest.mark.slow
def test_a_damaged_cluster_folder_is_said_so(tmp_path, jobfile):
    folder = tmp_path / "damaged"
    folder.mkdir()
    (folder / "cluster.json").write_text("{not json")
    r, _ = apollo("submit", str(jobfile), "--cluster", str(folder))
    no_traceback(r)
    assert r.returncode == 1 and "is not a cluster description" in r.stderr, r.stderr
    # a cluster none of whose processes is alive: said to be down
    (folder / "cluster.json").write_text('{"rm": "127.0.0.1:9", "processes": [], "config": {}}')
    r, _ = apollo("submit", str(jobfile), "--cluster", str(folder))
    no_traceback(r)
    assert r.returncode == 1 and f"the cluster in {folder} is not running" in r.stderr, r.stderr
    # cluster.json without the secret next to it (copied alone from another machine, say); one of
    # its processes alive (this one stands in for it)
    (folder / "cluster.json").write_text('{"rm": "127.0.0.1:9", "config": {}, "processes": [{"role": "rm", '
                                         f'"index": 0, "address": "127.0.0.1:9", "pid": {os.getpid()}}}]}}')
    r, _ = apollo("submit", str(jobfile), "--cluster", str(folder))
    no_traceback(r)
    assert r.returncode == 1 and f"no secret file {folder / 'secret'}" in r.stderr, r.stderr


def test_client_without_a_cluster_raises_cluster_error(tmp_path):
    with pytest.raises(ClusterError, match="no cluster in .*apollo cluster up --cluster"):
        Client(tmp_path / "none")


# ---------------------------------------------------------------------------- a wrong secret

@pytest.mark.live
@pytest.mark.slow
def test_a_wrong_secret_is_refused_at_once_with_a_clear_line(cluster, jobfile):
    folder = cluster.up(pns=2, racks=1, procs=1, jm_hosts=1)
    rm = read_info(folder)["rm"]

    async def submit_long():
        async with Client(folder) as c:
            return await c.submit(small("long", 1, 60.0))
    long_job = run(submit_long())            # with the right secret: a job to try to cancel below
    wait_until(lambda: job_state(folder, long_job) == "running", 10, "the job stored as running")

    secret = folder / "secret"
    good = secret.read_bytes()
    secret.write_text("0" * 64)              # the user's copy is wrong; the cluster keeps its own
    want = f"the cluster at {rm} refused our secret (check {secret})"
    try:
        async def api():
            async with Client(folder) as c:
                t0 = time.monotonic()
                with pytest.raises(ClusterError, match="refused our secret"):
                    await c.submit(small(), timeout_s=30)
                assert time.monotonic() - t0 < 3.0
                with pytest.raises(ClusterError, match="refused our secret"):
                    await c.reach_rm(30)
                with pytest.raises(ClusterError, match="refused our secret"):
                    await c.wait(long_job, 30)

        cases = (["submit", str(jobfile), "--wait"], ["cancel", str(long_job)], ["replay", "fb2009", "--jobs", "1"])
        # (the three commands at once, and the API's calls, here, meanwhile)
        with ThreadPoolExecutor(len(cases)) as pool:
            runs = [pool.submit(apollo, *args, "--cluster", str(folder)) for args in cases]
            run(api())
            runs = [f.result() for f in runs]
        for args, (r, took) in zip(cases, runs):
            no_traceback(r)
            assert r.returncode == 1, (args, r.stdout + r.stderr)
            assert f"apollo {args[0]}: {want}" in r.stderr, (args, r.stderr)
            assert took < 5.0, f"{args[0]} took {took:.1f} s to notice a refused secret"
            assert "closing connection" not in r.stderr, r.stderr    # no transport log noise
    finally:
        secret.write_bytes(good)
    assert job_state(folder, long_job) == "running"      # the refused cancel did nothing
    # (and the right secret still works)
    r, _ = apollo("submit", str(jobfile), "--wait", "--cluster", str(folder))
    assert r.returncode == 0 and "completed" in r.stdout, r.stdout + r.stderr


# ---------------------------------------------------------------------------- the RM unreachable

@pytest.mark.live
@pytest.mark.slow
def test_an_unreachable_rm_is_retried_visibly_then_given_up_with_exit_code_1(cluster, jobfile):
    # unsupervised: the killed RM must stay dead (a supervisor would start it again within a second)
    folder = cluster.up(pns=2, racks=1, procs=1, jm_hosts=1, supervise=False)
    info = read_info(folder)
    rm = info["rm"]
    r, _ = apollo("submit", str(jobfile), "--wait", "--cluster", str(folder))
    assert r.returncode == 0, r.stdout + r.stderr          # job 0, to cancel below
    rm_pid = next(p["pid"] for p in info["processes"] if p["role"] == "rm")
    os.kill(rm_pid, signal.SIGKILL)
    wait_until(lambda: _gone(rm_pid), 5, "the killed RM to be gone")

    async def api():
        notes = []
        async with Client(folder) as c:
            c.on_retry = notes.append
            t0 = time.monotonic()
            with pytest.raises(ClusterError, match=f"the RM at {rm} did not answer for 2 s"):
                await c.submit(small(), timeout_s=2)
            assert 2 <= time.monotonic() - t0 < 4
        assert notes and all("retrying" in n for n in notes), notes

    cases = ((["submit", str(jobfile)], 2), (["cancel", "0"], 2), (["replay", "fb2009", "--jobs", "1"], 2))
    reads = (["jobs"], ["job", "0"])
    # (at once: each waits out its timeout; the commands that only read the folder, and the
    # API's own submission, here, run meanwhile)
    with ThreadPoolExecutor(len(cases) + len(reads)) as pool:
        waiting = [pool.submit(apollo, *args, "--timeout", str(timeout), "--cluster", str(folder))
                   for args, timeout in cases]
        reading = [pool.submit(apollo, *args, "--cluster", str(folder)) for args in reads]
        run(api())
        runs = [f.result() for f in waiting]
        (jobs, _), (job, _) = (f.result() for f in reading)
    for (args, timeout), (r, took) in zip(cases, runs):
        no_traceback(r)
        cmd = args[0]
        assert r.returncode == 1, (args, r.stdout + r.stderr)
        assert f"apollo {cmd}: the RM at {rm} is not reachable" in r.stderr and "retrying" in r.stderr, r.stderr
        assert f"apollo {cmd}: the RM at {rm} did not answer for {timeout} s" in r.stderr, r.stderr
        assert "apollo cluster status" in r.stderr, r.stderr
        assert timeout <= took < timeout + 5, f"{cmd} gave up after {took:.1f} s (--timeout {timeout})"
        assert "closing connection" not in r.stderr and "connect failed" not in r.stderr, r.stderr

    # What reads the folder only still works without the RM.
    assert jobs.returncode == 0 and "done" in jobs.stdout, jobs.stdout + jobs.stderr
    assert job.returncode == 0 and "2/2 done" in job.stdout, job.stdout + job.stderr


def test_submit_timeout_defaults_to_30_s():
    from apollo.tools.cli import build_parser
    assert build_parser().parse_args(["submit", "x.toml"]).timeout == 30.0
