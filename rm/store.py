"""Durable job store: submitted jobs survive an RM restart.

The RM never touches it: it returns Persist effects, which its runtime carries
out here before anything the RM asked for after them (a submission is written
before it is acknowledged), and reads it once at a (re)start to hand the RM what
it holds (Start.stored). The simulator uses the in-memory store (the simulated
disk outlives the RM's crashes); a live RM uses SQLite in WAL mode.
"""
from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Iterator

import msgpack

from apollo.core.effects import Persist
from apollo.core.messages import JOB
from apollo.core.spec import JobSpec


@dataclass(frozen=True)
class StoredJob:
    """An unfinished job as stored: what the RM needs to go on with it after a restart."""
    job_id: int
    spec: JobSpec
    submitted_at: float
    reply_to: str
    key: str = ""                    # the client's idempotency key
    host: str = ""                   # the JM host it was last placed on ("": not admitted)
    generation: int = 0              # how many JM homes it has had (rm.state: re-homing)
    done: bytes = b""                # its finished tasks as its JM last reported (packbits)


@dataclass(frozen=True)
class StoredJobs:
    """What an RM (re)starting finds: the highest job id ever stored, the unfinished jobs (in
    id order), the finished ones' outcomes ((job_id, key, state, reason, at), to answer a
    client's retry), and how many times an RM has started on this store before."""
    max_job_id: int
    unfinished: tuple
    finished: tuple = ()
    boots: int = 0


# Columns of the jobs table added for `apollo jobs` (name -> declaration).
LISTING_COLUMNS = {"queue": "TEXT DEFAULT ''", "user": "TEXT DEFAULT ''", "tasks": "INTEGER DEFAULT 0",
                   "tasks_done": "INTEGER"}


def _decode(job_id: int, blob: bytes) -> JobSpec:
    return JOB["decode"](msgpack.unpackb(blob, raw=False), f"stored job {job_id}")


class JobStore:
    def apply(self, p: Persist) -> None:
        """Carry out an RM's Persist (see OPS)."""
        op = self.OPS.get(p.op)
        if op is None:
            raise ValueError(f"unknown job store operation {p.op!r}")
        getattr(self, op)(*p.args)

    # Persist op -> method: ("put", (job_id, spec, submitted_at, reply_to[, key, host])), ("finish",
    # (job_id, state, reason, at[, tasks_done])), ("home", (job_id, host, generation)), ("progress", (job_id,
    # done bitmap)), ("boot", (boots,)), ("queues", ...).
    OPS = {"put": "put", "finish": "finish", "queues": "queues", "home": "home", "progress": "progress",
           "boot": "boot"}

    def recovered(self) -> StoredJobs:
        return StoredJobs(self.max_job_id(), tuple(self.unfinished()), tuple(self.finished()), self.boots())

    def put(self, job_id: int, spec: JobSpec, submitted_at: float, reply_to: str, key: str = "",
            host: str = "") -> None: ...
    def finish(self, job_id: int, state: str, reason: str, at: float, tasks_done: int | None = None) -> None: ...
    def home(self, job_id: int, host: str, generation: int) -> None: ...
    def progress(self, job_id: int, done: bytes) -> None: ...
    def boot(self, boots: int) -> None: ...
    def boots(self) -> int: ...
    def finished(self) -> Iterator[tuple[int, str, str, str, float]]: ...
    def queues(self, at: float, shares: dict, running: dict, waiting: dict, positions: dict,
               held: dict | None = None) -> None:
        """The queues' state at the RM's last allocation round (not needed for recovery): each
        queue's share, running and waiting jobs and held CPUs, and the waiting jobs' places."""

    def unfinished(self) -> Iterator[StoredJob]: ...
    def all(self) -> list[tuple[int, str, str, float, float | None, str]]: ...
    def max_job_id(self) -> int: ...


class MemoryJobStore(JobStore):
    # row: [spec, submitted_at, reply_to, state, finished_at, reason, key, host, generation, done, tasks_done]
    def __init__(self) -> None:
        self.rows: dict[int, list] = {}
        self._boots = 0

    def put(self, job_id, spec, submitted_at, reply_to, key="", host=""):
        self.rows[job_id] = [spec, submitted_at, reply_to, "running", None, "", key, host, 0, b"", None]

    def finish(self, job_id, state, reason, at, tasks_done=None):
        r = self.rows.get(job_id)
        if r is not None:
            r[3], r[4], r[5], r[10] = state, at, reason, tasks_done

    def home(self, job_id, host, generation):
        r = self.rows.get(job_id)
        if r is not None:
            r[7], r[8] = host, generation

    def progress(self, job_id, done):
        r = self.rows.get(job_id)
        if r is not None:
            r[9] = done

    def boot(self, boots):
        self._boots = boots

    def boots(self):
        return self._boots

    def unfinished(self):
        for job_id, r in sorted(self.rows.items()):
            if r[3] == "running":
                yield StoredJob(job_id, r[0], r[1], r[2], r[6], r[7], r[8], r[9])

    def finished(self):
        for job_id, r in sorted(self.rows.items()):
            if r[3] != "running":
                yield job_id, r[6], r[3], r[5], r[4]

    def all(self):
        return [(j, r[0].name, r[3], r[1], r[4], r[5]) for j, r in sorted(self.rows.items())]

    def max_job_id(self):
        return max(self.rows, default=-1)


# WAL pages after which a write checkpoints the log itself (SQLite's default is 1,000). A live RM
# checkpoints from a thread every CHECKPOINT_S (``checkpoint``), off the message path: a write
# that checkpoints waits for two fsyncs, 1-5 ms on this machine's disk, about once every 900
# writes, where a write is ~15 us. The high mark is what is left of it: a log that thread could
# not keep short.
WAL_PAGES_MAX = 10_000
CHECKPOINT_S = 1.0


class SqliteJobStore(JobStore):
    def __init__(self, path: str) -> None:
        self.path = path
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute(f"PRAGMA wal_autocheckpoint={WAL_PAGES_MAX}")
        self._checkpointer: sqlite3.Connection | None = None
        # The queues' state as last written (queues()); None: not written by this object yet
        self._queue_rows: dict | None = None
        self._places: dict = {}
        self.db.execute("""CREATE TABLE IF NOT EXISTS jobs (
            job_id INTEGER PRIMARY KEY, name TEXT, spec BLOB, submitted_at REAL, reply_to TEXT,
            state TEXT, finished_at REAL, reason TEXT)""")
        # Added with RM restarts that keep their work (older stores gain them empty).
        have = {r[1] for r in self.db.execute("PRAGMA table_info(jobs)")}
        for col, decl in (("key", "TEXT DEFAULT ''"), ("host", "TEXT DEFAULT ''"),
                          ("generation", "INTEGER DEFAULT 0"), ("done", "BLOB DEFAULT x''")):
            if col not in have:
                self.db.execute(f"ALTER TABLE jobs ADD COLUMN {col} {decl}")
        self.db.execute("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER)")
        # The sharing plane's state at its last round, for `apollo queues` and `apollo job`.
        self.db.execute("""CREATE TABLE IF NOT EXISTS queue_state (
            path TEXT PRIMARY KEY, share REAL, running INTEGER, waiting INTEGER, at REAL)""")
        self.db.execute("""CREATE TABLE IF NOT EXISTS waiting (
            job_id INTEGER PRIMARY KEY, queue TEXT, position INTEGER)""")
        if "held" not in {r[1] for r in self.db.execute("PRAGMA table_info(queue_state)")}:
            self.db.execute("ALTER TABLE queue_state ADD COLUMN held REAL DEFAULT 0")
        self._add_listing_columns(have)

    def _add_listing_columns(self, have: set) -> None:
        """Columns `apollo jobs` lists and filters on (added with it): the job's queue and user
        as submitted, its task count, and the tasks done when it ended. An older store gains
        them filled in from the stored specs."""
        missing = [c for c in LISTING_COLUMNS if c not in have]
        if not missing:
            return
        with self.db:
            self.db.execute("BEGIN")
            for col in missing:
                self.db.execute(f"ALTER TABLE jobs ADD COLUMN {col} {LISTING_COLUMNS[col]}")
            if "queue" in missing:
                rows = self.db.execute("SELECT job_id, spec FROM jobs").fetchall()
                for job_id, blob in rows:
                    spec = _decode(job_id, blob)
                    self.db.execute("UPDATE jobs SET queue=?, user=?, tasks=? WHERE job_id=?",
                                    (spec.queue, spec.user, spec.total_tasks, job_id))

    def checkpoint(self) -> tuple[int, int, int]:
        """Copy the write-ahead log into the database (SQLite's PASSIVE checkpoint: it waits for
        no writer, and writes go on meanwhile), on a connection of its own: what a live RM runs
        in a thread every CHECKPOINT_S (apollo/tools/process.py), one at a time. Returns (busy,
        pages in the log, pages copied)."""
        if self._checkpointer is None:
            self._checkpointer = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        busy, logged, copied = self._checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        return busy, logged, copied

    def put(self, job_id, spec, submitted_at, reply_to, key="", host=""):
        blob = msgpack.packb(JOB["encode"](spec), use_bin_type=True)
        # A plain INSERT: an id is never reused, so a clash is a bug to hear about, not to paper over.
        self.db.execute("INSERT INTO jobs (job_id, name, spec, submitted_at, reply_to, state, finished_at, reason,"
                        " key, host, queue, user, tasks) VALUES (?,?,?,?,?,'running',NULL,'',?,?,?,?,?)",
                        (job_id, spec.name, blob, submitted_at, reply_to, key, host, spec.queue, spec.user,
                         spec.total_tasks))

    def home(self, job_id, host, generation):
        self.db.execute("UPDATE jobs SET host=?, generation=? WHERE job_id=?", (host, generation, job_id))

    def progress(self, job_id, done):
        self.db.execute("UPDATE jobs SET done=? WHERE job_id=?", (done, job_id))

    def boot(self, boots):
        self.db.execute("INSERT OR REPLACE INTO meta VALUES ('boots', ?)", (boots,))

    def boots(self):
        row = self.db.execute("SELECT value FROM meta WHERE name='boots'").fetchone()
        return row[0] if row else 0

    def finished(self):
        return self.db.execute("SELECT job_id, key, state, reason, finished_at FROM jobs WHERE state!='running'"
                               " ORDER BY job_id").fetchall()

    def finish(self, job_id, state, reason, at, tasks_done=None):
        self.db.execute("UPDATE jobs SET state=?, finished_at=?, reason=?, tasks_done=? WHERE job_id=?",
                        (state, at, reason, tasks_done, job_id))

    def queues(self, at, shares, running, waiting, positions, held=None):
        # Only the rows that moved are written: a round of a busy cluster moves one queue's
        # running count, where rewriting both tables cost ~4x one write, per job. The first call
        # of this store object (a new RM incarnation) writes everything, clearing what an earlier
        # one left. A row's ``at`` is the round that last moved it.
        held = held or {}
        rows = {q: (s, running.get(q, 0), waiting.get(q, 0), held.get(q, 0.0)) for q, s in shares.items()}
        places = {j: (q, p) for j, (q, p) in positions.items()}
        first = self._queue_rows is None
        was_rows: dict = {} if first else self._queue_rows
        was_places: dict = {} if first else self._places
        moved = [(q, r[0], r[1], r[2], at, r[3]) for q, r in rows.items() if was_rows.get(q) != r]
        gone = [(q,) for q in was_rows if q not in rows]
        placed = [(j, q, p) for j, (q, p) in places.items() if was_places.get(j) != (q, p)]
        left = [(j,) for j in was_places if j not in places]
        if first or moved or gone or placed or left:
            with self.db:
                self.db.execute("BEGIN")
                if first:
                    self.db.execute("DELETE FROM queue_state")
                    self.db.execute("DELETE FROM waiting")
                for sql, args in (("DELETE FROM queue_state WHERE path=?", gone),
                                  ("INSERT OR REPLACE INTO queue_state (path, share, running, waiting, at, held)"
                                   " VALUES (?,?,?,?,?,?)", moved),
                                  ("DELETE FROM waiting WHERE job_id=?", left),
                                  ("INSERT OR REPLACE INTO waiting VALUES (?,?,?)", placed)):
                    if args:
                        self.db.executemany(sql, args)
        self._queue_rows, self._places = rows, places

    def unfinished(self):
        rows = self.db.execute(
            "SELECT job_id, spec, submitted_at, reply_to, key, host, generation, done FROM jobs"
            " WHERE state='running' ORDER BY job_id").fetchall()
        for job_id, blob, t, reply_to, key, host, gen, done in rows:
            spec = _decode(job_id, blob)
            yield StoredJob(job_id, spec, t, reply_to, key or "", host or "", gen or 0, bytes(done or b""))

    def max_job_id(self):
        return self.db.execute("SELECT COALESCE(MAX(job_id), -1) FROM jobs").fetchone()[0]

    def all(self):
        return self.db.execute(
            "SELECT job_id, name, state, submitted_at, finished_at, reason FROM jobs ORDER BY job_id").fetchall()


# ---- reading a live RM's store (`apollo jobs`) -----------------------------------------------
@dataclass(frozen=True)
class ListedJob:
    """A job as `apollo jobs` lists it. ``state``: waiting (not admitted yet: in its queue's
    line), running, done, failed or cancelled. Times are the cluster's clock."""
    job_id: int
    name: str
    queue: str
    user: str
    state: str
    tasks: int
    tasks_done: int
    submitted_at: float
    finished_at: float | None
    reason: str


def list_jobs(con: sqlite3.Connection) -> list[ListedJob]:
    """Every stored job, in id order, from a connection to a live RM's store (read-only is
    enough: a store older than the listing columns is read from its specs).

    A job not finished is waiting while it has no JM host (it was stored without one and no
    admission placed it since: every admission writes its host) or the RM's last round left
    it in a queue's line (the ``waiting`` table: a restarted RM re-admits stored jobs anew)."""
    have = {r[1] for r in con.execute("PRAGMA table_info(jobs)")}
    if not have:
        return []
    listing = all(c in have for c in LISTING_COLUMNS)
    cols = "queue, user, tasks, tasks_done" if listing else "spec, NULL, NULL, NULL"
    try:
        in_line = {r[0] for r in con.execute("SELECT job_id FROM waiting")}
    except sqlite3.OperationalError:       # a store from before the queues' tables
        in_line = set()
    out = []
    for row in con.execute(f"SELECT job_id, name, state, submitted_at, finished_at, reason, host, done, {cols}"
                           " FROM jobs ORDER BY job_id"):
        job_id, name, state, t0, t1, reason, host, done, queue, user, tasks, tasks_done = row
        if not listing:
            spec = _decode(job_id, queue)
            queue, user, tasks = spec.queue, spec.user, spec.total_tasks
        if state == "running":
            if not host or job_id in in_line:
                state = "waiting"
            tasks_done = _bits(done)
        elif tasks_done is None:          # ended before its store counted tasks done
            tasks_done = tasks if state == "done" else _bits(done)
        out.append(ListedJob(job_id, name or "", queue or "", user or "", state, int(tasks or 0),
                             int(tasks_done), float(t0), None if t1 is None else float(t1), reason or ""))
    return out


def _bits(done: bytes | None) -> int:
    """Tasks marked done in a packed bitmap (numpy.packbits: the padding bits are 0)."""
    return sum(bin(b).count("1") for b in bytes(done or b""))
