"""The `apollo` command line."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from apollo.spec import SpecError


def _simulate(args: argparse.Namespace) -> int:
    from apollo.report import summary_lines, write_report
    from apollo.runtime.sim import NetModel
    from apollo.simulate import SimConfig, run_simulation
    from apollo.workloads import load_workload

    racks = args.racks or max(1, args.servers // 50)
    workload = load_workload(args.workload, seed=args.seed, cluster_servers=args.servers).first(args.jobs)
    if not workload.jobs:
        print(f"apollo simulate: workload {args.workload!r} has no jobs", file=sys.stderr)
        return 2
    cfg = SimConfig(servers=args.servers, racks=racks, cores=args.cores, mem_gb=args.mem_gb,
                    scheduler=args.scheduler, tokens=args.tokens, seed=args.seed, wire=not args.no_wire,
                    net=NetModel(latency_s=args.latency_ms / 1000, loss=args.loss),
                    fail_prob=args.fail_prob, slow_fraction=args.slow_fraction,
                    opportunistic=args.opportunistic)
    if args.load:
        workload.scaled_to_load(args.load, cfg.servers * cfg.cores)
    for spec in args.crash or []:
        try:
            t, server, down = (float(x) for x in spec.split(":"))
        except ValueError:
            print(f"apollo simulate: --crash takes TIME:SERVER:DOWN_FOR, got {spec!r}", file=sys.stderr)
            return 2
        cfg.crashes.append((t, int(server), down))
    report = run_simulation(workload, cfg)
    print("\n".join(summary_lines(report)))
    if args.json:
        write_report(report, args.json)
        print(f"report: {args.json}")
    return 0 if report["jobs"]["failed"] == 0 else 1


def _bench(args: argparse.Namespace, rest: list[str]) -> int:
    import importlib
    names = ("matching", "scale")
    if args.name not in names:
        print(f"apollo bench: unknown benchmark {args.name!r} (known: {', '.join(names)})", file=sys.stderr)
        return 2
    mod = importlib.import_module(f"bench.{args.name}")
    return mod.main(rest)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="apollo", description="Apollo-style decentralized cluster scheduler")
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("simulate", help="run a workload through the discrete-event simulator")
    s.add_argument("workload", help="a trace file (.tsv SWIM, .tr Hawk/Eagle) or a generator NAME[:k=v,...]")
    s.add_argument("--servers", type=int, default=100)
    s.add_argument("--racks", type=int, default=0, help="default: one rack per 50 servers")
    s.add_argument("--cores", type=float, default=4.0)
    s.add_argument("--mem-gb", type=float, default=16.0)
    s.add_argument("--scheduler", default="apollo", choices=["apollo", "greedy", "random", "fifo"])
    s.add_argument("--tokens", default="", choices=["", "even", "fifo", "fixed"], help="token policy")
    s.add_argument("--load", type=float, default=0.0, help="rescale arrivals to this CPU utilization")
    s.add_argument("--jobs", type=int, default=None, help="take the first K jobs")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--json", help="write the report here")
    s.add_argument("--no-wire", action="store_true", help="skip msgpack encoding of messages (faster)")
    s.add_argument("--latency-ms", type=float, default=0.5)
    s.add_argument("--loss", type=float, default=0.0)
    s.add_argument("--fail-prob", type=float, default=0.0, help="chance a task attempt fails")
    s.add_argument("--slow-fraction", type=float, default=0.0, help="fraction of slow servers")
    s.add_argument("--opportunistic", action="store_true",
                   help="Apollo: dispatch beyond tokens as opportunistic (preemptible) tasks")
    s.add_argument("--crash", action="append", metavar="T:SERVER:DOWN", help="crash a PN at T for DOWN s")

    b = sub.add_parser("bench", help="benchmarks (matching, scale)")
    b.add_argument("name")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if argv[:1] == ["bench"]:
        args, rest = parser.parse_known_args(argv)
        if args.cmd == "bench":
            return _bench(args, rest)
    args = parser.parse_args(argv)
    try:
        if args.cmd == "simulate":
            return _simulate(args)
    except SpecError as e:
        print(f"apollo {args.cmd}: {e}", file=sys.stderr)
        return 2
    except FileNotFoundError as e:
        print(f"apollo {args.cmd}: {e}", file=sys.stderr)
        return 2
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
