"""Task identity and logs on a live cluster, as a user sees them: a job array's tasks each know
their index, `apollo logs` fetches their output from the processes that ran them, `apollo job`
says where it is and a failure's exit code, and `--follow` prints output as it comes."""
import subprocess
import sys

import pytest

from apollo.tools import livecluster
from apollo.tools.client import job_status
from helpers import wait_until

pytestmark = [pytest.mark.live, pytest.mark.slow]

ARRAY = '''name = "split"
[[stage]]
name = "part"
tasks = 3
cpu = 1
mem_gb = 1
command = ["sh", "-c", "echo part=$APOLLO_TASK_INDEX of=$APOLLO_TASKS job=$APOLLO_JOB_ID stage=$APOLLO_STAGE name=$APOLLO_JOB_NAME cpus=$APOLLO_CPUS mem=$APOLLO_MEM_GB"]
'''
FAILING = '''name = "bad"
max_retries = 0
[[stage]]
name = "x"
tasks = 1
command = ["sh", "-c", "echo oops >&2; exit 3"]
'''
GATED = '''name = "gated"
[[stage]]
name = "g"
tasks = 1
command = ["sh", "-c", "echo first; while [ ! -e {gate} ]; do sleep 0.02; done; echo second"]
'''


def apollo(*args, timeout=30):
    return subprocess.run([sys.executable, "-m", "apollo.tools.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_job_array_logs_job_view_and_follow(tmp_path):
    folder = tmp_path / "c"
    livecluster.up(folder, pns=4, racks=2, procs=2, cpus=2.0, mem_gb=4.0)
    follow = None
    try:
        for name, text in (("array", ARRAY), ("bad", FAILING), ("gated", GATED.format(gate=tmp_path / "gate"))):
            (tmp_path / f"{name}.toml").write_text(text)
            r = apollo("submit", str(tmp_path / f"{name}.toml"), "--cluster", str(folder))
            assert r.returncode == 0, r.stderr
        with open(tmp_path / "follow.txt", "w") as out:
            follow = subprocess.Popen([sys.executable, "-m", "apollo.tools.cli", "logs", "2", "--follow",
                                       "--cluster", str(folder)], stdout=out, stderr=subprocess.PIPE, text=True)
        wait_until(lambda: all(job_status(folder, j).state != "running" for j in (0, 1)), 20, "jobs 0 and 1 to end")

        r = apollo("logs", "0", "--cluster", str(folder))
        assert r.returncode == 0, r.stderr
        assert sorted(r.stdout.splitlines()) == [
            f"[part:{i}] part={i} of=3 job=0 stage=part name=split cpus=1 mem=1" for i in range(3)], r.stdout
        assert r.stderr.count("attempt 1 on pn:") == 3, r.stderr          # which attempt is shown, and where
        r = apollo("logs", "0", "--task", "part:1", "--cluster", str(folder))
        assert r.stdout == "part=1 of=3 job=0 stage=part name=split cpus=1 mem=1\n", r.stdout + r.stderr

        r = apollo("job", "1", "--cluster", str(folder))
        assert r.returncode == 1 and "exit code 3: oops" in r.stdout, r.stdout       # the reason's exit code
        row = next(line for line in r.stdout.splitlines() if line.strip().startswith("x:0"))
        assert "failed" in row and "exit 3" in row and str(folder / "work") in row and "1-0-1.out" in row, row
        r = apollo("logs", "1", "--stderr", "--cluster", str(folder))
        assert r.stdout == "[x:0] oops\n", r.stdout + r.stderr

        wait_until(lambda: "first" in (tmp_path / "follow.txt").read_text(), 20, "--follow to print the first line")
        (tmp_path / "gate").touch()
        assert follow.wait(20) == 0, follow.stderr.read()
        assert (tmp_path / "follow.txt").read_text() == "[g:0] first\n[g:0] second\n"
    finally:
        if follow is not None and follow.poll() is None:
            follow.kill()
            follow.wait()
        livecluster.down(folder)
