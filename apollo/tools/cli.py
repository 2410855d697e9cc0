"""The `apollo` command line."""
from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path

from apollo.core.spec import SpecError
from jm.policies import PROFILES
from rm.queues import QueueError


def _simulate(args: argparse.Namespace) -> int:
    from apollo.runtime.sim import NetModel
    from apollo.tools.simulate import SimConfig, run_simulation
    from apollo.workloads import load_workload

    from apollo.workloads.assign import assign
    from rm.queues import load_queue_file
    from apollo.core.stragglers import model as straggler_model

    racks = args.racks or max(1, args.servers // 50)
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
    try:
        report = run_simulation(workload, cfg)
    except ValueError as e:
        print(f"apollo simulate: {e}", file=sys.stderr)
        return 2
    return _show(report, args.json)


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


def _chaos(args) -> int:
    from apollo.tools.chaos import run_chaos

    def progress(r: dict) -> None:
        if r["why"]:
            print(f"seed {r['seed']} FAILED: {r['why']}\n  replay: {r['replay']}", flush=True)
    out = run_chaos(args.seeds, args.start, workers=args.workers, progress=progress)
    print(f"{out['passed']}/{out['seeds']} seeds passed in {out['wall_s']:.1f} s; faults: "
          + ", ".join(f"{k} {v}" for k, v in out["faults"].items()))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0 if out["passed"] == out["seeds"] else 1


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


def _dashboard(args: argparse.Namespace) -> int:
    from rm.http import dashboard_lines
    for line in dashboard_lines(Path(args.cluster).expanduser()):
        print(line)
    return 0


def _submit(args: argparse.Namespace) -> int:
    from apollo.tools.client import Client
    from apollo.tools.jobfile import load_job_file
    from apollo.runtime.live import run
    spec = load_job_file(args.jobfile)

    async def go() -> int:
        async with Client(args.cluster) as c:
            c.on_retry = _retry_note("submit")
            job_id = await c.submit(spec, timeout_s=args.timeout)
            print(f"submitted job {job_id} ({spec.name}, {spec.total_tasks} tasks) to queue "
                  f"{spec.queue!r} as user {spec.user!r}" + (f": {c.notes[job_id]}" if c.notes.get(job_id) else ""))
            if not args.wait:
                return 0
            done = await _wait_with_progress(c, job_id, spec.total_tasks)
            print(f"job {job_id} {'completed' if done.ok else 'FAILED: ' + done.reason} "
                  f"({done.tasks_done} tasks done)")
            return 0 if done.ok else 1
    return run(go())


def _retry_note(cmd: str):
    """An on_retry hook for apollo.tools.client.Client: the first line at once, then one every 5 s."""
    import time
    last = [-1e9]

    def note(line: str) -> None:
        if time.monotonic() - last[0] >= 5.0:
            last[0] = time.monotonic()
            print(f"apollo {cmd}: {line}", file=sys.stderr, flush=True)
    return note


async def _wait_with_progress(c, job_id: int, total: int):
    """Wait for the job while a rich progress bar per stage follows its attempt records."""
    import asyncio

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    waiting = asyncio.ensure_future(c.wait(job_id))
    with Progress(TextColumn("{task.description:<16}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[note]}"), TimeElapsedColumn(), transient=False) as bar:
        rows: dict[int, int] = {}
        catch_up = 20
        while True:
            st = c.status(job_id)
            if st is not None:
                for i, s in enumerate(st.stages):
                    if i not in rows:
                        rows[i] = bar.add_task(s.name, total=s.tasks, note="")
                    note = f"{s.failed_attempts} failed attempts" if s.failed_attempts else ""
                    bar.update(rows[i], completed=s.done, note=note)
            if waiting.done():
                done = waiting.result()
                # The JM host says a job finished as its last records are being written: give the
                # bars a moment to catch up with its count.
                if st is None or st.done >= done.tasks_done or catch_up == 0:
                    return done
                catch_up -= 1
                await asyncio.sleep(0.05)
                continue
            await asyncio.wait([waiting], timeout=0.2)


def _jobs(args: argparse.Namespace) -> int:
    import sqlite3
    db = Path(args.cluster).expanduser() / "jobs.db"
    if not db.exists():
        print(f"no jobs stored in {db} yet")
        return 0
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        waiting = {r[0] for r in con.execute("SELECT job_id FROM waiting")}
    except sqlite3.OperationalError:
        waiting = set()
    for row in con.execute("SELECT job_id, name, state, submitted_at, finished_at, reason FROM jobs ORDER BY job_id"):
        job_id, name, state, t0, t1, reason = row
        if state == "running" and job_id in waiting:
            state = "waiting"                 # not admitted yet: in its queue's line
        took = f"{t1 - t0:.2f} s" if t1 is not None else "-"
        print(f"{job_id:>6}  {state:<9} {took:>10}  {name}  {reason}")
    return 0


def _job(args: argparse.Namespace) -> int:
    """One job: state, per-stage progress, placements and locality (from the event records),
    and the failure reason (with the failing task's stderr tail) if it failed."""
    from apollo.tools.client import job_status
    from apollo.core.cluster import LOCALITY_NAMES
    folder = Path(args.cluster).expanduser()
    st = job_status(folder, args.id) if (folder / "jobs.db").exists() else None
    if st is None:
        print(f"apollo job: no job {args.id} in {folder / 'jobs.db'}", file=sys.stderr)
        return 1
    from apollo.tools.client import waiting_position
    took = f", {st.finished_at - st.submitted_at:.2f} s" if st.finished_at is not None else ""
    pos = waiting_position(folder, args.id) if st.state == "running" else None
    state = f"waiting for admission in queue {pos[0]} at position {pos[1]}" if pos else st.state
    print(f"job {args.id} {st.name!r}: {state}{took}")
    for s in st.stages:
        print(f"  stage {s.name:<12} {s.done:>6}/{s.tasks} done, {s.failed_attempts} failed attempts")
    reads = sum(st.locality.values())
    if reads:
        print("  locality of input reads: " + ", ".join(
            f"{LOCALITY_NAMES[k]} {st.locality[k] / reads:.0%}" for k in range(3)))
    if st.placements:
        print("  placements: " + ", ".join(f"pn:{s} x{n}" for s, n in sorted(st.placements.items())))
    if st.reason:
        print(f"  reason: {st.reason}")
    return 0 if st.state in ("done", "running") else 1


def _queues(args: argparse.Namespace) -> int:
    """The queue tree of a live cluster: each queue's guarantee and max (in cores on this
    cluster), its share at the RM's last round, the CPUs its jobs hold (run on), running jobs,
    and waiting jobs in order."""
    import sqlite3

    from apollo.tools.livecluster import read_info
    from rm.queues import load_queue_file
    from rm.state import single_queue
    folder = Path(args.cluster).expanduser()
    cfg = read_info(folder)["config"]
    tree = load_queue_file(folder / cfg["queues"]) if cfg.get("queues") else single_queue()
    cap = cfg["pns"] * cfg["cpus"]
    lim = tree.resolve(cap)
    state, waiting = {}, {}
    db = folder / "jobs.db"
    if db.exists():
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            state = {r[0]: r[1:] for r in con.execute("SELECT path, share, running, waiting, held FROM queue_state")}
            for job_id, q, pos in con.execute("SELECT job_id, queue, position FROM waiting ORDER BY position"):
                waiting.setdefault(q, []).append(job_id)
        except sqlite3.OperationalError:
            pass
        con.close()
    print(f"{tree.sharing} sharing over {cap:g} cores ({tree.source})")
    for q in reversed(tree.nodes()):         # a parent holds what its children hold
        if q.children and q.path not in state:
            kids = [state.get(c.path, (0.0, 0, 0, 0.0)) for c in q.children]
            state[q.path] = tuple(sum(k[i] for k in kids) for i in range(4))
    print(f"{'queue':<24} {'guarantee':>9} {'max':>7} {'share now':>9} {'held':>6} {'running':>7} {'waiting':>7}"
          f"  next in line")
    for q in tree.nodes():
        depth = q.path.count(".") + (0 if q.path == "root" else 1)
        share, running, nwait, held = state.get(q.path, (0.0, 0, 0, 0.0))
        line = ", ".join(f"job {j}" for j in waiting.get(q.path, [])[:5])
        print(f"{'  ' * depth + q.name:<24} {lim[q.path].guarantee:>9.1f} {lim[q.path].max:>7.1f} {share:>9.1f} "
              f"{held or 0.0:>6.1f} {running:>7} {nwait:>7}  {line}")
    return 0


def _cancel(args: argparse.Namespace) -> int:
    """Ask the RM to cancel; the job's outcome goes to its submitter, so confirm from the store
    (keeping the connection open until then, so the request surely leaves)."""
    import asyncio
    import sqlite3
    import time

    from apollo.tools.client import Client
    from apollo.runtime.live import run
    folder = Path(args.cluster).expanduser()
    if not (folder / "jobs.db").exists():
        print(f"apollo cancel: no job {args.id} (no jobs stored in {folder / 'jobs.db'} yet)", file=sys.stderr)
        return 1
    con = sqlite3.connect(f"file:{folder / 'jobs.db'}?mode=ro", uri=True)

    def state() -> str | None:
        row = con.execute("SELECT state FROM jobs WHERE job_id=?", (args.id,)).fetchone()
        return None if row is None else row[0]

    async def go() -> int:
        if state() is None:
            print(f"apollo cancel: no job {args.id}", file=sys.stderr)
            return 1
        async with Client(folder) as c:
            c.on_retry = _retry_note("cancel")
            await c.reach_rm(args.timeout)
            deadline = time.monotonic() + 10.0
            sent = 0.0
            while state() == "running" and time.monotonic() < deadline:
                if time.monotonic() - sent >= 1.0:      # again each second: a cancel may be lost
                    c.cancel(args.id)
                    sent = time.monotonic()
                await asyncio.sleep(0.05)
        print(f"job {args.id}: {state()}")
        return 0 if state() == "cancelled" else 1
    return run(go())


def _replay(args: argparse.Namespace) -> int:
    from apollo.tools.livecluster import read_info
    from apollo.tools.replay import replay
    from apollo.runtime.live import run
    from apollo.workloads import load_workload
    from apollo.tools.client import Client
    folder = Path(args.cluster).expanduser()
    workload = load_workload(args.trace, seed=args.seed,
                             cluster_servers=read_info(folder)["config"]["pns"]).first(args.jobs)

    async def reach() -> None:      # before the replay empties the event files: is the RM there?
        async with Client(folder) as c:
            c.on_retry = _retry_note("replay")
            await c.reach_rm(args.timeout)
    run(reach())
    report, _ = run(replay(folder, workload, speedup=args.speedup))
    return _show(report, args.json)


def _demo(args: argparse.Namespace) -> int:
    from apollo.tools.demo import demo
    return demo(Path(args.out), trace=args.trace, pns=args.pns, racks=args.racks, procs=args.procs,
                jobs=args.jobs, seed=args.seed)


def _bench(args: argparse.Namespace, rest: list[str]) -> int:
    import importlib
    names = ("matching", "scale", "throughput", "delay", "fairshare", "capacity", "pools", "dolly", "corrections",
             "compare", "shortjob", "results")
    if args.name not in names:
        print(f"apollo bench: unknown benchmark {args.name!r} (known: {', '.join(names)})", file=sys.stderr)
        return 2
    mod = importlib.import_module(f"apollo.bench.{args.name}")
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
    s.add_argument("--scheduler", default="apollo", choices=list(PROFILES))
    s.add_argument("--tokens", default="", choices=["", "even", "fifo"],
                   help="without --queues: how jobs share the one root queue (default: the scheduler's)")
    s.add_argument("--queues", metavar="FILE", help="a queue file (TOML): fair pools or capacity queues")
    s.add_argument("--assign", metavar="RULE", help="spread the jobs over the queue file's leaves and users: "
                   "size | rr | random [:users=N,...] (apollo/workloads/assign.py; default size)")
    s.add_argument("--delay", metavar="W1[,W2]", help="add delay scheduling to the scheduler's filters")
    s.add_argument("--load", type=float, default=0.0, help="rescale arrivals to this CPU utilization")
    s.add_argument("--jobs", type=int, default=None, help="take the first K jobs")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--json", help="write the report here")
    s.add_argument("--no-wire", action="store_true", help="skip msgpack encoding of messages (faster)")
    s.add_argument("--heartbeat", type=float, metavar="S",
                   help="a PN whose queues changed re-reports to the RM within S seconds (default 5)")
    s.add_argument("--latency-ms", type=float, default=0.5)
    s.add_argument("--loss", type=float, default=0.0)
    s.add_argument("--fail-prob", type=float, default=0.0, help="chance a task attempt fails")
    s.add_argument("--slow-fraction", type=float, default=0.0, help="fraction of slow servers")
    s.add_argument("--opportunistic", action="store_true",
                   help="Apollo: dispatch beyond tokens as opportunistic (preemptible) tasks")
    s.add_argument("--dup", type=float, default=0.0, help="chance a message is delivered twice")
    s.add_argument("--stragglers", default="none", choices=["none", "dolly"],
                   help="per-attempt slowdowns (apollo/core/stragglers.py): none, or Dolly's heavy tail")
    s.add_argument("--no-copies", action="store_true", help="no straggler copies (Apollo's corrections)")
    s.add_argument("--clone-beta", type=float, default=0.05,
                   help="Dolly's clone budget, a fraction of the cores (0: no cloning; clones are made "
                        "only when stragglers are expected)")
    s.add_argument("--jm-hosts", type=int, default=1, help="JM host actors the RM spreads jobs over")
    s.add_argument("--crash", action="append", metavar="T:WHO:DOWN",
                   help="crash an actor at T for DOWN s: WHO is a server number, rm, or jm:K (JM host K)")

    nd = sub.add_parser("node", help="join a running cluster from this machine: PNs or a JM host")
    nd.add_argument("action", choices=["join"])
    nd.add_argument("--rm", required=True, metavar="HOST:PORT", help="the cluster's RM (cluster.json's \"rm\")")
    nd.add_argument("--secret-file", required=True, help="a copy of the cluster's DIR/secret")
    nd.add_argument("--pns", type=int, default=1, help="PNs to run here (one per server)")
    nd.add_argument("--cpus", type=float, default=2.0, help="CPUs per PN (as the cluster's)")
    nd.add_argument("--mem-gb", type=float, default=8.0, help="memory per PN (as the cluster's)")
    nd.add_argument("--rack", type=int, default=-1, help="the rack these servers are in (default: any)")
    nd.add_argument("--jm-host", action="store_true", help="join as a JM host instead of PNs")
    nd.add_argument("--bind", default="127.0.0.1", help="the address to listen on (reachable from the cluster)")
    nd.add_argument("--port", type=int, default=0)
    nd.add_argument("--dir", default=str(Path.home() / ".apollo" / "joined"), help="logs and records here")

    ch = sub.add_parser("chaos", help="seeded simulations with random faults; invariants checked every event")
    ch.add_argument("--seeds", type=int, default=100)
    ch.add_argument("--start", type=int, default=0, help="the first seed")
    ch.add_argument("--workers", type=int, default=0, help="processes (default: one per core)")
    ch.add_argument("--json", help="write {seeds, passed, failed, wall_s, faults} here")

    b = sub.add_parser("bench", help="benchmarks (matching, scale)")
    b.add_argument("name")

    from apollo.tools.livecluster import DEFAULT_DIR
    c = sub.add_parser("cluster", help="a local multi-process cluster")
    c.add_argument("action", choices=["up", "status", "down"])
    c.add_argument("--cluster", default=str(DEFAULT_DIR))
    c.add_argument("--pns", type=int, default=16)
    c.add_argument("--racks", type=int, default=4)
    c.add_argument("--procs", type=int, default=2, help="processes hosting the PNs")
    c.add_argument("--cpus", type=float, default=2.0, help="CPUs per PN")
    c.add_argument("--mem-gb", type=float, default=8.0)
    c.add_argument("--scheduler", default="apollo", choices=list(PROFILES))
    c.add_argument("--queues", metavar="FILE", help="a queue file (TOML): fair pools or capacity queues")
    c.add_argument("--bind", default="127.0.0.1",
                   help="the address every process listens on (another machine's PNs join through it)")
    c.add_argument("--jm-hosts", type=int, default=2,
                   help="JM host processes (jobs move to another when one dies)")
    c.add_argument("--http-host", default="127.0.0.1",
                   help="where the RM serves its API, metrics and dashboard (not loopback: the token is asked)")

    db = sub.add_parser("dashboard", help="print the URL of the cluster's dashboard, API and metrics")
    db.add_argument("--cluster", default=str(DEFAULT_DIR))

    qs = sub.add_parser("queues", help="the queue tree: guarantees, shares, running and waiting jobs")
    qs.add_argument("--cluster", default=str(DEFAULT_DIR))

    sb = sub.add_parser("submit", help="submit a TOML job file")
    sb.add_argument("jobfile")
    sb.add_argument("--cluster", default=str(DEFAULT_DIR))
    sb.add_argument("--wait", action="store_true")
    sb.add_argument("--timeout", type=float, default=30.0, metavar="S",
                    help="give up if the RM has not accepted the job after S seconds (default 30)")

    j = sub.add_parser("jobs", help="list stored jobs")
    j.add_argument("--cluster", default=str(DEFAULT_DIR))

    jb = sub.add_parser("job", help="one job: state, progress, placements, failures")
    jb.add_argument("id", type=int)
    jb.add_argument("--cluster", default=str(DEFAULT_DIR))

    cn = sub.add_parser("cancel", help="cancel a job")
    cn.add_argument("id", type=int)
    cn.add_argument("--cluster", default=str(DEFAULT_DIR))
    cn.add_argument("--timeout", type=float, default=30.0, metavar="S",
                    help="give up if the RM cannot be reached within S seconds (default 30)")

    r = sub.add_parser("replay", help="replay a trace on a live cluster")
    r.add_argument("trace")
    r.add_argument("--cluster", default=str(DEFAULT_DIR))
    r.add_argument("--jobs", type=int, default=None)
    r.add_argument("--speedup", type=float, default=1.0)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--json")
    r.add_argument("--timeout", type=float, default=30.0, metavar="S",
                   help="give up if the RM cannot be reached within S seconds (default 30)")

    d = sub.add_parser("demo", help="the main job: a local cluster replaying a workload, with a report")
    d.add_argument("--out", default="apollo-out")
    d.add_argument("--trace", default=None, help="replay this trace file instead of the fb2009 generator")
    d.add_argument("--jobs", type=int, default=None)
    d.add_argument("--pns", type=int, default=16)
    d.add_argument("--racks", type=int, default=4)
    d.add_argument("--procs", type=int, default=2)
    d.add_argument("--seed", type=int, default=0)
    return p


_ON_A_CLUSTER = ("submit", "jobs", "job", "cancel", "replay", "queues", "dashboard")


def _cluster_or_error(args: argparse.Namespace) -> None:
    """A command on a live cluster: a clear ClusterError if its folder holds none; the client's
    connection warnings are left out (the client says what went wrong itself)."""
    import logging

    from apollo.tools.livecluster import ClusterError, read_info
    folder = Path(args.cluster).expanduser()
    try:
        info = read_info(folder)
    except ValueError as e:
        raise ClusterError(f"{folder / 'cluster.json'} is not a cluster description ({e})") from None
    if not isinstance(info, dict) or "rm" not in info or "processes" not in info:
        raise ClusterError(f"{folder / 'cluster.json'} is not a cluster description (no RM address)")
    logging.getLogger("apollo.transport").setLevel(logging.ERROR)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if argv[:1] == ["bench"]:
        args, rest = parser.parse_known_args(argv)
        if args.cmd == "bench":
            return _bench(args, rest)
    args = parser.parse_args(argv)
    try:
        if args.cmd in _ON_A_CLUSTER:
            _cluster_or_error(args)
        if args.cmd == "simulate":
            return _simulate(args)
        handlers = {"cluster": _cluster, "submit": _submit, "jobs": _jobs, "job": _job, "cancel": _cancel,
                    "replay": _replay, "demo": _demo, "queues": _queues, "chaos": _chaos, "node": _node,
                    "dashboard": _dashboard}
        if args.cmd in handlers:
            return handlers[args.cmd](args)
    except (SpecError, QueueError) as e:
        print(f"apollo {args.cmd}: {e}", file=sys.stderr)
        return 2
    except FileNotFoundError as e:
        print(f"apollo {args.cmd}: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:      # ClusterError and friends: a clear one-line reason
        print(f"apollo {args.cmd}: {e}", file=sys.stderr)
        return 1
    except sqlite3.Error as e:     # the RM's store, read while the RM rewrites it, or damaged
        print(f"apollo {args.cmd}: cannot read {Path(args.cluster).expanduser() / 'jobs.db'}: {e}", file=sys.stderr)
        return 1
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
