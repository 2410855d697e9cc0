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


def _start_ticks(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot, /proc/PID/stat's field 22): with the pid, a
    process's identity, since a pid is handed out again once its process is gone. None off
    Linux or if there is no such process."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def _alive(pid: int, ticks: int | None = None) -> bool:
    """Whether process ``pid`` runs: a zombie (ours, reaped here, or anyone's, which its parent
    has not reaped yet) is dead, and so is a process that started at other ``ticks`` than
    recorded (the pid went to someone else after ours died: a folder from yesterday)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass                        # someone else's process: the pid was reused, unless unknown
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return False
    except ChildProcessError:
        pass
    if _zombie(pid):
        return False
    return ticks is None or _start_ticks(pid) in (None, ticks)


def alive(entry: dict | None) -> bool:
    """Whether the process of a cluster.json entry (a process's, or the supervisor's) runs."""
    if not entry or not entry.get("pid"):
        return False
    return _alive(entry["pid"], entry.get("ticks"))


def write_info(folder: Path, info: dict) -> None:
    """cluster.json, replaced in one step (a reader sees the old file or the new one, never half)."""
    tmp = folder / f"cluster.json.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(info, indent=2))
    tmp.replace(folder / "cluster.json")


def spawn(folder: Path, role: str, index: int) -> subprocess.Popen:
    """Start one process of the cluster, detached (a session of its own: a signal to the group of
    whoever started it does not reach it), its output appended to DIR/NAME.out. Its ready file
    appears once it listens. The one place a cluster process is started (up, restart_process,
    the supervisor)."""
    (folder / f"ready-{role}{index}").unlink(missing_ok=True)
    with open(folder / f"{process_name(role, index)}.out", "ab") as out:   # the child keeps its own descriptor
        return subprocess.Popen([sys.executable, "-m", "apollo.tools.process", "--cluster", str(folder),
                                 "--role", role, "--index", str(index)], stdout=out, stderr=out,
                                stdin=subprocess.DEVNULL, start_new_session=True, env=child_env(folder))


def child_env(folder: Path) -> dict[str, str]:
    """The environment of a cluster process: this one's, with the compiled modules asked for or
    not as the cluster was started (cluster.json's config "native"; absent: as this process's
    environment says), so that a process started again (the supervisor, `apollo cluster
    restart`) runs the same code as its peers."""
    from apollo.tools.native import ENV
    env = dict(os.environ)
    native = read_info(folder).get("config", {}).get("native")
    if native is True:
        env[ENV] = "1"
    elif native is False:
        env.pop(ENV, None)
    return env


def started(entry: dict, pid: int) -> None:
    """Record in ``entry`` (cluster.json's) that its process now runs as ``pid``, since now."""
    entry["pid"] = pid
    entry["ticks"] = _start_ticks(pid)
    entry["started_at"] = time.time()


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
    if not any(alive(p) for p in info.get("processes", []) + [info.get("supervisor")]):
        return False, "none of its processes is alive"
    return True, ""


def up(folder: Path, pns: int = 16, racks: int = 4, procs: int = 2, cpus: float = 2.0, mem_gb: float = 8.0,
       scheduler: str = "apollo", timeout_s: float = 15.0, io: dict | None = None,
       queues: str | Path | None = None, http_host: str = "127.0.0.1", jm_hosts: int = 2,
       bind: str = "127.0.0.1", supervise: bool = False, native: bool | None = None) -> dict:
    """Start a cluster in ``folder``; returns its info (with ``startup_s``).

    ``native``: its processes load the compiled modules (apollo.tools.native; a build of these
    sources must exist) or not; None: as this process's environment says (APOLLO_NATIVE).

    ``io``: fields of apollo.core.cluster.IoModel for every process (e.g. ``{"init_s": 0.0}`` makes a
    synthetic task with a 0 s duration a true no-op instead of paying the modelled 0.2 s start-up);
    kept in cluster.json's config, which apollo.tools.process reads. ``queues``: a queue file
    (rm/queues.py), checked here and copied into the folder for the RM. ``http_host``: where the
    RM's HTTP face listens (cluster.json "http"; any address but loopback asks for the token).
    ``supervise``: start the supervisor too (apollo.tools.supervisor: it restarts any process
    that dies; `apollo cluster up` does); off for tests that kill processes and restart them
    by hand.
    """
    # Everything is checked before anything is started or written: a refused start leaves no trace.
    if (folder / "cluster.json").exists():
        try:
            old = json.loads((folder / "cluster.json").read_text())
        except ValueError:
            old = {}
        if any(alive(p) for p in old.get("processes", []) + [old.get("supervisor")]):
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
    # (an earlier cluster's grants to joined processes go too: they hold its secret, not the new one)
    for stale in [*folder.glob("ready-*"), *folder.glob("restart-*"), *folder.glob("joined.json")]:
        stale.unlink()
    secret_path = folder / "secret"
    secret_path.write_text(secrets.token_hex(32))
    os.chmod(secret_path, 0o600)
    processes: list[dict] = [{"role": "rm", "index": 0, "address": f"{bind}:{ports[0]}"}]
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
    if native is not None:
        info["config"]["native"] = native
    if tree_text is not None:
        (folder / "queues.toml").write_text(tree_text)
        info["config"]["queues"] = "queues.toml"
    write_info(folder, info)
    t0 = time.monotonic()
    for p in processes:
        child = spawn(folder, p["role"], p["index"])
        child.returncode = 0   # detached on purpose: `down` stops it by pid; no "still running" warning
        started(p, child.pid)
        p["restarts"] = 0
    write_info(folder, info)
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
    if supervise:
        info = start_supervisor(folder, timeout_s)
    info["startup_s"] = time.monotonic() - t0
    return info


def start_supervisor(folder: Path, timeout_s: float = 15.0) -> dict:
    """Start the cluster's supervisor (apollo.tools.supervisor), detached; returns cluster.json's
    content once the supervisor has written itself into it (from then on it watches)."""
    with open(folder / "supervisor.out", "ab") as out:
        child = subprocess.Popen([sys.executable, "-m", "apollo.tools.supervisor", "--cluster", str(folder)],
                                 stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True,
                                 env=child_env(folder))
    child.returncode = 0       # detached on purpose, as the processes
    deadline = time.monotonic() + timeout_s
    while True:
        info = read_info(folder)
        if info.get("supervisor", {}).get("pid") == child.pid:
            return info
        if not _alive(child.pid) or time.monotonic() > deadline:
            down(folder)
            raise ClusterError(f"the supervisor did not start; see {folder}/supervisor.out and supervisor.log")
        time.sleep(0.01)


def down(folder: Path, grace_s: float = 5.0) -> list[str]:
    """Stop the cluster; returns what was done, one line each. The supervisor goes first (else it
    would start again what is being stopped), then every joined process is told to leave (it
    stops and its `apollo node join` does not start it again), then this machine's processes."""
    info = read_info(folder)
    lines = []
    sup = info.get("supervisor")
    if sup is not None and alive(sup):
        lines += _stop([("supervisor", sup)], grace_s)
        info = read_info(folder)            # with the pids it started last
    from apollo.tools.join import tell_joined_to_leave
    lines += tell_joined_to_leave(folder)
    lines += _stop([(process_name(p["role"], p["index"]), p) for p in info["processes"] if p.get("pid")], grace_s)
    for f in [*folder.glob("ready-*"), *folder.glob("restart-*")]:
        f.unlink(missing_ok=True)
    info["stopped_at"] = time.time()
    write_info(folder, info)
    return lines


def _stop(procs: list[tuple[str, dict]], grace_s: float) -> list[str]:
    """SIGTERM to each running process's group, then SIGKILL to any still there after ``grace_s``."""
    running = [(name, p) for name, p in procs if alive(p)]
    for _, p in running:
        try:
            os.killpg(p["pid"], signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(alive(p) for _, p in running):
        time.sleep(0.02)
    lines = []
    for name, p in procs:
        if alive(p):
            try:
                os.killpg(p["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
            lines.append(f"{name} (pid {p['pid']}) did not stop in {grace_s:.0f} s: killed")
        elif any(p is q for _, q in running):
            lines.append(f"{name} (pid {p['pid']}) stopped")
        else:
            lines.append(f"{name} (pid {p['pid']}) was not running")
    return lines


def status(folder: Path) -> dict:
    """Each process (alive, since when, restarts), the supervisor, the joined processes the
    registrar knows of (no liveness: they live elsewhere; the RM's API knows their PNs) and
    the stored jobs by state."""
    info = read_info(folder)
    rows = []
    now = time.time()
    for p in info["processes"]:
        up = alive(p)
        rows.append({"role": p["role"], "index": p["index"], "name": process_name(p["role"], p["index"]),
                     "pid": p.get("pid"), "address": p["address"], "alive": up, "pns": p.get("pns", []),
                     "restarts": p.get("restarts", 0),
                     "uptime_s": now - p["started_at"] if up and p.get("started_at") else None})
    sup = info.get("supervisor")
    supervisor = None if sup is None else {
        "pid": sup.get("pid"), "alive": alive(sup),
        "uptime_s": now - sup["started_at"] if alive(sup) and sup.get("started_at") else None}
    jobs = {}
    db = folder / "jobs.db"
    if db.exists():
        import sqlite3
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        for state, n in con.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state"):
            jobs[state] = n
        con.close()
    from apollo.tools.join import joined_entries
    return {"processes": rows, "supervisor": supervisor, "joined": joined_entries(folder),
            "config": info["config"], "jobs": jobs, "stopped": bool(info.get("stopped_at"))}


def _entry(folder: Path, info: dict, name: str) -> dict:
    for p in info["processes"]:
        if process_name(p["role"], p.get("index", 0)) == name:
            return p
    known = ", ".join(process_name(q["role"], q.get("index", 0)) for q in info["processes"])
    raise ClusterError(f"no process {name} in {folder}/cluster.json (it has: {known})")


def restart_process(folder: Path, role: str, index: int = 0, timeout_s: float = 15.0) -> int:
    """Start one process of the cluster again (after it crashed or was killed), at the same address.

    The process must not be running (and no supervisor may be, which would race this: `restart`
    goes through it). Its new pid goes into DIR/cluster.json (so that ``status`` and ``down``
    see it); returns that pid once the process is listening (its ready file exists).
    """
    folder = Path(folder)
    info = read_info(folder)
    p = _entry(folder, info, process_name(role, index))
    if alive(p):
        raise ClusterError(f"{role}{index} (pid {p['pid']}) is still running; stop it before restarting it")
    ready = folder / f"ready-{role}{index}"
    name = process_name(role, index)
    child = spawn(folder, role, index)
    started(p, child.pid)
    p["restarts"] = p.get("restarts", 0) + 1
    write_info(folder, info)
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


def restart(folder: Path, name: str, timeout_s: float = 30.0) -> tuple[int, int]:
    """`apollo cluster restart NAME`: stop process NAME (rm, jm0, pn1, ...) and start it again;
    returns (old pid, new pid) once the new one listens. With a supervisor running, the
    supervisor does it (a request file DIR/restart-NAME), so the two never race; without one,
    it is done here. NAME "supervisor" starts the supervisor again if it is not running."""
    folder = Path(folder)
    info = read_info(folder)
    if info.get("stopped_at"):
        raise ClusterError(f"the cluster in {folder} was stopped by `apollo cluster down`; "
                           f"start it with `apollo cluster up --cluster {folder}`")
    sup = info.get("supervisor")
    if name == "supervisor":
        if sup is not None and alive(sup):
            raise ClusterError(f"the supervisor (pid {sup['pid']}) is running; it restarts the other processes")
        return (sup or {}).get("pid") or 0, start_supervisor(folder)["supervisor"]["pid"]
    p = _entry(folder, info, name)
    old = p.get("pid") or 0
    if not alive(sup):
        _stop([(name, p)], 5.0)
        return old, restart_process(folder, p["role"], p["index"], timeout_s)
    (folder / f"restart-{name}").write_text(str(os.getpid()))
    ready = folder / f"ready-{p['role']}{p['index']}"
    deadline = time.monotonic() + timeout_s
    while True:
        now = _entry(folder, read_info(folder), name)
        if now.get("pid") != old and ready.exists() and alive(now):
            return old, now["pid"]
        if time.monotonic() > deadline or not alive(sup):
            raise ClusterError(f"{name} not restarted within {timeout_s:.0f} s; see {folder}/supervisor.log"
                               if alive(sup) else f"the supervisor died before restarting {name}; see "
                               f"{folder}/supervisor.log (`apollo cluster restart supervisor` starts another)")
        time.sleep(0.02)
