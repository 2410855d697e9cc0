"""Commands about one job's tasks on a live cluster: job (outcomes, placements, failures, where
each task's output is) and logs (that output, fetched from wherever it ran: apollo.tools.logs)."""
from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from .options import add_cluster_option, count

TASK_ROWS = 20         # `apollo job` lists this many tasks unless --all (failed and running ones first)
FOLLOW_S = 0.5         # `apollo logs --follow` asks for new output this often
ASK_S = 3.0            # a log service that has not answered in this long is reported as not answering


def _job(args: argparse.Namespace) -> int:
    """One job: state, per-stage progress, placements and locality (from the event records),
    each task's last attempt with its exit code and where its output is (asked of the log
    services), and the failure reason (with the exit code and stderr tail) if it failed."""
    from apollo.tools.client import EventTail, job_status
    from apollo.core.cluster import LOCALITY_NAMES
    folder = Path(args.cluster).expanduser()
    tail = EventTail(folder)          # (read once for the job's figures and its tasks)
    st = job_status(folder, args.id, tail) if (folder / "jobs.db").exists() else None
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
    _print_tasks(folder, args.id, st, args.all, tail)
    if st.reason:
        print(f"  reason: {st.reason.rstrip()}")
    return 0 if st.state in ("done", "running") else 1


def _print_tasks(folder: Path, job_id: int, st, show_all: bool, tail) -> None:
    from apollo.runtime.live import run
    from apollo.tools.livecluster import ClusterError
    try:
        attempts, listings = run(_gather(folder, job_id, st, tail=tail))
    except ClusterError as e:          # (the records alone still say how each task ended)
        print(f"  (where the output is: unknown, the cluster did not answer: {e})")
        attempts, listings = run(_gather(folder, job_id, st, ask=False, tail=tail))
    rows = _task_rows(st, attempts)
    shown = rows if show_all or len(rows) <= TASK_ROWS else sorted(
        sorted(rows, key=lambda r: r[0] not in ("failed", "running", "lost"))[:TASK_ROWS], key=lambda r: r[1])
    print(f"  tasks (the last attempt of each; `apollo logs {job_id}` prints their output):")
    for outcome, _, label, a in shown:
        print(f"    {label:<14} {outcome:<8} {_where(a, listings)}".rstrip())
    if len(shown) < len(rows):
        print(f"    ... {len(rows) - len(shown)} more tasks (--all lists every one)")


def _task_rows(st, attempts: dict) -> list[tuple]:
    """(outcome, job-wide task, label, its last attempt or None) for every task of the job."""
    from apollo.tools.logs import last_attempt
    rows, t = [], 0
    for s in st.stages:
        for i in range(s.tasks):
            a = last_attempt(attempts[t]) if t in attempts else None
            rows.append((a.outcome if a else "waiting", t, f"{s.name}:{i}", a))
            t += 1
    return rows


def _where(a, listings: dict) -> str:
    """An attempt's exit code, place and output files, as `apollo job` lists them."""
    if a is None:
        return ""
    rc = "-" if a.exit_code is None else str(a.exit_code)
    on = f"pn:{a.server}" if a.server >= 0 else "a PN unknown"
    text = f"exit {rc:<4} attempt {a.attempt} on {on}" + (f" (process {a.process})" if a.process else "")
    if a.folder:
        return f"{text}: {a.path()} (and .err)"
    if a.process and listings.get(a.process, 0) is None:
        return f"{text}: its process did not answer"
    return f"{text}: no output (a synthetic task)" if a.process in listings else text


async def _gather(folder: Path, job_id: int, st, ask: bool = True, tail=None, reader=None) -> tuple[dict, dict]:
    """The job's attempts by task (apollo.tools.logs.job_attempts) and the log services'
    listings (empty when not asked)."""
    from apollo.tools.client import EventTail
    from apollo.tools.logs import job_attempts, pn_processes
    from apollo.tools.livecluster import read_info
    stages = [(s.name, s.tasks) for s in st.stages]
    processes = pn_processes(folder, read_info(folder))
    records = (tail or EventTail(folder)).poll()
    if not ask:
        return job_attempts(job_id, stages, records, {}, processes), {}
    if reader is not None:
        listings = await reader.listings(job_id, ASK_S)
        return job_attempts(job_id, stages, records, listings, processes), listings
    from apollo.tools.client import Client
    from apollo.tools.logs import LogReader
    async with Client(folder) as c:
        listings = await LogReader(c, processes).listings(job_id, ASK_S)
    return job_attempts(job_id, stages, records, listings, processes), listings


# ---- apollo logs ----------------------------------------------------------------------------------

def _task_option(text: str) -> tuple[str, int]:
    stage, sep, index = text.rpartition(":")
    if not sep or not stage or not index.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not STAGE:INDEX (e.g. part:0)")
    return stage, int(index)


def _logs(args: argparse.Namespace) -> int:
    """A job's task output (stdout, or stderr with --stderr), from wherever each task ran."""
    from apollo.runtime.live import run
    from apollo.tools.client import job_status
    folder = Path(args.cluster).expanduser()
    st = job_status(folder, args.id) if (folder / "jobs.db").exists() else None
    if st is None:
        print(f"apollo logs: no job {args.id} in {folder / 'jobs.db'}", file=sys.stderr)
        return 1
    wanted = None
    if args.task is not None:
        stage, index = args.task
        offset = 0
        for s in st.stages:
            if s.name == stage:
                if index >= s.tasks:
                    print(f"apollo logs: --task {stage}:{index}: stage {stage!r} has tasks 0-{s.tasks - 1}",
                          file=sys.stderr)
                    return 2
                wanted = offset + index
                break
            offset += s.tasks
        else:
            print(f"apollo logs: --task {stage}:{index}: job {args.id} has no stage {stage!r} (its stages: "
                  f"{', '.join(s.name for s in st.stages)})", file=sys.stderr)
            return 2
    return run(_show_logs(folder, args, st, wanted))


def _note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


async def _show_logs(folder: Path, args: argparse.Namespace, st, wanted: int | None) -> int:
    from apollo.tools.client import Client, EventTail, job_status
    from apollo.tools.livecluster import read_info
    from apollo.tools.logs import LogReader, last_attempt, pn_processes
    tail = EventTail(folder)
    prefixed = wanted is None            # every task of the job: several may be shown
    shown: dict[int, Any] = {}           # task -> the attempt followed
    offsets: dict[tuple, int] = {}       # (task, attempt) -> bytes printed
    partial: dict[int, str] = {}         # task -> its last line, not ended yet
    silent: set[str] = set()             # tasks whose process did not answer
    async with Client(folder) as c:
        reader = LogReader(c, pn_processes(folder, read_info(folder)))
        ended = not args.follow
        while True:
            attempts, listings = await _gather(folder, args.id, st, tail=tail, reader=reader)
            for t in ([wanted] if wanted is not None else sorted(attempts)):
                if t not in attempts:
                    continue
                a = _pick(attempts[t], args.attempt, last_attempt)
                if a is None:
                    continue
                if not a.folder and not (a.process and listings.get(a.process, 0) is None):
                    continue                 # no output anywhere (a synthetic task)
                old = shown.get(t)
                if old is None or (old.task, old.attempt) != (a.task, a.attempt):
                    _end_line(t, partial, prefixed, old)
                    shown[t] = a
                    _note(f"{a.label}: attempt {a.attempt}" + (f" on pn:{a.server}" if a.server >= 0 else "")
                          + (f" (process {a.process})" if a.process else "") + f", {a.outcome}"
                          + ("" if a.exit_code is None else f", exit {a.exit_code}")
                          + (f": {a.path(args.stderr)}" if a.folder else ": its process did not answer"))
                if not a.folder:
                    silent.add(a.label)
                    continue
                silent.discard(a.label)
                key = (a.task, a.attempt)
                async for data, end in reader.chunks(a, args.stderr, offsets.get(key, 0)):
                    offsets[key] = end
                    _print_output(a, data, partial, prefixed)
            if ended:
                break
            now = job_status(folder, args.id, tail)
            ended = now is None or now.state != "running"    # one more pass after the end: what came last
            await asyncio.sleep(FOLLOW_S)
        for t in list(partial):
            _end_line(t, partial, prefixed, shown.get(t))
    if not shown:
        which = f"job {args.id}" if wanted is None else f"task {args.task[0]}:{args.task[1]} of job {args.id}"
        _note(f"apollo logs: {which} has no output" + ("" if args.attempt is None else f" from attempt {args.attempt}")
              + " (not started yet, or synthetic tasks: they write none)")
        return 1
    if silent:
        _note(f"apollo logs: no output from {', '.join(sorted(silent))}: the process that ran it did not answer")
        return 1
    return 0


def _pick(attempts: list, attempt: int | None, last_attempt):
    if attempt is None:
        return last_attempt(attempts)
    return next((a for a in attempts if a.attempt == attempt), None)


def _print_output(a, data: bytes, partial: dict, prefixed: bool) -> None:
    """Print the complete lines of ``data`` (after what was left of the task's last line);
    keep an unfinished last line for later."""
    text = partial.pop(a.task, "") + data.decode("utf-8", "replace")
    lines = text.split("\n")
    if lines[-1]:
        partial[a.task] = lines[-1]
    lines = lines[:-1]
    if lines:
        head = f"[{a.label}] " if prefixed else ""
        sys.stdout.write("".join(f"{head}{line}\n" for line in lines))
        sys.stdout.flush()


def _end_line(t: int, partial: dict, prefixed: bool, a) -> None:
    rest = partial.pop(t, "")
    if rest:
        sys.stdout.write((f"[{a.label}] " if prefixed else "") + rest + "\n")
        sys.stdout.flush()


def register(sub) -> None:
    jb = sub.add_parser("job", help="one job: state, progress, placements, each task's outcome and output, failures")
    jb.set_defaults(run=_job, on_cluster=True)
    jb.add_argument("id", type=count(0), help="the job's id")
    jb.add_argument("--all", action="store_true", help=f"list every task (default: {TASK_ROWS}, failed ones first)")
    add_cluster_option(jb)
    lg = sub.add_parser("logs", help="a job's task output (stdout or stderr), from wherever each task ran")
    lg.set_defaults(run=_logs, on_cluster=True)
    lg.add_argument("id", type=count(0), help="the job's id")
    lg.add_argument("--task", type=_task_option, metavar="STAGE:INDEX",
                    help="only this task (INDEX 0-based within its stage); default: every task, each line "
                         "prefixed with its task")
    lg.add_argument("--attempt", type=count(0), metavar="N",
                    help="this attempt (as `apollo job` lists them); default: the last attempt of each task "
                         "(the one whose result counted, else the newest)")
    lg.add_argument("--stderr", action="store_true", help="print stderr instead of stdout")
    lg.add_argument("--follow", "-f", action="store_true", help="keep printing new output until the job ends")
    add_cluster_option(lg)
