"""The messages that tell a job's JM its tokens: StartJob (an offer to a home), TokenGrant and
ReclaimTokens. Every one is numbered (``seq``: (RM boots << 32) + count, so a restarted RM
numbers above its earlier incarnations) and the last one kept per job, to be re-sent to a JM
whose host reports an older seq."""
from __future__ import annotations

from apollo.core.effects import Send
from apollo.core.messages import ReclaimTokens, StartJob, TokenGrant

from .jobs import JobEntry


class TokenMessages:
    def __init__(self) -> None:
        self.seq = 0                     # the last seq sent
        self.now = 0.0                   # the time of the event being handled (the router sets it)
        # jobs whose last message no report of their host has shown applied yet (rm/host_reports.py)
        self.in_flight: set[int] = set()

    def restarted(self, boots: int) -> None:
        """This RM's ``boots``-th start: its seqs go above every one an earlier incarnation sent."""
        self.seq = boots << 32

    def _next_seq(self, e: JobEntry) -> int:
        self.seq += 1
        self.in_flight.add(e.job_id)
        return self.seq

    def grant(self, e: JobEntry, tokens: int) -> Send:
        e.tokens_at = self.now
        e.seq = seq = self._next_seq(e)
        e.last_tokens = msg = TokenGrant(e.job_id, tokens, seq)
        return Send(e.host, msg)

    def reclaim(self, e: JobEntry, keep: int, within_s: float) -> Send:
        e.tokens_at = self.now
        e.seq = seq = self._next_seq(e)
        e.last_tokens = msg = ReclaimTokens(e.job_id, e.tokens, keep, within_s, seq)
        return Send(e.host, msg)

    def offer(self, e: JobEntry, now: float) -> Send:
        """StartJob to the job's host (first admission, a re-offer, or a new home)."""
        e.seq = seq = self._next_seq(e)
        e.offered_at = e.tokens_at = now
        e.last_tokens = msg = StartJob(e.job_id, e.spec, e.tokens, e.submitted_at, e.reply_to, seq,
                                       e.generation, e.done, e.clones, e.clone_cpu, e.clones_low)
        return Send(e.host, msg)

    def resend(self, e: JobEntry, now: float) -> Send | None:
        """The job's last token message again (a give-back's deadline stays where it was)."""
        m = e.last_tokens
        if type(m) is ReclaimTokens and m.within_s > 0:
            left = max(0.0, e.reclaim[1] - now) if e.reclaim else 0.0
            m = ReclaimTokens(m.job_id, m.tokens, m.keep, left, m.seq)
        e.tokens_at = now
        return Send(e.host, m) if m is not None else None
