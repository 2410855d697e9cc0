"""Build a simulated cluster from the real actors and run a workload through it."""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import numpy as np

from apollo.core.cluster import IoModel, Topology
from apollo.core.records import AttemptLog, Recorder
from apollo.tools.report import build_report
from apollo.tools.sim_client import Client, Submit
from apollo.runtime.sim import NetModel, SimRuntime
from apollo.runtime.truth import TaskTruth
from apollo.core.spec import Workload
from apollo.core.stragglers import NONE as NO_STRAGGLERS, StragglerModel
from jm.config import AttemptsConfig, DispatchConfig, JmConfig, PlacementConfig
from jm.host import JmHost
from jm.policies import profile as find_profile
from pn.state import PnConfig, PnState
from rm.state import RmConfig, RmState
from rm.store import MemoryJobStore
from rm.clones import CloneConfig
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
    # A partition lasting this long makes the actors it separates hear PeerLost of each other
    # (the live transport's keepalive timeout); a crash is heard at once. PNs report only on
    # change: a quiet server sends nothing, and is dead when its connection is lost.
    keepalive_timeout_s: float = 3.0
    # A PN's report goes once more this long after it if nothing changed (PnConfig.repeat_after_s);
    # None: the keepalive timeout when the network loses messages (net.loss), else never.
    repeat_after_s: float | None = None
    fail_prob: float = 0.0           # chance a task attempt fails (a flaky machine, a bad input)
    slow_fraction: float = 0.0       # fraction of servers that run tasks slower (stragglers)
    slow_factor: float = 3.0
    # Per-attempt stragglers (apollo.core.stragglers; Dolly's figures); the JMs' straggler copies
    # (Apollo's corrections); Dolly's clone budget, a fraction of the cores (0: no cloning), for
    # a straggler chance of clone_p (None: the straggler model's own p, as an operator who
    # measured the cluster would set it).
    stragglers: StragglerModel = NO_STRAGGLERS
    copies: bool = True
    clone_beta: float = 0.05
    clone_p: float | None = None
    # (time_s, who, down_for_s): who is a server number, "pn:S", "rm" or "jm:K" (JM host K)
    crashes: list = field(default_factory=list)
    partitions: list = field(default_factory=list)  # apollo.runtime.sim.Partition
    jm_hosts: int = 1                # JM host actors ("jmhost:K"); the RM spreads jobs over them
    host_report_s: float = 1.0       # JM hosts report their jobs to the RM this often
    host_dead_after_s: float = 5.0   # ...and are dead after this long silent
    max_sim_s: float = float("inf")
    # Apollo may dispatch beyond its tokens as opportunistic tasks. Off by default: with
    # even-split tokens regular work claims the whole cluster and most of it gets preempted.
    opportunistic: bool = False
    # A closed loop instead of the trace's arrival times: this many jobs in flight, the next one
    # submitted as one finishes (the HFS paper's microbenchmarks ran "50 jobs active at any time").
    # 0: open arrivals.
    concurrent_jobs: int = 0
    check: bool = False              # every actor's validate() after every event (tests)


def build(cfg: SimConfig, workload: Workload) -> tuple[SimRuntime, Recorder, Client, dict]:
    find_profile(cfg.scheduler)      # an unknown name: a clear error before anything is built
    topo = Topology(cfg.servers, cfg.racks, cfg.cores, cfg.mem_gb)
    rec = Recorder(attempts=AttemptLog())
    rt = SimRuntime(seed=cfg.seed, net=cfg.net, wire=cfg.wire, log_sink=rec,
                    task_model=TaskTruth(topo.servers, cfg.io, cfg.seed, cfg.slow_fraction, cfg.slow_factor, cfg.fail_prob),
                    check=cfg.check, keepalive_timeout_s=cfg.keepalive_timeout_s)
    repeat = cfg.repeat_after_s
    if repeat is None:
        repeat = cfg.keepalive_timeout_s if cfg.net.loss > 0 else 0.0
    pncfg = PnConfig(cores=cfg.cores, mem_gb=cfg.mem_gb, heartbeat_s=cfg.heartbeat_s,
                     repeat_after_s=repeat, fresh_reports=cfg.fresh_reports, stragglers=cfg.stragglers,
                     io=cfg.io)
    shapes = pncfg.grid.size
    token_name = cfg.tokens or find_profile(cfg.scheduler).tokens
    tree = cfg.queues or single_queue(token_name)
    hosts = tuple(f"jmhost:{k}" for k in range(cfg.jm_hosts))
    rmcfg = RmConfig(cfg.servers, shapes, cfg.cores, cfg.mem_gb, view_interval_s=cfg.view_interval_s,
                     rejoin_s=cfg.keepalive_timeout_s, queues=tree, jm_hosts=hosts,
                     host_report_s=cfg.host_report_s, host_dead_after_s=cfg.host_dead_after_s,
                     clones=CloneConfig(beta=cfg.clone_beta,
                                        p=cfg.stragglers.p if cfg.clone_p is None else cfg.clone_p))
    delay = {"delay": True, "delay_node_s": cfg.delay[0], "delay_rack_s": cfg.delay[1]} if cfg.delay else {}
    jmcfg = JmConfig(topology=topo, policy=cfg.scheduler, io=cfg.io, grid=pncfg.grid,
                     placement=PlacementConfig(**delay), dispatch=DispatchConfig(opportunistic=cfg.opportunistic),
                     attempts=AttemptsConfig(copies=cfg.copies), host_report_s=cfg.host_report_s)

    def new_actor(addr: str):
        """A fresh actor for ``addr`` (at the start, and when a crashed one restarts)."""
        if addr == "rm":
            return RmState(rmcfg)
        if addr.startswith("jmhost:"):
            return JmHost(replace(jmcfg, host=addr))
        return PnState(int(addr.split(":")[1]), pncfg)

    jobs = list(enumerate(workload.jobs))
    first, backlog = (jobs[:cfg.concurrent_jobs], jobs[cfg.concurrent_jobs:]) if cfg.concurrent_jobs else (jobs, [])
    client = Client(len(workload.jobs), rt, dict(jobs), backlog)
    rt.add("rm", new_actor("rm"), store=MemoryJobStore())
    for h in hosts:
        rt.add(h, new_actor(h))
    rt.route_prefix("jm", hosts[0])
    rt.add("client", client, start=False)
    for s in range(cfg.servers):
        rt.add(f"pn:{s}", PnState(s, pncfg))
    for i, job in first:
        at = 0.0 if cfg.concurrent_jobs else job.arrival_s
        rt.call_at(at, lambda i=i: rt.deliver_now("client", Submit(i)))
    for t, who, down_for in cfg.crashes:
        addr = crash_address(who)
        if addr not in rt.slots:
            raise ValueError(f"--crash: no actor {who!r} in this cluster")
        rt.call_at(t, lambda a=addr: rt.crash(a))
        rt.call_at(t + down_for, lambda a=addr: rt.restart(a, new_actor(a)))
    for p in cfg.partitions:
        rt.add_partition(p)
    meta = {"topology": topo, "token_policy": token_name if cfg.queues is None else f"queues:{tree.sharing}",
            "profile": jmcfg.profile, "tree": tree}
    return rt, rec, client, meta


def crash_address(who) -> str:
    """The actor a crash names: a server number or "pn:S", "rm", or "jm:K" (JM host K)."""
    if isinstance(who, int) or str(who).isdigit():
        return f"pn:{int(who)}"
    who = str(who)
    if who.startswith("jm:"):
        return f"jmhost:{who[3:]}"
    return who


def run_simulation(workload: Workload, cfg: SimConfig) -> dict:
    rt, rec, client, meta = build(cfg, workload)
    t0 = time.perf_counter()
    rt.run(until=cfg.max_sim_s)
    return run_report(cfg, workload, rt, rec, meta, time.perf_counter() - t0)


def run_report(cfg: SimConfig, workload: Workload, rt: SimRuntime, rec: Recorder, meta: dict, wall_s: float) -> dict:
    """The report of a run made by ``build`` (``wall_s``: how long it ran)."""
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
                              "latency_s": cfg.net.latency_s, "loss": cfg.net.loss, "dup": cfg.net.dup,
                              "fail_prob": cfg.fail_prob, "slow_fraction": cfg.slow_fraction,
                              "stragglers_p": cfg.stragglers.p, "copies": cfg.copies,
                              "clone_beta": cfg.clone_beta,
                              "crashes": len(cfg.crashes), "jm_hosts": cfg.jm_hosts}},
        capacity_cpus=topo.total_cores, wall_s=wall_s, sim_time_s=rt.now)
