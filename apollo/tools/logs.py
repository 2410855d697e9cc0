"""Command tasks' output, served where it ran and fetched over the cluster's own protocol.

Serving. Every process that hosts PNs (those `apollo cluster up` starts and those that joined
from other machines) also hosts a log service at "logs:NAME", NAME its process name (pn0,
pn1000: apollo.tools.livecluster.process_name). It answers ListLogs (which attempts of a job
have output in this process's work folder, their sizes and exit codes, and which still run
here) and ReadLog (a slice of one attempt's stdout or stderr) from the files the executor
writes (apollo.runtime.executor). It schedules nothing and keeps no state: a thin reader of
files behind the same authenticated connections as everything else.

Fetching. ``LogReader`` rides an entered apollo.tools.client.Client (the cluster's secret).
The processes hosting PNs come from cluster.json and the registrar's grants
(DIR/joined.json: joined machines too); each is asked which attempts of the job it holds
(``listings``). ``job_attempts`` joins those listings with the job's attempt records
(events-*.msgpack: where each ended attempt ran and how it ended); ``last_attempt`` picks the
attempt shown for a task. Nothing reads another machine's disk.
"""
from __future__ import annotations

import asyncio
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from apollo.core.effects import Send
from apollo.core.messages import ListLogs, LogChunk, LogList, ReadLog
from apollo.core.records import A_ATTEMPT, A_END, A_JOB, A_OUTCOME, A_SERVER, A_STAGE, A_START, A_TASK
from apollo.runtime.executor import output_base
from apollo.tools.livecluster import process_name

CHUNK = 1 << 20            # bytes of output per LogChunk (a frame may hold 16 MiB)
ASK_AGAIN_S = 1.0          # a request not answered (its connection was still being made) is sent again


# ---- serving ----------------------------------------------------------------------------------

def service_address(name: str) -> str:
    return f"logs:{name}"


class LogService:
    """The log service of one process: answers from ``executor``'s work folder (and, for
    attempts it runs now, its running table)."""

    def __init__(self, name: str, executor: Any) -> None:
        self.name = name
        self.executor = executor

    def handle(self, event: Any, now: float, rng: Any) -> list:
        if type(event) is ListLogs:
            return [Send(event.reply_to, self.listing(event.job_id))]
        if type(event) is ReadLog:
            return [Send(event.reply_to, self.read(event))]
        return []

    def listing(self, job_id: int) -> LogList:
        folder = Path(self.executor.workdir)
        running = {tuple(key): int(owner.rsplit(":", 1)[1]) for owner, key in self.executor.running
                   if key[0] == job_id and owner.startswith("pn:")}
        rows = []
        for out in folder.glob(f"{job_id}-*.out"):
            try:
                _, task, attempt = (int(x) for x in out.stem.split("-"))
            except ValueError:
                continue
            rows.append((task, attempt, _size(out), _size(out.with_suffix(".err")), _exit_code(out),
                         running.get((job_id, task, attempt), -1)))
        rows.sort()
        cols = list(zip(*rows)) if rows else [()] * 6
        return LogList(job_id, self.name, str(folder.resolve()), *[list(c) for c in cols])

    def read(self, r: ReadLog) -> LogChunk:
        path = output_base(Path(self.executor.workdir), r.job_id, r.task, r.attempt).with_suffix(
            ".err" if r.stderr else ".out")
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                f.seek(r.offset)
                data = f.read(min(r.limit, CHUNK))
        except OSError:
            size, data = -1, b""
        return LogChunk(r.job_id, r.task, r.attempt, r.stderr, r.offset, size, data)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _exit_code(out: Path) -> int | None:
    try:
        return int(out.with_suffix(".exit").read_text())
    except (OSError, ValueError):
        return None


def add_log_service(rt: Any, me: dict) -> None:
    """Host the log service in a process of PNs (apollo.tools.process.add_actors; ``me``: the
    process's entry in cluster.json or the registrar's grant)."""
    if me["role"] == "pn":
        name = process_name("pn", me.get("index", 0))
        rt.add(service_address(name), LogService(name, rt.executor), start=False)


# ---- where the output is ----------------------------------------------------------------------

@dataclass(frozen=True)
class PnProcess:
    name: str
    address: str
    servers: tuple[int, ...]
    joined: bool


def pn_processes(folder: Path, info: dict) -> list[PnProcess]:
    """The processes hosting PNs: those cluster.json lists and those that joined since (the
    registrar's grants in DIR/joined.json)."""
    entries = [p for p in info.get("processes", []) if p.get("role") == "pn"]
    try:
        entries += [p for p in json.loads((folder / "joined.json").read_text()).values() if p.get("role") == "pn"]
    except (OSError, ValueError):
        pass
    return [PnProcess(process_name("pn", p.get("index", 0)), p["address"], tuple(p.get("pns", ())),
                      bool(p.get("joined"))) for p in entries]


@dataclass
class AttemptOutput:
    """One attempt of one task, with where its output is. ``outcome``: its record's (done,
    failed, killed, lost, ...) once it ended; before that, what its process says: "running",
    "done" or "failed" by its exit code, or "lost" (no exit code and not running: it died
    with its process)."""
    job_id: int
    stage: str
    index: int             # within its stage
    task: int              # the job-wide number (in file names)
    attempt: int
    outcome: str
    server: int = -1       # the PN it ran on (-1: unknown)
    process: str = ""      # the process that ran it ("": unknown)
    folder: str = ""       # that process's work folder, on its own machine ("": it has not said)
    exit_code: int | None = None
    out_bytes: int = 0
    err_bytes: int = 0
    t_start: float = float("inf")   # (from its record; one not yet recorded is the newest)
    t_end: float = float("inf")

    @property
    def label(self) -> str:
        return f"{self.stage}:{self.index}"

    def path(self, stderr: bool = False) -> str:
        """Its stdout (stderr) file on the machine that ran it ("" unknown)."""
        if not self.folder:
            return ""
        return str(output_base(Path(self.folder), self.job_id, self.task, self.attempt).with_suffix(
            ".err" if stderr else ".out"))


def job_attempts(job_id: int, stages: list[tuple[str, int]], records: list[tuple], listings: dict[str, Any],
                 processes: list[PnProcess]) -> dict[int, list[AttemptOutput]]:
    """Every known attempt of the job, by job-wide task number: its records (``records``: the
    cluster's attempt records) joined with the log services' ``listings`` (process name ->
    LogList, None for one that did not answer). ``stages``: (name, tasks) in the job's order."""
    offsets, names = [], []
    n = 0
    for name, tasks in stages:
        offsets.append(n)
        names.append(name)
        n += tasks
    stage_of = [i for i, (_, tasks) in enumerate(stages) for _ in range(tasks)]
    by_server = {s: p for p in processes for s in p.servers}
    out: dict[tuple[int, int], AttemptOutput] = {}
    for rec in records:
        if rec[A_JOB] != job_id or not (0 <= rec[A_STAGE] < len(stages)):
            continue
        t = offsets[rec[A_STAGE]] + rec[A_TASK]
        p = by_server.get(rec[A_SERVER])
        out[(t, rec[A_ATTEMPT])] = AttemptOutput(job_id, names[rec[A_STAGE]], rec[A_TASK], t, rec[A_ATTEMPT],
                                                 rec[A_OUTCOME], rec[A_SERVER], p.name if p else "",
                                                 t_start=rec[A_START], t_end=rec[A_END])
    for name, ls in listings.items():
        if ls is None:
            continue
        for t, att, ob, eb, rc, on in zip(ls.tasks, ls.attempts, ls.out_bytes, ls.err_bytes, ls.exit_codes,
                                          ls.running_on):
            if not (0 <= t < n):
                continue
            a = out.get((t, att))
            if a is None:
                a = out[(t, att)] = AttemptOutput(job_id, names[stage_of[t]], t - offsets[stage_of[t]], t, att,
                                                  _unrecorded_outcome(on, rc),
                                                  on)
            a.process, a.folder, a.exit_code, a.out_bytes, a.err_bytes = name, ls.folder, rc, ob, eb
            if a.server < 0 and on >= 0:
                a.server = on
    by_task: dict[int, list[AttemptOutput]] = {}
    for (t, _), a in sorted(out.items()):
        by_task.setdefault(t, []).append(a)
    return by_task


def _unrecorded_outcome(running_on: int, exit_code: int | None) -> str:
    if running_on >= 0:
        return "running"
    if exit_code is None:
        return "lost"
    return "done" if exit_code == 0 else "failed"


def last_attempt(attempts: list[AttemptOutput]) -> AttemptOutput:
    """The attempt shown for a task: the one whose result counted (the first done), else the
    newest one running, else the one that ended last."""
    done = [a for a in attempts if a.outcome == "done"]
    if done:
        return min(done, key=lambda a: (a.t_end, a.attempt))
    running = [a for a in attempts if a.outcome == "running"]
    if running:
        return max(running, key=lambda a: a.attempt)
    return max(attempts, key=lambda a: (a.t_end, a.t_start, a.attempt))


# ---- fetching -----------------------------------------------------------------------------------

class _Inbox:
    """The reader's actor: each answer resolves the future waiting for it."""

    def __init__(self) -> None:
        self.waiting: dict[tuple, asyncio.Future] = {}

    def handle(self, event: Any, now: float, rng: Any) -> list:
        if type(event) is LogList:
            key: tuple = ("list", event.process, event.job_id)
        elif type(event) is LogChunk:
            key = ("read", event.job_id, event.task, event.attempt, event.stderr, event.offset)
        else:
            return []
        f = self.waiting.get(key)
        if f is not None and not f.done():
            f.set_result(event)
        return []


class LogReader:
    """Asks the log services of ``processes`` through ``client`` (an entered Client)."""

    def __init__(self, client: Any, processes: list[PnProcess]) -> None:
        self.client = client
        self.processes = {p.name: p for p in processes}
        self.inbox = _Inbox()
        self.address = f"logs-reader:{secrets.token_hex(6)}"
        client.rt.add(self.address, self.inbox, start=False)
        for p in processes:
            client.rt.add_route(service_address(p.name), p.address)

    async def _ask(self, key: tuple, to: str, msg: Any, timeout_s: float) -> Any:
        """Send ``msg`` until its answer comes (None after ``timeout_s``). Raises the client's
        ClusterError if the cluster refused its secret."""
        loop = asyncio.get_running_loop()
        f = self.inbox.waiting[key] = loop.create_future()
        deadline = loop.time() + timeout_s
        try:
            while True:
                if self.client.error is not None:
                    raise self.client.error
                self.client.rt.inject(to, msg)
                left = deadline - loop.time()
                if left <= 0:
                    return None
                try:
                    return await asyncio.wait_for(asyncio.shield(f), min(ASK_AGAIN_S, left))
                except asyncio.TimeoutError:
                    continue
        finally:
            self.inbox.waiting.pop(key, None)

    async def listings(self, job_id: int, timeout_s: float = 5.0) -> dict[str, LogList | None]:
        """Each process's LogList of the job (None: it did not answer within ``timeout_s``)."""
        names = list(self.processes)
        got = await asyncio.gather(*[self._ask(("list", n, job_id), service_address(n),
                                               ListLogs(job_id, self.address), timeout_s) for n in names])
        return dict(zip(names, got))

    async def read(self, a: AttemptOutput, stderr: bool, offset: int = 0, timeout_s: float = 5.0) -> LogChunk | None:
        """The attempt's output from byte ``offset`` on, up to CHUNK bytes (None: no answer)."""
        msg = ReadLog(a.job_id, a.task, a.attempt, stderr, offset, CHUNK, self.address)
        return await self._ask(("read", a.job_id, a.task, a.attempt, stderr, offset), service_address(a.process),
                               msg, timeout_s)

    async def chunks(self, a: AttemptOutput, stderr: bool, offset: int = 0):
        """The attempt's output from ``offset`` to the end of the file as it is now, chunk by chunk:
        (bytes, the offset after them). Ends early if its process stops answering or has no such file."""
        while True:
            c = await self.read(a, stderr, offset)
            if c is None or c.size < 0 or not c.data:
                return
            offset += len(c.data)
            yield c.data, offset
            if offset >= c.size:
                return
