"""The Resource Monitor: aggregated server load, admission and the token plane.

Never on the critical path: JMs schedule on their last ClusterView whether or
not the RM answers. The RM keeps every server's last wait-time matrix with
its timestamp, marks a server dead when the runtime says its PN's connection went (PeerLost), publishes a
lightly-loaded list, and runs the capacity plane: jobs go to leaf queues of a
queue tree (rm/queues.py; without a queue file, one root queue), wait there
until admitted, and hold tokens that a sharing policy (rm/sharing.py: fair
pools or capacity queues) allocates from a snapshot of the jobs. The tokens
granted never add up to more than the cluster's cores.

Pure state machine, as a router: a stimulus comes in (``handle``: a message or a timer), the
parts that own the RM's state act on it and return the effects (sends, timers, records,
writes to the store), which go back to the runtime; ``validate`` checks the invariants
between stimuli. The parts:

- the cluster's load (rm.cluster_load): servers' matrices, liveness, what each job holds;
- admission and the token ledger (rm.admission), with a queue's max and guarantee
  (rm.queue_limits) and Dolly's clone budget;
- allocation rounds (rm.allocation_round) and the give-backs they ask (rm.give_back_asks);
- the jobs' homes on JM hosts and their failover (rm.jm_homes), and what the hosts report
  (rm.host_reports);
- the numbered token messages to JMs (rm.token_messages).
The router itself takes jobs in (submitted, retried, recovered after a restart) and out
(done, cancelled).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from apollo.core.effects import Log, PeerBack, PeerLost, Persist, Send, SetTimer, Start, Timer
from apollo.core.messages import (CancelJob, ClusterView, Heartbeat, HostReport, JobAccepted, JobDemand, JobDone, JobQuery,
                                  SubmitJob)
from apollo.core.spec import JobSpec

from .admission import ROUND_NOW, ROUND_SOON, Admission
from .allocation_round import AllocationRound
from .cluster_load import ClusterLoad
from .clones import CloneConfig
from .give_back_asks import KEEP_ALL, GiveBackAsks
from .host_reports import HostReports
from .jm_homes import JmHomes
from .jobs import JobEntry, first_demand
from .queues import QueueError, QueueTree
from .sharing import SharingPolicy, make_sharing_policy
from .store import StoredJob, StoredJobs
from .token_messages import TokenMessages

# (KEEP_ALL and JobEntry: as they were read from here before the parts)
__all__ = ["KEEP_ALL", "JobEntry", "RmConfig", "RmState", "single_queue"]


# The single root queue used without a queue file: how its jobs share it, by the names the
# --tokens option has always taken (even: max-min fair among jobs; fifo: oldest job first).
SINGLE_QUEUE_ORDERS = {"even": "fair", "fifo": "fifo"}


def single_queue(tokens: str = "even") -> QueueTree:
    """One root queue holding every job (no queue file)."""
    try:
        order = SINGLE_QUEUE_ORDERS[tokens]
    except KeyError:
        raise ValueError(f"unknown token policy {tokens!r} (known: {', '.join(SINGLE_QUEUE_ORDERS)})") from None
    return QueueTree.single(order)


@dataclass(slots=True)
class RmConfig:
    servers: int
    shapes: int
    server_cores: float = 4.0
    server_mem_gb: float = 16.0
    view_interval_s: float = 1.0
    # After a (re)start, no ClusterView until every server has reported or this long has passed:
    # a server not heard yet is unknown, not dead (its PN sends its state when it sees the RM
    # back: PeerBack; live, once its process has dialled again, within the transport's backoff).
    rejoin_s: float = 5.0
    lightly_loaded: int = 0          # list length; 0: max(8, servers // 10)
    jm_hosts: tuple[str, ...] = ("jmhost",)
    queues: QueueTree = field(default_factory=single_queue)
    # A JM host that has not reported (HostReport) for this long is dead: its jobs move to
    # another host, whose JMs adopt their attempts. JM hosts report every host_report_s.
    host_dead_after_s: float = 5.0
    host_report_s: float = 1.0
    clones: CloneConfig = field(default_factory=CloneConfig)   # Dolly's clone budget (rm/clones.py)


class RmState:
    # Heartbeats may come as a list of several (a runtime collects those arriving close
    # together): they are folded in with a few array operations instead of one event each.
    batched = (Heartbeat,)
    # Liveness: a server is dead when the runtime says its PN's connection went (PeerLost).
    watches = ("pn",)

    def __init__(self, config: RmConfig, policy: SharingPolicy | None = None) -> None:
        self.cfg = config
        self.tree = config.queues
        self.policy = policy or make_sharing_policy(self.tree)
        self.jobs: dict[int, JobEntry] = {}
        self.next_job_id = 0
        self.by_key: dict[str, int] = {}                  # idempotency key -> job id
        self.outcomes: dict[int, JobDone] = {}            # finished jobs' answers (for retries)
        # The RM's copies of JobDones a JM host also sent its submitter directly: the safety net
        # for a lost direct copy, sent with the next tick's messages (one write for many), not
        # on the job's critical path, which the direct copy is
        self._copies_due: list[tuple[str, JobDone]] = []
        self._started_at = 0.0
        self.cluster = cluster = ClusterLoad(config.servers, config.shapes, config.server_cores,
                                             config.lightly_loaded)
        self.messages = messages = TokenMessages()
        self.homes = homes = JmHomes(config.jm_hosts, config.host_dead_after_s, self.jobs, messages)
        self.admission = admission = Admission(self.tree, self.jobs, cluster, homes, messages, config.clones)
        self.rounds = AllocationRound(self.tree, self.policy, self.jobs, cluster, admission,
                                      GiveBackAsks(self.jobs, cluster, messages, config.view_interval_s))
        self.host_reports = HostReports(self.jobs, homes, admission, messages, config.host_report_s)

    # ---- what the RM's HTTP face, the tools and tests read --------------------------------
    @property
    def matrices(self) -> np.ndarray:
        return self.cluster.matrices

    @property
    def stamps(self) -> np.ndarray:
        return self.cluster.stamps

    @property
    def boot_times(self) -> np.ndarray:
        return self.cluster.boot_times

    @property
    def alive(self) -> np.ndarray:
        return self.cluster.alive

    @property
    def running_tasks(self) -> np.ndarray:
        """Tasks running per server, as its last heartbeat said."""
        return self.cluster.running_tasks

    @property
    def queued_tasks(self) -> np.ndarray:
        return self.cluster.queued_tasks

    @property
    def cpu_free(self) -> np.ndarray:
        return self.cluster.cpu_free

    @property
    def capacity(self) -> float:
        return self.cluster.capacity

    def lightly_loaded(self) -> np.ndarray:
        return self.cluster.lightly_loaded()

    @property
    def hosts_alive(self) -> list[str]:
        return self.homes.hosts_alive

    @property
    def positions(self) -> dict[int, tuple[str, int]]:
        """Waiting job -> (leaf, place in line)."""
        return self.admission.positions

    @property
    def admitted_in(self) -> dict[str, int]:
        """Leaf queue -> admitted jobs."""
        return self.admission.admitted_in

    @property
    def waiting_in(self) -> dict[str, int]:
        """Leaf queue -> waiting jobs."""
        return self.admission.waiting_in

    @property
    def shares(self) -> dict[str, float]:
        """Queue -> share at the last round."""
        return self.rounds.shares

    def held(self, job_id: int) -> float:
        """CPUs the job's regular attempts run on, as the live servers last said: the one account
        of what a job holds (the sharing plane's, the API's, the metrics')."""
        return self.cluster.held(job_id)

    def holding(self) -> dict[str, float]:
        """Each leaf queue's held CPUs: its admitted jobs' (never more than the live cores)."""
        return self.rounds.holding()

    def queue_figures(self) -> dict[str, tuple[float, int, float]]:
        """Per leaf queue: (CPUs held, tokens, CPUs its jobs could use now)."""
        return self.rounds.queue_figures()

    # ---- stimuli -------------------------------------------------------------------------------
    def handle(self, event: Any, now: float, rng: Any) -> list:
        self.messages.now = now
        t = type(event)
        if t is Heartbeat:
            return self._on_heartbeat(event, now)
        if t is list:
            return self._on_heartbeats(event, now)
        if t is Timer:
            if event.key == "tick":
                return self._tick(now)
            return self.rounds.run(now)      # "soon" (waiting jobs) or "policy" (a timeout)
        if t is SubmitJob:
            return self._on_submit(event, now)
        if t is JobQuery:
            return self._queried(event)
        if t is JobDemand:
            e = self.jobs.get(event.job_id)
            if e is not None and e.state == "running":
                self.admission.on_demand(e, event, now)
            return []
        if t is HostReport:
            self.cluster.acked[event.host] = event.view_seq   # (its next view: the rows since)
            return self.host_reports.on_report(event, now)
        if t is JobDone:
            return self._on_done(event, now, told_submitter=True)
        if t is CancelJob:
            return self._on_cancel(event, now)
        if t is Start:
            return self._recover(now, event.stored) + [SetTimer(self.cfg.view_interval_s, "tick")]
        if t is PeerLost or t is PeerBack:
            return self._on_peer(event, t is PeerLost)
        return [Log("warn", (f"rm ignored {t.__name__}",))]

    def _on_heartbeat(self, hb: Heartbeat, now: float) -> list:
        if hb.server >= self.cfg.servers:
            return [_unknown_server(hb)]
        if self.cluster.observe(hb, now):
            self.admission.dirty = True      # a server (back) to life: more tokens to share
        return []

    def _on_heartbeats(self, hbs: list, now: float) -> list:
        """Several heartbeats at once, in arrival order (one event for all of them: the
        per-heartbeat work is a few row writes, less than the event's own cost)."""
        out: list = []
        n = self.cfg.servers
        # (called on the object, each heartbeat typed: compiled, C calls and struct reads; a bound
        # method kept in a local is a Python call that parses its arguments)
        cluster = self.cluster
        grew = False
        hb: Heartbeat
        for hb in hbs:
            if hb.server >= n:
                out.append(_unknown_server(hb))
            elif cluster.observe(hb, now):
                grew = True
        if grew:
            self.admission.dirty = True
        return out

    def _on_peer(self, event: PeerLost | PeerBack, lost: bool) -> list:
        """A PN's connection went (the server is dead: what it holds is freed, its tasks are
        placed again once the next view shows it dead) or came back (its full state follows)."""
        prefix, _, rest = event.address.partition(":")
        if prefix != "pn" or not rest.isdigit() or int(rest) >= self.cfg.servers:
            return []
        s = int(rest)
        if not lost:
            self.cluster.back(s)
            return []
        if self.cluster.lose(s):
            self.admission.dirty = True      # fewer cores to share
            return [Log("servers_dead", (s,))]
        return []

    def _tick(self, now: float) -> list:
        out: list = [SetTimer(self.cfg.view_interval_s, "tick")]
        if self._copies_due:
            out += [Send(to, done) for to, done in self._copies_due]
            self._copies_due = []
        out += self.homes.check(now, self._started_at)
        cluster = self.cluster
        if now - self._started_at < self.cfg.rejoin_s and not cluster.all_alive():
            # Just (re)started: servers we have not heard from yet are unknown, not dead. A view
            # now would tell every JM to give up its running tasks; their stale view is better.
            return out
        # One view per acknowledged view among the hosts (most acknowledge the same one): the
        # rows changed since it (cluster_load: views as deltas)
        cluster.next_view()
        views: dict[int, ClusterView] = {}
        acked = cluster.acked
        for h in self.homes.hosts_alive:
            base = acked.get(h, 0)
            v = views.get(base)
            if v is None:
                v = views[base] = cluster.view(now, base)
            out.append(Send(h, v))
        if self.rounds.due(now):
            out.extend(self.rounds.run(now))
        return out

    # ---- jobs in -------------------------------------------------------------------------------
    def _fits_somewhere(self, spec: JobSpec) -> str:
        for s in spec.stages:
            if s.cpu > self.cfg.server_cores or s.mem_gb > self.cfg.server_mem_gb:
                return (f"stage {s.name!r} asks for {s.cpu} cpu / {s.mem_gb} GB per task; the largest "
                        f"server has {self.cfg.server_cores} cpu / {self.cfg.server_mem_gb} GB")
        return ""

    def _leaf_of(self, spec: JobSpec) -> tuple[str, str]:
        """(leaf queue path, "") or ("", why the queue is refused)."""
        try:
            return self.tree.job_leaf(spec.queue).path, ""
        except QueueError as e:
            return "", f"job {spec.name!r}: {e}"

    def _on_submit(self, msg: SubmitJob, now: float) -> list:
        spec = msg.spec
        if msg.key and msg.key in self.by_key:
            return self._resubmitted(msg)
        why = self._fits_somewhere(spec)
        leaf, bad_queue = self._leaf_of(spec)
        why = why or bad_queue
        job_id = msg.job_id if msg.job_id >= 0 else self.next_job_id
        if job_id in self.jobs or job_id in self.outcomes:
            why = why or f"job id {job_id} is already in use"
        if why:
            return [Send(msg.reply_to, JobAccepted(max(job_id, 0), spec.name, False, why, msg.key)),
                    Log("job_refused", (job_id, spec.name, why))]
        self.next_job_id = max(self.next_job_id, job_id + 1)
        e = JobEntry(job_id, spec, now, msg.reply_to, first_demand(spec), leaf, key=msg.key)
        self.jobs[job_id] = e
        if msg.key:
            self.by_key[msg.key] = job_id
        start = self._admit_or_wait(e, now)
        # Stored (with its host, if admitted at once: one write on the job's critical path, not
        # two), then the StartJob in ``start``, then the acknowledgement: the StartJob is on the
        # job's critical path and the acknowledgement is not (a JobDone may overtake it).
        # (Only its own home write goes: a round run for it may have admitted others.)
        start = [x for x in start if not (type(x) is Persist and x.op == "home" and x.args[0] == job_id)]
        where = "" if e.admitted else f"waiting in queue {leaf} at position {self.positions[job_id][1]}"
        return [Persist("put", (job_id, spec, now, msg.reply_to, msg.key, e.host))] + start + [
            Send(msg.reply_to, JobAccepted(job_id, spec.name, True, where, msg.key)),
            Log("job_submitted", (job_id, now, spec.total_tasks, leaf, spec.user))]

    def _admit_or_wait(self, e: JobEntry, now: float) -> list:
        """Admitted at once, or waiting (a round now or soon, as admission says)."""
        out: list = []
        then = self.admission.admit_now(e, now, out)
        if then == ROUND_NOW:
            out += self.rounds.run(now)
        elif then == ROUND_SOON:
            out += self.rounds.soon()
        return out

    def _resubmitted(self, msg: SubmitJob) -> list:
        """A retried submission (same key): acknowledge the job stored for it again, and repeat
        its outcome if it has finished (the first answers may have been lost)."""
        return self._stored_answer(self.by_key[msg.key], msg.spec.name, msg.reply_to, msg.key)

    def _queried(self, q: JobQuery) -> list:
        """A client asking after the job of its submission ``q.key``: answered as a retried
        submission is; an unknown key is refused, naming it."""
        job_id = self.by_key.get(q.key) if q.key else None
        if job_id is None:
            why = f"no job is stored for submission key {q.key!r}"
            return [Send(q.reply_to, JobAccepted(0, "", False, why, q.key))]
        e = self.jobs.get(job_id)
        return self._stored_answer(job_id, e.spec.name if e is not None else "", q.reply_to, q.key)

    def _stored_answer(self, job_id: int, name: str, reply_to: str, key: str) -> list:
        e = self.jobs.get(job_id)
        out: list = [Send(reply_to, JobAccepted(job_id, name, True, "already stored", key))]
        if e is not None:
            e.reply_to = reply_to        # a restarted client listens elsewhere
        done = self.outcomes.get(job_id)
        if done is not None:
            out.append(Send(reply_to, done))
        return out

    def _recover(self, now: float, stored: StoredJobs | None) -> list:
        """After a restart, re-admit (or queue again) every stored job that had not finished; ids
        continue after the highest ever stored, finished jobs included."""
        self._started_at = now
        self.homes.restarted(now, stored.boots if stored is not None else 0)
        if stored is None:
            return []
        boots = stored.boots + 1
        self.messages.restarted(boots)
        self.cluster.restarted(boots)
        out: list = [Persist("boot", (boots,))]
        self.next_job_id = max(self.next_job_id, stored.max_job_id + 1)
        for job_id, key, state, reason, at in stored.finished:
            if key:
                self.by_key[key] = job_id
            self.outcomes[job_id] = JobDone(job_id, state == "done", reason if state != "done" else "", at or 0.0, 0)
        for sj in stored.unfinished:
            out += self._recover_job(sj, now)
        return out

    def _recover_job(self, sj: StoredJob, now: float) -> list:
        """An unfinished stored job, after a restart: admitted again, to the host it was on (whose
        JM, if it still runs the job, takes the StartJob as a token grant), or queued again."""
        if sj.job_id in self.jobs:
            return []
        leaf, why = self._leaf_of(sj.spec)
        if why:       # the queue file changed under it: it cannot run here any more
            return [Persist("finish", (sj.job_id, "failed", why, now)),
                    Send(sj.reply_to, JobDone(sj.job_id, False, why, now, 0))]
        e = JobEntry(sj.job_id, sj.spec, sj.submitted_at, sj.reply_to, first_demand(sj.spec), leaf, key=sj.key,
                     generation=sj.generation, done=sj.done)
        self.homes.home(e, sj.host)
        self.jobs[sj.job_id] = e
        if sj.key:
            self.by_key[sj.key] = sj.job_id
        self.next_job_id = max(self.next_job_id, sj.job_id + 1)
        return self._admit_or_wait(e, now)

    # ---- jobs out ------------------------------------------------------------------------------
    def _on_done(self, msg: JobDone, now: float, told_submitter: bool = False) -> list:
        """A job ended: stored, then its submitter told (now, unless a JM host, which sends
        ``told_submitter`` JobDones to the submitter too, already did: then at the next tick)."""
        e = self.jobs.get(msg.job_id)
        if e is None or e.state != "running":
            return []
        e.state = msg.state
        del self.jobs[e.job_id]     # the store keeps the record; memory keeps only live jobs
        self.homes.home(e, "")
        self.admission.forget(e)
        self.outcomes[msg.job_id] = msg
        out: list = [Persist("finish", (msg.job_id, e.state, msg.reason, finished_at(e, msg, now), msg.tasks_done))]
        if told_submitter:
            self._copies_due.append((e.reply_to, msg))
        else:
            out.append(Send(e.reply_to, msg))
        if e.admitted and self.positions:
            out += self.rounds.soon()       # its place may go to a waiting job
        return out

    def _on_cancel(self, msg: CancelJob, now: float) -> list:
        e = self.jobs.get(msg.job_id)
        if e is None or e.state != "running":
            return []
        if e.admitted:
            return [Send(e.host, msg)]
        # Still waiting: no JM exists; the RM ends it.
        return self._on_done(JobDone(msg.job_id, False, "cancelled", now, 0), now)

    def validate(self) -> None:
        self.rounds.validate()
        self.cluster.validate()
        self.homes.validate()
        self.admission.validate()
        self.host_reports.validate()
        assert all(e.tokens >= 0 for e in self.jobs.values())
        assert all(j < self.next_job_id for j in self.jobs)
        assert sum(self.holding().values()) <= self.capacity + 1e-6, "more CPUs held than the cluster has"


def finished_at(e: JobEntry, msg: JobDone, now: float) -> float:
    """When a job really ended: its JM's time (the JM host stamps its JobDone when the last task
    ends, on the cluster's clock), not when the RM heard of it, which may be much later (the
    RM was down, or restarting, when the job ended: its host repeats the JobDone once it is
    back). A time outside the job's life here (before its submission, after now) is not on
    this RM's clock: ``now`` stands in."""
    t = msg.finished_at
    return t if e.submitted_at <= t <= now else now


def _unknown_server(hb: Heartbeat) -> Log:
    return Log("warn", (f"heartbeat from unknown server {hb.server}",))
