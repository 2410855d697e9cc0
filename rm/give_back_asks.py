"""Asking JMs to give tokens back: the sharing policy's Reclaims (rm/give_back.py computes them)
turned into ReclaimTokens, each asked once, none asked again before the last one's effect is
heard, and called off when no longer owed."""
from __future__ import annotations

from apollo.core.effects import Log

from .cluster_load import ClusterLoad
from .jobs import JobEntry
from .sharing import Reclaim
from .token_messages import TokenMessages

# A give-back that kills at once is not asked again of the same job until its JM and the
# others have reported what the kill changed (two views): asked again on the figures of
# before, it would kill the same shortfall twice.
SETTLE_VIEWS = 2
KEEP_ALL = 2 ** 31 - 1       # ReclaimTokens.keep that kills nothing (a give-back called off)


class GiveBackAsks:
    def __init__(self, jobs: dict[int, JobEntry], cluster: ClusterLoad, messages: TokenMessages,
                 view_interval_s: float) -> None:
        self.jobs = jobs
        self.cluster = cluster
        self.messages = messages
        self.settle_s = SETTLE_VIEWS * view_interval_s

    def ask(self, reclaims: list[Reclaim], now: float) -> list:
        """A round's give-backs: ask each owed one not yet asked, call off the ones no longer
        owed."""
        out: list = []
        owed = set()
        for r in reclaims:
            e = self.jobs[r.job_id]
            owed.add(r.job_id)
            deadline = now + r.within_s
            if e.reclaim and e.reclaim[0] == r.tokens and abs(e.reclaim[1] - deadline) < 0.05:
                continue            # already asked
            if deadline <= now + 1e-9 and now < e.settle_until:
                continue            # its last kill has not been heard of yet
            e.reclaim = (r.tokens, deadline)
            # the JM kills at the deadline by itself: nothing more is asked of it at once until
            # what that did has been heard
            e.settle_until = max(deadline, now) + self.settle_s
            out.append(self.messages.reclaim(e, r.tokens, r.within_s))
            out.append(Log("reclaim", (r.job_id, now, e.queue, self.cluster.held(r.job_id) - r.tokens, r.within_s)))
        for e in self.jobs.values():
            if e.reclaim and e.job_id not in owed and e.reclaim[1] > now:
                # no longer owed (the shortfall was met as tasks ended): call the kill off
                e.reclaim = ()
                out.append(self.messages.reclaim(e, KEEP_ALL, 0.0))
            elif e.reclaim and e.job_id not in owed:
                e.reclaim = ()
        return out
