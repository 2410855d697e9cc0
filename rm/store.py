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

from apollo.effects import Persist
from apollo.messages import JOB
from apollo.spec import JobSpec


@dataclass(frozen=True)
class StoredJobs:
    """What an RM (re)starting finds: the highest job id ever stored, and the unfinished jobs
    as (job_id, spec, submitted_at, reply_to) in id order."""
    max_job_id: int
    unfinished: tuple


class JobStore:
    def apply(self, p: Persist) -> None:
        """Carry out an RM's Persist: ("put", (job_id, spec, submitted_at, reply_to)) or
        ("finish", (job_id, state, reason, at))."""
        if p.op == "put":
            self.put(*p.args)
        elif p.op == "finish":
            self.finish(*p.args)
        elif p.op == "queues":
            self.queues(*p.args)
        else:
            raise ValueError(f"unknown job store operation {p.op!r}")

    def recovered(self) -> StoredJobs:
        return StoredJobs(self.max_job_id(), tuple(self.unfinished()))

    def put(self, job_id: int, spec: JobSpec, submitted_at: float, reply_to: str) -> None: ...
    def finish(self, job_id: int, state: str, reason: str, at: float) -> None: ...
    def queues(self, at: float, shares: dict, running: dict, waiting: dict, positions: dict) -> None:
        """The queues' state at the RM's last allocation round (not needed for recovery)."""

    def unfinished(self) -> Iterator[tuple[int, JobSpec, float, str]]: ...
    def all(self) -> list[tuple[int, str, str, float, float | None, str]]: ...
    def max_job_id(self) -> int: ...


class MemoryJobStore(JobStore):
    def __init__(self) -> None:
        self.rows: dict[int, list] = {}

    def put(self, job_id, spec, submitted_at, reply_to):
        self.rows[job_id] = [spec, submitted_at, reply_to, "running", None, ""]

    def finish(self, job_id, state, reason, at):
        r = self.rows.get(job_id)
        if r is not None:
            r[3], r[4], r[5] = state, at, reason

    def unfinished(self):
        for job_id, (spec, t, reply_to, state, _, _) in sorted(self.rows.items()):
            if state == "running":
                yield job_id, spec, t, reply_to

    def all(self):
        return [(j, r[0].name, r[3], r[1], r[4], r[5]) for j, r in sorted(self.rows.items())]

    def max_job_id(self):
        return max(self.rows, default=-1)


class SqliteJobStore(JobStore):
    def __init__(self, path: str) -> None:
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("""CREATE TABLE IF NOT EXISTS jobs (
            job_id INTEGER PRIMARY KEY, name TEXT, spec BLOB, submitted_at REAL, reply_to TEXT,
            state TEXT, finished_at REAL, reason TEXT)""")
        # The sharing plane's state at its last round, for `apollo queues` and `apollo job`.
        self.db.execute("""CREATE TABLE IF NOT EXISTS queue_state (
            path TEXT PRIMARY KEY, share REAL, running INTEGER, waiting INTEGER, at REAL)""")
        self.db.execute("""CREATE TABLE IF NOT EXISTS waiting (
            job_id INTEGER PRIMARY KEY, queue TEXT, position INTEGER)""")

    def put(self, job_id, spec, submitted_at, reply_to):
        blob = msgpack.packb(JOB[0](spec), use_bin_type=True)
        # A plain INSERT: an id is never reused, so a clash is a bug to hear about, not to paper over.
        self.db.execute("INSERT INTO jobs VALUES (?,?,?,?,?,'running',NULL,'')",
                        (job_id, spec.name, blob, submitted_at, reply_to))

    def finish(self, job_id, state, reason, at):
        self.db.execute("UPDATE jobs SET state=?, finished_at=?, reason=? WHERE job_id=?",
                        (state, at, reason, job_id))

    def queues(self, at, shares, running, waiting, positions):
        with self.db:
            self.db.execute("BEGIN")
            self.db.execute("DELETE FROM queue_state")
            self.db.executemany("INSERT INTO queue_state VALUES (?,?,?,?,?)",
                                [(q, s, running.get(q, 0), waiting.get(q, 0), at) for q, s in shares.items()])
            self.db.execute("DELETE FROM waiting")
            self.db.executemany("INSERT INTO waiting VALUES (?,?,?)",
                                [(j, q, p) for j, (q, p) in positions.items()])

    def unfinished(self):
        rows = self.db.execute(
            "SELECT job_id, spec, submitted_at, reply_to FROM jobs WHERE state='running' ORDER BY job_id").fetchall()
        for job_id, blob, t, reply_to in rows:
            spec = JOB[1](msgpack.unpackb(blob, raw=False), f"stored job {job_id}")
            yield job_id, spec, t, reply_to

    def max_job_id(self):
        return self.db.execute("SELECT COALESCE(MAX(job_id), -1) FROM jobs").fetchone()[0]

    def all(self):
        return self.db.execute(
            "SELECT job_id, name, state, submitted_at, finished_at, reason FROM jobs ORDER BY job_id").fetchall()
