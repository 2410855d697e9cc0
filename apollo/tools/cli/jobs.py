"""Commands about jobs on a live cluster: submit, jobs, cancel, queues, replay."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .offline import _show
from .options import add_cluster_option, count, positive


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


def register(sub) -> None:
    sb = sub.add_parser("submit", help="submit a TOML job file")
    sb.set_defaults(run=_submit, on_cluster=True)
    sb.add_argument("jobfile", help="the job file (TOML; see docs/design.md)")
    add_cluster_option(sb)
    sb.add_argument("--wait", action="store_true", help="wait for the job to finish, with progress bars")
    sb.add_argument("--timeout", type=positive, default=30.0, metavar="S",
                    help="give up if the RM has not accepted the job after S seconds (default 30)")

    j = sub.add_parser("jobs", help="list the cluster's jobs")
    j.set_defaults(run=_jobs, on_cluster=True)
    add_cluster_option(j)

    cn = sub.add_parser("cancel", help="cancel a job")
    cn.set_defaults(run=_cancel, on_cluster=True)
    cn.add_argument("id", type=count(0), help="the job's id")
    add_cluster_option(cn)
    cn.add_argument("--timeout", type=positive, default=30.0, metavar="S",
                    help="give up if the RM cannot be reached within S seconds (default 30)")

    qs = sub.add_parser("queues", help="the queue tree: guarantees, shares, running and waiting jobs")
    qs.set_defaults(run=_queues, on_cluster=True)
    add_cluster_option(qs)

    r = sub.add_parser("replay", help="replay a trace on a live cluster")
    r.set_defaults(run=_replay, on_cluster=True)
    r.add_argument("trace", help="a trace file (.tsv SWIM, .tr Hawk/Eagle) or a generator NAME[:k=v,...]")
    add_cluster_option(r)
    r.add_argument("--jobs", type=count(1), default=None, help="replay the first K jobs (default: all)")
    r.add_argument("--speedup", type=positive, default=1.0, help="replay time runs this much faster (default 1)")
    r.add_argument("--seed", type=count(0), default=0, help="the random seed (default 0)")
    r.add_argument("--json", metavar="FILE", help="write the report here")
    r.add_argument("--timeout", type=positive, default=30.0, metavar="S",
                   help="give up if the RM cannot be reached within S seconds (default 30)")
