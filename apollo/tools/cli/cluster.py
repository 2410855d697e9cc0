"""Commands about the cluster itself: cluster up|status|down|restart, node join, dashboard."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from jm.policies import PROFILES

from .options import add_cluster_option, count, number, port, positive


def _cluster(args: argparse.Namespace) -> int:
    from apollo.tools import livecluster
    folder = Path(args.cluster).expanduser()
    if args.action == "up":
        info = livecluster.up(folder, pns=args.pns, racks=args.racks, procs=args.procs, cpus=args.cpus,
                              mem_gb=args.mem_gb, scheduler=args.scheduler, queues=args.queues,
                              http_host=args.http_host, jm_hosts=args.jm_hosts, bind=args.bind)
        print(f"cluster up in {info['startup_s']:.2f} s: RM {info['rm']}, {args.jm_hosts} JM hosts, {args.pns} PNs "
              f"in {args.racks} racks over {args.procs} processes; files in {folder}; "
              f"dashboard http://{info['http']}/")
    elif args.action == "down":
        for line in livecluster.down(folder):
            print(line)
    else:
        st = livecluster.status(folder)
        dead = 0
        for p in st["processes"]:
            extra = f" PNs {p['pns'][0]}-{p['pns'][-1]}" if p["pns"] else ""
            print(f"{p['role']}{p['index']:<3} pid {p['pid']:<8} {p['address']:<22} "
                  f"{'alive' if p['alive'] else 'DEAD'}{extra}")
            dead += not p["alive"]
        c = st["config"]
        print(f"{c['pns']} PNs x {c['cpus']} cpu / {c['mem_gb']} GB in {c['racks']} racks; scheduler {c['scheduler']}")
        print("jobs: " + (", ".join(f"{k} {v}" for k, v in sorted(st["jobs"].items())) or "none"))
        return 1 if dead else 0
    return 0


def _node(args) -> int:
    import asyncio
    import logging

    from apollo.tools.process import _tight_timers, join_cluster
    from apollo.runtime.live import run
    folder = Path(args.dir).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(filename=str(folder / "joined.log"), level=logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        secret = Path(args.secret_file).read_bytes().strip()
    except OSError as e:
        print(f"apollo node join: cannot read the secret file: {e}", file=sys.stderr)
        return 2
    _tight_timers()
    ready = None

    async def main():
        nonlocal ready
        ready = asyncio.Event()
        task = asyncio.ensure_future(join_cluster(
            args.rm, secret, "jm" if args.jm_host else "pn", folder, pns=args.pns, cpus=args.cpus,
            mem_gb=args.mem_gb, rack=args.rack, bind=args.bind, port=args.port, ready=ready))
        await asyncio.wait([task, asyncio.ensure_future(ready.wait())], return_when=asyncio.FIRST_COMPLETED)
        if ready.is_set():
            print(f"joined the cluster at {args.rm} ({'a JM host' if args.jm_host else f'{args.pns} PNs'}); "
                  f"logs in {folder}", flush=True)
        return await task
    run(main())
    return 0


def _dashboard(args: argparse.Namespace) -> int:
    from rm.http import dashboard_lines
    for line in dashboard_lines(Path(args.cluster).expanduser()):
        print(line)
    return 0


def register(sub) -> None:
    c = sub.add_parser("cluster", help="a local multi-process cluster: up, status, down")
    c.set_defaults(run=_cluster)
    c.add_argument("action", choices=["up", "status", "down"], help="start, inspect or stop the cluster")
    add_cluster_option(c)
    c.add_argument("--pns", type=count(1), default=16, help="PNs (servers) to run (default 16)")
    c.add_argument("--racks", type=count(1), default=4, help="racks the PNs are spread over (default 4)")
    c.add_argument("--procs", type=count(0), default=2,
                   help="processes hosting the PNs (default 2; 0: PNs only join from other machines)")
    c.add_argument("--cpus", type=positive, default=2.0, help="CPUs per PN, > 0 (default 2)")
    c.add_argument("--mem-gb", type=positive, default=8.0, help="memory per PN in GB, > 0 (default 8)")
    c.add_argument("--scheduler", default="apollo", choices=list(PROFILES), help="the scheduling profile")
    c.add_argument("--queues", metavar="FILE", help="a queue file (TOML): fair pools or capacity queues")
    c.add_argument("--bind", default="127.0.0.1",
                   help="the address every process listens on (another machine's PNs join through it)")
    c.add_argument("--jm-hosts", type=count(1), default=2,
                   help="JM host processes (jobs move to another when one dies; default 2)")
    c.add_argument("--http-host", default="127.0.0.1",
                   help="where the RM serves its API, metrics and dashboard (not loopback: the token is asked)")

    nd = sub.add_parser("node", help="join a running cluster from this machine: PNs or a JM host")
    nd.set_defaults(run=_node)
    nd.add_argument("action", choices=["join"], help="join the cluster (and serve until told to leave)")
    nd.add_argument("--rm", required=True, metavar="HOST:PORT", help="the cluster's RM (cluster.json's \"rm\")")
    nd.add_argument("--secret-file", required=True, metavar="FILE", help="a copy of the cluster's DIR/secret")
    nd.add_argument("--pns", type=count(1), default=1, help="PNs to run here (one per server; default 1)")
    nd.add_argument("--cpus", type=positive, default=2.0, help="CPUs per PN (as the cluster's; default 2)")
    nd.add_argument("--mem-gb", type=positive, default=8.0, help="memory per PN in GB (as the cluster's; default 8)")
    nd.add_argument("--rack", type=number(-1, integer=True), default=-1,
                    help="the rack these servers are in (default -1: any)")
    nd.add_argument("--jm-host", action="store_true", help="join as a JM host instead of PNs")
    nd.add_argument("--bind", default="127.0.0.1", help="the address to listen on (reachable from the cluster)")
    nd.add_argument("--port", type=port, default=0, help="the port to listen on (default 0: any free one)")
    nd.add_argument("--dir", default=str(Path.home() / ".apollo" / "joined"), metavar="DIR",
                    help="logs and records here (default ~/.apollo/joined)")

    db = sub.add_parser("dashboard", help="print the URL of the cluster's dashboard, API and metrics")
    db.set_defaults(run=_dashboard, on_cluster=True)
    add_cluster_option(db)
