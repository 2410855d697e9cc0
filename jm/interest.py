"""Which of a JM host's jobs a new cluster view can give anything to do.

A view comes every second; most live jobs of a long-task workload have nothing to gain from
it (no task ready, nothing new to tell the RM, nothing overdue, no queued task an idle server
could take). Asking each of them (``JmState.wants_view``) was a cost per live job per view;
these indexes make it a cost per job that changed or fell due:

- ``wanting``: jobs whose own state says yes (``JmState.needs_view``: tasks ready, a report the
  RM has not heard, clone grant to give back). That state moves only with a stimulus of the
  job, so it is looked at again only for jobs ``touched`` since the last view;
- ``due``: a heap of the jobs' watchdog times (``Watchdog.watch_at``), as of their last stimulus;
- ``queued``: jobs with tasks waiting in PN queues, which an idle server in the view may let
  move (a duplicate; only when duplicates run at all).

The asked jobs go in the host's job order (the order of ``JmHost.jms``), each still asked
``wants_view`` itself, so exactly the jobs asked before run ``on_view``, in the same order.
One more thing keeps the runs the same: the view's idle servers are found once per view, by
whoever asks first (``ViewCache.idle_servers``), and before, the first job with nothing of its
own to do asked, in its turn; ``to_ask`` says where that was, and the host takes the finding
there (``ViewCache.look_for_idle``: made from the view as it was then, when first asked).
"""
from __future__ import annotations

import heapq
from typing import Any, Final

from apollo.core.nonzero import count_nonzero

INF: Final = float("inf")


class ViewInterest:
    __slots__ = ("order", "next_order", "touched", "wanting", "queued", "due", "due_at", "dups")

    def __init__(self, dups: bool) -> None:
        self.dups = dups                       # duplicates run: queued tasks may move to idle servers
        self.order: dict[int, int] = {}        # job -> its place in the host's job order
        self.next_order = 0
        self.touched: set[int] = set()         # jobs given a stimulus since the last view
        self.wanting: set[int] = set()         # needs_view() as of the job's last stimulus
        self.queued: set[int] = set()          # tasks waiting in queues, as of the last stimulus
        self.due: list[tuple[float, int]] = []   # heap of (watch_at, job), some stale
        self.due_at: dict[int, float] = {}     # job -> the watch_at its live heap entry holds

    # ---- what the host tells ---------------------------------------------------------
    def started(self, job_id: int) -> None:
        self.order[job_id] = self.next_order
        self.next_order += 1
        self.touched.add(job_id)

    def touch(self, job_id: int) -> None:
        """The job had a stimulus: its state may have moved."""
        self.touched.add(job_id)

    def gone(self, job_id: int) -> None:
        self.order.pop(job_id, None)
        self.touched.discard(job_id)
        self.wanting.discard(job_id)
        self.queued.discard(job_id)
        self.due_at.pop(job_id, None)         # (its heap entries go stale)

    # ---- a view -----------------------------------------------------------------------
    def _refresh(self, jms: dict) -> None:
        """Look again at the jobs touched since the last view."""
        wanting, queued, due, due_at = self.wanting, self.queued, self.due, self.due_at
        for job_id in self.touched:
            jm = jms.get(job_id)
            if jm is None:
                continue
            if jm.needs_view():
                wanting.add(job_id)
            else:
                wanting.discard(job_id)
            if self.dups and count_nonzero(jm.tasks.waiting):
                queued.add(job_id)
            else:
                queued.discard(job_id)
            at = jm.watchdog.watch_at
            if at != due_at.get(job_id):
                if at < INF:
                    heapq.heappush(due, (at, job_id))
                    due_at[job_id] = at
                else:
                    due_at.pop(job_id, None)
        self.touched.clear()
        if len(due) > 2 * len(due_at) + 64:
            # (stale entries go when their time passes; those of times far ahead, or of jobs gone,
            # are dropped here, so the heap stays of the order of the live jobs)
            self.due = [(at, job_id) for job_id, at in due_at.items()]
            heapq.heapify(self.due)

    def to_ask(self, jms: dict, now: float) -> tuple[list[int], int | None]:
        """The jobs to ask ``wants_view`` at ``now``, in the host's job order (every job that
        could say yes), and the first job in that order that has nothing of its own to do
        (None: none, or duplicates do not run), where the view's idle servers were first
        looked for. Each asked job is then given a stimulus (on_view) or stays as it was."""
        self._refresh(jms)
        due, due_at = self.due, self.due_at
        ask = set(self.wanting)
        ask |= self.queued
        busy = set(self.wanting)            # jobs with something of their own to do now
        while due and due[0][0] <= now:
            at, job_id = heapq.heappop(due)
            if due_at.get(job_id) == at:     # (else stale: the job's watch_at moved since)
                del due_at[job_id]
                ask.add(job_id)
                busy.add(job_id)
        order = self.order
        asked = sorted(ask, key=order.__getitem__)
        first_idle = None
        if self.dups:
            for job_id in jms:
                if job_id not in busy:
                    first_idle = job_id
                    break
        return asked, first_idle

    # ---- invariants ------------------------------------------------------------------
    def validate(self, jms: dict) -> None:
        assert list(self.order) == list(jms), "job order out of step with the host's"
        for job_id, jm in jms.items():
            if job_id in self.touched:
                continue
            assert (job_id in self.wanting) == jm.needs_view(), "a job's own wish for a view not indexed"
            assert (job_id in self.queued) == (self.dups and bool(jm.tasks.waiting.any())), \
                "a job with queued tasks not indexed"
            at = jm.watchdog.watch_at
            assert self.due_at.get(job_id, INF) == at, "a job's watchdog time not in the heap"
