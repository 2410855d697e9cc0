"""The live CLI as a user drives it: up, submit, job, cancel, down (real processes on 127.0.0.1)."""
import subprocess
import sys

import pytest

pytestmark = pytest.mark.live


def apollo(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "apollo.tools.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow
def test_submit_inspect_cancel_and_down(tmp_path):
    folder = str(tmp_path / "c")
    quick = tmp_path / "quick.toml"
    quick.write_text('name = "quick"\n[[stage]]\nname = "s"\ntasks = 3\nduration_s = 0.05\n'
                     '[[stage]]\nname = "t"\ntasks = 1\ndepends_on = ["s"]\ncommand = ["sh", "-c", "exit 0"]\n')
    slow = tmp_path / "slow.toml"
    slow.write_text('name = "slow"\n[[stage]]\nname = "sleepy"\ntasks = 2\ncommand = ["sleep", "30"]\n')
    r = apollo("cluster", "up", "--cluster", folder, "--pns", "4", "--racks", "2", "--procs", "1")
    assert r.returncode == 0, r.stderr
    try:
        r = apollo("submit", "--cluster", folder, str(quick), "--wait")
        assert r.returncode == 0 and "job 0 completed" in r.stdout, r.stdout + r.stderr
        assert "3/3" in r.stdout and "1/1" in r.stdout, r.stdout      # the progress bar, per stage
        r = apollo("job", "0", "--cluster", folder)
        assert "done" in r.stdout and "3/3 done" in r.stdout and "1/1 done" in r.stdout, r.stdout
        r = apollo("submit", "--cluster", folder, str(slow))
        assert "submitted job 1" in r.stdout
        r = apollo("cancel", "1", "--cluster", folder)
        assert r.returncode == 0 and "job 1: cancelled" in r.stdout, r.stdout + r.stderr
        r = apollo("jobs", "--cluster", folder)
        assert "cancelled" in r.stdout and "done" in r.stdout
        bad = tmp_path / "bad.toml"
        bad.write_text('name = "bad"\n[[stage]]\nname = "s"\ntasks = 1\nduration_s = 1\ncpu = 64\n')
        r = apollo("submit", "--cluster", folder, str(bad))
        assert r.returncode != 0 and "refused" in r.stderr and "64" in r.stderr, r.stdout + r.stderr
    finally:
        r = apollo("cluster", "down", "--cluster", folder)
    assert r.returncode == 0 and "stopped" in r.stdout
    r = apollo("cluster", "status", "--cluster", folder)
    assert r.returncode == 1 and " alive" not in r.stdout and r.stdout.count("DEAD") == 4      # rm, two JM hosts, one PN process
