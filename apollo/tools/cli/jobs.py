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
    if args.queue is not None or args.user is not None:        # the command line over the file
        import dataclasses
        spec = dataclasses.replace(spec, queue=spec.queue if args.queue is None else args.queue,
                                   user=spec.user if args.user is None else args.user)

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


# ---- apollo jobs ------------------------------------------------------------------------------
JOB_STATES = ("waiting", "running", "done", "failed", "cancelled")


class ClusterClock:
    """The cluster's clock (seconds since its epoch: cluster.json's ``epoch``, a reading of this
    machine's monotonic clock when the cluster came up) against this machine's wall clock."""

    def __init__(self, epoch: float | None, monotonic: float | None = None, wall: float | None = None) -> None:
        import time
        mono = time.monotonic() if monotonic is None else monotonic
        self.now = None if epoch is None else mono - epoch                # the cluster's time now
        self._wall_at_zero = None if epoch is None else (time.time() if wall is None else wall) - self.now

    def wall(self, t: float) -> float | None:
        """Cluster time ``t`` as a Unix time (None: the cluster's epoch is unknown)."""
        return None if self._wall_at_zero is None else self._wall_at_zero + t


def select_jobs(rows: list, states=None, queue: str | None = None, user: str | None = None,
                limit: int | None = None) -> list:
    """The jobs (rm.store.ListedJob, in id order) in any of ``states``, in ``queue`` (a leaf's
    name or path, "root." optional) and of ``user``; the most recent ``limit`` of them."""
    from rm.queues import DEFAULT_QUEUE, SINGLE_QUEUE_NAMES

    def plain(q: str) -> str:
        """A queue's name as a job may give it: "root.a" is "a"; the one queue of a cluster without
        a queue file is "default" by any of its names."""
        return DEFAULT_QUEUE if q in SINGLE_QUEUE_NAMES else q[5:] if q.startswith("root.") else q

    def same_queue(name: str) -> bool:
        return plain(name) == plain(queue)
    out = [r for r in rows if (not states or r.state in states) and (queue is None or same_queue(r.queue))
           and (user is None or r.user == user)]
    return out[-limit:] if limit else out


def _duration(r, clock: ClusterClock) -> float | None:
    """Submission to end, or to now for a job not ended (None if now is unknown)."""
    end = r.finished_at if r.finished_at is not None else clock.now
    return None if end is None else max(0.0, end - r.submitted_at)


def job_dicts(rows: list, clock: ClusterClock) -> list[dict]:
    """`apollo jobs --json`'s rows: the table's columns, and the times behind them (the
    cluster's clock, seconds; ``submitted``: the wall time, ISO 8601)."""
    from datetime import datetime
    out = []
    for r in rows:
        wall = clock.wall(r.submitted_at)
        took = _duration(r, clock)
        out.append({"id": r.job_id, "name": r.name, "queue": r.queue, "user": r.user, "state": r.state,
                    "progress": f"{r.tasks_done}/{r.tasks}", "tasks_done": r.tasks_done, "tasks": r.tasks,
                    "submitted": None if wall is None else datetime.fromtimestamp(wall).isoformat(timespec="seconds"),
                    "duration_s": None if took is None else round(took, 3),
                    "submitted_at": round(r.submitted_at, 3),
                    "finished_at": None if r.finished_at is None else round(r.finished_at, 3),
                    "reason": r.reason})
    return out


def format_duration(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 60:
        return f"{s:.1f}s"
    m, sec = divmod(int(round(s)), 60)
    if m < 60:
        return f"{m}m{sec:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


def jobs_table(rows: list, clock: ClusterClock, today=None) -> list[str]:
    """`apollo jobs`'s lines: a header and one line per job (submitted as a time of day, with
    its date if not today)."""
    from datetime import date, datetime
    today = today or date.today()

    def when(t: float) -> str:
        wall = clock.wall(t)
        if wall is None:
            return "-"
        d = datetime.fromtimestamp(wall)
        return d.strftime("%H:%M:%S") if d.date() == today else d.strftime("%Y-%m-%d %H:%M:%S")

    header = ("ID", "NAME", "QUEUE", "USER", "STATE", "PROGRESS", "SUBMITTED", "DURATION", "REASON")
    cells = [(str(r.job_id), r.name, r.queue, r.user, r.state, f"{r.tasks_done}/{r.tasks}", when(r.submitted_at),
              format_duration(_duration(r, clock)), _first_line(r.reason))
             for r in rows]
    widths = [max(len(c[i]) for c in [header] + cells) for i in range(len(header))]
    right = {0, 5, 7}                               # numbers line up on the right
    return [("  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cols, widths)))).rstrip()
            for cols in [header] + cells]


def _first_line(reason: str, width: int = 72) -> str:
    """A reason in a table cell: its first line, cut to ``width`` (`apollo job ID` shows it all)."""
    line = reason.splitlines()[0] if reason else ""
    return line if len(line) <= width else line[:width - 3] + "..."


def _jobs(args: argparse.Namespace) -> int:
    """The stored jobs (the RM's store, read-only): listed even when the cluster is down
    (cli/__init__.py says so then, and exits 1)."""
    import json
    import sqlite3

    from apollo.tools.livecluster import read_info, running
    from rm.store import list_jobs
    folder = Path(args.cluster).expanduser()
    info = read_info(folder)
    up, _ = running(folder, info)
    db = folder / "jobs.db"
    rows = []
    if db.exists():
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            rows = list_jobs(con)
        finally:
            con.close()
    clock = ClusterClock(info.get("epoch"))
    if not up:
        clock.now = None            # a stopped cluster's unfinished jobs are not running now
    rows = select_jobs(rows, args.state, args.queue, args.user, args.limit)
    if args.json:
        print(json.dumps({"cluster_running": up, "jobs": job_dicts(rows, clock)}, indent=1))
    elif not rows:
        print("no jobs" + (" match" if args.state or args.queue or args.user else f" stored in {db} yet"))
    else:
        print("\n".join(jobs_table(rows, clock)))
    return 0


# ---- apollo queues -----------------------------------------------------------------------------
def queue_rows(tree, capacity: float, state: dict, waiting: dict) -> list[dict]:
    """Each queue, parents before children: its guarantee and max in cores, its share at the
    RM's last round, the CPUs its jobs hold, running and waiting jobs, and the waiting jobs in
    line (a parent's figures are its children's summed). ``state``: path -> (share, running,
    waiting, held), as the store's queue_state; ``waiting``: leaf -> job ids in line."""
    lim = tree.resolve(capacity)
    state = dict(state)
    for q in reversed(tree.nodes()):         # a parent holds what its children hold
        if q.children and q.path not in state:
            kids = [state.get(c.path, (0.0, 0, 0, 0.0)) for c in q.children]
            state[q.path] = tuple(sum(k[i] for k in kids) for i in range(4))
    rows = []
    for q in tree.nodes():
        share, run, nwait, held = state.get(q.path, (0.0, 0, 0, 0.0))
        rows.append({"queue": q.path, "name": q.name, "depth": q.path.count(".") + (0 if q.path == "root" else 1),
                     "guarantee": round(lim[q.path].guarantee, 3), "max": round(lim[q.path].max, 3),
                     "share": round(share or 0.0, 3), "held": round(held or 0.0, 3), "running": int(run or 0),
                     "waiting": int(nwait or 0), "in_line": list(waiting.get(q.path, []))})
    return rows


def _queues(args: argparse.Namespace) -> int:
    """The queue tree of a live cluster: each queue's guarantee and max (in cores on this
    cluster), its share at the RM's last round, the CPUs its jobs hold (run on), running jobs,
    and waiting jobs in order."""
    import json
    import sqlite3

    from apollo.tools.livecluster import read_info
    from rm.queues import load_queue_file
    from rm.state import single_queue
    folder = Path(args.cluster).expanduser()
    cfg = read_info(folder)["config"]
    tree = load_queue_file(folder / cfg["queues"]) if cfg.get("queues") else single_queue()
    cap = cfg["pns"] * cfg["cpus"]
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
    rows = queue_rows(tree, cap, state, waiting)
    if args.json:
        print(json.dumps({"sharing": tree.sharing, "capacity_cores": cap, "source": tree.source, "queues": rows},
                         indent=1))
        return 0
    print(f"{tree.sharing} sharing over {cap:g} cores ({tree.source})")
    print(f"{'queue':<24} {'guarantee':>9} {'max':>7} {'share now':>9} {'held':>6} {'running':>7} {'waiting':>7}"
          f"  next in line")
    for r in rows:
        line = ", ".join(f"job {j}" for j in r["in_line"][:5])
        print(f"{'  ' * r['depth'] + r['name']:<24} {r['guarantee']:>9.1f} {r['max']:>7.1f} {r['share']:>9.1f} "
              f"{r['held']:>6.1f} {r['running']:>7} {r['waiting']:>7}  {line}")
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
    sb.add_argument("--queue", metavar="Q", help="the queue to submit to (over the job file's `queue`)")
    sb.add_argument("--user", metavar="U", help="the user to submit as (over the job file's `user`)")
    sb.add_argument("--wait", action="store_true", help="wait for the job to finish, with progress bars")
    sb.add_argument("--timeout", type=positive, default=30.0, metavar="S",
                    help="give up if the RM has not accepted the job after S seconds (default 30)")

    j = sub.add_parser("jobs", help="list the cluster's jobs: queue, user, state, progress, times")
    j.set_defaults(run=_jobs, on_cluster=True)
    add_cluster_option(j)
    j.add_argument("--state", action="append", choices=JOB_STATES, metavar="STATE",
                   help=f"only jobs in this state ({', '.join(JOB_STATES)}; may be given again); "
                        "waiting: not admitted yet, in its queue's line")
    j.add_argument("--queue", metavar="Q", help="only jobs submitted to queue Q")
    j.add_argument("--user", metavar="U", help="only jobs of user U")
    j.add_argument("--limit", type=count(1), metavar="N", help="only the N most recent jobs (of those selected)")
    j.add_argument("--json", action="store_true",
                   help='print {"cluster_running": bool, "jobs": [...]} instead of a table')

    cn = sub.add_parser("cancel", help="cancel a job")
    cn.set_defaults(run=_cancel, on_cluster=True)
    cn.add_argument("id", type=count(0), help="the job's id")
    add_cluster_option(cn)
    cn.add_argument("--timeout", type=positive, default=30.0, metavar="S",
                    help="give up if the RM cannot be reached within S seconds (default 30)")

    qs = sub.add_parser("queues", help="the queue tree: guarantees, shares, running and waiting jobs")
    qs.set_defaults(run=_queues, on_cluster=True)
    add_cluster_option(qs)
    qs.add_argument("--json", action="store_true", help="print the same figures as JSON")

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
