"""LiveRuntime: the real actors on asyncio and TCP (loopback only), and the executor."""
import asyncio
import gc
import logging
from pathlib import Path

import numpy as np
import pytest

from apollo.core.cluster import REMOTE, IoModel, Topology
from apollo.core.effects import (CancelTimer, Kill, Launch, Log, PeerBack, PeerLost, Persist, Send, SetTimer, Spawn,
                                 Start, TaskExited)
from apollo.core.messages import JobAccepted, JobDemand, JobDone, SubmitJob, TaskSpec
from apollo.core.records import Recorder
from apollo.runtime.executor import Executor
from apollo.runtime.live import LiveRuntime, run
from apollo.core.spec import JobSpec, StageSpec
from jm.host import JmHost
from jm.config import DispatchConfig
from jm.state import JmConfig
from pn.state import PnConfig, PnState
from rm.state import RmConfig, RmState
from rm.store import MemoryJobStore
from helpers import await_holds_for, await_until

pytestmark = pytest.mark.live

SECRET = b"live-runtime-test-secret"
SERVERS, RACKS = 4, 2


class Client:
    """The submitting side: records the RM's answers."""

    def __init__(self):
        self.accepted = []
        self.done = {}

    def handle(self, event, now, rng):
        if type(event) is JobAccepted:
            self.accepted.append(event)
        elif type(event) is JobDone:
            self.done[event.job_id] = event
        return []


def cluster_actors():
    """The actors and configs of apollo.tools.simulate.build(), at test speed."""
    topo = Topology(SERVERS, RACKS, 4.0, 16.0)
    pncfg = PnConfig(cores=4.0, mem_gb=16.0, heartbeat_s=0.1)
    shapes = pncfg.grid.size
    rm = RmState(RmConfig(SERVERS, shapes, 4.0, 16.0, view_interval_s=0.2, rejoin_s=1.0))
    jmcfg = JmConfig(topology=topo, policy="apollo", io=IoModel(), grid=pncfg.grid,
                     dispatch=DispatchConfig(opportunistic=False))
    return rm, JmHost(jmcfg), [PnState(s, pncfg) for s in range(SERVERS)]


def two_stage_job(map_s=0.05, maps=8):
    return JobSpec("wordcount", [
        StageSpec("map", maps, np.full(maps, map_s)),
        StageSpec("reduce", 1, np.array([0.05]), depends_on=("map",), command=("sh", "-c", "echo reduced")),
    ])


def check_job(client, rec, workdir, maps=8):
    assert len(client.accepted) == 1 and client.accepted[0].accepted
    job_id = client.accepted[0].job_id
    done = client.done[job_id]
    assert done.ok, done.reason
    assert done.tasks_done == maps + 1
    outs = list(Path(workdir).glob(f"{job_id}-{maps}-*.out"))        # the reduce is task `maps`
    assert outs and any(p.read_text() == "reduced\n" for p in outs)
    assert sum(1 for a in rec.attempts if a[10] == "done") == maps + 1
    assert rec.done and rec.done[0][1] is True


def host_all(rt):
    """Every actor of a small cluster, and a client, in the one runtime ``rt``."""
    rm, host, pns = cluster_actors()
    client = Client()
    rt.add("rm", rm, store=MemoryJobStore())
    rt.add("jmhost", host)
    rt.route_prefix("jm", "jmhost")
    rt.add("client", client, start=False)
    for s, pn in enumerate(pns):
        rt.add(f"pn:{s}", pn)
    return rm, host, pns, client


async def test_end_to_end_job_in_one_process(tmp_path):
    rec = Recorder()
    rt = LiveRuntime(SECRET, seed=1, log_sink=rec, workdir=tmp_path)
    rm, host, pns, client = host_all(rt)
    await rt.start(listen_port=0)
    try:
        rt.inject("rm", SubmitJob(-1, two_stage_job(), "client"))
        await await_until(lambda: client.done, timeout=8, what="JobDone")
        check_job(client, rec, tmp_path)
        assert rt.errors == 0
        # JmHost, like every actor, is handed Start; it answers with a warning (so does the sim)
        assert [w for _, w in rec.warnings if w != ("jm host ignored Start",)] == []
        for pn in pns:
            pn.validate()
        rm.validate()
        assert rm.alive.tolist() == [1] * SERVERS
    finally:
        await rt.stop()


async def test_end_to_end_across_runtimes_over_tcp(tmp_path):
    """RM + JM host in one runtime, the PNs in a second, the client in a third that does not even
    listen: every message between them crosses a real TCP connection on 127.0.0.1, and the
    client's answers come back over the connection it opened."""
    rec_a, rec_b = Recorder(), Recorder()
    epoch = asyncio.get_running_loop().time()       # one clock for the runtimes (see notes)
    a = LiveRuntime(SECRET, seed=2, log_sink=rec_a, workdir=tmp_path / "a", epoch=epoch)
    b = LiveRuntime(SECRET, seed=3, log_sink=rec_b, workdir=tmp_path / "b", epoch=epoch, wire_local=True)
    c = LiveRuntime(SECRET, seed=4, workdir=tmp_path / "c")
    rm, host, pns = cluster_actors()
    client = Client()
    a.add("rm", rm, store=MemoryJobStore())
    a.add("jmhost", host)
    a.route_prefix("jm", "jmhost")
    await a.start()
    for s, pn in enumerate(pns):
        b.add(f"pn:{s}", pn)
    b.add_route("rm", a.address)
    b.add_route("jm", a.address)
    await b.start()
    a.add_route("pn", b.address)          # also learned from b's hello once it connects
    c.add("client:ab12", client, start=False)
    c.add_route("rm", a.address)
    await c.start(listen_port=None)
    try:
        c.inject("rm", SubmitJob(-1, two_stage_job(), "client:ab12"))
        await await_until(lambda: client.done, timeout=8, what="JobDone")
        check_job(client, rec_a, tmp_path / "b")
        assert b.local_messages == 0 and c.local_messages == 0   # everything they sent went over TCP
        # JobAccepted, then JobDone twice: the JM host's own and the RM's copy (with its next tick)
        await await_until(lambda: c.endpoint.frames_in >= 3, timeout=3, what="the RM's copy of JobDone")
        assert a.endpoint.frames_in > 0 and b.endpoint.frames_in > 0 and c.endpoint.frames_in == 3
        assert b.endpoint.frames_out > b.endpoint.writes                   # batched
        assert sorted(p[1] for p in a.endpoint.peers()) == ["", b.address]   # one connection per pair
        assert [p[1] for p in b.endpoint.peers()] == [a.address]
        assert a.errors == b.errors == c.errors == 0
        assert a.endpoint.bad_frames == b.endpoint.bad_frames == 0
    finally:
        await c.stop()
        await b.stop()
        await a.stop()


async def test_a_killed_pn_is_declared_dead_and_its_tasks_rerun_elsewhere(tmp_path):
    rec = Recorder()
    rt = LiveRuntime(SECRET, seed=4, log_sink=rec, workdir=tmp_path)
    rm, host, pns, client = host_all(rt)
    await rt.start()
    try:
        rt.inject("rm", SubmitJob(-1, two_stage_job(map_s=1.0), "client"))
        await await_until(lambda: any(pn.running for pn in pns), what="tasks running")
        victim = next(s for s, pn in enumerate(pns) if pn.running)
        lost = len(pns[victim].running)
        rt.remove(f"pn:{victim}")                      # the server dies with its tasks
        assert not any(k[0] == f"pn:{victim}" for k in rt.executor.running)
        await await_until(lambda: client.done, timeout=8, what="JobDone")
        check_job(client, rec, tmp_path)
        assert rm.alive[victim] == 0
        failed = [a for a in rec.attempts if a[10] == "failed"]
        assert len(failed) == lost and all(a[4] == victim for a in failed)
        assert all(a[4] != victim for a in rec.attempts if a[10] == "done" and a[1] == 1)
    finally:
        await rt.stop()


def test_end_to_end_on_uvloop(tmp_path):
    async def main():
        rec = Recorder()
        rt = LiveRuntime(SECRET, log_sink=rec, workdir=tmp_path)   # rng seeded from os.urandom
        rm, host, pns, client = host_all(rt)
        await rt.start()
        try:
            rt.inject("rm", SubmitJob(-1, two_stage_job(), "client"))
            await await_until(lambda: client.done, timeout=8, what="JobDone")
            check_job(client, rec, tmp_path)
            return type(asyncio.get_running_loop()).__module__
        finally:
            await rt.stop()
    assert run(main()).startswith("uvloop")


# ---- runtime semantics ----------------------------------------------------------------------

class Probe:
    """Records what it is handed and answers with scripted effects."""

    def __init__(self, script=None):
        self.seen = []
        self.script = script or (lambda ev, now: [])
        self.depth = 0
        self.max_depth = 0

    def handle(self, event, now, rng):
        self.depth += 1
        self.max_depth = max(self.max_depth, self.depth)
        try:
            self.seen.append((event, now))
            return self.script(event, now)
        finally:
            self.depth -= 1


async def test_local_sends_are_asynchronous_and_in_order(tmp_path):
    rt = LiveRuntime(SECRET, seed=0, workdir=tmp_path)
    b = Probe()

    def a_script(ev, now):
        if type(ev) is Start:
            return [Send("b", JobDemand(i, 0)) for i in range(100)] + [Send("a", JobDemand(999, 0))]
        return []
    a = Probe(a_script)
    rt.add("a", a)
    rt.add("b", b, start=False)
    await rt.start()
    try:
        await await_until(lambda: len(b.seen) == 100 and len(a.seen) == 2)
        assert [m.job_id for m, _ in b.seen] == list(range(100))
        assert a.max_depth == 1 and b.max_depth == 1          # a send to itself is not re-entrant
        assert a.seen[1][0] == JobDemand(999, 0)
        assert all(now >= 0 for _, now in a.seen + b.seen)
    finally:
        await rt.stop()


async def test_timers_fire_replace_and_cancel(tmp_path):
    rt = LiveRuntime(SECRET, seed=0, workdir=tmp_path)

    def script(ev, now):
        if type(ev) is Start:
            return [SetTimer(5.0, "x"), SetTimer(0.05, "x"),   # re-setting replaces: fires once, early
                    SetTimer(0.02, "gone"), CancelTimer("gone"),
                    SetTimer(0.08, ("k", 1))]
        return []
    p = Probe(script)
    rt.add("p", p)
    await rt.start()
    try:
        await await_until(lambda: len(p.seen) == 3 and not rt.timers, what="the two timers fired, no other left")
        keys = [ev.key for ev, _ in p.seen[1:]]
        assert keys == ["x", ("k", 1)]
        assert 0.04 <= p.seen[1][1] < 1.0
        assert not rt.timers
    finally:
        await rt.stop()


async def test_an_actor_exception_drops_that_event_only(tmp_path, caplog):
    caplog.set_level(logging.ERROR, logger="apollo.live")
    rt = LiveRuntime(SECRET, seed=0, workdir=tmp_path)

    def script(ev, now):
        if type(ev) is JobDemand and ev.job_id == 2:
            raise RuntimeError("boom")
        return []
    p = Probe(script)
    rt.add("p", p, start=False)
    await rt.start()
    try:
        for i in range(4):
            rt.inject("p", JobDemand(i, 0))
        await await_until(lambda: len(p.seen) == 4)
        assert rt.errors == 1
        assert "boom" in caplog.text and "Traceback" in caplog.text
    finally:
        await rt.stop()


async def test_spawn_and_log_effects(tmp_path):
    logged = []
    rt = LiveRuntime(SECRET, seed=0, workdir=tmp_path, log_sink=lambda k, d, now: logged.append((k, d)))
    child = Probe()
    p = Probe(lambda ev, now: [Spawn("child:1", child), Log("hello", (1, 2))] if type(ev) is Start else [])
    rt.add("p", p)
    await rt.start()
    try:
        await await_until(lambda: child.seen)
        assert type(child.seen[0][0]) is Start
        assert ("hello", (1, 2)) in logged
        assert "child:1" in rt.endpoint.hosted
    finally:
        await rt.stop()


async def test_persist_runs_before_later_effects_and_a_failed_write_stops_them(tmp_path, caplog):
    """An actor's Persist is written before the effects after it are carried out (the RM stores
    a job, then acknowledges it); if the write fails, those effects are not carried out."""
    class FlakyStore(MemoryJobStore):
        fail = False

        def apply(self, p):
            if self.fail:
                raise OSError("disk full")
            super().apply(p)

    store = FlakyStore()
    spec = JobSpec("j", [StageSpec("s", 1, np.ones(1))])
    rt = LiveRuntime(SECRET, seed=0, workdir=tmp_path)
    sink = Probe()
    p = Probe(lambda ev, now: [Persist("put", (int(ev.job_id), spec, now, "sink")),
                                Send("sink", JobAccepted(ev.job_id, "j", True, ""))]
              if type(ev) is SubmitJob else [])
    rt.add("p", p, store=store)
    rt.add("sink", sink)
    await rt.start()
    try:
        rt.inject("p", SubmitJob(5, spec, "sink"))
        await await_until(lambda: any(type(ev) is JobAccepted for ev, _ in sink.seen))
        assert [j.job_id for j in store.unfinished()] == [5]
        store.fail = True
        rt.inject("p", SubmitJob(6, spec, "sink"))
        await await_until(lambda: rt.errors == 1)
        await await_holds_for(lambda: [ev.job_id for ev, _ in sink.seen if type(ev) is JobAccepted] == [5], 0.05,
                              "no JobAccepted for job 6")
        assert "disk full" in caplog.text
    finally:
        await rt.stop()


async def test_remote_message_to_an_unknown_address_is_logged(tmp_path):
    logged = []
    a = LiveRuntime(SECRET, seed=0, workdir=tmp_path, log_sink=lambda k, d, now: logged.append((k, d)))
    b = LiveRuntime(SECRET, seed=0, workdir=tmp_path)
    await a.start()
    await b.start()
    try:
        b.add_route("ghost", a.address)
        b.inject("ghost:3", JobDemand(1, 0))
        await await_until(lambda: a.unknown == 1)
        assert logged[0][0] == "warn" and "ghost:3" in logged[0][1][0]
    finally:
        await a.stop()
        await b.stop()


# ---- the executor, through a PN-like actor -------------------------------------------------

def spec(task=0, command=None, dur=0.0, timeout=None, env=None, cwd=None, in_bytes=0.0, mem_limit=None):
    return TaskSpec(7, task, 1, 0, 1.0, 2.0, dur, in_bytes, REMOTE, dur, False,
                    None if command is None else tuple(command), env or {}, cwd, timeout,
                    command is not None if mem_limit is None else mem_limit)


class FakePn:
    def __init__(self):
        self.exits = []
        self.todo = []

    def handle(self, ev, now, rng):
        if type(ev) is TaskExited:
            self.exits.append((ev, now))
            return []
        if type(ev) is JobDemand:        # a poke: run whatever the test queued
            out, self.todo = self.todo, []
            return out
        return []


async def runtime_with_pn(tmp_path, **kw):
    rt = LiveRuntime(SECRET, seed=0, workdir=tmp_path, **kw)
    pn = FakePn()
    rt.add("pn:0", pn, start=False)
    await rt.start()

    def do(*effects):
        pn.todo.extend(effects)
        rt.inject("pn:0", JobDemand(0, 0))
    return rt, pn, do


async def test_command_tasks_exit_codes_output_env_cwd_and_timeouts(tmp_path):
    rt, pn, do = await runtime_with_pn(tmp_path / "work")
    (tmp_path / "elsewhere").mkdir()
    try:
        do(Launch(spec(0, ["sh", "-c", "echo out-$FOO; pwd"], env={"FOO": "bar"}, cwd=str(tmp_path / "elsewhere")), 0),
           Launch(spec(1, ["sh", "-c", "echo oops >&2; exit 3"]), 0),
           Launch(spec(2, ["sleep", "30"], timeout=0.2), 0),
           Launch(spec(3, ["/no/such/binary"]), 0))
        await await_until(lambda: len(pn.exits) == 4)
        by = {ev.task_key[1]: ev for ev, _ in pn.exits}
        assert by[0].ok and by[0].exit_code == 0 and by[0].detail == ""
        assert (tmp_path / "work" / "7-0-1.out").read_text() == f"out-bar\n{tmp_path / 'elsewhere'}\n"
        assert not by[1].ok and by[1].exit_code == 3 and by[1].detail == "exit code 3: oops"
        assert (tmp_path / "work" / "7-1-1.err").read_text() == "oops\n"
        assert not by[2].ok and by[2].detail.startswith("timeout after 0.2s (exit code -") and by[2].exit_code < 0
        assert not by[3].ok and by[3].exit_code == 127 and "cannot start" in by[3].detail
        assert not rt.executor.running
    finally:
        await rt.stop()


async def test_stderr_detail_is_the_last_2000_bytes(tmp_path):
    rt, pn, do = await runtime_with_pn(tmp_path)
    try:
        do(Launch(spec(0, ["sh", "-c", "head -c 5000 /dev/zero | tr '\\0' a >&2; echo END >&2; exit 1"]), 0))
        await await_until(lambda: pn.exits)
        d = pn.exits[0][0].detail
        assert d == "exit code 1: " + "a" * 1996 + "END"     # the exit code, then the last 2000 bytes
    finally:
        await rt.stop()


async def test_memory_limit_applies_to_command_tasks(tmp_path):
    rt, pn, do = await runtime_with_pn(tmp_path)
    try:
        probe = ["sh", "-c", "ulimit -v"]
        do(Launch(spec(0, probe), 0), Launch(spec(1, probe, mem_limit=False), 0))
        await await_until(lambda: len(pn.exits) == 2)
        assert (tmp_path / "7-0-1.out").read_text().strip() == str(2 * 2 ** 20)   # 2 GB, in KiB
        assert (tmp_path / "7-1-1.out").read_text().strip() != str(2 * 2 ** 20)
    finally:
        await rt.stop()


async def test_kill_stops_a_subprocess_and_a_timer_and_no_exit_follows(tmp_path):
    rt, pn, do = await runtime_with_pn(tmp_path)
    try:
        do(Launch(spec(0, ["sh", "-c", "echo started; sleep 30"]), 0),
           Launch(spec(1, dur=30.0), 0),
           Launch(spec(2, dur=0.0), 0))
        await await_until(lambda: (tmp_path / "7-0-1.out").exists()
                         and (tmp_path / "7-0-1.out").read_text() == "started\n")
        proc = rt.executor.running[("pn:0", (7, 0, 1))].proc
        do(Kill((7, 0, 1)), Kill((7, 1, 1)))
        await asyncio.wait_for(proc.wait(), 3)
        await await_until(lambda: pn.exits)
        await await_holds_for(lambda: [ev.task_key for ev, _ in pn.exits] == [(7, 2, 1)], 0.1,
                              "only the one not killed exits")
        assert not rt.executor.running and rt.executor.killed == 2
    finally:
        await rt.stop()


async def test_synthetic_task_time_is_duration_plus_io_over_speedup(tmp_path):
    io = IoModel(init_s=0.1, remote_bytes_per_s=1e6)
    ex = Executor(tmp_path, io=io, speedup=2.0)
    assert ex.synthetic_duration(spec(0, dur=0.3, in_bytes=2e5), REMOTE) == pytest.approx((0.3 + 0.1 + 0.2) / 2)
    rt, pn, do = await runtime_with_pn(tmp_path, io=io, speedup=2.0)
    try:
        t0 = rt.now
        do(Launch(spec(0, dur=0.3, in_bytes=2e5), REMOTE))
        await await_until(lambda: pn.exits)
        ev, t = pn.exits[0]
        assert ev.ok and ev.exit_code == 0
        assert 0.28 <= t - t0 < 1.0
    finally:
        await rt.stop()


async def test_synthetic_tasks_leave_no_cyclic_garbage(tmp_path):
    # A task's records go with their last reference. A PN process collects cycles once a second
    # (apollo.tools.process.quiet_collector); ~12 objects a task made that ~20% of its CPU at
    # 16,000 no-op tasks/s.
    ex = Executor(tmp_path, io=IoModel(init_s=0.0))
    exits: list = []
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for i in range(20):
            ex.launch("pn:0", spec(i, dur=0.0), 0, exits.append)
        ex.launch("pn:0", spec(99, dur=30.0), 0, exits.append)
        assert ex.kill("pn:0", (7, 99, 1))
        await await_until(lambda: len(exits) == 20)
        gc.collect()
        mine = [type(o).__name__ for o in gc.garbage if type(o).__name__ in ("_Running", "TaskExited", "TaskSpec")]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert mine == [], f"left to the cyclic collector: {sorted(set(mine))}"


async def test_removing_an_actor_kills_its_tasks_and_timers(tmp_path):
    rt, pn, do = await runtime_with_pn(tmp_path)
    try:
        do(Launch(spec(0, ["sleep", "30"]), 0), SetTimer(0.05, "t"))
        await await_until(lambda: ("pn:0", (7, 0, 1)) in rt.executor.running
                         and rt.executor.running[("pn:0", (7, 0, 1))].proc is not None)
        proc = rt.executor.running[("pn:0", (7, 0, 1))].proc
        rt.remove("pn:0")
        await asyncio.wait_for(proc.wait(), 3)
        await await_holds_for(lambda: pn.exits == [] and not rt.timers, 0.1, "no exit and no timer (its was 0.05 s)")
    finally:
        await rt.stop()


class Watcher:
    """An actor that watches ``prefix`` and records the connection events it hears."""
    def __init__(self, prefix):
        self.watches = (prefix,)
        self.heard = []

    def handle(self, event, now, rng):
        if type(event) in (PeerLost, PeerBack):
            self.heard.append((type(event).__name__, event.address))
        return []


async def test_connection_events_reach_watchers_and_a_pn_process_finds_a_restarted_rm(tmp_path):
    """Liveness by connection, live: the RM's process hears PeerBack of a PN process's servers
    when it connects and PeerLost when it stops; the PN process keeps dialling its RM, so that
    when the RM's process restarts (same address) its PNs hear PeerLost, then PeerBack."""
    a = LiveRuntime(SECRET, seed=1, workdir=tmp_path / "a")
    rm = Watcher("pn")
    a.add("rm", rm, start=False)
    await a.start()
    port = int(a.address.rsplit(":", 1)[1])
    b = LiveRuntime(SECRET, seed=2, workdir=tmp_path / "b")
    pns = [Watcher("rm"), Watcher("rm")]
    for s, w in enumerate(pns):
        b.add(f"pn:{s}", w, start=False)
    b.add_route("rm", a.address)
    b.keep("rm")
    await b.start()
    a2 = None
    try:
        await await_until(lambda: sorted(rm.heard) == [("PeerBack", "pn:0"), ("PeerBack", "pn:1")],
                          what="the RM hearing the PNs' process connect")
        assert all(w.heard == [("PeerBack", "rm")] for w in pns)
        await a.stop()                                  # the RM's process dies
        await await_until(lambda: all(w.heard[-1] == ("PeerLost", "rm") for w in pns), what="PNs hearing it")
        a2 = LiveRuntime(SECRET, seed=3, workdir=tmp_path / "a2")
        rm2 = Watcher("pn")
        a2.add("rm", rm2, start=False)
        await a2.start(listen_port=port)                # ... and comes back at its address
        await await_until(lambda: all(w.heard[-1] == ("PeerBack", "rm") for w in pns), timeout=8,
                          what="the PN process dialling the new RM")
        await await_until(lambda: len(rm2.heard) == 2, what="the new RM hearing the PNs")
        await b.stop()                                  # the PNs' process dies
        await await_until(lambda: sorted(rm2.heard[2:]) == [("PeerLost", "pn:0"), ("PeerLost", "pn:1")],
                          what="the RM hearing it")
    finally:
        await b.stop()
        if a2 is not None:
            await a2.stop()
        await a.stop()
