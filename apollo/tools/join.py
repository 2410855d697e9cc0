"""Joining a running cluster from another machine: `apollo node join --rm HOST:PORT ...`.

The RM's process carries a Registrar actor (address "registrar"). A joining process sends it a
JoinRequest: "N PNs in rack R with C cpus / M GB each", or "a JM host". The registrar gives
it server ids (of the cluster's declared servers, in that rack, not held by anyone else) or a
JM host index, and the cluster's description (every process's address), and remembers the
grant in its store, so the same process asking again (it restarted) gets the same ids back,
and a restarted RM does not give them to another. From then on the joined process is an
ordinary member: its PNs heartbeat to the RM, which tracks their liveness (a PN that stops
heartbeating is dead, its tasks placed again; it may come back), and the processes it talks
to learn its addresses from its connections (and dial it back at its listen address).
"""
from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import numpy as np

from apollo.core.effects import Log, Persist, Send, Start
from apollo.core.messages import JoinReply, JoinRequest


class Registrar:
    def __init__(self, info: dict) -> None:
        """``info``: cluster.json's content (config and the processes started with the cluster)."""
        self.info = info
        cfg = info["config"]
        self.pns, self.racks = cfg["pns"], cfg["racks"]
        self.cpus, self.mem_gb = float(cfg["cpus"]), float(cfg["mem_gb"])
        self.rack_of = (np.arange(self.pns) * self.racks // self.pns).tolist()   # as apollo.core.cluster.Topology
        self.joined: dict[str, dict] = {}       # listen address -> its process entry
        self._taken: set[int] = set()
        for p in info["processes"]:
            self._taken.update(p.get("pns", []))
        self._jm_indexes = {p["index"] for p in info["processes"] if p["role"] == "jm"}

    def handle(self, event, now: float, rng) -> list:
        if type(event) is Start:
            for entry in (event.stored or {}).values():
                self._remember(entry)
            return []
        if type(event) is JoinRequest:
            return self._join(event)
        return [Log("warn", (f"registrar ignored {type(event).__name__}",))]

    def _remember(self, entry: dict) -> None:
        self.joined[entry["address"]] = entry
        self._taken.update(entry.get("pns", []))
        if entry["role"] == "jm":
            self._jm_indexes.add(entry["index"])

    def _join(self, r: JoinRequest) -> list:
        old = self.joined.get(r.address)
        if old is not None and old["role"] == r.kind and (r.kind == "jm" or len(old["pns"]) == r.count):
            return [self._reply(r, old)]         # the same process again (it restarted)
        if r.kind == "pn":
            why = self._pn_misfit(r)
            if why:
                return [Send(r.reply_to, JoinReply(False, why, [], -1, "")), Log("warn", (f"join refused: {why}",))]
            free = [s for s in range(self.pns) if s not in self._taken and (r.rack < 0 or self.rack_of[s] == r.rack)]
            if len(free) < r.count:
                where = f"rack {r.rack}" if r.rack >= 0 else "the cluster"
                why = (f"{r.address} asked for {r.count} PNs in {where}, which has {len(free)} free server slots "
                       f"(the cluster was declared with {self.pns} PNs in {self.racks} racks)")
                return [Send(r.reply_to, JoinReply(False, why, [], -1, "")), Log("warn", (f"join refused: {why}",))]
            entry = {"role": "pn", "index": 1000 + len(self.joined), "address": r.address, "pns": free[:r.count],
                     "joined": True}
        elif r.kind == "jm":
            index = max(self._jm_indexes, default=-1) + 1
            entry = {"role": "jm", "index": index, "address": r.address, "joined": True}
        else:
            why = f"unknown kind {r.kind!r} (pn or jm)"
            return [Send(r.reply_to, JoinReply(False, why, [], -1, ""))]
        self._remember(entry)
        return [Persist("joined", (entry,)), self._reply(r, entry),
                Log("joined", (r.kind, r.address, entry.get("pns", entry["index"])))]

    def _pn_misfit(self, r: JoinRequest) -> str:
        if abs(r.cpus - self.cpus) > 1e-9 or abs(r.mem_gb - self.mem_gb) > 1e-9:
            return (f"{r.address} offers PNs of {r.cpus} cpu / {r.mem_gb} GB; this cluster's servers are "
                    f"{self.cpus} cpu / {self.mem_gb} GB each (start the join with --cpus {self.cpus} "
                    f"--mem-gb {self.mem_gb})")
        if not (r.rack < self.racks):
            return f"{r.address} asked for rack {r.rack}; the cluster has racks 0-{self.racks - 1}"
        return ""

    def _reply(self, r: JoinRequest, entry: dict) -> Send:
        info = dict(self.info)
        info["processes"] = list(self.info["processes"]) + [e for e in self.joined.values()]
        return Send(r.reply_to, JoinReply(True, "", list(entry.get("pns", [])), entry["index"],
                                          json.dumps(info)))


class JoinStore:
    """The registrar's grants, in DIR/joined.json (a Persist store: written before answering)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def recovered(self) -> dict:
        try:
            return json.loads(self.path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    def apply(self, p: Persist) -> None:
        if p.op != "joined":
            raise ValueError(f"unknown registrar store operation {p.op!r}")
        entry = p.args[0]
        grants = self.recovered()
        grants[entry["address"]] = entry
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(grants, indent=1))
        tmp.replace(self.path)


# ---- the joined side's lifecycle: `apollo node join` supervises its process; `down` tells it to leave

FIRST_JOIN_GIVE_UP_S = 5.0     # a first join whose RM cannot be reached ends here (a restarted one keeps trying)
JOIN_REFUSED = 3               # the joining process's exit code for a refused or unreachable join: not restarted
LEAVE_WAIT_S = 6.0             # `down` waits this long for joined processes to leave (a dial times out in 5 s)


def member_address(name: str) -> str:
    """The actor address of a joined process itself (where Leave goes): "member:pn1000"."""
    return f"member:{name}"


def joined_entries(folder: Path) -> list[dict]:
    """The processes that joined the cluster in ``folder`` (the registrar's grants), each with its name."""
    from apollo.tools.livecluster import process_name
    return [dict(e, name=process_name(e["role"], e["index"]))
            for e in JoinStore(Path(folder) / "joined.json").recovered().values()]


def tell_joined_to_leave(folder: Path, wait_s: float = LEAVE_WAIT_S) -> list[str]:
    """Send Leave to every process that joined the cluster in ``folder`` (over the cluster's
    authenticated protocol, with its secret); one line each: left, was not running, or did not
    answer. A joined process that gets it stops, and its `apollo node join` ends."""
    entries = joined_entries(folder)
    if not entries:
        return []
    secret = (Path(folder) / "secret").read_bytes().strip()
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from apollo.runtime.live import run
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run(_leave(entries, secret, wait_s))
    with ThreadPoolExecutor(1) as pool:       # called from inside an event loop: a loop of its own
        return pool.submit(run, _leave(entries, secret, wait_s)).result()


async def _leave(entries: list[dict], secret: bytes, wait_s: float) -> list[str]:
    """Connect to each joined process; tell those reached to leave, until a connection to them is
    refused (they are gone); those never reached were not running."""
    import asyncio
    import logging

    from apollo.core.messages import Leave
    from apollo.runtime.live import LiveRuntime
    quiet = logging.getLogger("apollo.transport")
    level = quiet.level
    quiet.setLevel(logging.ERROR)           # refused connections are the expected end here
    rt = LiveRuntime(secret)
    failed: set[str] = set()
    rt.endpoint.on_dial_failed = lambda hostport, why: failed.add(hostport)
    rt.endpoint.on_handshake_failed = lambda hostport, why, by_peer: failed.add(hostport)   # not ours: not it
    for e in entries:
        rt.add_route(member_address(e["name"]), e["address"])
    await rt.start(listen_port=0)
    loop = asyncio.get_running_loop()
    end = loop.time() + wait_s
    pending = {e["address"]: e for e in entries}
    told: set[str] = set()
    lines = []
    try:
        while pending and loop.time() < end:
            connected = {listen for _, listen, _ in rt.endpoint.peers()}
            for address, e in list(pending.items()):
                if address in failed:       # a connection refused (or timed out): gone
                    lines.append(f"{e['name']} (joined, {address}) " + ("left" if address in told else
                                                                         "was not running"))
                    del pending[address]
                elif address in connected or address in told:
                    rt.inject(member_address(e["name"]), Leave("apollo cluster down"))
                    told.add(address)
                else:
                    rt.endpoint.connect(address)
            await asyncio.sleep(0.05)
        lines += [f"{e['name']} (joined, {a}) did not answer within {wait_s:.0f} s" +
                  (" after being told to leave" if a in told else ": not told to leave") for a, e in pending.items()]
        await rt.stop()
    finally:
        quiet.setLevel(level)
    return lines


def run_node(rm: str, secret_file: Path, kind: str, folder: Path, *, pns: int, cpus: float, mem_gb: float,
             rack: int, bind: str, port: int) -> int:
    """`apollo node join`: a small supervisor of one child process (`python -m apollo.tools.process
    --join ...`) that joins the cluster and serves it. The first join's outcome goes to the
    terminal: a line once joined; or one line and exit 1 for a refused secret, a refused join or
    an RM nobody answers at (in FIRST_JOIN_GIVE_UP_S). Once joined, a child that dies is started
    again after a backoff (apollo.tools.supervisor.Backoff), at the same address, so that the
    registrar gives it the same servers back. A child told to leave (`apollo cluster down`) ends
    the command with exit 0; so do SIGTERM and SIGINT (passed on to the child)."""
    import select
    import signal
    import subprocess
    import sys
    import time

    from apollo.tools.supervisor import Backoff
    stopping = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: stopping.append(signum))
    # (one tag for every restart of the child: its work folder, hence the output of the tasks it
    # ran before a restart, stays where its log service serves it from)
    params = {"rm": rm, "secret_file": str(secret_file), "kind": kind, "dir": str(folder), "pns": pns, "cpus": cpus,
              "tag": f"{kind}-{secrets.token_hex(3)}",
              "mem_gb": mem_gb, "rack": rack, "bind": bind, "port": port, "give_up_s": FIRST_JOIN_GIVE_UP_S,
              "parent": os.getpid()}
    backoff = Backoff()
    joined = False
    what = "a JM host" if kind == "jm" else f"{pns} PNs"
    while True:
        r, w = os.pipe()
        with open(folder / "joined.out", "ab") as out:
            child = subprocess.Popen([sys.executable, "-m", "apollo.tools.process", "--join",
                                      json.dumps(dict(params, status_fd=w))], pass_fds=(w,), stdout=out, stderr=out,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        os.close(w)
        began = time.monotonic()
        said: dict = {}
        buf = b""
        signalled = False
        with os.fdopen(r, "rb", buffering=0) as pipe:
            while True:
                if stopping and not signalled:
                    child.send_signal(signal.SIGTERM)
                    signalled = True
                ready, _, _ = select.select([pipe], [], [], 0.2)
                chunk = pipe.read(65536) if ready else b""
                if ready and not chunk:
                    break                   # the child is gone (its end of the pipe closed)
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    said.update(json.loads(line))
                    if "joined" in said and not joined:
                        joined = True
                        me = said["joined"]
                        params.update(port=int(me["address"].rsplit(":", 1)[1]), give_up_s=None)
                        servers = f": servers {me['pns']}" if me.get("pns") else f": JM host {me['index']}"
                        print(f"joined the cluster at {rm} as {what}{servers}, listening at {me['address']}; "
                              f"logs in {folder}", flush=True)
        code = child.wait()
        if "failed" in said:
            print(f"apollo node join: {said['failed']}", file=sys.stderr)
            return 1
        if "left" in said:
            print(f"left the cluster: {said['left']}", flush=True)
            return 0
        if stopping or code == 0:
            return 0
        how = f"code {code}" if code >= 0 else signal.Signals(-code).name
        if not joined:
            print(f"apollo node join: the joining process exited ({how}) before joining; see {folder}/joined.out "
                  f"and {folder}/joined.log", file=sys.stderr)
            return 1
        delay = backoff.after_death(time.monotonic() - began)
        print(f"the node's process died ({how}); starting it again in {delay:.1f} s", flush=True)
        end = time.monotonic() + delay
        while time.monotonic() < end and not stopping:
            time.sleep(0.05)
        if stopping:
            return 0
