"""What a JM host's report (HostReport, every host_report_s) tells the RM, and what it answers:
re-send what the host missed (a token message, a StartJob), learn its jobs' demand and
progress, and tell it to drop jobs that are not its own (any more)."""
from __future__ import annotations

from apollo.core.effects import Persist, Send
from apollo.core.messages import HostReport, ReleaseJob

from .admission import Admission
from .jm_homes import JmHomes
from .jobs import JobEntry
from .token_messages import TokenMessages


class HostReports:
    def __init__(self, jobs: dict[int, JobEntry], homes: JmHomes, admission: Admission, messages: TokenMessages,
                 host_report_s: float) -> None:
        self.jobs = jobs
        self.homes = homes
        self.admission = admission
        self.messages = messages
        # a message younger than this may still be on its way: not missed yet
        self.late_s = 2 * host_report_s

    def on_report(self, r: HostReport, now: float) -> list:
        h = r.host
        homes, adm = self.homes, self.admission
        out: list = homes.heard_from(h, now)
        held: set[int] = set()       # its jobs it reports
        jobs = self.jobs
        late = self.late_s
        # (typed, and the set and dict called on their objects: compiled, C calls and the
        # entries' fields as struct reads, for the one row per live job per report)
        job_id: int
        seq: int
        demand: int                  # (whole CPUs: compared as floats, exactly, with the entry's)
        in_use: int
        for job_id, seq, demand, in_use in zip(r.jobs.tolist(), r.seqs.tolist(), r.demand.tolist(),
                                               r.in_use.tolist()):
            e = jobs.get(job_id)
            if e is None or e.state != "running":
                out.append(Send(h, ReleaseJob(job_id, True)))      # finished, or cancelled: stop it
                continue
            if e.host == h and e.admitted:
                if seq == e.seq and float(demand) == e.demand and float(in_use) == e.in_use:
                    # the common row: what the RM holds already (it had heard the last grant)
                    held.add(job_id)
                    t, u = e.tokens, e.in_use
                    e.may_run = u if u > t else t          # (max(e.tokens, e.in_use))
                    continue
            elif not e.admitted or not e.host:
                # a restarted RM that had not re-admitted it yet: it is this host's
                homes.home(e, h)
                if not e.admitted:
                    out += adm.admit_waiting(e, 0, now, offer=False)
                out.append(Persist("home", (job_id, h, e.generation)))
            else:
                out.append(Send(h, ReleaseJob(job_id, False)))     # adopted by another host
                continue
            held.add(job_id)
            if seq < e.seq and now - e.tokens_at > late:      # (not one still on its way)
                m = self.messages.resend(e, now)
                if m is not None:
                    out.append(m)
            if (float(demand) != e.demand or float(in_use) != e.in_use) and now - e.demand_at > late:
                # a JobDemand lost (it is sent only on a change): the report's figures stand in
                adm.note_demand(e, demand, in_use, seq)
            elif seq >= e.seq:
                e.may_run = max(e.tokens, e.in_use)
        for job_id, done in zip(r.progress_jobs.tolist(), r.progress):
            e = jobs.get(job_id)
            if e is not None and e.host == h and e.state == "running":
                e.done = done
                out.append(Persist("progress", (job_id, done)))
        if len(held) == homes.homed_at(h):
            return out              # (it reported every job homed there)
        for e in self.jobs.values():
            if e.host == h and e.admitted and e.job_id not in held and now - e.offered_at >= late:
                # The host does not run it: its StartJob was lost, or the host restarted and lost
                # its JM, whose attempts may still be queued or running at PNs. Offered again as
                # a new home of the job: its JM adopts what the PNs hold and numbers its own
                # attempts above theirs (a fresh JM re-sent attempt 1 of tasks still running as
                # attempt 1: a PN ran both under one key). (A finished job's host repeats its
                # JobDone instead.)
                out += homes.new_generation(e, now)
        return out
