"""A 1-task job's critical path, in process: the CPU each actor and the codec spend on it.

The live round trip (`apollo bench throughput`) is a few process hops plus the work at each,
and on a shared 2-core machine its run-to-run spread is larger than a change to that work. This
bench runs the same work without the hops: a client's SubmitJob packed and unpacked, the RM's
handling and its store write, StartJob to the JM host, the Dispatch to a PN, the
task's exit, the StatusBatch back and the JobDone, each message through msgpack, with the
cluster's live configuration (2 PNs of 1 CPU, the live RM and JM host settings). Each step is
timed in thread CPU time; the figures are medians over the jobs after the first fifth (warm).
The periodic work (heartbeats, views, host reports) runs every 200 jobs, off the measured path.

For instruction counts, run it under ``valgrind --tool=callgrind`` with two ``--jobs`` values:
the difference over the difference in jobs is the instructions per job.
"""
from __future__ import annotations

import gc
import os
import statistics
import sys
import tempfile
import time

import numpy as np

from apollo.core.cluster import IoModel, Topology
from apollo.core.effects import Launch, Persist, Send, Start, TaskExited, Timer
from apollo.core.messages import (ClusterView, Dispatch, Heartbeat, JobAccepted, JobDone, StartJob, StatusBatch,
                                  SubmitJob, pack, unpack)
from apollo.core.spec import JobSpec, StageSpec
from apollo.tools import native
from apollo.tools.cli.options import Parser, count
from apollo.tools.process import HOST_DEAD_AFTER_S, HOST_REPORT_S, REJOIN_S, VIEW_INTERVAL_S, pn_config
from jm.config import DispatchConfig, JmConfig
from jm.host import JmHost
from jm.policies import profile as find_profile
from pn.state import PnState
from rm.state import RmConfig, RmState, single_queue
from rm.store import SqliteJobStore

from .common import ensure_native, write_json

CLUSTER = {"pns": 2, "racks": 1, "cpus": 1.0, "mem_gb": 4.0}
# The RM writes a submission before anything it sends after (apollo/runtime/live.py), StartJob
# included, and packs the JobAccepted before the read's sends go out: both are on the path. The
# client hears JobDone from the JM host; the RM's copy is not.
OFF_PATH = ("rm handle JobDone",)


def _sends(effects: list, cls: type) -> list:
    return [e for e in effects if type(e) is Send and type(e.msg) is cls]


class JobPath:
    """The actors of a live cluster of 2 PNs in one process, and one 1-task job at a time
    through them (``one``), each step's thread CPU time recorded."""

    def __init__(self, store_path: str) -> None:
        pncfg = pn_config(CLUSTER)
        topo = Topology(CLUSTER["pns"], CLUSTER["racks"], CLUSTER["cpus"], CLUSTER["mem_gb"])
        self.rng = np.random.default_rng(1)
        self.rm = RmState(RmConfig(CLUSTER["pns"], pncfg.grid.size, CLUSTER["cpus"], CLUSTER["mem_gb"],
                                   view_interval_s=VIEW_INTERVAL_S, rejoin_s=REJOIN_S,
                                   queues=single_queue(find_profile("apollo").tokens), jm_hosts=("jmhost:0",),
                                   host_report_s=HOST_REPORT_S, host_dead_after_s=HOST_DEAD_AFTER_S))
        self.host = JmHost(JmConfig(topology=topo, policy="apollo", io=IoModel(init_s=0.0), grid=pncfg.grid,
                                    dispatch=DispatchConfig(retry_s=0.1, coalesce=True), host="jmhost:0",
                                    host_report_s=HOST_REPORT_S, adopt_wait_s=0.3))
        self.pns = [PnState(s, pncfg) for s in range(CLUSTER["pns"])]
        self.store = SqliteJobStore(store_path)
        self.spec = JobSpec("one", [StageSpec("work", 1, np.full(1, 0.0), cpu=1.0, mem_gb=1.0)])
        self.steps: dict[str, list[float]] = {}
        self.now = 0.0
        self._start_cluster()

    def _start_cluster(self) -> None:
        rm, host, rng = self.rm, self.host, self.rng
        rm.handle(Start(None), 0.0, rng)
        host.handle(Start(), 0.0, rng)
        for p in self.pns:
            for e in _sends(p.handle(Start(), 0.0, rng), Heartbeat):
                rm.handle(e.msg, 0.0, rng)
        self.now = 3.5
        self.periodic()

    def periodic(self) -> None:
        """What the cluster does on its timers between jobs: heartbeats, a view, a host report."""
        rm, host, rng, now = self.rm, self.host, self.rng, self.now
        for p in self.pns:
            for e in _sends(p.handle(Timer("hb"), now, rng), Heartbeat):
                rm.handle(e.msg, now, rng)
        for v in _sends(rm.handle(Timer("tick"), now, rng), ClusterView):
            host.handle(v.msg, now, rng)
        host.handle(Timer("report"), now, rng)

    def one(self) -> None:
        """One 1-task job from its submission to its JobDone."""
        rm, host, rng = self.rm, self.host, self.rng
        steps = self.steps
        clock = time.thread_time_ns

        def timed(name: str, fn, *args):
            t0 = clock()
            got = fn(*args)
            steps.setdefault(name, []).append((clock() - t0) / 1000.0)
            return got

        self.now += 0.001
        now = self.now
        msg = timed("rm unpack SubmitJob", unpack, timed("client pack SubmitJob", pack,
                                                           SubmitJob(-1, self.spec, "client:1")))
        out = timed("rm handle SubmitJob", rm.handle, msg, now, rng)
        timed("rm store write", lambda: [self.store.apply(e) for e in out if type(e) is Persist])
        timed("rm pack JobAccepted", pack, _sends(out, JobAccepted)[0].msg)
        start = timed("jm unpack StartJob", unpack, timed("rm pack StartJob", pack, _sends(out, StartJob)[0].msg))
        out = timed("jm handle StartJob", host.handle, start, now, rng)
        sent = _sends(out, Dispatch)
        if len(sent) != 1:
            raise RuntimeError(f"a 1-task job's start sent {len(sent)} Dispatch messages: {out}")
        pn = self.pns[int(sent[0].to.split(":")[1])]
        dispatch = timed("pn unpack Dispatch", unpack, timed("jm pack Dispatch", pack, sent[0].msg))
        now += 0.0001
        launched = [e for e in timed("pn handle Dispatch", pn.handle, dispatch, now, rng) if type(e) is Launch]
        now += 0.0001
        out = timed("pn handle TaskExited", pn.handle, TaskExited(launched[0].task.key, True, 0, ""), now, rng)
        status = timed("jm unpack StatusBatch", unpack, timed("pn pack StatusBatch", pack,
                                                               _sends(out, StatusBatch)[0].msg))
        now += 0.0001
        out = timed("jm handle StatusBatch", host.handle, status, now, rng)
        done = timed("client unpack JobDone", unpack, timed("jm pack JobDone", pack, _sends(out, JobDone)[0].msg))
        timed("rm handle JobDone", rm.handle, done, now, rng)
        self.now = now


def measure(jobs: int) -> dict:
    """Per step, the median thread CPU microseconds of ``jobs`` 1-task jobs (after a warm-up of a
    fifth of them), and their sum over the critical path."""
    with tempfile.TemporaryDirectory() as tmp:
        path = JobPath(os.path.join(tmp, "jobs.db"))
        gc.disable()
        try:
            for i in range(jobs):
                path.one()
                if i % 200 == 199:
                    path.periodic()
                    gc.collect()
        finally:
            gc.enable()
        path.store.db.close()
    warm = jobs // 5
    medians = {k: statistics.median(v[warm:]) for k, v in path.steps.items()}
    return {"jobs": jobs, "steps_us": medians,
            "critical_path_us": sum(v for k, v in medians.items() if k not in OFF_PATH)}


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="apollo bench jobpath", description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=count(10), default=3000, help="1-task jobs to run (default 3000)")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--native", choices=("auto", "on", "off"), default="off",
                   help="the compiled modules (apollo.tools.native) as the live cluster's processes load "
                        "them: auto uses them when they can be built (default off: the interpreted code)")
    a = p.parse_args(argv)
    ensure_native("jobpath", a.native, sys.argv[1:] if argv is None else argv)
    r = measure(a.jobs)
    r["native"] = native.loaded()
    print(("compiled" if r["native"] else "interpreted") + f" modules, {a.jobs} jobs; thread CPU us, medians")
    for k, v in r["steps_us"].items():
        print(f"  {k:28s} {v:8.2f}" + ("   (off the path)" if k in OFF_PATH else ""))
    print(f"  {'critical path':28s} {r['critical_path_us']:8.2f}")
    write_json(r, a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
