"""`apollo bench throughput`: a tiny run of every measurement on small local clusters, the
peers' skip path, and the scheduler changes made for throughput (each checked against the
behaviour it must keep)."""
import asyncio
import json
import sys

import msgpack
import numpy as np
import pytest

from apollo.tools.cli import main as cli_main
from apollo.core.cluster import IoModel, Topology
from apollo.core.effects import Launch, Send, SetTimer, TaskExited, Timer
from apollo.core.lifecycle import TaskState
from apollo.tools.livecluster import ClusterError, up
from apollo.core.messages import Dispatch, StatusBatch, TaskReport, UpgradeTask
from apollo.core.spec import JobSpec, StageSpec
from apollo.bench import throughput as tp
from jm.stable_matching import stable_match
from jm.config import DispatchConfig
from jm.state import JmConfig, JmState
from jm.view import ViewCache
from pn.attempt import weighted_pick as _weighted_pick
from pn.state import PnConfig, PnState

from helpers import Rng, await_holds_for, await_until, interpreted_only, task


# ---------------------------------------------------------------------------- the bench

@pytest.mark.live
@pytest.mark.slow
def test_tiny_bench_through_the_cli_writes_sane_numbers(tmp_path):
    out = tmp_path / "tp.json"
    # (interpreted: building the compiled modules takes a minute or two, and test_native already
    # builds them and checks that child processes load them)
    rc = cli_main(["bench", "throughput", "--noop-tasks", "300", "--wide-noop-tasks", "300",
                   "--roundtrips", "10", "--short-tasks", "40", "--short-ms", "10", "--native", "off",
                   "--json", str(out)])
    assert rc == 0
    res = json.loads(out.read_text())
    a = res["apollo"]
    for k in tp.KEYS:
        assert k in a and a[k] > 0, k
    assert a["noop_tasks_per_s_wide"] > 0
    # <= 1.05: no task ran shorter than asked; > 0.25: the 0.2 s modelled start-up is off
    # (io={"init_s": 0}), else 10 ms tasks would take 210 ms
    assert 0.25 < a["short_task_efficiency"] <= 1.05
    assert 0 < a["startup_s"] < 15
    assert res["config"]["slots"] == 2 and res["config"]["short_ms"] == 10
    if sys.platform.startswith("linux"):      # (each process's CPU per round trip: /proc/PID/schedstat)
        cpu = a["roundtrip_cpu_us"]
        assert {"client", "rm0", "jm0", "pn0"} <= set(cpu) and all(cpu[k] > 0 for k in ("client", "rm0", "jm0"))


@pytest.mark.live
@pytest.mark.slow
def test_a_cluster_that_fails_to_start_is_retried_once_and_counted(tmp_path, monkeypatch, capsys):
    from apollo.tools import livecluster
    real_up, calls = livecluster.up, []

    def flaky_up(folder, **kw):
        calls.append(folder)
        if len(calls) == 1:
            (folder / "jm.out").parent.mkdir(parents=True, exist_ok=True)
            (folder / "jm.out").write_text("OSError: [Errno 98] address already in use\n")
            raise ClusterError("jm process 0 exited during start-up")
        return real_up(folder, **kw)
    monkeypatch.setattr(livecluster, "up", flaky_up)
    res = tp._apollo_cluster(tmp_path / "c", {"pns": 1, "racks": 1, "procs": 1, "cpus": 1.0},
                             lambda f: tp._apollo_runs(f, 20, 2, 0, 0.0))
    assert res["startup_retries"] == 1 and res["noop_tasks_per_s"] > 0 and res["roundtrip_ms"] > 0
    assert calls[1] != calls[0]
    assert "address already in use" in capsys.readouterr().err


def test_unknown_peer_and_bad_counts_are_refused(capsys):
    # (--native off: the bench builds the compiled modules before it reads the rest of its arguments)
    assert tp.main(["--vs", "spark", "--native", "off"]) == 2
    assert "unknown peer" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:       # (the parser refuses it: one line, exit 2)
        tp.main(["--noop-tasks", "-1", "--native", "off"])
    assert e.value.code == 2 and "--noop-tasks: -1 is not an integer >= 1" in capsys.readouterr().err


def test_a_peer_that_is_not_installed_is_skipped(monkeypatch):
    monkeypatch.setitem(sys.modules, "dask", None)
    monkeypatch.setitem(sys.modules, "dask.distributed", None)
    monkeypatch.setitem(sys.modules, "ray", None)
    for peer in tp.PEERS:
        r = tp.run_peer(peer, 10, 1, 2, 0.01)
        assert set(r) == {"skipped"} and "not installed" in r["skipped"]
    lines = tp.table({"apollo": {"noop_tasks_per_s": 1.0, "roundtrip_ms": 1.0, "short_task_efficiency": 0.9,
                                 "startup_s": 0.5, "cluster": "x"},
                      "dask": {"skipped": "not installed (x)"}})
    assert any(line.startswith("dask: skipped") for line in lines)
    assert "dask" in lines[0] and "target" in lines[0]


def test_cluster_io_model_is_checked_and_recorded(tmp_path):
    with pytest.raises(ClusterError, match="unknown I/O model field"):
        up(tmp_path, pns=1, racks=1, procs=1, io={"init_seconds": 0.0})
    assert not (tmp_path / "cluster.json").exists() and not (tmp_path / "secret").exists()
    from apollo.tools.process import io_model
    assert io_model({"io": {"init_s": 0.0}}) == IoModel(init_s=0.0)
    assert io_model({}) == IoModel()


# ---------------------------------------------------------------------------- JM

TOPO = Topology(8, 2, 2.0, 8.0)


def _view(stamp=0.0):
    v = ViewCache(8)
    v.stamps[:] = stamp
    v.time = stamp
    return v


def _jm(tasks=20, tokens=4, coalesce=False, opportunistic=True):
    spec = JobSpec("j", [StageSpec("s", tasks, np.full(tasks, 0.5))])
    cfg = JmConfig(topology=TOPO, dispatch=DispatchConfig(coalesce=coalesce, opportunistic=opportunistic),
                   io=IoModel(init_s=0.0))
    j = JmState(1, spec, tokens, 0.0, cfg, _view())
    return j, j.start(0.0, Rng())


def _sent(out, kind=Dispatch):
    return [e.msg for e in out if isinstance(e, Send) and isinstance(e.msg, kind)]


def _done(j, ts, state=TaskState.DONE, now=1.0):
    reps = [TaskReport(1, t, int(j.tasks.attempt[t]), int(state), 0.5, now, 0, "") for t in ts]
    return StatusBatch(1, int(j.tasks.server[ts[0]]), reps, np.zeros(12, np.float32), now)


def test_coalescing_jm_schedules_once_per_burst_of_reports():
    j, out = _jm(coalesce=True)
    first = [t.task for d in _sent(out) for t in d.tasks if not t.opportunistic]
    outs = [j.handle(_done(j, [t]), 1.0, Rng()) for t in first]
    timers = [e for o in outs for e in o if isinstance(e, SetTimer)]
    assert [e.key for e in timers] == ["sched"]                 # one pass armed for the burst
    assert not any(_sent(o) for o in outs)                      # nothing dispatched inline
    out = j.handle(Timer("sched"), 1.0, Rng())
    assert len([t for d in _sent(out) for t in d.tasks]) + len(_sent(out, UpgradeTask)) >= len(first)
    j.validate()


def test_without_coalescing_a_report_schedules_inline():
    j, out = _jm(coalesce=False)
    t = next(t.task for d in _sent(out) for t in d.tasks if not t.opportunistic)
    out = j.handle(_done(j, [t]), 1.0, Rng())
    assert _sent(out) or _sent(out, UpgradeTask)
    assert not any(isinstance(e, SetTimer) and e.key == "sched" for e in out)


def test_freed_tokens_upgrade_running_opportunistic_attempts_first():
    j, out = _jm(tokens=2)
    opp = [t.task for d in _sent(out) for t in d.tasks if t.opportunistic]
    reg = [t.task for d in _sent(out) for t in d.tasks if not t.opportunistic]
    assert len(opp) == 2 and len(reg) == 2
    younger = max(opp, key=lambda t: (j.tasks.dispatch_t[t], t))
    # the younger opportunistic attempt is running, the older one still queued
    j.handle(StatusBatch(1, int(j.tasks.server[younger]), [TaskReport(1, younger, int(j.tasks.attempt[younger]),
                         int(TaskState.RUNNING), 0.6, 0.0, 0, "")], np.zeros(12, np.float32), 0.6), 0.6, Rng())
    out = j.handle(_done(j, reg[:1]), 1.0, Rng())
    assert [u.task for u in _sent(out, UpgradeTask)] == [younger]
    j.validate()


def test_matching_shortcut_agrees_with_stable_matching():
    rng = np.random.default_rng(7)
    for _ in range(300):
        B, K, S = int(rng.integers(1, 6)), int(rng.integers(1, 5)), int(rng.integers(2, 12))
        cand = np.sort(rng.choice(S, size=(B, K)), axis=1)
        cost = rng.random((B, K))
        cost[rng.random((B, K)) < 0.2] = np.inf
        dup = np.zeros_like(cand, dtype=bool)
        dup[:, 1:] = cand[:, 1:] == cand[:, :-1]
        cost[dup] = np.inf
        best = cost.argmin(axis=1)
        srv = cand[np.arange(B), best]
        fin = np.isfinite(cost[np.arange(B), best])
        if len(np.unique(srv[fin])) == fin.sum():          # the case the JM short-cuts
            assert np.array_equal(np.where(fin, srv, -1), stable_match(cand, cost, 64))


# ---------------------------------------------------------------------------- PN

def test_pn_takes_a_list_of_exits_as_one_pass_and_one_report():
    p = PnState(0, PnConfig(cores=2.0, mem_gb=8.0, fresh_reports=True))
    p.handle(Dispatch(1, [task(t=i, est=0.01) for i in range(4)]), 0.0, Rng())
    running = list(p.running)
    assert len(running) == 2
    out = p.handle([TaskExited(k, True, 0, "") for k in running], 0.5, Rng())
    batches = [e.msg for e in out if isinstance(e, Send) and isinstance(e.msg, StatusBatch)]
    assert len(batches) == 1
    states = sorted(r.state for r in batches[0].reports)
    assert states == [int(TaskState.DONE)] * 2     # the starts were never reported queued
    assert batches[0].matrix_time == 0.5                     # a reading planned now
    assert sum(isinstance(e, Launch) for e in out) == 2
    p.validate()


def test_weighted_pick_draws_as_numpy_choice():
    for n in range(2, 7):
        w = list(np.random.default_rng(n).random(n) + 0.01)
        a, b = np.random.default_rng(1), np.random.default_rng(1)
        p = np.array(w) / np.sum(w)
        assert [int(a.choice(n, p=p)) for _ in range(500)] == [_weighted_pick(w, b) for _ in range(500)]


# ---------------------------------------------------------------------------- live runtime pieces

def test_event_file_buffers_within_an_iteration_and_flushes(tmp_path):
    from apollo.tools import eventlog
    ev = tmp_path / "events-x.msgpack"
    f = eventlog.EventFile(ev)

    def read() -> list:
        return [[kind, now, data] for _, kind, now, data in eventlog.records(tmp_path)]

    async def go():
        f("attempt", (1, 2.5, True), 0.1)
        f("decisions", (np.int64(3),), 0.2)   # (numpy's numbers recorded as Python's)
        f("job_started", (1,), 0.2)          # not a recorded kind
        before = ev.read_bytes()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return before
    before = asyncio.run(go())
    assert before == b""
    assert read() == [["attempt", 0.1, [1, 2.5, True]], ["decisions", 0.2, [3]]]
    f("job_done", (1,), 0.3)                 # no running loop: written at once
    f.close()
    assert read()[-1] == ["job_done", 0.3, [1]]


def test_event_files_keep_whole_records_after_a_write_cut_short(tmp_path):
    from apollo.tools import eventlog
    from apollo.tools.client import EventTail
    ev = tmp_path / "events-jm0.msgpack"
    f = eventlog.EventFile(ev)
    f("attempt", (1, 0, 2.0), 1.0)
    f.close()
    whole = ev.read_bytes()
    with open(ev, "ab") as out:              # a kill in the middle of the next record's write
        out.write(msgpack.packb(["attempt", 2.0, [2, 0, 3.0]])[:-3])
    tail = EventTail(tmp_path)
    assert tail.poll() == [(1, 0, 2.0)]      # the partial record is left, as one still being written
    f = eventlog.EventFile(ev)               # the process again: the partial record is cut off
    assert ev.read_bytes() == whole
    f("attempt", (3, 0, 4.0), 5.0)
    f.close()
    assert [r[3] for r in eventlog.records(tmp_path, "attempt")] == [[1, 0, 2.0], [3, 0, 4.0]]
    assert tail.poll() == [(1, 0, 2.0), (3, 0, 4.0)]


class _Exits:
    """An actor that records what the runtime hands it."""

    def __init__(self, batch: bool) -> None:
        self.batch_exits = batch
        self.got: list = []

    def handle(self, event, now, rng):
        self.got.append(event)
        return []


async def test_runtime_hands_batching_actors_their_exits_together_and_drops_killed_ones(tmp_path):
    from apollo.core.effects import Kill
    from apollo.runtime.live import LiveRuntime
    rt = LiveRuntime(b"secret", seed=1, workdir=tmp_path, io=IoModel(init_s=0.0))
    batching, single = _Exits(True), _Exits(False)
    rt.add("pn:0", batching, start=False)
    rt.add("pn:1", single, start=False)
    await rt.start(listen_port=None)
    try:
        for addr, actor in (("pn:0", batching), ("pn:1", single)):
            rt._apply(addr, actor, [Launch(task(t=i, dur=0.0), 2) for i in range(3)], rt.now)
        await await_until(lambda: batching.got and len(single.got) == 3, 2, "the exits handed over")
        assert len(batching.got) == 1 and [e.task_key for e in batching.got[0]] == [(1, i, 1) for i in range(3)]
        assert [e.task_key for e in single.got] == [(1, i, 1) for i in range(3)]
        # an exit still waiting for delivery when its attempt is killed never arrives
        batching.got.clear()
        rt._exited("pn:0", batching, TaskExited((1, 7, 1), True, 0, ""))
        rt._exited("pn:0", batching, TaskExited((1, 8, 1), True, 0, ""))
        rt._apply("pn:0", batching, [Kill((1, 7, 1))], rt.now)
        await await_until(lambda: batching.got, 2, "the exit not killed")
        await await_holds_for(lambda: [getattr(e, "task_key", None) for e in batching.got] == [(1, 8, 1)], 0.01,
                              "only the exit not killed")
    finally:
        await rt.stop()


@interpreted_only
async def test_runtime_delivers_an_iterations_exits_of_every_batching_actor_with_one_flush(tmp_path):
    """Exits of several batching actors in one loop iteration (the tasks a burst dispatched to
    many PNs of a process end together) go out in one callback, with one write per connection;
    an actor removed or replaced before it runs gets none of them."""
    from apollo.runtime.live import LiveRuntime
    rt = LiveRuntime(b"secret", seed=1, workdir=tmp_path, io=IoModel(init_s=0.0))
    a, b, gone = _Exits(True), _Exits(True), _Exits(True)
    for addr, actor in (("pn:0", a), ("pn:1", b), ("pn:2", gone)):
        rt.add(addr, actor, start=False)
    await rt.start(listen_port=None)
    flushes = []
    real_flush = rt.endpoint.flush_now
    rt.endpoint.flush_now = lambda: (flushes.append(len(a.got) + len(b.got)), real_flush())[1]
    try:
        for i, (addr, actor) in enumerate((("pn:0", a), ("pn:1", b), ("pn:2", gone))):
            rt._exited(addr, actor, TaskExited((1, 2 * i, 1), True, 0, ""))
            rt._exited(addr, actor, TaskExited((1, 2 * i + 1, 1), True, 0, ""))
        rt.remove("pn:2")
        await await_until(lambda: a.got and b.got, 2, "the exits handed over")
        assert [[e.task_key for e in ev] for ev in a.got] == [[(1, 0, 1), (1, 1, 1)]]
        assert [[e.task_key for e in ev] for ev in b.got] == [[(1, 2, 1), (1, 3, 1)]]
        assert flushes == [2]                     # one flush, after both actors had theirs
        await await_holds_for(lambda: gone.got == [], 0.01, "no exits for a removed actor")
    finally:
        await rt.stop()


async def test_client_waits_have_their_own_futures(tmp_path):
    from apollo.tools.client import Client
    from apollo.core.messages import JobDone
    (tmp_path / "cluster.json").write_text(json.dumps({"rm": "127.0.0.1:1", "processes": []}))
    (tmp_path / "secret").write_text("s")
    c = Client(tmp_path)
    with pytest.raises(asyncio.TimeoutError):
        await c.wait(5, timeout_s=0.01)
    assert c.inbox.waiters == {}                              # a timed-out wait leaves nothing behind
    a = asyncio.ensure_future(c.wait(5))
    b = asyncio.ensure_future(c.wait(5))
    late = asyncio.ensure_future(c.wait(5, timeout_s=5))
    await asyncio.sleep(0)
    a.cancel()                                                # one waiter cancelled: the others still get it
    await asyncio.sleep(0)
    done = JobDone(5, True, "", 1.0, 3)
    c.inbox.handle(done, 1.0, None)
    assert await b == done and await late == done
    assert a.cancelled() and await c.wait(5) == done and c.inbox.waiters == {}
