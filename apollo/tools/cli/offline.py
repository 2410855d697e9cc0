"""Commands that run on this machine alone: simulate, chaos, bench, demo."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from apollo.core.spec import SpecError
from jm.policies import PROFILES

from .options import DEFAULT_CLUSTER, count, fraction, non_negative, number, positive, probability

BENCHES = {
    "matching": "stable matching: batch size vs time and quality",
    "scale": "simulated decisions per wall second at 1k-100k servers",
    "longspan": "heavy-tailed long tasks: decisions per wall s, wall s per simulated hour and day",
    "throughput": "live cluster: no-op tasks/s, round trip, efficiency on short tasks",
    "jobpath": "a 1-task job's critical path in process: each actor's and the codec's CPU per step",
    "delay": "delay scheduling: locality and response time vs the wait",
    "fairshare": "fair pools: time for a starved pool to reach its fair share",
    "capacity": "capacity queues: time for a queue to get its guarantee back, kills, user limit",
    "pools": "FB-2009 day 0 over three fair pools: small jobs' response time",
    "dolly": "Dolly's clones against stragglers: small jobs' completion",
    "corrections": "Apollo's corrections (duplicates, copies) under slow servers",
    "compare": "every profile over the traces and loads: mean and median response",
    "shortjob": "the short-job-behind-a-long-one scenarios, simulated or live",
    "results": "regenerate docs/results.md from the benches' JSON",
}


def _simulate(args: argparse.Namespace) -> int:
    from apollo.runtime.sim import NetModel
    from apollo.tools.simulate import SimConfig, run_simulation
    from apollo.workloads import load_workload

    from apollo.workloads.assign import assign
    from rm.queues import load_queue_file
    from apollo.core.stragglers import model as straggler_model
    from apollo.tools import native

    racks = args.racks or max(1, args.servers // 50)
    if racks > args.servers:
        raise SpecError(f"--racks {racks} is more than --servers {args.servers}")
    if not args.embedded:
        native.relaunch(args.argv, args.native, build_missing=False)   # (a program's call runs here)
    workload = load_workload(args.workload, seed=args.seed, cluster_servers=args.servers).first(args.jobs)
    if not workload.jobs:
        print(f"apollo simulate: workload {args.workload!r} has no jobs", file=sys.stderr)
        return 2
    tree = load_queue_file(args.queues) if args.queues else None
    if tree is not None:
        assign(workload, [q.path for q in tree.leaves()], args.assign or "size", seed=args.seed)
    elif args.assign:
        raise SpecError("--assign spreads jobs over the leaf queues of --queues FILE; give a queue file")
    cfg = SimConfig(servers=args.servers, racks=racks, cores=args.cores, mem_gb=args.mem_gb,
                    scheduler=args.scheduler, tokens=args.tokens, seed=args.seed, wire=not args.no_wire,
                    net=NetModel(latency_s=args.latency_ms / 1000, loss=args.loss),
                    fail_prob=args.fail_prob, slow_fraction=args.slow_fraction,
                    opportunistic=args.opportunistic, queues=tree, delay=_delay(args.delay),
                    stragglers=straggler_model(args.stragglers), copies=not args.no_copies,
                    clone_beta=args.clone_beta,
                    **({"heartbeat_s": args.heartbeat} if args.heartbeat is not None else {}))
    if args.load:
        workload.scaled_to_load(args.load, cfg.servers * cfg.cores)
    from apollo.tools.simulate import crash_address
    cfg.net.dup = args.dup
    cfg.jm_hosts = args.jm_hosts
    for spec in args.crash or []:
        parts = spec.split(":")              # T:WHO:DOWN, WHO itself may be jm:K
        try:
            if len(parts) < 3:
                raise ValueError
            cfg.crashes.append((float(parts[0]), crash_address(":".join(parts[1:-1])), float(parts[-1])))
        except ValueError:
            print(f"apollo simulate: --crash takes TIME:WHO:DOWN_FOR (WHO: a server number, rm, or jm:K), "
                  f"got {spec!r}", file=sys.stderr)
            return 2
    print("compiled modules (apollo.tools.native)" if native.loaded() else "interpreted modules", flush=True)
    try:
        report = run_simulation(workload, cfg)
    except ValueError as e:
        print(f"apollo simulate: {e}", file=sys.stderr)
        return 2
    return _show(report, args.json)


def _chaos(args) -> int:
    from apollo.tools import native
    if not args.cluster and not args.embedded:   # (a sweep on a cluster simulates nothing here)
        native.relaunch(args.argv, args.native, build_missing=False)
    from apollo.tools.chaos import run_chaos
    if args.as_task:
        return _chaos_task(args)

    def progress(r: dict) -> None:
        if r["why"]:
            print(f"seed {r['seed']} FAILED: {r['why']}\n  replay: {r['replay']}", flush=True)
    if args.cluster:
        from apollo.tools.sweep import chaos_on_cluster
        out = chaos_on_cluster(Path(args.cluster).expanduser(), args.seeds, args.start, tasks=args.tasks,
                               progress=progress, native=args.native, progress_s=args.progress_s)
    else:
        print("compiled modules (apollo.tools.native)" if native.loaded() else "interpreted modules", flush=True)
        out = run_chaos(args.seeds, args.start, workers=args.workers, progress=progress)
    print(f"{out['passed']}/{out['seeds']} seeds passed in {out['wall_s']:.1f} s; faults: "
          + ", ".join(f"{k} {v}" for k, v in out["faults"].items()))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0 if out["passed"] == out["seeds"] else 1


def _chaos_task(args) -> int:
    """One task of a sweep on a cluster (apollo.tools.sweep): this task's share of the seeds, by
    its place in the job array, one JSON line per seed on stdout as each is checked."""
    import os

    from apollo.tools.chaos import run_chaos, task_share
    try:
        index, tasks = int(os.environ["APOLLO_TASK_INDEX"]), int(os.environ["APOLLO_TASKS"])
    except (KeyError, ValueError):
        print("apollo chaos --as-task: run as a task of a cluster job (APOLLO_TASK_INDEX and APOLLO_TASKS "
              "are not set)", file=sys.stderr)
        return 2

    def emit(r: dict) -> None:
        print(json.dumps(r), flush=True)
    run_chaos(args.seeds, args.start, workers=args.workers or 1, progress=emit,
              ids=task_share(args.seeds, args.start, index, tasks))
    return 0


def _delay(text: str | None) -> tuple[float, float] | None:
    """--delay W1[,W2] (seconds; W2 defaults to W1)."""
    if not text:
        return None
    try:
        parts = [float(x) for x in text.split(",")]
    except ValueError:
        raise SpecError(f"--delay takes W1[,W2] in seconds, got {text!r}") from None
    if len(parts) not in (1, 2) or min(parts) < 0:
        raise SpecError(f"--delay takes W1[,W2] in seconds (>= 0), got {text!r}")
    return parts[0], parts[-1]


def _show(report: dict, json_path: str | None) -> int:
    """Print a run's summary, write its report if asked; the exit code says whether jobs failed."""
    from apollo.tools.report import summary_lines, write_report
    print("\n".join(summary_lines(report)))
    if json_path:
        write_report(report, json_path)
        print(f"report: {json_path}")
    return 0 if report["jobs"]["failed"] == 0 else 1


def _demo(args: argparse.Namespace) -> int:
    from apollo.tools.demo import demo
    return demo(Path(args.out), trace=args.trace, pns=args.pns, racks=args.racks, procs=args.procs,
                jobs=args.jobs, seed=args.seed)


def _bench(args: argparse.Namespace, rest: list[str]) -> int:
    import importlib
    if args.name not in BENCHES:
        print(f"apollo bench: unknown benchmark {args.name!r} (known: {', '.join(BENCHES)})", file=sys.stderr)
        return 2
    mod = importlib.import_module(f"apollo.bench.{args.name}")
    return mod.main(rest)


def register(sub) -> None:
    s = sub.add_parser("simulate", help="run a workload through the discrete-event simulator")
    s.set_defaults(run=_simulate)
    s.add_argument("workload", help="a trace file (.tsv SWIM, .tr Hawk/Eagle) or a generator NAME[:k=v,...]")
    s.add_argument("--servers", type=count(1), default=100, help="servers in the simulated cluster (default 100)")
    s.add_argument("--racks", type=count(0), default=0, help="racks (default: one per 50 servers)")
    s.add_argument("--cores", type=number(1), default=4.0, help="cores per server, >= 1 (default 4)")
    s.add_argument("--mem-gb", type=positive, default=16.0, help="memory per server in GB (default 16)")
    s.add_argument("--scheduler", default="apollo", choices=list(PROFILES),
                   help="the scheduling profile (default apollo)")
    s.add_argument("--tokens", default="", choices=["", "even", "fifo"],
                   help="without --queues: how jobs share the one root queue (default: the scheduler's)")
    s.add_argument("--queues", metavar="FILE", help="a queue file (TOML): fair pools or capacity queues")
    s.add_argument("--assign", metavar="RULE", help="spread the jobs over the queue file's leaves and users: "
                   "size | rr | random [:users=N,...] (apollo/workloads/assign.py; default size)")
    s.add_argument("--delay", metavar="W1[,W2]", help="add delay scheduling to the scheduler's filters")
    s.add_argument("--load", type=number(0, 10, lo_open=True), default=None,
                   help="rescale arrivals to this CPU utilization, in (0, 10] (default: the workload's own)")
    s.add_argument("--jobs", type=count(1), default=None, help="take the first K jobs (default: all)")
    s.add_argument("--seed", type=count(0), default=0, help="the random seed (default 0)")
    s.add_argument("--json", metavar="FILE", help="write the report here")
    s.add_argument("--no-wire", action="store_true", help="skip msgpack encoding of messages (faster)")
    s.add_argument("--heartbeat", type=positive, metavar="S",
                   help="a PN whose queues changed re-reports to the RM within S seconds (default 5)")
    s.add_argument("--latency-ms", type=non_negative, default=0.5, help="one-way message latency (default 0.5)")
    s.add_argument("--loss", type=number(0, 0.5), default=0.0,
                   help="chance a message is lost, in [0, 0.5] (default 0)")
    s.add_argument("--fail-prob", type=probability, default=0.0, help="chance a task attempt fails, in [0, 1)")
    s.add_argument("--slow-fraction", type=fraction, default=0.0, help="fraction of slow servers, in [0, 1]")
    s.add_argument("--opportunistic", action="store_true",
                   help="Apollo: dispatch beyond tokens as opportunistic (preemptible) tasks")
    s.add_argument("--dup", type=probability, default=0.0, help="chance a message is delivered twice, in [0, 1)")
    s.add_argument("--stragglers", default="none", choices=["none", "dolly"],
                   help="per-attempt slowdowns (apollo/core/stragglers.py): none, or Dolly's heavy tail")
    s.add_argument("--no-copies", action="store_true", help="no straggler copies (Apollo's corrections)")
    s.add_argument("--clone-beta", type=fraction, default=0.05,
                   help="Dolly's clone budget, a fraction of the cores in [0, 1] (0: no cloning; clones are "
                        "made only when stragglers are expected)")
    s.add_argument("--jm-hosts", type=count(1), default=1, help="JM host actors the RM spreads jobs over")
    s.add_argument("--crash", action="append", metavar="T:WHO:DOWN",
                   help="crash an actor at T for DOWN s: WHO is a server number, rm, or jm:K (JM host K)")
    s.add_argument("--native", choices=("auto", "on", "off"), default="auto",
                   help="the compiled modules (apollo.tools.native; the same report): auto uses them when "
                        "built (`apollo bench scale` builds them), on builds them if need be")

    ch = sub.add_parser("chaos", help="seeded simulations with random faults; invariants checked every event")
    ch.set_defaults(run=_chaos)
    ch.add_argument("--seeds", type=count(1), default=100, help="how many seeds (default 100)")
    ch.add_argument("--start", type=count(0), default=0, help="the first seed (default 0)")
    ch.add_argument("--workers", type=count(0), default=0, help="processes (default 0: one per core)")
    ch.add_argument("--json", metavar="FILE", help="write {seeds, passed, failed, wall_s, faults} here")
    ch.add_argument("--cluster", metavar="DIR", nargs="?", const=os.environ.get("APOLLO_CLUSTER") or str(DEFAULT_CLUSTER),
                    help="run the seeds as command tasks of this live cluster (default with no DIR: "
                         "$APOLLO_CLUSTER, else ~/.apollo/cluster); joined hosts take their share")
    ch.add_argument("--tasks", type=count(1), default=None,
                    help="with --cluster: tasks the seeds are split over (default: about 20 seeds per task, "
                         "at least one per core)")
    ch.add_argument("--progress-s", type=non_negative, default=30.0, metavar="S",
                    help="with --cluster: how far the job is, every S seconds (default 30; 0: never)")
    ch.add_argument("--native", choices=("auto", "on", "off"), default="auto",
                    help="the compiled modules (apollo.tools.native; the same results): auto uses them when "
                         "built (`apollo bench scale` builds them), on builds them if need be; on a cluster, "
                         "what each task does where it runs")
    ch.add_argument("--as-task", action="store_true",
                    help="(what a sweep's tasks run) this task's share of the seeds, one JSON line each")

    lines = "\n".join(f"  {name:<12} {what}" for name, what in BENCHES.items())
    b = sub.add_parser("bench", help="benchmarks: " + ", ".join(BENCHES),
                       description=f"Benchmarks; each writes the report JSON (--json FILE).\n\n{lines}\n\n"
                                   "`apollo bench NAME --help` lists a benchmark's options.",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    b.add_argument("name", metavar="NAME", help="the benchmark: " + ", ".join(BENCHES))

    d = sub.add_parser("demo", help="the main job: a local cluster replaying a workload, with a report")
    d.set_defaults(run=_demo)
    d.add_argument("--out", default="apollo-out", metavar="DIR", help="the report and cluster files (default apollo-out)")
    d.add_argument("--trace", default=None, help="replay this trace file instead of the fb2009 generator")
    d.add_argument("--jobs", type=count(1), default=None, help="replay the first K jobs (default: the demo's)")
    d.add_argument("--pns", type=count(1), default=16, help="PNs (servers) in the cluster (default 16)")
    d.add_argument("--racks", type=count(1), default=4, help="racks (default 4)")
    d.add_argument("--procs", type=count(1), default=2, help="processes hosting the PNs (default 2)")
    d.add_argument("--seed", type=count(0), default=0, help="the random seed (default 0)")
