"""Giving back: a job that holds more than the RM now grants it (docs/sharing.md).

A cut (a TokenGrant below what the job's regular attempts hold) demotes the queued ones
beyond the tokens: they wait as opportunistic attempts (DemoteTask). A give-back with a
deadline (ReclaimTokens) also tells every server where the job's regular attempts are that
the job yields there from the deadline (YieldJob), until the job is back within the line the
RM drew. And while an opportunistic attempt of the job runs and a regular one waits in a
queue, the token is better spent on the one that runs (the waiting one is demoted, the
running one upgraded).
"""
from __future__ import annotations

from typing import Final

import numpy as np

from apollo.core.effects import Log, Send
from apollo.core.messages import DemoteTask, ReclaimTokens, YieldJob

from .attempts import Attempts
from .tasks import DISPATCHED, INF, RUNNING, TaskTable, pn_address

KEEP_ALL: Final = 2 ** 31 - 1      # ReclaimTokens.keep of a give-back called off


class GiveBack:
    __slots__ = ("tasks", "attempts", "keep", "yield_at", "marked")

    def __init__(self, tasks: TaskTable, attempts: Attempts) -> None:
        self.tasks = tasks
        self.attempts = attempts
        self.keep = KEEP_ALL                   # CPUs a give-back lets it keep (ReclaimTokens.keep)
        self.yield_at = INF                    # ...and when its attempts yield, if it holds more
        self.marked: set[int] = set()          # servers told the job yields there (YieldJob)

    def reclaim(self, msg: ReclaimTokens, now: float) -> bool:
        """The RM takes tokens back, by a deadline; True if the deadline moved (every server
        where the job yields is told again)."""
        self.keep = msg.keep
        was = self.yield_at
        self.yield_at = INF if msg.keep >= KEEP_ALL else now + msg.within_s
        return abs(self.yield_at - was) > 1e-6

    def demote_beyond_tokens(self, out: list) -> None:
        """The job holds fewer tokens than its regular attempts: those its PNs said are queued
        wait as opportunistic ones (DemoteTask), the most recently sent first, until the rest fit
        in its tokens. (One queued for less than PnConfig.queued_report_s is not known queued:
        it goes when its PN says so.)"""
        tk = self.tasks
        excess = tk.used_tokens - tk.tokens * tk.max_depth()
        if excess <= 1e-9:
            return
        cpu_of = tk.cpu_of
        for t in tk.demoting:
            excess -= cpu_of.item(tk.stage_of.item(t))
        if excess <= 1e-9:
            return
        cand = np.flatnonzero(tk.waiting & ~tk.opp & (tk.state == DISPATCHED))
        for t in cand[np.argsort(-tk.dispatch_t[cand], kind="stable")].tolist():
            if excess <= 1e-9:
                break
            if t in tk.demoting or (self.attempts.extra and t in self.attempts.extra):
                continue          # (one with a duplicate out: that one may start any moment, as it is)
            tk.demoting.add(t)
            excess -= cpu_of.item(tk.stage_of.item(t))
            out.append(Send(pn_address(tk.server.item(t)), DemoteTask(tk.job_id, t, tk.attempt.item(t))))

    def swap_queued_for_running(self, out: list) -> None:
        """A token is better spent on an attempt that runs than on one that waits: while an
        opportunistic attempt of the job runs and a regular one waits in a queue (as its PN
        said), the waiting one is demoted (DemoteTask), and the token it gives back upgrades
        the running one (Attempts.upgrade). What the job holds then is what it runs."""
        tk = self.tasks
        st = tk.state
        cpu_of, stage_of = tk.cpu_of, tk.stage_of
        running = sum(cpu_of.item(stage_of.item(t)) for t in tk.opp_active if st.item(t) == RUNNING) - \
            sum(cpu_of.item(stage_of.item(t)) for t in tk.demoting)       # (demotions already out)
        if running <= 1e-9:
            return
        cand = np.flatnonzero(tk.waiting & ~tk.opp & (st == DISPATCHED))
        for t in cand[np.argsort(-tk.dispatch_t[cand], kind="stable")].tolist():
            if running <= 1e-9:
                break
            if t in tk.demoting or (self.attempts.extra and t in self.attempts.extra):
                continue
            tk.demoting.add(t)
            running -= cpu_of.item(stage_of.item(t))
            out.append(Send(pn_address(tk.server.item(t)), DemoteTask(tk.job_id, t, tk.attempt.item(t))))

    def sync_yield(self, now: float, out: list, resend: bool = False) -> None:
        """While a give-back's kill line is below what the job holds, every server where its
        regular attempts are knows the job yields there from the deadline (YieldJob): regular
        work of others waiting for their room there takes it then, whichever server it waits
        at, and no more than waits. When the job is back within the line, they are told."""
        tk = self.tasks
        over = self.yield_at < INF and tk.used_tokens > max(self.keep, tk.tokens) * tk.max_depth() + 1e-9
        if over:
            if self.marked and not resend:
                return
            st = tk.state
            act = ((st == DISPATCHED) | (st == RUNNING)) & ~tk.opp
            servers = set(tk.server[act].tolist())
            for e in (x for ex in self.attempts.extra.values() for x in ex):
                servers.add(e.server)
            after = max(0.0, self.yield_at - now)
            for s in sorted(servers if resend else servers - self.marked):
                out.append(Send(pn_address(s), YieldJob(tk.job_id, after)))
            self.marked |= servers
        elif self.marked:
            for s in sorted(self.marked):
                out.append(Send(pn_address(s), YieldJob(tk.job_id, -1.0)))
            self.marked = set()
            if tk.used_tokens <= self.keep * tk.max_depth():
                self.yield_at = INF         # the give-back is done

    def demoted(self, t: int, now: float, out: list) -> None:
        """Its PN made ``t``'s queued regular attempt an opportunistic one (the job held more
        than its tokens): it counts against the opportunistic allowance now, and gets a token
        again, like any opportunistic attempt, when one frees (Attempts.upgrade)."""
        tk = self.tasks
        tk.demoting.discard(t)
        tk.waiting[t] = False
        if tk.opp.item(t):
            return
        cpu = tk.cpu_of.item(tk.stage_of.item(t))
        tk.used_tokens -= cpu
        tk.outstanding_opp += cpu
        tk.opp[t] = True
        tk.opp_active.add(t)
        out.append(Log("demoted", (tk.job_id, t)))
