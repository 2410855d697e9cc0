"""Several hosts, on one machine: Linux network namespaces joined by veth pairs to a bridge (in
a namespace of its own). The RM and the JM hosts run in one namespace, PNs join from two
others (`apollo node join`), each process on its own clock; a replay of 150 jobs of the
FB-2009 trace completes, while one PN namespace is cut off until its PNs are seen dead: its
tasks run again elsewhere, each task's result is counted once, and its PNs are back after.

Needs root and iproute2 (CI runs as root); skips otherwise. Only addresses inside the
namespaces this test creates (10.77.0.0/24) are ever used.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import wait_until

TRACE = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "FB-2009_samples_24_times_1hr_0.tsv"
IP = shutil.which("ip")
NET = "10.77.0"

pytestmark = [pytest.mark.live, pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0 or IP is None or not TRACE.exists(),
                                 reason="needs root, iproute2 and ../shared/traces")]


def sh(*args, ns=None, check=True):
    cmd = ([IP, "netns", "exec", ns] if ns else []) + [str(a) for a in args]
    return subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=60)


class Namespaces:
    """Four namespaces: a bridge and three hosts (10.77.0.1-3), torn down on exit."""

    def __init__(self, tag: str) -> None:
        self.br = f"apl{tag}br"
        self.hosts = [f"apl{tag}h{i}" for i in range(3)]

    def __enter__(self):
        self.__exit__()
        for ns in [self.br, *self.hosts]:
            sh(IP, "netns", "add", ns)
            sh(IP, "link", "set", "lo", "up", ns=ns)
        sh(IP, "link", "add", "br0", "type", "bridge", ns=self.br)
        sh(IP, "link", "set", "br0", "up", ns=self.br)
        for i, ns in enumerate(self.hosts):
            sh(IP, "link", "add", "eth0", "type", "veth", "peer", "name", f"p{i}", "netns", self.br, ns=ns)
            sh(IP, "addr", "add", f"{NET}.{i + 1}/24", "dev", "eth0", ns=ns)
            sh(IP, "link", "set", "eth0", "up", ns=ns)
            sh(IP, "link", "set", f"p{i}", "master", "br0", "up", ns=self.br)
        return self

    def cut(self, i: int, down: bool) -> None:
        sh(IP, "link", "set", "eth0", "down" if down else "up", ns=self.hosts[i])

    def __exit__(self, *exc):
        for ns in [*self.hosts, self.br]:
            subprocess.run([IP, "netns", "pids", ns], capture_output=True)
            pids = subprocess.run([IP, "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            for p in pids:
                try:
                    os.kill(int(p), 9)
                except (ProcessLookupError, ValueError):
                    pass
            subprocess.run([IP, "netns", "del", ns], capture_output=True)


def apollo(ns: str, *args, **kw):
    return subprocess.Popen([IP, "netns", "exec", ns, sys.executable, "-m", "apollo.tools.cli", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def api(ns: str, folder: Path, path: str) -> dict:
    code = ("import json,sys,urllib.request;c=json.load(open(sys.argv[1]));"
            "print(urllib.request.urlopen(f\"http://{c['http']}" + path + "\", timeout=5).read().decode())")
    return json.loads(sh(sys.executable, "-c", code, folder / "cluster.json", ns=ns).stdout)


def test_pns_on_other_hosts_join_survive_a_partition_and_rejoin(tmp_path):
    folder = tmp_path / "cluster"
    with Namespaces(f"{os.getpid() % 10000}") as net:
        a, b, c = net.hosts
        up = apollo(a, "cluster", "up", "--cluster", folder, "--bind", f"{NET}.1", "--pns", 8, "--racks", 2,
                    "--procs", 0)
        assert up.wait(60) == 0, up.stdout.read()
        rm = json.loads((folder / "cluster.json").read_text())["rm"]
        joins = [apollo(ns, "node", "join", "--rm", rm, "--secret-file", folder / "secret", "--pns", 4,
                        "--rack", r, "--bind", f"{NET}.{i + 2}", "--dir", tmp_path / f"joined{r}")
                 for i, (ns, r) in enumerate([(b, 0), (c, 1)])]
        def alive() -> int:
            return api(a, folder, "/api/cluster")["servers_alive"]
        try:
            wait_until(lambda: alive() == 8, 30, "the joined PNs all alive", 0.2)
            # (at 500x the 150 jobs arrive over 10.2 s, their tasks shortened as much: the cut,
            # from the 20th job until the cut-off PNs are seen dead ~3.5 s later, falls inside
            # the arrivals, with tasks of the cut-off host to run again; 300x took 7 s longer)
            rep = apollo(a, "replay", "--cluster", folder, TRACE, "--jobs", 150, "--speedup", 500,
                         "--json", tmp_path / "replay.json")
            wait_until(lambda: len(api(a, folder, "/api/jobs")["jobs"]) >= 20, 60, "the replay well under way", 0.2)
            net.cut(2, down=True)                 # the second PN host, cut off until its PNs are dead (after 3 s)
            wait_until(lambda: alive() == 4, 20, "the cut-off host's 4 PNs seen dead", 0.5)
            net.cut(2, down=False)
            out, _ = rep.communicate(timeout=240)
            assert rep.returncode == 0, out
            report = json.loads((tmp_path / "replay.json").read_text())
            wait_until(lambda: alive() == 8, 30, "the cut-off PNs back", 0.5)
        finally:
            for j in joins:
                j.kill()
            subprocess.run([IP, "netns", "exec", a, sys.executable, "-m", "apollo.tools.cli", "cluster", "down",
                            "--cluster", str(folder)], capture_output=True, timeout=60)
    j, t = report["jobs"], report["tasks"]
    print(f"\n150-job replay over 3 namespaces, one cut off until seen dead: jobs {j}, tasks {t}")
    assert j["submitted"] == j["completed"] == 150
    assert t["completed"] == t["submitted"]          # each task's result counted once


def test_logs_of_tasks_on_a_pn_joined_from_another_namespace(tmp_path):
    """A job array runs on PNs joined from another namespace (their output files are that host's);
    `apollo logs` on the RM's host reads them back through the joined process's log service."""
    folder = tmp_path / "cluster"
    job = tmp_path / "array.toml"
    job.write_text('name = "split"\n[[stage]]\nname = "part"\ntasks = 3\ncommand = ["sh", "-c", '
                   '"echo part=$APOLLO_TASK_INDEX of=$APOLLO_TASKS job=$APOLLO_JOB_ID stage=$APOLLO_STAGE '
                   'attempt=$APOLLO_ATTEMPT"]\n')
    with Namespaces(f"L{os.getpid() % 1000}") as net:
        a, b, _ = net.hosts
        up = apollo(a, "cluster", "up", "--cluster", folder, "--bind", f"{NET}.1", "--pns", 4, "--racks", 1,
                    "--procs", 0)
        assert up.wait(60) == 0, up.stdout.read()
        rm = json.loads((folder / "cluster.json").read_text())["rm"]
        join = apollo(b, "node", "join", "--rm", rm, "--secret-file", folder / "secret", "--pns", 4,
                      "--bind", f"{NET}.2", "--dir", tmp_path / "joined")
        try:
            wait_until(lambda: api(a, folder, "/api/cluster")["servers_alive"] == 4, 30, "the joined PNs alive", 0.2)
            sub = apollo(a, "submit", job, "--cluster", folder, "--wait")
            assert sub.wait(60) == 0, sub.stdout.read()
            logs = subprocess.run([IP, "netns", "exec", a, sys.executable, "-m", "apollo.tools.cli", "logs", "0",
                                   "--cluster", str(folder)], capture_output=True, text=True, timeout=60)
        finally:
            join.kill()
            subprocess.run([IP, "netns", "exec", a, sys.executable, "-m", "apollo.tools.cli", "cluster", "down",
                            "--cluster", str(folder)], capture_output=True, timeout=60)
    print(f"\napollo logs of a job on PNs joined from another namespace:\n{logs.stdout}{logs.stderr}")
    assert logs.returncode == 0, logs.stderr
    assert sorted(logs.stdout.splitlines()) == [f"[part:{i}] part={i} of=3 job=0 stage=part attempt=1"
                                                for i in range(3)], logs.stdout
    assert logs.stderr.count("(process pn1000)") == 3, logs.stderr      # the joined process ran them
    assert str(tmp_path / "joined" / "work") in logs.stderr, logs.stderr    # in its own folder
