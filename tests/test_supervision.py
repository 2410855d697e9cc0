"""Supervision: the cluster's supervisor restarts a process that dies (with backoff), `apollo cluster
restart NAME` goes through it, `apollo cluster down` stops it first and tells joined processes
to leave; `apollo node join` says at once, in one line, that its secret was refused or that
nobody answers at the RM's address.

The live tests run the CLI as a subprocess, as a user runs it, and wait with deadlines.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from apollo.tools.livecluster import _alive, alive, read_info
from apollo.tools.supervisor import Backoff
from helpers import wait_until
from test_live_cluster import _gone


def cli(*args, **kw) -> subprocess.Popen:
    kw = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **kw}
    return subprocess.Popen([sys.executable, "-m", "apollo.tools.cli", *map(str, args)], text=True, **kw)


def entry(folder: Path, name: str) -> dict:
    info = read_info(folder)
    if name == "supervisor":
        return info["supervisor"]
    return next(p for p in info["processes"] if f"{p['role']}{p['index']}".replace("rm0", "rm") == name)


# ---------------------------------------------------------------------------- without processes

def test_backoff_doubles_while_a_process_keeps_dying_and_starts_over_once_it_stayed_up():
    b = Backoff(first_s=0.5, max_s=4.0, stable_s=10.0)
    assert [b.after_death(1.0) for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert b.after_death(10.0) == 0.5          # it had stayed up: a rare crash is repaired fast
    assert b.after_death(0.2) == 1.0


def test_a_zombie_or_a_reused_pid_is_not_alive():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    wait_until(lambda: Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z", 10,
               "the child to exit (a zombie until reaped)")
    assert not _alive(child.pid)               # ours: reaped on the way
    child.returncode = 0
    me = {"pid": os.getpid()}
    assert alive(me)
    assert not alive(dict(me, ticks=1))        # this pid, but a process started at another time


# ---------------------------------------------------------------------------- live

@pytest.mark.live
def test_supervised_cluster_restarts_what_dies_and_down_makes_a_joined_node_leave(cluster, tmp_path):
    # (meanwhile, a join to an RM nobody answers at: it fails in one line, within 10 s)
    (tmp_path / "wrong").write_text("wrong")
    nobody = cli("node", "join", "--rm", "127.0.0.1:9", "--secret-file", tmp_path / "wrong", "--pns", 1,
                 "--dir", tmp_path / "nobody")
    nobody_ended = []
    threading.Thread(target=lambda: nobody_ended.append((nobody.communicate(timeout=30), time.monotonic())),
                     daemon=True).start()
    t_nobody = time.monotonic()
    folder = cluster.up(pns=2, racks=1, procs=0, jm_hosts=1, supervise=True)
    info = read_info(folder)
    sup = info["supervisor"]["pid"]
    joined = open(tmp_path / "join.out", "w+")
    join = cli("node", "join", "--rm", info["rm"], "--secret-file", folder / "secret", "--pns", 2,
               "--dir", tmp_path / "joined", stdout=joined, stderr=subprocess.STDOUT)
    wrong = cli("node", "join", "--rm", info["rm"], "--secret-file", tmp_path / "wrong", "--pns", 1,
                "--dir", tmp_path / "wrong-dir")
    try:
        # the RM, killed, comes back on its own: a new pid in cluster.json, listening
        rm = entry(folder, "rm")["pid"]
        os.kill(rm, signal.SIGKILL)
        t0 = time.monotonic()
        wait_until(lambda: entry(folder, "rm")["pid"] != rm and alive(entry(folder, "rm"))
                   and (folder / "ready-rm0").exists(), 20, "the killed RM restarted by the supervisor")
        print(f"\nRM restarted {time.monotonic() - t0:.2f} s after its kill")
        assert entry(folder, "rm")["restarts"] == 1
        cluster.note(folder)

        # a refused secret: one line on the terminal, at once
        _, err = wrong.communicate(timeout=20)
        assert wrong.returncode == 1 and err.count("\n") == 1 and "refused our secret" in err, err

        # a restart by hand goes through the supervisor
        r = subprocess.run([sys.executable, "-m", "apollo.tools.cli", "cluster", "restart", "jm0", "--cluster",
                            str(folder)], capture_output=True, text=True, timeout=40)
        assert r.returncode == 0 and "jm0 restarted: pid" in r.stdout, r.stdout + r.stderr
        assert entry(folder, "jm0")["restarts"] == 1 and "restart asked for by hand" in \
            (folder / "supervisor.log").read_text()
        cluster.note(folder)

        # work goes on: a job runs on the joined PNs
        wait_until(lambda: "joined the cluster" in (tmp_path / "join.out").read_text(), 20, "the node to join")
        job = tmp_path / "job.toml"
        job.write_text('name = "after"\n[[stage]]\nname = "s"\ntasks = 4\nduration_s = 0.05\n')
        r = subprocess.run([sys.executable, "-m", "apollo.tools.cli", "submit", str(job), "--wait", "--timeout",
                            "30", "--cluster", str(folder)], capture_output=True, text=True, timeout=40)
        assert r.returncode == 0 and "completed" in r.stdout, r.stdout + r.stderr
        r = subprocess.run([sys.executable, "-m", "apollo.tools.cli", "cluster", "status", "--cluster", str(folder)],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0 and "supervisor" in r.stdout and "pn1000" in r.stdout, r.stdout + r.stderr

        # down: the supervisor first (nothing comes back), the joined node told to leave
        r = subprocess.run([sys.executable, "-m", "apollo.tools.cli", "cluster", "down", "--cluster", str(folder)],
                           capture_output=True, text=True, timeout=40)
        assert r.returncode == 0, r.stdout + r.stderr
        lines = r.stdout.splitlines()
        assert lines[0].startswith("supervisor") and "pn1000 (joined" in r.stdout and " left" in r.stdout, lines
        assert join.wait(10) == 0
        assert "left the cluster" in (tmp_path / "join.out").read_text()
        wait_until(lambda: _gone(sup), 10, "the supervisor to be gone")

        # nobody at the RM's address: one line, within 10 s (its end time is taken by the thread
        # that waits for it, so it is checked last: the rest runs meanwhile)
        (_, err), t_end = wait_until(lambda: nobody_ended and nobody_ended[0], 30, "the join to nobody to end")
        assert nobody.returncode == 1 and err.count("\n") == 1 and "cannot reach the RM at 127.0.0.1:9" in err, err
        assert t_end - t_nobody < 10, f"gave up after {t_end - t_nobody:.1f} s"
    finally:
        for p in (join, wrong, nobody):
            if p.poll() is None:
                p.kill()
                p.wait()
        joined.close()
