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
    if args.name and args.action != "restart":
        raise livecluster.ClusterError(f"a process name ({args.name}) goes with `apollo cluster restart` only")
    if args.action == "up":
        compiled = _compiled(args.native)
        info = livecluster.up(folder, pns=args.pns, racks=args.racks, procs=args.procs, cpus=args.cpus,
                              mem_gb=args.mem_gb, scheduler=args.scheduler, queues=args.queues,
                              http_host=args.http_host, jm_hosts=args.jm_hosts, bind=args.bind, supervise=True,
                              native=compiled)
        print(f"cluster up in {info['startup_s']:.2f} s: RM {info['rm']}, {args.jm_hosts} JM hosts, {args.pns} PNs "
              f"in {args.racks} racks over {args.procs} processes, supervised (pid {info['supervisor']['pid']}); "
              f"files in {folder}; dashboard http://{info['http']}/")
        print("processes: compiled modules (apollo.tools.native)" if compiled else
              "processes: interpreted modules" + ("" if args.native == "off" else
                                                  " (`--native on` builds the compiled ones, once per version)"))
    elif args.action == "down":
        for line in livecluster.down(folder):
            print(line)
    elif args.action == "restart":
        if not args.name:
            raise livecluster.ClusterError("which process? `apollo cluster restart NAME` (rm, jm0, pn1, ..., "
                                           "supervisor; `apollo cluster status` lists them)")
        old, new = livecluster.restart(folder, args.name)
        print(f"{args.name} restarted: pid {old or '-'} -> {new}")
    else:
        return _status(livecluster.status(folder))
    return 0


def _compiled(mode: str) -> bool:
    """``--native``: whether the cluster's processes load the compiled modules: off, never; auto,
    when this machine has a build of these sources (none is made at start-up: it takes minutes);
    on, building one first if need be."""
    from apollo.tools import livecluster, native
    if mode == "auto":
        return native.built()
    try:
        return not native.for_children(mode)      # (off: no; on: built first, or NativeBuildError)
    except native.NativeBuildError as e:
        raise livecluster.ClusterError(f"--native on: {e}") from None


def _uptime(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    return f"{s // 86400}d{s % 86400 // 3600}h" if s >= 86400 else f"{s // 3600}h{s % 3600 // 60:02d}m" \
        if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{seconds:.1f}s"


def _status(st: dict) -> int:
    print(f"{'NAME':<11} {'PID':<8} {'ADDRESS':<22} {'STATE':<6} {'UP':>7} {'RESTARTS':>8}")
    dead = 0
    for p in st["processes"]:
        extra = f"  PNs {p['pns'][0]}-{p['pns'][-1]}" if p["pns"] else ""
        print(f"{p['name']:<11} {p['pid'] or '-':<8} {p['address']:<22} {'alive' if p['alive'] else 'DEAD':<6} "
              f"{_uptime(p['uptime_s']):>7} {p['restarts']:>8}{extra}")
        dead += not p["alive"]
    sup = st["supervisor"]
    if sup is None:
        print("supervisor  -        (none: nothing restarts a process that dies)")
    else:
        state = "alive" if sup["alive"] else "gone" if st["stopped"] else "DEAD"   # (down stops it on purpose)
        print(f"{'supervisor':<11} {sup['pid']:<8} {'':<22} {state:<6} "
              f"{_uptime(sup['uptime_s']):>7}")
        dead += not sup["alive"] and not st["stopped"]
    for e in st["joined"]:
        what = f"PNs {e['pns'][0]}-{e['pns'][-1]}" if e.get("pns") else "a JM host"
        print(f"{e['name']:<11} {'-':<8} {e['address']:<22} joined ({what}; `apollo cluster down` tells it to leave)")
    c = st["config"]
    print(f"{c['pns']} PNs x {c['cpus']} cpu / {c['mem_gb']} GB in {c['racks']} racks; scheduler {c['scheduler']}"
          + ("; stopped by `apollo cluster down`" if st["stopped"] else ""))
    print("jobs: " + (", ".join(f"{k} {v}" for k, v in sorted(st["jobs"].items())) or "none"))
    return 1 if dead else 0


def _node(args) -> int:
    from apollo.tools.join import run_node
    folder = Path(args.dir).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    try:
        Path(args.secret_file).read_bytes()
    except OSError as e:
        print(f"apollo node join: cannot read the secret file: {e}", file=sys.stderr)
        return 2
    return run_node(args.rm, Path(args.secret_file).resolve(), "jm" if args.jm_host else "pn", folder, pns=args.pns,
                    cpus=args.cpus, mem_gb=args.mem_gb, rack=args.rack, bind=args.bind, port=args.port)


def _dashboard(args: argparse.Namespace) -> int:
    from rm.http import dashboard_lines
    for line in dashboard_lines(Path(args.cluster).expanduser()):
        print(line)
    return 0


def register(sub) -> None:
    c = sub.add_parser("cluster", help="a local multi-process cluster: up, status, restart, down")
    c.set_defaults(run=_cluster)
    c.add_argument("action", choices=["up", "status", "restart", "down"],
                   help="start (supervised: a process that dies is started again), inspect, restart one "
                        "process, or stop the cluster (and tell joined processes to leave)")
    c.add_argument("name", nargs="?", help="restart: the process (rm, jm0, pn1, ..., supervisor)")
    add_cluster_option(c)
    c.add_argument("--pns", type=count(1), default=16, help="PNs (servers) to run (default 16)")
    c.add_argument("--racks", type=count(1), default=4, help="racks the PNs are spread over (default 4)")
    c.add_argument("--procs", type=count(0), default=2,
                   help="processes hosting the PNs (default 2; 0: PNs only join from other machines)")
    c.add_argument("--cpus", type=positive, default=2.0, help="CPUs per PN, > 0 (default 2)")
    c.add_argument("--mem-gb", type=positive, default=8.0, help="memory per PN in GB, > 0 (default 8)")
    c.add_argument("--scheduler", default="apollo", choices=list(PROFILES), help="the scheduling profile")
    c.add_argument("--native", choices=("auto", "on", "off"), default="auto",
                   help="up: the processes run the compiled modules (apollo.tools.native; the same behaviour, "
                        "faster): auto when this machine has built them (default), on builds them first")
    c.add_argument("--queues", metavar="FILE", help="a queue file (TOML): fair pools or capacity queues")
    c.add_argument("--bind", default="127.0.0.1",
                   help="the address every process listens on (another machine's PNs join through it)")
    c.add_argument("--jm-hosts", type=count(1), default=2,
                   help="JM host processes (jobs move to another when one dies; default 2)")
    c.add_argument("--http-host", default="127.0.0.1",
                   help="where the RM serves its API, metrics and dashboard (not loopback: the token is asked)")

    nd = sub.add_parser("node", help="join a running cluster from this machine: PNs or a JM host")
    nd.set_defaults(run=_node)
    nd.add_argument("action", choices=["join"],
                    help="join the cluster and serve until told to leave (`apollo cluster down`) or stopped; "
                         "its process is started again if it dies")
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
