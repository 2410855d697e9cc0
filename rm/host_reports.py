"""What a JM host's report (HostReport, every host_report_s) tells the RM, and what it answers:
re-send what the host missed (a token message, a StartJob), learn its jobs' demand and
progress, and tell it to drop jobs that are not its own (any more).

A report is a delta: the rows changed since the report the RM acknowledged (ReportAck), so the
RM keeps a copy of each host's table (``HostCopy``) and applies the deltas to it, checking the
copy against the report's count and digest. The repairs a full report made by going over every
row go over what is in flight instead: the jobs whose last token message (or StartJob) no
report has shown applied (``TokenMessages.in_flight``), the rows that disagreed with a JobDemand
heard just before (``disagree``), and the jobs a host was told to drop that it still lists
(``HostCopy.releasing``). A full report (the host's first, or one the RM asked for, after its
own restart or a delta it could not apply) is gone over whole, as before."""
from __future__ import annotations

from apollo.core.effects import Log, Persist, Send
from apollo.core.messages import HostReport, ReleaseJob, ReportAck, report_digest

from .admission import Admission
from .jm_homes import JmHomes
from .jobs import JobEntry
from .token_messages import TokenMessages


class HostCopy:
    """The RM's copy of one JM host's report table: job -> (token seq, demand, CPUs in use) as
    of the host's report ``seq``, and its digest (the xor of its rows' report_digest)."""
    __slots__ = ("seq", "rows", "digest", "releasing")

    def __init__(self, seq: int) -> None:
        self.seq = seq
        self.rows: dict[int, tuple[int, int, int]] = {}
        self.digest = 0
        self.releasing: set[int] = set()   # jobs told to drop (ReleaseJob) that it still lists

    def put(self, job_id: int, seq: int, demand: int, in_use: int) -> None:
        old = self.rows.get(job_id)
        if old is not None:
            self.digest ^= report_digest(job_id, old[0], old[1], old[2])
        self.rows[job_id] = (seq, demand, in_use)
        self.digest ^= report_digest(job_id, seq, demand, in_use)

    def drop(self, job_id: int) -> None:
        old = self.rows.pop(job_id, None)
        if old is not None:
            self.digest ^= report_digest(job_id, old[0], old[1], old[2])
        self.releasing.discard(job_id)

    def agrees(self, r: HostReport) -> bool:
        """Whether the copy is the table the host had when it made ``r``."""
        return len(self.rows) == r.count and self.digest == r.digest

    def validate(self) -> None:
        d = 0
        for job_id, (seq, demand, in_use) in self.rows.items():
            d ^= report_digest(job_id, seq, demand, in_use)
        assert d == self.digest, "a host's report copy out of sync with its digest"
        assert self.releasing <= set(self.rows), "releasing a job the host no longer lists"


FULL, DELTA, STALE, UNKNOWN = "full", "delta", "stale", "unknown"


def apply_report(copy: HostCopy | None, r: HostReport) -> tuple[HostCopy | None, str]:
    """Report ``r`` applied to the copy of its host's table: a full report makes a new copy; a
    delta applies to a copy of its base or later (its rows are absolute), is STALE if the copy
    is as new or newer (overtaken), and UNKNOWN if the copy is older than its base or missing.
    The copy to keep, and which of the four it was."""
    if r.base == 0:
        copy = HostCopy(r.seq)
    elif copy is None or copy.seq < r.base:
        return copy, UNKNOWN
    elif r.seq <= copy.seq:
        return copy, STALE
    else:
        copy.seq = r.seq
        for job_id in r.ended.tolist():
            copy.drop(job_id)
    put = copy.put
    for job_id, seq, demand, in_use in zip(r.jobs.tolist(), r.seqs.tolist(), r.demand.tolist(), r.in_use.tolist()):
        put(job_id, seq, demand, in_use)
    return copy, (FULL if r.base == 0 else DELTA)


class HostReports:
    def __init__(self, jobs: dict[int, JobEntry], homes: JmHomes, admission: Admission, messages: TokenMessages,
                 host_report_s: float) -> None:
        self.jobs = jobs
        self.homes = homes
        self.admission = admission
        self.messages = messages
        # a message younger than this may still be on its way: not missed yet
        self.late_s = 2 * host_report_s
        self.copies: dict[str, HostCopy] = {}
        self.disagree: set[int] = set()     # rows that disagreed with a JobDemand heard just before

    def on_report(self, r: HostReport, now: float) -> list:
        h = r.host
        out: list = self.homes.heard_from(h, now)
        copy, kind = apply_report(self.copies.get(h), r)
        if kind == UNKNOWN:
            # (a delta from a report this RM never applied: it restarted, or that one was lost
            # along with the acknowledgements after it; every row, next)
            out.append(Send(h, ReportAck(0)))
            return out
        if kind == STALE or copy is None:
            return out              # an older report, overtaken: the copy is newer
        self.copies[h] = copy
        held = self._rows(h, copy, r, now, out)
        self._progress(h, r, out)
        if kind == FULL:
            self._missing(h, held, now, out)
        else:
            for job_id in r.ended.tolist():
                e = self.jobs.get(job_id)
                if e is not None and e.state == "running" and e.admitted and e.host == h:
                    self.messages.in_flight.add(job_id)     # it no longer runs it: missing
            self._repairs(h, copy, now, out)
        if not copy.agrees(r):
            out.append(Log("warn", (f"{h}: its report {r.seq} disagrees with the RM's copy of its jobs "
                                    f"({len(copy.rows)} rows, the host says {r.count}); asked for all",)))
            out.append(Send(h, ReportAck(0)))
        else:
            out.append(Send(h, ReportAck(r.seq)))
        return out

    def _rows(self, h: str, copy: HostCopy, r: HostReport, now: float, out: list) -> set[int]:
        """The report's rows, each looked at (``_row``); the jobs that are this host's."""
        held: set[int] = set()
        job_id: int
        seq: int
        demand: int                  # (whole CPUs: compared as floats, exactly, with the entry's)
        in_use: int
        for job_id, seq, demand, in_use in zip(r.jobs.tolist(), r.seqs.tolist(), r.demand.tolist(),
                                               r.in_use.tolist()):
            if self._row(h, copy, job_id, seq, demand, in_use, now, out):
                held.add(job_id)
        return held

    def _row(self, h: str, copy: HostCopy, job_id: int, seq: int, demand: int, in_use: int, now: float,
             out: list) -> bool:
        """One row of host ``h``: whether the job is this host's (else it is told to drop it)."""
        jobs, homes, adm = self.jobs, self.homes, self.admission
        e = jobs.get(job_id)
        if e is None or e.state != "running":
            copy.releasing.add(job_id)
            out.append(Send(h, ReleaseJob(job_id, True)))      # finished, or cancelled: stop it
            return False
        if e.host == h and e.admitted:
            if seq == e.seq and float(demand) == e.demand and float(in_use) == e.in_use:
                # the common row: what the RM holds already (it had heard the last grant)
                self.messages.in_flight.discard(job_id)
                t, u = e.tokens, e.in_use
                e.may_run = u if u > t else t          # (max(e.tokens, e.in_use))
                return True
        elif not e.admitted or not e.host:
            # a restarted RM that had not re-admitted it yet: it is this host's
            homes.home(e, h)
            if not e.admitted:
                out += adm.admit_waiting(e, 0, now, offer=False)
            out.append(Persist("home", (job_id, h, e.generation)))
        else:
            copy.releasing.add(job_id)
            out.append(Send(h, ReleaseJob(job_id, False)))     # adopted by another host
            return False
        if seq >= e.seq:
            self.messages.in_flight.discard(job_id)
        elif now - e.tokens_at > self.late_s:                 # (not one still on its way)
            m = self.messages.resend(e, now)
            if m is not None:
                out.append(m)
        if float(demand) != e.demand or float(in_use) != e.in_use:
            if now - e.demand_at > self.late_s:
                # a JobDemand lost (it is sent only on a change): the report's figures stand in
                adm.note_demand(e, demand, in_use, seq)
            else:
                self.disagree.add(job_id)     # (looked at again while the copy says so)
        elif seq >= e.seq:
            e.may_run = max(e.tokens, e.in_use)
        return True

    def _progress(self, h: str, r: HostReport, out: list) -> None:
        for job_id, done in zip(r.progress_jobs.tolist(), r.progress):
            e = self.jobs.get(job_id)
            if e is not None and e.host == h and e.state == "running":
                e.done = done
                out.append(Persist("progress", (job_id, done)))

    def _missing(self, h: str, held: set[int], now: float, out: list) -> None:
        """After a full report: the admitted jobs homed at ``h`` it does not list."""
        if len(held) == self.homes.homed_at(h):
            return                  # (it reported every job homed there)
        for e in self.jobs.values():
            if e.host == h and e.admitted and e.job_id not in held and now - e.offered_at >= self.late_s:
                # The host does not run it: its StartJob was lost, or the host restarted and lost
                # its JM, whose attempts may still be queued or running at PNs. Offered again as
                # a new home of the job: its JM adopts what the PNs hold and numbers its own
                # attempts above theirs (a fresh JM re-sent attempt 1 of tasks still running as
                # attempt 1: a PN ran both under one key). (A finished job's host repeats its
                # JobDone instead.)
                out += self.homes.new_generation(e, now)

    def _repairs(self, h: str, copy: HostCopy, now: float, out: list) -> None:
        """After a delta: what a full report's rows would have repaired, from what is in flight
        (O(in flight), not O(jobs))."""
        jobs, late, rows = self.jobs, self.late_s, copy.rows
        for job_id in list(copy.releasing):        # a ReleaseJob lost: told again
            copy.releasing.discard(job_id)
            seq, demand, in_use = rows[job_id]
            self._row(h, copy, job_id, seq, demand, in_use, now, out)
        in_flight = self.messages.in_flight
        for job_id in list(in_flight):
            e = jobs.get(job_id)
            if e is None or e.state != "running" or not e.admitted or not e.host:
                in_flight.discard(job_id)
                continue
            if e.host != h:
                continue
            listed = rows.get(job_id)
            if listed is None:
                if now - e.offered_at >= late:
                    # not running it: as in _missing (its StartJob lost, or it dropped the job)
                    out += self.homes.new_generation(e, now)
            elif listed[0] >= e.seq:
                in_flight.discard(job_id)
            elif now - e.tokens_at > late:              # a token message lost: sent again
                m = self.messages.resend(e, now)
                if m is not None:
                    out.append(m)
        disagree = self.disagree
        for job_id in list(disagree):
            e = jobs.get(job_id)
            if e is None or e.state != "running":
                disagree.discard(job_id)
                continue
            if e.host != h:
                continue
            says = rows.get(job_id)
            if says is None or (float(says[1]) == e.demand and float(says[2]) == e.in_use):
                disagree.discard(job_id)
            elif now - e.demand_at > late:
                # a JobDemand lost: the report's figures stand in
                self.admission.note_demand(e, says[1], says[2], says[0])
                disagree.discard(job_id)

    def validate(self) -> None:
        for copy in self.copies.values():
            copy.validate()
