"""The simulated cluster's submitting side (apollo.tools.simulate): submits the workload's jobs,
counts their answers and stops the run when every job has one; in a closed loop (``backlog``),
submits the next job as each one ends.

A submission is sent again with its idempotency key until the RM acknowledges it, then the job
is asked after by that key until its outcome comes (the RM answers with the outcome once there
is one), so a lost message or a crashed RM loses no job. What a job costs while it runs is its
own due times, not a share of a periodic sweep: one timer, set for the earliest due job, and
each job's next question spaced further out the longer it runs (POLL_S, doubling up to
POLL_MAX_S). A long job that was asked after every POLL_S was most of a long-task simulation's
messages (the RM's outcome comes unasked unless it is lost, so a question is only a repair).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import TYPE_CHECKING

from apollo.core.effects import Send, SetTimer, Timer
from apollo.core.messages import JobAccepted, JobDone, JobQuery, SubmitJob

if TYPE_CHECKING:
    from apollo.runtime.sim import SimRuntime

RETRY_S = 5.0           # unacknowledged: submitted again after this long
POLL_S = 30.0           # acknowledged: first asked after this long, until the outcome comes ...
POLL_MAX_S = 480.0      # ... each next question twice as far out as the last, up to this
DUE_EPS = 1e-9


@dataclass(frozen=True)
class Submit:
    """The client's own event: submit job ``index`` now."""
    index: int


class Client:
    def __init__(self, expected: int, runtime: SimRuntime, jobs: dict, backlog: list | None = None) -> None:
        self.expected = expected
        self.runtime = runtime
        self.jobs = jobs                      # index -> spec
        self.finished = 0
        self.results: dict[int, JobDone] = {}
        self.accepted: set[int] = set()
        self.refused: set[int] = set()
        self.backlog = backlog or []          # (job index, spec) not submitted yet, in order
        self.due_at: dict[int, float] = {}    # outstanding job -> when it is next submitted or asked
        self.gap: dict[int, float] = {}       # accepted job -> the wait before its next question
        self._due: list[tuple[float, int]] = []   # heap of (due time, job); stale when due_at moved
        self._timer_at = float("inf")         # when the armed timer fires (inf: none armed)

    def handle(self, event, now, rng):
        t = type(event)
        out: list = []
        if t is Submit:
            self._submit(event.index, now, out)
        elif t is Timer:
            self._timer_at = float("inf")
            due, due_at = self._due, self.due_at
            while due and due[0][0] <= now + DUE_EPS:
                at, i = heapq.heappop(due)
                if due_at.get(i) != at:
                    continue            # answered, or rescheduled since
                if i in self.accepted:
                    self._ask(i, now, out)
                else:
                    self._submit(i, now, out)
        elif t is JobDone:
            if event.job_id in self.results:
                return []        # the second copy (the JM's and the RM's both come)
            self.results[event.job_id] = event
            self._settled(event.job_id)
            self.finished += 1
            self._next(now, out)
        elif t is JobAccepted:
            i = event.job_id
            if event.accepted:
                if i not in self.accepted and i in self.due_at and i not in self.results:
                    self.accepted.add(i)
                    self.gap[i] = POLL_S
                    self._schedule(i, now + POLL_S)
            elif event.key.startswith("sim:") and int(event.key[4:]) in self.accepted:
                # asked after by its key, the job is not stored (the RM lost its store): submit
                # it again
                i = int(event.key[4:])
                self.accepted.discard(i)
                if i not in self.results:
                    self._submit(i, now, out)
            elif i not in self.refused and i not in self.results:
                self.refused.add(i)
                self._settled(i)
                self.finished += 1
                self._next(now, out)
        if self.finished >= self.expected:
            self.runtime.stopped = True
        self._arm(now, out)
        return out

    def _submit(self, i: int, now: float, out: list) -> None:
        self.gap.pop(i, None)
        self._schedule(i, now + RETRY_S)
        out.append(Send("rm", SubmitJob(i, self.jobs[i], "client", f"sim:{i}")))

    def _ask(self, i: int, now: float, out: list) -> None:
        """An accepted job's outcome asked after by its key (the RM stored the job before it
        said so): the spec need not ride along again."""
        gap = self.gap.get(i, POLL_S)
        self.gap[i] = min(2.0 * gap, POLL_MAX_S)
        self._schedule(i, now + self.gap[i])
        out.append(Send("rm", JobQuery(f"sim:{i}", "client")))

    def _schedule(self, i: int, at: float) -> None:
        self.due_at[i] = at
        heapq.heappush(self._due, (at, i))

    def _settled(self, i: int) -> None:
        self.due_at.pop(i, None)
        self.gap.pop(i, None)
        if len(self._due) > 2 * len(self.due_at) + 64:     # (answered jobs' entries, dropped)
            self._due = [(at, j) for j, at in self.due_at.items()]
            heapq.heapify(self._due)

    def _arm(self, now: float, out: list) -> None:
        """One timer, for the earliest due job (set again when an earlier one comes)."""
        due, due_at = self._due, self.due_at
        while due and due_at.get(due[0][1]) != due[0][0]:
            heapq.heappop(due)
        if due and due[0][0] < self._timer_at - DUE_EPS:
            self._timer_at = due[0][0]
            out.append(SetTimer(max(due[0][0] - now, 0.0), "check"))

    def _next(self, now: float, out: list) -> None:
        if self.backlog:
            i, _ = self.backlog.pop(0)
            self._submit(i, now, out)
