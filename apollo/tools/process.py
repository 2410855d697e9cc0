"""One process of a local live cluster: `python -m apollo.tools.process --cluster DIR --role ROLE [--index K]`.

Roles: ``rm`` (the Resource Monitor with its SQLite job store), ``jm`` (a JM host)
and ``pn`` (a host of several PN actors). Addresses come from DIR/cluster.json,
which the launcher writes before starting anyone, so every process knows
every route from the start. Report records (the actors' Log effects) go to
DIR/events-ROLE[K].msgpack (apollo.tools.eventlog); the process log to DIR/ROLE[K].log.
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import secrets
import signal
import sys
from pathlib import Path
from typing import Callable

from apollo.core.cluster import IoModel, Topology
from apollo.tools import eventlog
from apollo.tools.eventlog import EventFile
from apollo.tools.join import JoinStore, Registrar
from apollo.tools.livecluster import process_name
from apollo.tools.logs import add_log_service
from apollo.core.messages import JoinReply, JoinRequest, Leave
from apollo.runtime.live import LiveRuntime, run
from jm.host import JmHost
from jm.policies import profile as find_profile
from jm.config import DispatchConfig, JmConfig
from pn.state import PnConfig, PnState
from rm.queues import load_queue_file
from rm.state import RmConfig, RmState, single_queue
from rm.store import CHECKPOINT_S, SqliteJobStore

# JM hosts report their jobs to the RM this often; one silent for HOST_DEAD_AFTER_S is dead and
# its jobs move to another host (a few missed reports: a busy host is late, not dead).
HOST_REPORT_S = 0.25
HOST_DEAD_AFTER_S = 1.5


def load_cluster(folder: Path) -> tuple[dict, bytes]:
    info = json.loads((folder / "cluster.json").read_text())
    secret = (folder / "secret").read_bytes().strip()
    return info, secret


# Live PNs report faster than simulated ones, and every status batch carries a reading planned
# now (fresh_reports): with short tasks an older one makes a drained server look busy to the JM
# host, which then leaves it idle until the RM's next view.
LIVE_PN = {"heartbeat_s": 0.2, "fresh_reports": True}
VIEW_INTERVAL_S = 0.25      # the RM spreads its view this often
# A restarted RM sends no view until every server has reported or this long has passed: PN
# processes dial it again within the transport's connect backoff (at most 5 s) and then send
# their state (PeerBack); a server not heard by then is dead as far as the view says.
REJOIN_S = 6.0


def pn_config(cfg: dict) -> PnConfig:
    return PnConfig(cores=cfg["cpus"], mem_gb=cfg["mem_gb"], **LIVE_PN)


def io_model(cfg: dict) -> IoModel:
    """The synthetic-task I/O model: IoModel's defaults unless cluster.json's config has "io"
    (e.g. ``{"init_s": 0}`` for no-op tasks that really take no time; see livecluster.up)."""
    return IoModel(**cfg.get("io", {}))


def build_runtime(folder: Path, role: str, index: int) -> tuple[LiveRuntime, dict]:
    info, secret = load_cluster(folder)
    me = next(p for p in info["processes"] if p["role"] == role and p.get("index", 0) == index)
    name = process_name(role, index)
    rt = LiveRuntime(secret, log_sink=EventFile(eventlog.path(folder, name)),
                     workdir=str(folder / "work" / name), epoch=info["epoch"], io=io_model(info["config"]),
                     listen_host=me["address"].rsplit(":", 1)[0])
    add_actors(rt, info, me, folder)
    return rt, me


def add_actors(rt: LiveRuntime, info: dict, me: dict, folder: Path) -> None:
    """Routes to every other process of ``info`` and this process's own actors (``me``: its
    entry in info["processes"]: its role, index and, for PNs, its servers)."""
    cfg = info["config"]
    role, index = me["role"], me.get("index", 0)
    hosts = tuple(f"jmhost:{p['index']}" for p in info["processes"] if p["role"] == "jm")
    io = io_model(cfg)
    pncfg = pn_config(cfg)
    shapes = pncfg.grid.size
    topo = Topology(cfg["pns"], cfg["racks"], cfg["cpus"], cfg["mem_gb"])
    for p in info["processes"]:
        if p is me or p["address"] == me["address"]:
            continue
        if p["role"] == "rm":
            rt.add_route("rm", p["address"])
            rt.add_route("registrar", p["address"])
        elif p["role"] == "jm":
            rt.add_route(f"jmhost:{p['index']}", p["address"])
            if p["index"] == 0:       # messages to "jm:JOB" (a route, not a host's own address)
                rt.add_route("jm", p["address"])
        else:
            for s in p["pns"]:
                rt.add_route(f"pn:{s}", p["address"])
    if role == "rm":
        tree = load_queue_file(folder / cfg["queues"]) if cfg.get("queues") else \
            single_queue(cfg.get("tokens") or find_profile(cfg.get("scheduler", "apollo")).tokens)
        rt.add("rm", RmState(RmConfig(cfg["pns"], shapes, cfg["cpus"], cfg["mem_gb"], view_interval_s=VIEW_INTERVAL_S,
                                      rejoin_s=REJOIN_S, queues=tree, jm_hosts=hosts,
                                      host_report_s=HOST_REPORT_S, host_dead_after_s=HOST_DEAD_AFTER_S)),
               store=SqliteJobStore(str(folder / "jobs.db")))
        rt.add("registrar", Registrar(info), store=JoinStore(folder / "joined.json"))
    elif role == "jm":
        # coalesce: one scheduling pass per burst of status reports (a network read), not per report
        me_host = f"jmhost:{index}"
        host = JmHost(JmConfig(topology=topo, policy=cfg.get("scheduler", "apollo"), io=io, grid=pncfg.grid,
                               dispatch=DispatchConfig(retry_s=0.1, coalesce=True), host=me_host,
                               host_report_s=HOST_REPORT_S,
                               adopt_wait_s=0.3))
        rt.add(me_host, host)
        rt.route_prefix("jm", me_host)
    else:
        for s in me["pns"]:
            rt.add(f"pn:{s}", PnState(s, pncfg))
        # Quiet PNs send nothing: the process dials its RM again whenever the connection is gone,
        # so that a restarted RM hears of them (PeerBack on both sides; docs/design.md, "Liveness").
        rt.keep("rm")
        add_log_service(rt, me)         # "logs:NAME": its tasks' output, for `apollo logs`


async def serve(folder: Path, role: str, index: int) -> None:
    rt, me = build_runtime(folder, role, index)
    port = int(me["address"].rsplit(":", 1)[1])
    await rt.start(listen_port=port)
    http = None
    checkpoints = None
    if role == "rm":        # the API, metrics and dashboard, on this loop (rm/http/server.py)
        from rm.http import start_http
        http = await start_http(rt, rt.actors["rm"], folder)
        checkpoints = asyncio.ensure_future(_checkpoints(rt.stores["rm"]))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    (folder / f"ready-{role}{index}").write_text(str(os.getpid()))
    quiet_collector(loop)
    await stop.wait()
    if checkpoints is not None:
        checkpoints.cancel()
    if http is not None:
        await http.cleanup()
    await rt.stop()
    if isinstance(rt.log_sink, EventFile):
        rt.log_sink.close()


async def _checkpoints(store: SqliteJobStore, every_s: float = CHECKPOINT_S) -> None:
    """The RM's job store: its write-ahead log copied into the database every ``every_s``, in a
    thread, so that no write on a job's path waits for the copy's fsyncs (rm/store.py)."""
    while True:
        await asyncio.sleep(every_s)
        try:
            await asyncio.to_thread(store.checkpoint)
        except Exception as e:      # (a full disk, say: the writes themselves will say so too)
            logging.getLogger("apollo.store").warning("job store checkpoint failed: %s: %s", type(e).__name__, e)


# The collector of a live process runs from its loop, not on allocation counts: the young
# generation every COLLECT_YOUNG_S, everything every COLLECT_ALL_EVERY of those.
COLLECT_YOUNG_S = 1.0
COLLECT_ALL_EVERY = 30


def quiet_collector(loop: asyncio.AbstractEventLoop) -> None:
    """Keep the cyclic garbage collector off the message path of a long-running process: what
    start-up made is frozen (never scanned again), and the collector runs on a timer of the
    loop (``COLLECT_YOUNG_S``), between callbacks, instead of whenever allocations outrun
    deallocations by a threshold. Counted by allocation, it ran inside the handling of bursts:
    a PN process of 5,000 PNs, whose tasks' timers, attempts and reports live a task's length,
    spent a fifth of its CPU in collections of up to 200 ms (10,000 PNs, 100,000 x 0.1 s tasks:
    ~3.5 s of 15 s per PN process), and a job's start made hundreds of objects in its round
    trip. Cycles are still collected, within a second (the oldest generation within
    COLLECT_ALL_EVERY seconds)."""
    gc.collect()
    gc.freeze()
    gc.disable()
    ticks = 0

    def collect() -> None:
        nonlocal ticks
        ticks += 1
        gc.collect(2 if ticks % COLLECT_ALL_EVERY == 0 else 1)
        loop.call_later(COLLECT_YOUNG_S, collect)
    loop.call_later(COLLECT_YOUNG_S, collect)


class _JoinAnswer:
    """The joining process's inbox for the registrar's answer."""

    def __init__(self) -> None:
        self.reply: JoinReply | None = None
        self.came = asyncio.Event()

    def handle(self, event, now, rng) -> list:
        if type(event) is JoinReply:
            self.reply = event
            self.came.set()
        return []


class _Member:
    """A joined process's own address (apollo.tools.join.member_address): `apollo cluster down`
    sends it Leave, and the process stops."""

    def __init__(self, on_leave: Callable[[str], None]) -> None:
        self.on_leave = on_leave

    def handle(self, event, now, rng) -> list:
        if type(event) is Leave:
            self.on_leave(event.reason)
        return []


JOIN_ANSWER_S = 30.0     # an RM that is reached but does not answer a join for this long: given up on


async def join_cluster(rm: str, secret: bytes, kind: str, folder: Path, *, pns: int = 1, cpus: float = 2.0,
                       mem_gb: float = 8.0, rack: int = -1, bind: str = "127.0.0.1", port: int = 0,
                       give_up_s: float | None = 5.0, on_joined: Callable[[dict], None] | None = None,
                       stop: "asyncio.Event | None" = None, tag: str | None = None) -> dict:
    """Join the cluster whose RM listens at ``rm`` as ``pns`` PNs (kind "pn") or a JM host (kind
    "jm"), listening on ``bind``; run until told to leave (Leave, from `apollo cluster down`), or
    ``stop`` is set (or SIGTERM/SIGINT). This process keeps its own clock (its origin is its
    start; apollo.core.clocks turns other processes' times into it). Its logs and records go to
    ``folder``. A refused secret or join raises ClusterError at once; an RM that cannot be reached
    does after ``give_up_s`` (None: keep trying, as a restarted process does while its RM may be
    restarting too). ``on_joined(entry)`` once joined. Returns the process entry it was given,
    with "left": Leave's reason ("" if stopped otherwise)."""
    from apollo.tools.join import member_address
    from apollo.tools.livecluster import ClusterError
    folder.mkdir(parents=True, exist_ok=True)
    tag = tag or f"{kind}-{secrets.token_hex(3)}"     # (names its records and work folder)
    rt = LiveRuntime(secret, log_sink=EventFile(eventlog.path(folder, f"joined-{tag}")),
                     workdir=str(folder / "work" / tag), listen_host=bind)
    answer = _JoinAnswer()
    inbox = f"joiner:{tag}"
    rt.add(inbox, answer, start=False)
    rt.add_route("registrar", rm)
    fatal: list[str] = []
    unreachable = [""]

    def handshake_failed(hostport: str, reason: str, by_peer: bool) -> None:
        if "proof" in reason or "secret" in reason:
            fatal.append(f"the cluster at {rm} refused our secret (the secret file must be a copy of the "
                         f"cluster's DIR/secret)")
        elif by_peer:
            fatal.append(f"the cluster at {rm} refused our handshake: {reason}")
    rt.endpoint.on_handshake_failed = handshake_failed
    rt.endpoint.on_dial_failed = lambda hostport, why: unreachable.__setitem__(0, why)
    await rt.start(listen_port=port)
    loop = asyncio.get_running_loop()
    began = loop.time()
    reached = False
    req = JoinRequest(kind, pns if kind == "pn" else 0, rack, cpus, mem_gb, rt.address, inbox)
    asked_at = -1.0
    while not answer.came.is_set():
        reached = reached or bool(rt.endpoint.peers())
        waited = loop.time() - began
        why = fatal[0] if fatal else None
        if why is None and give_up_s is not None and not reached and waited > give_up_s:
            why = (f"cannot reach the RM at {rm} ({unreachable[0] or 'no answer'}) for {give_up_s:.0f} s; "
                   f"is the cluster up, and is {rm} the \"rm\" address in its cluster.json?")
        if why is None and give_up_s is not None and waited > JOIN_ANSWER_S:
            why = f"the RM at {rm} did not answer a join for {JOIN_ANSWER_S:.0f} s"
        if why is not None:
            await rt.stop()
            raise ClusterError(why)
        if loop.time() - asked_at >= 1.0:
            if asked_at >= 0:
                logging.getLogger("apollo.tools.join").warning("the RM at %s has not answered yet (%s); asking again",
                                                               rm, unreachable[0] or "connected")
            rt.inject("registrar", req)
            asked_at = loop.time()
        try:
            await asyncio.wait_for(answer.came.wait(), 0.1)
        except asyncio.TimeoutError:
            pass
    r = answer.reply
    assert r is not None            # (the loop above ends once it came)
    if not r.ok:
        await rt.stop()
        raise ClusterError(f"the cluster refused the join: {r.reason}")
    info = json.loads(r.cluster)
    me = {"role": kind, "index": r.index, "address": rt.address, "pns": list(r.servers), "left": ""}
    add_actors(rt, info, me, folder)
    stop = stop or asyncio.Event()

    def leave(reason: str) -> None:
        logging.getLogger("apollo.tools.join").info("told to leave: %s", reason)
        me["left"] = reason
        stop.set()
    rt.add(member_address(process_name(kind, r.index)), _Member(leave), start=False)
    # Dial the processes that must reach ours (the RM and the JM hosts for PNs; the RM and the
    # PN processes for a JM host): they learn our addresses from the hello, and dial us back
    # at our listen address if a connection drops. Dialled again every second meanwhile.
    peers = [p["address"] for p in info["processes"] if p["address"] != rt.address and
             (p["role"] == "rm" or p["role"] == ("jm" if kind == "pn" else "pn"))]
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (RuntimeError, ValueError):     # not the main thread (tests)
            pass
    logging.getLogger("apollo.tools.join").info("joined as %s %s: %s", kind, r.index, r.servers)
    if on_joined is not None:
        on_joined(me)
    while not stop.is_set():
        for a in peers:
            rt.endpoint.connect(a)
        try:
            await asyncio.wait_for(stop.wait(), 1.0)
        except asyncio.TimeoutError:
            pass
    await rt.stop()
    rt.log_sink.close()
    return me


def join_main(params: dict) -> int:
    """The process `apollo node join` supervises (apollo.tools.join.run_node): it joins, then serves
    until told to leave or stopped. It tells its parent how it went on the pipe ``status_fd``, one
    JSON line each: {"joined": entry}, {"failed": why} (exit JOIN_REFUSED), {"left": why}."""
    from apollo.tools.join import JOIN_REFUSED
    from apollo.tools.livecluster import ClusterError
    folder = Path(params["dir"])
    logging.basicConfig(filename=str(folder / "joined.log"), level=logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    _die_with_parent(params["parent"])
    _tight_timers()
    status = os.fdopen(params["status_fd"], "w", buffering=1)

    def tell(**what) -> None:
        try:
            status.write(json.dumps(what) + "\n")
            status.flush()
        except (BrokenPipeError, ValueError):   # the parent is gone: SIGTERM follows
            pass
    secret = Path(params["secret_file"]).read_bytes().strip()
    try:
        me = run(join_cluster(params["rm"], secret, params["kind"], folder, pns=params["pns"], cpus=params["cpus"],
                              mem_gb=params["mem_gb"], rack=params["rack"], bind=params["bind"], port=params["port"],
                              give_up_s=params["give_up_s"], on_joined=lambda me: tell(joined=me),
                              tag=params.get("tag")))
    except ClusterError as e:
        tell(failed=str(e))
        return JOIN_REFUSED
    if me["left"]:
        tell(left=me["left"])
    return 0


def _die_with_parent(parent: int) -> None:
    """Linux: SIGTERM to this process when its parent (`apollo node join`) dies, even by SIGKILL:
    a joined node's process never outlives its supervisor. Best effort; elsewhere a no-op."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            PR_SET_PDEATHSIG = 1
            ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:        # it died before the line above
        os.kill(os.getpid(), signal.SIGTERM)


def _tight_timers() -> None:
    """Linux: 1 ns timer slack instead of the default 50 us, so that the event loop wakes when
    its next timer is due (synthetic tasks are timers: 2,000 tasks of 10 ms otherwise end
    ~1% late). Best effort; elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        PR_SET_TIMERSLACK = 29
        ctypes.CDLL(None).prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="apollo.tools.process")
    p.add_argument("--cluster")
    p.add_argument("--role", choices=["rm", "jm", "pn"])
    p.add_argument("--index", type=int, default=0)
    p.add_argument("--join", metavar="JSON", help="`apollo node join`'s child: join a cluster (its parameters)")
    a = p.parse_args(argv)
    if a.join:
        return join_main(json.loads(a.join))
    if not (a.cluster and a.role):
        p.error("--cluster and --role are required (or --join)")
    folder = Path(a.cluster)
    name = process_name(a.role, a.index)
    logging.basicConfig(filename=str(folder / f"{name}.log"), level=logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    _tight_timers()
    run(serve(folder, a.role, a.index))
    return 0


if __name__ == "__main__":
    sys.exit(main())
