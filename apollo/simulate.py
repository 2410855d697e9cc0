"""Build a simulated cluster from the real actors and run a workload through it."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from apollo.cluster import IoModel, Topology
from apollo.messages import JobAccepted, JobDone, SubmitJob
from apollo.report import AttemptLog, Recorder, build_report
from apollo.runtime.sim import NetModel, SimRuntime
from apollo.spec import Workload
from jm.host import JmHost
from jm.policies import profile as find_profile
from jm.policies.delay import DelayScheduling
from jm.state import JmConfig
from pn.state import PnConfig, PnState
from rm.state import RmConfig, RmState
from rm.store import MemoryJobStore
from rm.queues import QueueTree
from rm.state import single_queue


@dataclass
class SimConfig:
    servers: int = 100
    racks: int = 10
    cores: float = 4.0
    mem_gb: float = 16.0
    scheduler: str = "apollo"
    tokens: str = ""                 # without queues: the root queue's order (even | fifo); default: the profile's
    queues: QueueTree | None = None  # the capacity plane's queue tree (rm/queues.py); None: one root queue
    delay: tuple[float, float] | None = None   # delay scheduling (W1, W2) added to the profile's filters
    seed: int = 0
    wire: bool = True                # encode every message to msgpack and back
    net: NetModel = field(default_factory=NetModel)
    io: IoModel = field(default_factory=IoModel)
    # Status batches carry a reading planned at the change they report (as on the live cluster),
    # not the PN's last heartbeat reading, so a JM host sees a server's state as each of its
    # tasks ends, and the RM's view matters less: a changed PN re-reports to the RM within
    # heartbeat_s (5 s, the cadence of re-reports of an overrunning task). Measured (README,
    # "Wait-time matrices"): quality well above stale readings with a 1 s heartbeat.
    fresh_reports: bool = True
    heartbeat_s: float = 5.0
    view_interval_s: float = 1.0     # the RM spreads its cluster view this often
    liveness_s: float = 60.0         # idle PNs report this often; the RM declares death after 3x
    fail_prob: float = 0.0           # chance a task attempt fails (a flaky machine, a bad input)
    slow_fraction: float = 0.0       # fraction of servers that run tasks slower (stragglers)
    slow_factor: float = 3.0
    crashes: list = field(default_factory=list)   # (time_s, server, down_for_s)
    max_sim_s: float = float("inf")
    # Apollo may dispatch beyond its tokens as opportunistic tasks. Off by default: with
    # even-split tokens regular work claims the whole cluster and most of it gets preempted.
    opportunistic: bool = False
    # A closed loop instead of the trace's arrival times: this many jobs in flight, the next one
    # submitted as one finishes (the HFS paper's microbenchmarks ran "50 jobs active at any time").
    # 0: open arrivals.
    concurrent_jobs: int = 0
    check: bool = False              # every actor's validate() after every event (tests)


class TaskTruth:
    """What really happens to a task in the simulator: its modelled compute time on this
    server (slow servers stretch it), plus start-up and input I/O at the locality it got."""

    def __init__(self, cfg: SimConfig, topo: Topology) -> None:
        rng = np.random.default_rng(cfg.seed + 7)
        self.slow = np.where(rng.random(topo.servers) < cfg.slow_fraction, cfg.slow_factor, 1.0)
        # By PN address; empty when no server is slow (the usual case: no lookup per task).
        self.slow_at = {f"pn:{s}": f for s, f in enumerate(self.slow.tolist()) if f != 1.0}
        self.io = cfg.io
        self.init_s = cfg.io.init_s
        self.bandwidth = cfg.io.bandwidths().tolist()          # by locality
        self.fail_prob = cfg.fail_prob
        self.rand = np.random.default_rng(cfg.seed + 11)

    def __call__(self, address: str, task, locality: int) -> tuple[float, bool]:
        # (io.io_time, inlined: this runs once per task attempt)
        dur = task.duration_s * (self.slow_at.get(address, 1.0) if self.slow_at else 1.0) + self.init_s \
            + task.input_bytes / self.bandwidth[locality]
        if self.fail_prob and self.rand.random() < self.fail_prob:
            return dur * self.rand.random(), False
        return dur, True


class Client:
    """The submitting side: counts answers and stops the run when every job has one; in a
    closed loop (``backlog``), submits the next job as each one ends."""

    def __init__(self, expected: int, runtime: SimRuntime, backlog: list | None = None) -> None:
        self.expected = expected
        self.runtime = runtime
        self.finished = 0
        self.results: dict[int, JobDone] = {}
        self.backlog = backlog or []          # (job index, spec) not submitted yet, in order

    def handle(self, event, now, rng):
        if type(event) is JobDone:
            if event.job_id in self.results:
                return []        # the second copy (the JM's and the RM's both come)
            self.results[event.job_id] = event
            self.finished += 1
            self._next()
        elif type(event) is JobAccepted and not event.accepted:
            self.finished += 1
            self._next()
        if self.finished >= self.expected:
            self.runtime.stopped = True
        return []

    def _next(self) -> None:
        if self.backlog:
            i, job = self.backlog.pop(0)
            self.runtime.inject("rm", SubmitJob(i, job, "client"))


def build(cfg: SimConfig, workload: Workload) -> tuple[SimRuntime, Recorder, Client, dict]:
    find_profile(cfg.scheduler)      # an unknown name: a clear error before anything is built
    topo = Topology(cfg.servers, cfg.racks, cfg.cores, cfg.mem_gb)
    rec = Recorder(attempts=AttemptLog())
    rt = SimRuntime(seed=cfg.seed, net=cfg.net, wire=cfg.wire, task_model=TaskTruth(cfg, topo), log_sink=rec,
                    check=cfg.check)
    pncfg = PnConfig(cores=cfg.cores, mem_gb=cfg.mem_gb, heartbeat_s=cfg.heartbeat_s,
                     liveness_s=cfg.liveness_s, fresh_reports=cfg.fresh_reports)
    shapes = pncfg.grid.size
    token_name = cfg.tokens or find_profile(cfg.scheduler).tokens
    tree = cfg.queues or single_queue(token_name)
    rm = RmState(RmConfig(cfg.servers, shapes, cfg.cores, cfg.mem_gb, view_interval_s=cfg.view_interval_s,
                          dead_after_s=3 * pncfg.liveness_s, queues=tree))
    jmcfg = JmConfig(topology=topo, policy=cfg.scheduler, io=cfg.io, grid=pncfg.grid,
                     opportunistic=cfg.opportunistic,
                     **({"delay_node_s": cfg.delay[0], "delay_rack_s": cfg.delay[1]} if cfg.delay else {}))
    if cfg.delay:
        jmcfg.profile = jmcfg.profile.with_filter(DelayScheduling())
    host = JmHost(jmcfg)
    jobs = list(enumerate(workload.jobs))
    first, backlog = (jobs[:cfg.concurrent_jobs], jobs[cfg.concurrent_jobs:]) if cfg.concurrent_jobs else (jobs, [])
    client = Client(len(workload.jobs), rt, backlog)
    rt.add("rm", rm, store=MemoryJobStore())
    rt.add("jmhost", host)
    rt.route_prefix("jm", "jmhost")
    rt.add("client", client, start=False)
    for s in range(cfg.servers):
        rt.add(f"pn:{s}", PnState(s, pncfg))
    for i, job in first:
        at = 0.0 if cfg.concurrent_jobs else job.arrival_s
        rt.call_at(at, lambda i=i, job=job: rt.inject("rm", SubmitJob(i, job, "client")))
    for t, server, down_for in cfg.crashes:
        addr = f"pn:{server}"
        rt.call_at(t, lambda a=addr: rt.crash(a))
        rt.call_at(t + down_for, lambda a=addr, s=server: rt.restart(a, PnState(s, pncfg)))
    meta = {"topology": topo, "token_policy": token_name if cfg.queues is None else f"queues:{tree.sharing}",
            "profile": jmcfg.profile, "tree": tree}
    return rt, rec, client, meta


def run_simulation(workload: Workload, cfg: SimConfig) -> dict:
    rt, rec, client, meta = build(cfg, workload)
    t0 = time.perf_counter()
    rt.run(until=cfg.max_sim_s)
    wall = time.perf_counter() - t0
    topo = meta["topology"]
    policies = meta["profile"].describe(cfg.opportunistic)
    return build_report(
        rec, mode="sim",
        workload={"name": workload.name, "jobs": len(workload.jobs), "tasks": workload.total_tasks},
        cluster={"servers": cfg.servers, "racks": cfg.racks, "cores_per_server": cfg.cores,
                 "mem_gb_per_server": cfg.mem_gb},
        scheduler={"name": cfg.scheduler, "policies": policies + [f"tokens:{meta['token_policy']}"],
                   "config": {"seed": cfg.seed, "wire": cfg.wire, "heartbeat_s": cfg.heartbeat_s,
                              "fresh_reports": cfg.fresh_reports,
                              "latency_s": cfg.net.latency_s, "loss": cfg.net.loss,
                              "fail_prob": cfg.fail_prob, "slow_fraction": cfg.slow_fraction,
                              "crashes": len(cfg.crashes)}},
        capacity_cpus=topo.total_cores, wall_s=wall, sim_time_s=rt.now)
