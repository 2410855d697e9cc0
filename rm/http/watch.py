"""What the RM's HTTP face knows beyond RmState: the cluster's records.

``HeartbeatTap`` names the per-server running/queued/free-CPU figures the RM keeps from
heartbeats. ``Watch`` folds the report
records of the cluster's folder (apollo.tools.client.EventTail, incrementally) into
Prometheus counters and histograms (rm/http/metrics.py), per-job tallies, recent
events and a short history of the queues' shares, for the API and dashboard.
"""
from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from apollo.tools.client import EventTail
from apollo.core.records import (A_ATTEMPT, A_CPU, A_DISPATCH, A_END, A_HAS_INPUT, A_JOB, A_LOC, A_OUTCOME, A_READY,
                            A_SERVER, A_STAGE, A_START, A_TASK)

LOCALITY = ("node", "rack", "remote")           # A_LOC codes 0, 1, 2
KINDS = ("attempt", "job_submitted", "job_admitted", "job_done")
KEEP_JOBS = 500                                # finished jobs' tallies kept (oldest dropped)
KEEP_ATTEMPTS = 2000                           # attempts kept per job for /api/jobs/{id}
HISTORY = 300                                  # share samples kept (one a second: five minutes)


class HeartbeatTap:
    """Per-server running/queued/free CPU as the last heartbeat said (the RM keeps the heartbeats;
    the arrays are made when read)."""

    def __init__(self, rm) -> None:
        self.rm = rm

    @property
    def running(self):
        return self.rm.running_tasks

    @property
    def queued(self):
        return self.rm.queued_tasks

    @property
    def cpu_free(self):
        return self.rm.cpu_free


@dataclass
class JobTally:
    """One job as its records tell: submission, admission, end, and its ended attempts."""
    queue: str = ""
    user: str = ""
    tasks: int = 0
    submitted_at: float | None = None
    admitted_at: float | None = None
    finished_at: float | None = None
    ok: bool | None = None
    reason: str = ""
    done: int = 0
    failed: int = 0
    preempted: int = 0
    locality: list = field(default_factory=lambda: [0, 0, 0])
    attempts: deque = field(default_factory=lambda: deque(maxlen=KEEP_ATTEMPTS))


def _attempt_text(a: tuple, loc: str) -> str:
    return (f"task {a[A_STAGE]}.{a[A_TASK]}#{a[A_ATTEMPT]} on server {a[A_SERVER]} "
            f"({loc + '-local' if loc in ('node', 'rack') else loc if loc == 'remote' else 'no input'}), "
            f"{a[A_END] - a[A_START]:.2f} s, {a[A_CPU]:g} cpu")


class Watch:
    def __init__(self, folder: Path, rm, metrics=None) -> None:
        self.rm = rm
        self.tap = HeartbeatTap(rm)
        self.tail = EventTail(Path(folder), kinds=KINDS, keep=False, max_bytes=4 << 20)
        self.metrics = metrics                 # rm.http.metrics.RecordMetrics, or None
        self.jobs: OrderedDict[int, JobTally] = OrderedDict()
        self._recent: deque = deque(maxlen=60)  # recent task and job events, newest last (see events)
        self.history: deque = deque(maxlen=HISTORY)   # (t, {queue: share cores}, busy cores)
        self.records = 0

    # ---- records -------------------------------------------------------------------
    def poll(self) -> None:
        """Read what the records files gained (blocking file I/O: run it off the loop)."""
        self.tail.poll()

    def fold(self) -> int:
        """Fold the records the last poll() read into the tallies (on the loop: the API reads them)."""
        r = self.tail.records
        for d in r["job_submitted"]:
            self._submitted(d)
        for d in r["job_admitted"]:
            self._admitted(d)
        for d in r["attempt"]:
            self._attempt(d)
        for d in r["job_done"]:
            self._done(d)
        if self.metrics:
            self.metrics.flush()
        n = sum(len(v) for v in r.values())
        for v in r.values():
            v.clear()                          # folded once, even if fold() runs again before a poll
        self.records += n
        return n

    def tally(self, job_id: int) -> JobTally:
        t = self.jobs.get(job_id)
        if t is None:
            t = self.jobs[job_id] = JobTally()
            if len(self.jobs) > KEEP_JOBS:
                self._drop_finished()
        return t

    def _drop_finished(self) -> None:
        live = self.rm.jobs
        over = len(self.jobs) - KEEP_JOBS
        gone = []               # the oldest finished ones, found without copying every key
        for j in self.jobs:
            if len(gone) >= over:
                break
            if j not in live:
                gone.append(j)
        for j in gone:
            del self.jobs[j]

    @property
    def events(self) -> list[dict]:
        """The recent task and job events, newest last; an attempt's text is made here, when asked
        (most are pushed out of the window unread)."""
        return [{"t": round(float(t), 3), "kind": kind, "job": int(job), "text": text if type(text) is str
                 else _attempt_text(*text)} for t, kind, job, text in self._recent]

    def _event(self, t: float, kind: str, job: int, text) -> None:
        self._recent.append((t, kind, job, text))

    def _submitted(self, d: tuple) -> None:
        job_id, t, n = d[0], d[1], d[2]
        j = self.tally(job_id)
        j.submitted_at, j.tasks = t, int(n)
        j.queue = d[3] if len(d) > 3 else "root"
        j.user = d[4] if len(d) > 4 else ""
        if self.metrics:
            self.metrics.job_submitted(j.queue)
        self._event(t, "submitted", job_id, f"{n} tasks to queue {j.queue}")

    def _admitted(self, d: tuple) -> None:
        job_id, t, queue = d[0], d[1], d[2]
        j = self.tally(job_id)
        j.admitted_at = t
        if self.metrics and j.submitted_at is not None:
            self.metrics.job_admitted(queue, t - j.submitted_at)

    def _attempt(self, a: tuple) -> None:
        j = self.tally(a[A_JOB])
        outcome = a[A_OUTCOME]
        started = a[A_START] >= 0
        loc = LOCALITY[a[A_LOC]] if a[A_HAS_INPUT] and 0 <= a[A_LOC] < 3 else "none"
        if outcome == "done":
            j.done += 1
            if loc != "none":
                j.locality[a[A_LOC]] += 1
        elif outcome == "failed":
            j.failed += 1
        elif outcome == "preempted":
            j.preempted += 1
        j.attempts.append(a)
        if self.metrics:
            self.metrics.attempt(j.queue or self._queue_of(a[A_JOB]), outcome, loc if started else None,
                                 a[A_START] - a[A_READY] if started and outcome == "done" else None,
                                 a[A_DISPATCH] - a[A_READY] if a[A_DISPATCH] >= 0 else None)
        if started:
            self._event(a[A_END], outcome, a[A_JOB], (a, loc))

    def _queue_of(self, job_id: int) -> str:
        e = self.rm.jobs.get(job_id)
        return e.queue if e is not None else "root"

    def _done(self, d: tuple) -> None:
        job_id, ok, submitted_at, t = d[0], bool(d[1]), d[2], d[3]
        j = self.tally(job_id)
        j.ok, j.finished_at = ok, t
        j.reason = d[5] if len(d) > 5 else ""
        if self.metrics:
            self.metrics.job_done(ok, t - submitted_at)
        self._event(t, "job done" if ok else "job failed", job_id,
                    f"after {t - submitted_at:.1f} s" + (f": {j.reason}" if j.reason and not ok else ""))

    # ---- samples of the RM's state -------------------------------------------------------
    def sample(self, now: float) -> None:
        """Note the queues' shares and the busy cores now (the dashboard's chart)."""
        busy = float(np.sum(np.where(self.rm.alive == 1, self.rm.cfg.server_cores - self.tap.cpu_free, 0.0)))
        self.history.append((round(now, 2), {q: round(float(v), 3) for q, v in self.rm.shares.items()},
                             round(busy, 3)))
