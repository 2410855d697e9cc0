"""A local multi-process cluster: start, inspect and stop it (`apollo cluster up|status|down`).

``up`` reserves a loopback port per process, writes DIR/cluster.json (every
address, known before anyone starts) and a fresh DIR/secret (mode 0600),
then starts an RM process, a JM host process and P processes hosting the
PN actors, and waits until each is listening. ``down`` stops them with
SIGTERM, then SIGKILL for any that linger.
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_DIR = Path.home() / ".apollo" / "cluster"


class ClusterError(RuntimeError):
    pass


def _free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct free loopback ports. The probing sockets stay open until all are picked:
    a port released at once can be handed out again to the next probe (two processes were
    once given the same port)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)
            s.bind((host, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours counts as dead.
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return True


def process_name(role: str, index: int) -> str:
    """A process's name in the cluster folder's files (rm, jm0, jm1, pn0, ...)."""
    return "rm" if role == "rm" else f"{role}{index}"


def read_info(folder: Path) -> dict:
    try:
        return json.loads((folder / "cluster.json").read_text())
    except FileNotFoundError:
        raise ClusterError(f"no cluster in {folder} (run `apollo cluster up --cluster {folder}`)") from None


def running(folder: Path, info: dict | None = None) -> tuple[bool, str]:
    """Whether the cluster in ``folder`` is running, and if not, why (for a one-line message)."""
    info = read_info(folder) if info is None else info
    if info.get("stopped_at"):
        return False, "stopped by `apollo cluster down`"
    pids = [p.get("pid") for p in info.get("processes", [])] + [info.get("supervisor", {}).get("pid")]
    if not any(pid and _alive(pid) for pid in pids):
        return False, "none of its processes is alive"
    return True, ""


def up(folder: Path, pns: int = 16, racks: int = 4, procs: int = 2, cpus: float = 2.0, mem_gb: float = 8.0,
       scheduler: str = "apollo", timeout_s: float = 15.0, io: dict | None = None,
       queues: str | Path | None = None, http_host: str = "127.0.0.1", jm_hosts: int = 2,
       bind: str = "127.0.0.1") -> dict:
    """Start a cluster in ``folder``; returns its info (with ``startup_s``).

    ``io``: fields of apollo.core.cluster.IoModel for every process (e.g. ``{"init_s": 0.0}`` makes a
    synthetic task with a 0 s duration a true no-op instead of paying the modelled 0.2 s start-up);
    kept in cluster.json's config, which apollo.tools.process reads. ``queues``: a queue file
    (rm/queues.py), checked here and copied into the folder for the RM. ``http_host``: where the
    RM's HTTP face listens (cluster.json "http"; any address but loopback asks for the token).
    """
    # Everything is checked before anything is started or written: a refused start leaves no trace.
    if (folder / "cluster.json").exists():
        old = json.loads((folder / "cluster.json").read_text())
        if any(p.get("pid") and _alive(p["pid"]) for p in old.get("processes", [])):
            raise ClusterError(f"a cluster is already running in {folder}; `apollo cluster down` it first")
    if not (1 <= racks <= pns) or procs < 0:
        raise ClusterError(f"need 1 <= racks <= pns and procs >= 0 (pns={pns}, racks={racks}, procs={procs})")
    if not (cpus > 0 and mem_gb > 0):
        raise ClusterError(f"each PN needs cpus > 0 and mem_gb > 0 (cpus={cpus}, mem_gb={mem_gb})")
    if jm_hosts < 1:
        raise ClusterError(f"need at least one JM host (--jm-hosts {jm_hosts})")
    procs = min(procs, pns)       # 0: no PN here; they join from other machines (apollo node join)
    if io:
        from dataclasses import fields

        from apollo.core.cluster import IoModel
        known = {f.name for f in fields(IoModel)}
        bad = sorted(set(io) - known)
        if bad:
            raise ClusterError(f"unknown I/O model field(s) {bad} (known: {', '.join(sorted(known))})")
        io = {k: float(v) for k, v in io.items()}
    tree_text = None
    if queues:
        from rm.queues import QueueError, load_queue_file
        try:
            load_queue_file(queues)
        except QueueError as e:
            raise ClusterError(str(e)) from None
        tree_text = Path(queues).read_text()
    for host in dict.fromkeys((bind, http_host)):
        try:
            _free_ports(1, host)
        except OSError as e:
            raise ClusterError(f"cannot listen on {host}: {e.strerror or e} (is it an address of this machine?)") \
                from None
    ports = _free_ports(2 + jm_hosts + procs, bind)   # the last one: the RM's HTTP face (rm/http/server.py)
    folder.mkdir(parents=True, exist_ok=True)
    for f in folder.glob("ready-*"):
        f.unlink()
    secret_path = folder / "secret"
    secret_path.write_text(secrets.token_hex(32))
    os.chmod(secret_path, 0o600)
    processes = [{"role": "rm", "index": 0, "address": f"{bind}:{ports[0]}"}]
    for k in range(jm_hosts):
        processes.append({"role": "jm", "index": k, "address": f"{bind}:{ports[1 + k]}"})
    for k in range(procs):
        processes.append({"role": "pn", "index": k, "address": f"{bind}:{ports[1 + jm_hosts + k]}",
                          "pns": list(range(k * pns // procs, (k + 1) * pns // procs))})
    # One time origin for every process (CLOCK_MONOTONIC is machine-wide): the actors compare
    # timestamps taken in different processes, so they must share a clock.
    info = {"rm": processes[0]["address"], "http": f"{http_host}:{ports[-1]}", "processes": processes,
            "epoch": time.monotonic(),
            "config": {"pns": pns, "racks": racks, "cpus": cpus, "mem_gb": mem_gb, "scheduler": scheduler,
                       "jm_hosts": jm_hosts}}
    if io:
        info["config"]["io"] = io
    if tree_text is not None:
        (folder / "queues.toml").write_text(tree_text)
        info["config"]["queues"] = "queues.toml"
    (folder / "cluster.json").write_text(json.dumps(info, indent=2))
    started = time.monotonic()
    for p in processes:
        out = open(folder / f"{process_name(p['role'], p['index'])}.out", "ab")
        with out:   # the child keeps its own descriptor
            child = subprocess.Popen([sys.executable, "-m", "apollo.tools.process", "--cluster", str(folder), "--role",
                                      p["role"], "--index", str(p["index"])], stdout=out, stderr=out,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        child.returncode = 0   # detached on purpose: `down` stops it by pid; no "still running" warning
        p["pid"] = child.pid
    (folder / "cluster.json").write_text(json.dumps(info, indent=2))
    deadline = time.monotonic() + timeout_s
    waiting = {f"ready-{p['role']}{p['index']}": p for p in processes}
    while waiting and time.monotonic() < deadline:
        for f in list(waiting):
            if (folder / f).exists():
                del waiting[f]
        for p in waiting.values():
            if not _alive(p["pid"]):
                down(folder)
                raise ClusterError(f"{p['role']} process {p['index']} exited during start-up; "
                                   f"see {folder}/{p['role']}*.out and .log")
        time.sleep(0.01)
    if waiting:
        down(folder)
        raise ClusterError(f"processes not ready after {timeout_s:.0f} s: {sorted(waiting)}")
    info["startup_s"] = time.monotonic() - started
    return info


def down(folder: Path, grace_s: float = 5.0) -> list[str]:
    """Stop every process of the cluster; returns what was done, one line each."""
    info = read_info(folder)
    lines = []
    procs = [p for p in info["processes"] if p.get("pid")]
    for p in procs:
        if _alive(p["pid"]):
            try:
                os.killpg(p["pid"], signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_alive(p["pid"]) for p in procs):
        time.sleep(0.02)
    for p in procs:
        if _alive(p["pid"]):
            os.killpg(p["pid"], signal.SIGKILL)
            lines.append(f"{p['role']}{p['index']} (pid {p['pid']}) did not stop in {grace_s:.0f} s: killed")
        else:
            lines.append(f"{p['role']}{p['index']} (pid {p['pid']}) stopped")
    for f in folder.glob("ready-*"):
        f.unlink()
    info["stopped_at"] = time.time()
    tmp = folder / "cluster.json.tmp"
    tmp.write_text(json.dumps(info, indent=2))
    tmp.replace(folder / "cluster.json")
    return lines


def status(folder: Path) -> dict:
    info = read_info(folder)
    rows = []
    for p in info["processes"]:
        rows.append({"role": p["role"], "index": p["index"], "pid": p.get("pid"), "address": p["address"],
                     "alive": bool(p.get("pid")) and _alive(p["pid"]), "pns": p.get("pns", [])})
    jobs = {}
    db = folder / "jobs.db"
    if db.exists():
        import sqlite3
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        for state, n in con.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state"):
            jobs[state] = n
        con.close()
    return {"processes": rows, "config": info["config"], "jobs": jobs}


def restart_process(folder: Path, role: str, index: int = 0, timeout_s: float = 15.0) -> int:
    """Start one process of the cluster again (after it crashed or was killed), at the same address.

    The process must not be running. Its new pid goes into DIR/cluster.json (so that ``status``
    and ``down`` see it); returns that pid once the process is listening (its ready file exists).
    """
    folder = Path(folder)
    info = read_info(folder)
    p = next((q for q in info["processes"] if q["role"] == role and q.get("index", 0) == index), None)
    if p is None:
        known = ", ".join(f"{q['role']}{q.get('index', 0)}" for q in info["processes"])
        raise ClusterError(f"no process {role}{index} in {folder}/cluster.json (it has: {known})")
    if p.get("pid") and _alive(p["pid"]):
        raise ClusterError(f"{role}{index} (pid {p['pid']}) is still running; stop it before restarting it")
    ready = folder / f"ready-{role}{index}"
    ready.unlink(missing_ok=True)
    name = process_name(role, index)
    with open(folder / f"{name}.out", "ab") as out:
        child = subprocess.Popen([sys.executable, "-m", "apollo.tools.process", "--cluster", str(folder), "--role", role,
                                  "--index", str(index)], stdout=out, stderr=out, stdin=subprocess.DEVNULL,
                                 start_new_session=True)
    p["pid"] = child.pid
    tmp = folder / "cluster.json.tmp"
    tmp.write_text(json.dumps(info, indent=2))
    tmp.replace(folder / "cluster.json")
    deadline = time.monotonic() + timeout_s
    while not ready.exists():
        if child.poll() is not None:
            raise ClusterError(f"{role}{index} exited with code {child.returncode} while restarting; "
                               f"see {folder}/{name}.out and {folder}/{name}.log")
        if time.monotonic() > deadline:
            raise ClusterError(f"{role}{index} (pid {child.pid}) not ready {timeout_s:.0f} s after a restart; "
                               f"see {folder}/{name}.log")
        time.sleep(0.01)
    return child.pid
