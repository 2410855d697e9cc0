"""The Resource Monitor: aggregated server load, admission and the token plane.

Never on the critical path: JMs schedule on their last ClusterView whether or
not the RM answers. The RM keeps every server's last wait-time matrix with
its timestamp, marks servers dead when their heartbeats stop, publishes a
lightly-loaded list, and runs the capacity plane: jobs go to leaf queues of a
queue tree (rm/queues.py; without a queue file, one root queue), wait there
until admitted, and hold tokens that a sharing policy (rm/sharing.py: fair
pools or capacity queues) allocates from a snapshot of the jobs. The tokens
granted never add up to more than the cluster's cores.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from apollo.clocks import RESET_S, Offsets
from apollo.effects import Log, Persist, Send, SetTimer, Start, Timer
from apollo.messages import (CancelJob, ClusterView, Heartbeat, HostReport, JobAccepted, JobDemand, JobDone,
                             ReclaimTokens, ReleaseJob, StartJob, SubmitJob, TokenGrant)
from apollo.spec import JobSpec

from .clones import CloneBudget, CloneConfig
from .queues import QueueError, QueueTree
from .sharing import JobView, SharingPolicy, Snapshot, make_sharing_policy
from .store import StoredJob, StoredJobs

# A job that finds no free token waits for an allocation this soon, not for the next tick: on a
# busy cluster every arrival would otherwise wait up to a whole tick (jobs arriving together
# share one round).
ADMIT_SOON_S = 0.05
# A give-back that kills at once is not asked again of the same job until its JM and the
# others have reported what the kill changed (two views): asked again on the figures of
# before, it would kill the same shortfall twice.
SETTLE_VIEWS = 2
KEEP_ALL = 2 ** 31 - 1       # ReclaimTokens.keep that kills nothing (a give-back called off)


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
    dead_after_s: float = 5.0        # no heartbeat for this long: the server is dead
    lightly_loaded: int = 0          # list length; 0: max(8, servers // 10)
    jm_hosts: tuple[str, ...] = ("jmhost",)
    queues: QueueTree = field(default_factory=single_queue)
    # A JM host that has not reported (HostReport) for this long is dead: its jobs move to
    # another host, whose JMs adopt their attempts. JM hosts report every host_report_s.
    host_dead_after_s: float = 5.0
    host_report_s: float = 1.0
    clones: CloneConfig = field(default_factory=CloneConfig)   # Dolly's clone budget (rm/clones.py)


@dataclass(slots=True)
class JobEntry:
    job_id: int
    spec: JobSpec
    submitted_at: float
    reply_to: str
    demand: float                    # CPUs it could use now (as its JM last said)
    queue: str                       # its leaf queue's path
    tokens: int = 0
    in_use: float = 0.0              # CPUs its regular attempts have out, queued or running (its JM's word)
    # The most CPUs it may be running, as far as the RM can tell: its tokens, or more after a cut
    # until its JM, having heard the cut, says how many it has out (a queue's max counts this)
    may_run: float = 0.0
    admitted: bool = False
    state: str = "running"           # running | done | failed | cancelled
    host: str = ""
    reclaim: tuple = ()              # the last give-back asked: (kill line, deadline)
    settle_until: float = -1.0       # no kill asked of it before then (the last one's effect is unknown)
    key: str = ""                    # the client's idempotency key
    seq: int = 0                     # seq of the last token message sent to its JM
    last_tokens: Any = None          # that message (re-sent to a JM that reports an older seq)
    generation: int = 0              # JM homes it has had (a JM host died: the next one adopts)
    offered_at: float = -1.0         # when StartJob was last sent to its host
    done: bytes = b""                # its finished tasks, as its JM host last reported
    demand_at: float = -1.0          # when its JM last sent a JobDemand
    tokens_at: float = -1.0          # when the last token message was sent to its JM
    clones: int = 1                  # Dolly: attempts per task (1: not cloned) ...
    clone_cpu: float = 0.0           # ... and the CPUs of the clone budget granted for them ...
    clones_low: bool = False         # ... running at low priority (granted above tau)

    def view(self, held: float) -> JobView:
        s = self.spec
        return JobView(self.job_id, self.queue, s.user, 1.0, s.priority, self.submitted_at, self.demand,
                       self.tokens, held, self.admitted)


class RmState:
    # Heartbeats may come as a list of several (a runtime collects those arriving close
    # together): they are folded in with a few array operations instead of one event each.
    batched = (Heartbeat,)

    def __init__(self, config: RmConfig, policy: SharingPolicy | None = None) -> None:
        self.cfg = config
        self.tree = config.queues
        self.policy = policy or make_sharing_policy(self.tree)
        n, k = config.servers, config.shapes
        self.matrices = np.zeros((n, k), dtype=np.float32)
        self.stamps = np.full(n, -1.0)
        self.boot_times = np.zeros(n)
        self.alive = np.zeros(n, dtype=np.uint8)
        # what each server's last heartbeat said besides its matrix (plain lists: a heartbeat is
        # the RM's most frequent event; running_tasks etc. make arrays of them when asked)
        self._running = [0] * n
        self._queued = [0] * n
        self._cpu_free = [float(config.server_cores)] * n
        self._offsets = Offsets(n)                  # each PN's clock against ours
        # What jobs hold: the CPUs their regular attempts run on, as each server's last heartbeat
        # said (queued attempts hold nothing; docs/sharing.md). Per server: (jobs, milli-CPUs);
        # per job: the sum over live servers, in milli-CPUs (integers: no drift).
        self._pn_held: list[tuple] = [((), ())] * n
        self._held: dict[int, int] = {}
        self._pn_time = [-math.inf] * n             # its last heartbeat's time, on its clock
        self._pn_boot = [math.nan] * n              # ...and boot time, on its clock
        self._alive_n = 0                # alive.sum(), kept (capacity is read per admission)
        self.jobs: dict[int, JobEntry] = {}
        self.next_job_id = 0
        self._host_jobs: dict[str, int] = {}   # JM host -> live jobs homed there (_home keeps it)
        self._tokens_dirty = False
        self._granted = 0                # tokens held by admitted jobs, summed
        self._grant_cap = 0              # whole cores when tokens were last handed out
        self._slack: set[int] = set()    # admitted jobs granted more than their demand
        self._admitted_in: dict[str, int] = {}            # leaf -> admitted jobs
        self._waiting_in: dict[str, int] = {}             # leaf -> waiting jobs
        self._user_in: dict[tuple[str, str], int] = {}    # (leaf, user) -> admitted jobs
        self.positions: dict[int, tuple[str, int]] = {}   # waiting job -> (leaf, place in line)
        self.shares: dict[str, float] = {}                # queue -> share at the last round
        self._soon = False               # an admission round is due shortly
        self._policy_at = math.inf       # when the sharing policy asked to run again
        self._published: tuple | None = None    # the queue state last persisted
        self._checked: tuple | None = None      # the last round's (snapshot, allocation), not yet validated
        self._started_at = 0.0
        # JM hosts: when each last reported (all presumed alive at start), and which are alive
        self.host_seen: dict[str, float] = {h: 0.0 for h in config.jm_hosts}
        # Only a host heard from can be declared dead (a restarted RM has heard of all of them:
        # they ran its jobs before)
        self._heard: set[str] = set()
        self.hosts_alive: list[str] = list(config.jm_hosts)
        self.by_key: dict[str, int] = {}                  # idempotency key -> job id
        self.outcomes: dict[int, JobDone] = {}            # finished jobs' answers (for retries)
        # The RM's copies of JobDones a JM host also sent its submitter directly: the safety net
        # for a lost direct copy, sent with the next tick's messages (one write for many), not
        # on the job's critical path, which the direct copy is
        self._copies_due: list[tuple[str, JobDone]] = []
        self._seq = 0                    # token message seq; (RM boots << 32) + count
        self.clone_budget = CloneBudget(config.clones)
        # whether some queue has a max below the cluster (admission at once then checks it)
        self._has_max = any(q.max is not None for q in self.tree.nodes())
        self._now = 0.0                  # the time of the event being handled

    @property
    def running_tasks(self) -> np.ndarray:
        """Tasks running per server, as its last heartbeat said."""
        return np.array(self._running, dtype=np.int64)

    @property
    def queued_tasks(self) -> np.ndarray:
        return np.array(self._queued, dtype=np.int64)

    @property
    def cpu_free(self) -> np.ndarray:
        return np.array(self._cpu_free, dtype=np.float64)

    @property
    def capacity(self) -> float:
        return float(self._alive_n) * self.cfg.server_cores

    def _whole_cores(self) -> int:
        return int(math.floor((self.capacity or self.cfg.servers * self.cfg.server_cores) + 1e-9))

    def handle(self, event, now: float, rng) -> list:
        self._now = now
        t = type(event)
        if t is Heartbeat:
            return self._on_heartbeat(event, now)
        if t is list:
            return self._on_heartbeats(event, now)
        if t is Timer:
            if event.key == "tick":
                return self._tick(now)
            return self._round(now)          # "soon" (waiting jobs) or "policy" (a timeout)
        if t is SubmitJob:
            return self._on_submit(event, now)
        if t is JobDemand:
            e = self.jobs.get(event.job_id)
            if e is not None and e.state == "running":
                e.demand_at = now
                self._note_demand(e, event.remaining, event.in_use, event.seq)
                if 0.0 <= event.clone_cpu < e.clone_cpu:      # its finished tasks' clones are over
                    self.clone_budget.release(e.clone_cpu - event.clone_cpu)
                    e.clone_cpu = event.clone_cpu
            return []
        if t is HostReport:
            return self._on_host_report(event, now)
        if t is JobDone:
            return self._on_done(event, now, told_submitter=True)
        if t is CancelJob:
            return self._on_cancel(event, now)
        if t is Start:
            return self._recover(now, event.stored) + [SetTimer(self.cfg.view_interval_s, "tick")]
        return [Log("warn", (f"rm ignored {t.__name__}",))]

    # ---- load aggregation --------------------------------------------------
    def _on_heartbeat(self, hb: Heartbeat, now: float) -> list:
        s = hb.server
        if s >= self.cfg.servers:
            return [Log("warn", (f"heartbeat from unknown server {s}",))]
        # (its clock is its own: its times are turned into ours, apollo.clocks)
        booted = hb.boot_time != self._pn_boot[s]
        if not booted and hb.time < self._pn_time[s]:
            return []  # reordered: an older reading
        self._pn_time[s] = hb.time
        # (Offsets.observe, inlined: a heartbeat is the RM's most frequent event)
        offs = self._offsets.of
        shift = now - hb.time
        cur = offs[s]
        if shift >= cur and shift <= cur + RESET_S:
            shift = cur
        else:
            offs[s] = shift
        if booted:     # (a new incarnation, or the first heartbeat heard)
            self._pn_boot[s] = hb.boot_time
            self.boot_times[s] = hb.boot_time + shift
        self.matrices[s] = hb.matrix
        self.stamps[s] = hb.time + shift
        if hb.jobs or self._pn_held[s][0]:
            self._set_held(s, tuple(hb.jobs), tuple(int(round(c * 1000)) for c in hb.job_cpus))
        self._running[s] = hb.running
        self._queued[s] = hb.queued
        self._cpu_free[s] = hb.cpu_free
        if not self.alive[s]:
            self.alive[s] = 1
            self._alive_n += 1
            self._tokens_dirty = True
        return []

    def _on_heartbeats(self, hbs: list, now: float) -> list:
        """Several heartbeats at once, in arrival order (one event for all of them: the
        per-heartbeat work is a few row writes, less than the event's own cost)."""
        out: list = []
        one = self._on_heartbeat
        for hb in hbs:
            r = one(hb, now)
            if r:
                out += r
        return out

    def _set_held(self, s: int, jobs: tuple, milli: tuple) -> None:
        """Server ``s`` now runs ``milli`` milli-CPUs of regular attempts of each of ``jobs``."""
        held = self._held
        old_jobs, old_milli = self._pn_held[s]
        for j, m in zip(old_jobs, old_milli):
            left = held[j] - m
            if left:
                held[j] = left
            else:
                del held[j]
        for j, m in zip(jobs, milli):
            held[j] = held.get(j, 0) + m
        self._pn_held[s] = (jobs, milli)

    def held(self, job_id: int) -> float:
        """CPUs the job's regular attempts run on, as the live servers last said: the one account
        of what a job holds (the sharing plane's, the API's, the metrics')."""
        return self._held.get(job_id, 0) / 1000.0

    def holding(self) -> dict[str, float]:
        """Each leaf queue's held CPUs: its admitted jobs' (never more than the live cores)."""
        return {q: f[0] for q, f in self.queue_figures().items()}

    def queue_figures(self) -> dict[str, tuple[float, int, float]]:
        """Per leaf queue: (CPUs held, tokens, CPUs its jobs could use now), as every view of
        the queues shows them (the report's rows, /api/queues, /metrics, the dashboard)."""
        out: dict[str, list] = {}
        held = self._held
        for e in list(self.jobs.values()):
            f = out.get(e.queue)
            if f is None:
                f = out[e.queue] = [0.0, 0, 0.0]
            if e.admitted:
                f[0] += held.get(e.job_id, 0) / 1000.0
                f[1] += e.tokens
            f[2] += e.demand
        return {q: (f[0], f[1], f[2]) for q, f in out.items()}

    def lightly_loaded(self) -> np.ndarray:
        n = self.cfg.servers
        k = self.cfg.lightly_loaded or max(8, n // 10)
        wait = np.where(self.alive == 1, self.matrices[:, 0], np.inf)
        k = min(k, self._alive_n)
        if k <= 0:
            return np.zeros(0, dtype=np.int32)
        idx = np.argpartition(wait, k - 1)[:k] if k < n else np.arange(n)
        return np.sort(idx).astype(np.int32)

    def _tick(self, now: float) -> list:
        out: list = [SetTimer(self.cfg.view_interval_s, "tick")]
        if self._copies_due:
            out += [Send(to, done) for to, done in self._copies_due]
            self._copies_due = []
        out += self._check_hosts(now)
        if now - self._started_at < self.cfg.dead_after_s and not self.alive.all():
            # Just (re)started: servers we have not heard from yet are unknown, not dead. A view
            # now would tell every JM to give up its running tasks; their stale view is better.
            return out
        stale = (self.alive == 1) & (now - self.stamps > self.cfg.dead_after_s)
        if stale.any():
            for s in np.flatnonzero(stale).tolist():
                self._set_held(s, (), ())       # a dead server holds nothing
            self.alive[stale] = 0
            self._alive_n = int(self.alive.sum())
            self._tokens_dirty = True
            out.append(Log("servers_dead", tuple(int(x) for x in np.flatnonzero(stale))))
        view = ClusterView(now, self.matrices.ravel().copy(), self.stamps.copy(), self.boot_times.copy(),
                           self.alive.copy(), self.lightly_loaded())
        out.extend(Send(h, view) for h in self.hosts_alive)
        if self._tokens_dirty or self.positions or now >= self._policy_at:
            out.extend(self._round(now))
        return out

    # ---- admission -----------------------------------------------------------
    def _fits_somewhere(self, spec: JobSpec) -> str:
        for s in spec.stages:
            if s.cpu > self.cfg.server_cores or s.mem_gb > self.cfg.server_mem_gb:
                return (f"stage {s.name!r} asks for {s.cpu} cpu / {s.mem_gb} GB per task; the largest "
                        f"server has {self.cfg.server_cores} cpu / {self.cfg.server_mem_gb} GB")
        return ""

    def _leaf_of(self, spec: JobSpec) -> tuple[str, str]:
        """(leaf queue path, "") or ("", why the queue is refused)."""
        try:
            return self.tree.leaf(spec.queue).path, ""
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
        e = JobEntry(job_id, spec, now, msg.reply_to, _first_demand(spec), leaf, key=msg.key)
        self.jobs[job_id] = e
        if msg.key:
            self.by_key[msg.key] = job_id
        start = self._admit_now(e, now)
        # Stored (with its host, if admitted at once: one write on the job's critical path, not
        # two), then the StartJob in ``start``, then the acknowledgement: the StartJob is on the
        # job's critical path and the acknowledgement is not (a JobDone may overtake it).
        start = [x for x in start if not (type(x) is Persist and x.op == "home")]
        where = "" if e.admitted else f"waiting in queue {leaf} at position {self.positions[job_id][1]}"
        return [Persist("put", (job_id, spec, now, msg.reply_to, msg.key, e.host))] + start + [
            Send(msg.reply_to, JobAccepted(job_id, spec.name, True, where, msg.key)),
            Log("job_submitted", (job_id, now, spec.total_tasks, leaf, spec.user))]

    def _resubmitted(self, msg: SubmitJob) -> list:
        """A retried submission (same key): acknowledge the job stored for it again, and repeat
        its outcome if it has finished (the first answers may have been lost)."""
        job_id = self.by_key[msg.key]
        e = self.jobs.get(job_id)
        out: list = [Send(msg.reply_to, JobAccepted(job_id, msg.spec.name, True, "already stored", msg.key))]
        if e is not None:
            e.reply_to = msg.reply_to        # a restarted client listens elsewhere
        done = self.outcomes.get(job_id)
        if done is not None:
            out.append(Send(msg.reply_to, done))
        return out

    # ---- token messages: every one numbered, the last kept to re-send --------------
    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _grant(self, e: JobEntry, tokens: int) -> Send:
        e.tokens_at = self._now
        e.seq = seq = self._next_seq()
        e.last_tokens = msg = TokenGrant(e.job_id, tokens, seq)
        return Send(e.host, msg)

    def _reclaim(self, e: JobEntry, keep: int, within_s: float) -> Send:
        e.tokens_at = self._now
        e.seq = seq = self._next_seq()
        e.last_tokens = msg = ReclaimTokens(e.job_id, e.tokens, keep, within_s, seq)
        return Send(e.host, msg)

    def _offer(self, e: JobEntry, now: float) -> Send:
        """StartJob to the job's host (first admission, a re-offer, or a new home)."""
        e.seq = seq = self._next_seq()
        e.offered_at = e.tokens_at = now
        e.last_tokens = msg = StartJob(e.job_id, e.spec, e.tokens, e.submitted_at, e.reply_to, seq,
                                       e.generation, e.done, e.clones, e.clone_cpu, e.clones_low)
        return Send(e.host, msg)

    def _resend_tokens(self, e: JobEntry, now: float) -> Send | None:
        m = e.last_tokens
        if type(m) is ReclaimTokens and m.within_s > 0:
            # the deadline stays where it was
            left = max(0.0, e.reclaim[1] - now) if e.reclaim else 0.0
            m = ReclaimTokens(m.job_id, m.tokens, m.keep, left, m.seq)
        e.tokens_at = now
        return Send(e.host, m) if m is not None else None

    # ---- JM hosts ---------------------------------------------------------------------
    def _on_host_report(self, r: HostReport, now: float) -> list:
        """A JM host's jobs: re-send what it missed (a token message, a StartJob), learn its
        jobs' demand and progress, tell it to drop jobs that are not its own (any more)."""
        h = r.host
        out: list = []
        back = h not in self.hosts_alive
        self.host_seen[h] = now
        self._heard.add(h)
        if back:
            self.hosts_alive.append(h)
            self.hosts_alive.sort()
            out.append(Log("host_up", (h, now)))
        held = set()
        jobs = self.jobs
        late = 2 * self.cfg.host_report_s
        for job_id, seq, demand, in_use in zip(r.jobs.tolist(), r.seqs.tolist(), r.demand.tolist(),
                                               r.in_use.tolist()):
            e = jobs.get(job_id)
            if e is None or e.state != "running":
                out.append(Send(h, ReleaseJob(job_id, True)))      # finished, or cancelled: stop it
                continue
            if not e.admitted or not e.host:
                # a restarted RM that had not re-admitted it yet: it is this host's
                self._home(e, h)
                if not e.admitted:
                    self._waiting_in[e.queue] -= 1
                    self.positions.pop(job_id, None)
                    out += self._admit(e, 0, now, offer=False)
                out.append(Persist("home", (job_id, h, e.generation)))
            elif e.host != h:
                out.append(Send(h, ReleaseJob(job_id, False)))     # adopted by another host
                continue
            held.add(job_id)
            if seq < e.seq and now - e.tokens_at > late:      # (not one still on its way)
                m = self._resend_tokens(e, now)
                if m is not None:
                    out.append(m)
            if (demand != e.demand or in_use != e.in_use) and now - e.demand_at > late:
                # a JobDemand lost (it is sent only on a change): the report's figures stand in
                self._note_demand(e, demand, in_use, seq)
            elif seq >= e.seq:
                e.may_run = max(e.tokens, e.in_use)
        for job_id, done in zip(r.progress_jobs.tolist(), r.progress):
            e = jobs.get(job_id)
            if e is not None and e.host == h and e.state == "running":
                e.done = done
                out.append(Persist("progress", (job_id, done)))
        for e in jobs.values():
            if e.host == h and e.admitted and e.job_id not in held and now - e.offered_at >= late:
                # The host does not run it: its StartJob was lost, or the host restarted and lost
                # its JM, whose attempts may still be queued or running at PNs. Offered again as
                # a new home of the job: its JM adopts what the PNs hold and numbers its own
                # attempts above theirs (a fresh JM re-sent attempt 1 of tasks still running as
                # attempt 1: a PN ran both under one key). (A finished job's host repeats its
                # JobDone instead.)
                e.generation += 1
                out += [Persist("home", (e.job_id, e.host, e.generation)), self._offer(e, now)]
        return out

    def _check_hosts(self, now: float) -> list:
        """Hosts silent for host_dead_after_s are dead; their jobs move to live ones."""
        out: list = []
        limit = self.cfg.host_dead_after_s
        for h in list(self.hosts_alive):
            if h in self._heard and now - self.host_seen.get(h, 0.0) > limit and now - self._started_at > limit:
                self.hosts_alive.remove(h)
                out.append(Log("host_dead", (h, now)))
        if self.hosts_alive:
            for e in self.jobs.values():
                if e.admitted and e.state == "running" and e.host not in self.hosts_alive:
                    out += self._rehome(e, now)
        return out

    def _rehome(self, e: JobEntry, now: float) -> list:
        old = e.host
        self._home(e, self._pick_host())
        e.generation += 1
        return [Persist("home", (e.job_id, e.host, e.generation)), self._offer(e, now),
                Log("rehomed", (e.job_id, now, old, e.host))]

    def _pick_host(self) -> str:
        """The live JM host with the fewest jobs (the first listed, of equals): load goes where
        there is least (a round-robin piles long jobs up by chance), and a quiet cluster keeps
        using one host, whose process is the one running and warm (on a 2-core machine,
        alternating two hosts cost a 1-task job's round trip ~0.1-0.3 ms)."""
        hosts = self.hosts_alive or list(self.cfg.jm_hosts)
        load = self._host_jobs
        return min(hosts, key=lambda h: load.get(h, 0))

    def _home(self, e: JobEntry, host: str) -> None:
        """``e`` is (now) homed at ``host`` ("": nowhere, as it ends)."""
        load = self._host_jobs
        if e.host:
            load[e.host] -= 1
        e.host = host
        if host:
            load[host] = load.get(host, 0) + 1

    def _note_demand(self, e: JobEntry, demand: float, in_use: float, seq: int) -> None:
        e.demand = float(demand)
        e.in_use = float(in_use)
        if seq >= e.seq:            # it had heard the last grant or cut: it runs no more than this
            e.may_run = max(e.tokens, e.in_use)
        if e.admitted:
            if e.tokens > e.demand:
                self._slack.add(e.job_id)
            else:
                self._slack.discard(e.job_id)
        self._tokens_dirty = True

    def _admit_now(self, e: JobEntry, now: float) -> list:
        """Admit a new job at once if its queue and user are below their limits, nobody waits
        ahead of it there, and a token is free (the tokens of jobs granted more than they can
        use are trimmed first); else it waits for the next allocation round, which comes soon.
        Exact shares follow at that round."""
        q = self.tree.get(e.queue)
        leaf, user = e.queue, e.spec.user
        total = self._whole_cores()
        free = total - self._granted
        ok = (not self._waiting_in.get(leaf) and
              (q.max_running_jobs is None or self._admitted_in.get(leaf, 0) < q.max_running_jobs) and
              (q.max_jobs_per_user is None or self._user_in.get((leaf, user), 0) < q.max_jobs_per_user))
        out: list = []
        if ok and free < e.demand:
            # what others were granted beyond their demand they cannot use: theirs goes first
            free += self._trim_slack(e.demand - free, out)
        if ok and free >= 1 and self._has_max:
            room = self._max_room(leaf, total)          # never past a max
            if room < free:
                free = int(math.floor(room + 1e-9))
        # Its queue holds less than its guarantee and what is free is not all it could use: it is
        # admitted now in a round of its own, which cuts the borrowers' tokens too (what they
        # still hold is given back within the queue's timeout).
        now_round = ok and e.demand > free and self._below_guarantee(leaf, total)
        if ok and not now_round and (e.demand <= 0 or free >= 1):
            self._grant_cap = total
            return out + self._admit(e, int(min(e.demand, free)) if e.demand > 0 else 0, now)
        self._waiting_in[leaf] = self._waiting_in.get(leaf, 0) + 1
        self.positions[e.job_id] = (leaf, self._waiting_in[leaf])
        if now_round:
            out += self._round(now)
        elif ok:        # only tokens are short: a round soon re-divides them (limits wait for a job to end)
            out += self._soon_round()
        return out

    def _max_room(self, leaf: str, total: int) -> float:
        """Tokens ``leaf`` may still be granted under its max and its ancestors' maxes."""
        lim = self.tree.resolve(float(total))
        caps = []
        p: str | None = leaf
        while p is not None:
            if lim[p].max < total - 1e-9:
                caps.append((p, p + ".", lim[p].max))
            p = self.tree.parent(p)
        room = math.inf
        for path, under, cap in caps:
            held = sum(e.may_run for e in self.jobs.values()
                       if e.admitted and (e.queue == path or e.queue.startswith(under)))
            room = min(room, cap - held)
        return room

    def _under_max(self, grants: dict[int, int], total: int) -> dict[int, int]:
        """``grants`` (job -> tokens) with what would take a queue past its max held back: a job
        cut may run what it had (JobEntry.may_run) until its attempts end, so tokens given to
        another job of the same queue in the meantime could add up past the max. The jobs that
        would grow give way, the most recently submitted first; they get it as the others'
        attempts end (the next rounds)."""
        lim = self.tree.resolve(float(total))
        out = dict(grants)
        for q in self.tree.nodes():
            cap = lim[q.path].max
            if cap >= total - 1e-9:
                continue
            under = q.path + "."
            mine = [self.jobs[j] for j in out
                    if self.jobs[j].queue == q.path or self.jobs[j].queue.startswith(under) or q is self.tree.root]
            excess = sum(max(out[e.job_id], e.may_run) for e in mine) - cap
            for e in sorted(mine, key=lambda e: (-e.submitted_at, -e.job_id)):
                if excess <= 1e-9:
                    break
                grow = out[e.job_id] - e.may_run
                if grow > 0:
                    cut = min(grow, math.ceil(excess - 1e-9))
                    out[e.job_id] -= int(cut)
                    excess -= cut
        return out

    def _below_guarantee(self, leaf: str, total: int) -> bool:
        """Whether the tokens of ``leaf``'s admitted jobs are below its guarantee (a queue file's
        leaf; the single queue of a cluster without one guarantees nothing)."""
        if self.tree.is_single:
            return False
        g = self.tree.resolve(float(total))[leaf].guarantee
        if g <= 0:
            return False
        return sum(e.tokens for e in self.jobs.values() if e.admitted and e.queue == leaf) < g - 1e-9

    def _soon_round(self) -> list:
        if self._soon:
            return []
        self._soon = True
        return [SetTimer(ADMIT_SOON_S, "soon")]

    def _trim_slack(self, want: float, out: list) -> int:
        """Take back tokens jobs hold beyond their demand (they cannot use them), up to ``want``."""
        freed = 0
        slack = self._slack
        while slack and freed < want:
            job_id = slack.pop()
            e = self.jobs[job_id]
            keep = max(int(math.ceil(e.demand - 1e-9)), 1 if e.demand > 0 else 0)
            if keep < e.tokens:
                freed += e.tokens - keep
                self._granted -= e.tokens - keep
                e.tokens = keep
                out.append(self._grant(e, keep))
        return freed

    def _admit(self, e: JobEntry, tokens: int, now: float, offer: bool = True) -> list:
        e.admitted = True
        e.tokens = tokens
        e.may_run = max(e.may_run, float(tokens))
        self._granted += tokens
        if e.tokens > e.demand:
            self._slack.add(e.job_id)
        leaf, user = e.queue, e.spec.user
        self._admitted_in[leaf] = self._admitted_in.get(leaf, 0) + 1
        self._user_in[(leaf, user)] = self._user_in.get((leaf, user), 0) + 1
        self._tokens_dirty = True  # the others' shares moved; sent at the next round
        cap = self.capacity
        e.clones, e.clone_cpu, e.clones_low = self.clone_budget.grant(e.spec, cap, lambda: cap - sum(self._cpu_free))
        out: list = [Log("job_admitted", (e.job_id, now, e.queue))]
        if not offer:
            return out
        if not e.host or e.host not in self.hosts_alive:
            self._home(e, self._pick_host())
            if len(self.cfg.jm_hosts) > 1 or e.generation:
                out.append(Persist("home", (e.job_id, e.host, e.generation)))
        return [self._offer(e, now)] + out

    # ---- allocation rounds -----------------------------------------------------
    def _round(self, now: float) -> list:
        """Ask the sharing policy for an allocation over every job (admitted and waiting) and
        carry it out: admissions, token grants, give-backs; note the queues' state."""
        self._soon = False
        self._tokens_dirty = False
        out: list = []
        total = self._whole_cores()
        cap = self.capacity or self.cfg.servers * self.cfg.server_cores
        held = self._held
        snap = Snapshot(now, float(total), tuple(e.view(held.get(e.job_id, 0) / 1000.0) for e in self.jobs.values()))
        alloc = self.policy.allocate(snap)
        self._checked = (snap, alloc)         # for validate(): the policy's invariants, once per round
        grants = self._under_max(alloc.tokens, total) if self._has_max else alloc.tokens
        for job_id in alloc.admit:
            e = self.jobs[job_id]
            self._waiting_in[e.queue] -= 1
            out += self._admit(e, grants[job_id], now)
        admitted_now = set(alloc.admit)
        for job_id, tokens in grants.items():
            e = self.jobs[job_id]
            if job_id in admitted_now or tokens == e.tokens:
                continue
            self._granted += tokens - e.tokens
            e.tokens = tokens
            e.may_run = max(e.may_run, float(tokens))
            if e.tokens > e.demand:
                self._slack.add(job_id)
            else:
                self._slack.discard(job_id)
            out.append(self._grant(e, tokens))
        self._grant_cap = total
        owed = set()
        for r in alloc.reclaim:
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
            e.settle_until = max(deadline, now) + SETTLE_VIEWS * self.cfg.view_interval_s
            out.append(self._reclaim(e, r.tokens, r.within_s))
            out.append(Log("reclaim", (r.job_id, now, e.queue, self.held(r.job_id) - r.tokens, r.within_s)))
        for e in self.jobs.values():
            if e.reclaim and e.job_id not in owed and e.reclaim[1] > now:
                # no longer owed (the shortfall was met as tasks ended): call the kill off
                e.reclaim = ()
                out.append(self._reclaim(e, KEEP_ALL, 0.0))
            elif e.reclaim and e.job_id not in owed:
                e.reclaim = ()
        self.positions = dict(alloc.positions)   # (a copy: admissions edit it; the policy's is checked)
        self.shares = alloc.shares
        if alloc.next_run_s is not None:
            at = now + alloc.next_run_s
            if at < self._policy_at - 1e-9 or self._policy_at <= now:
                self._policy_at = at
                out.append(SetTimer(alloc.next_run_s, "policy"))
        elif self._policy_at <= now:
            self._policy_at = math.inf
        out.append(Log("allocation", self._queue_rows(now, cap, alloc)))
        out += self._publish(now)
        return out

    def _queue_rows(self, now: float, cap: float, alloc) -> tuple:
        """(now, capacity, {leaf: (share, holding, demand, guarantee, starving_s, running jobs,
        waiting jobs)}) for the report and `apollo queues`."""
        lim = self.tree.resolve(cap)
        figs = self.queue_figures()
        none = (0.0, 0, 0.0)
        rows = {q.path: (alloc.shares.get(q.path, 0.0), figs.get(q.path, none)[0], figs.get(q.path, none)[2],
                         lim[q.path].guarantee, alloc.starving.get(q.path, 0.0), self._admitted_in.get(q.path, 0),
                         self._waiting_in.get(q.path, 0))
                for q in self.tree.leaves()}
        return (now, cap, rows)

    def _publish(self, now: float) -> list:
        """Persist the queues' state and the waiting jobs' places when they changed (a live
        cluster's `apollo queues` and `apollo job` read them from the store)."""
        held = self.holding()
        state = (tuple(sorted((k, round(v, 3)) for k, v in self.shares.items())),
                 tuple(sorted((k, self._admitted_in.get(k, 0), self._waiting_in.get(k, 0), round(held.get(k, 0.0), 1))
                              for k in self.shares)),
                 tuple(sorted(self.positions.items())))
        if state == self._published:
            return []
        self._published = state
        return [Persist("queues", (now, dict(self.shares), dict(self._admitted_in), dict(self._waiting_in),
                                   dict(self.positions), held))]

    # ---- the end of a job ----------------------------------------------------
    def _forget(self, e: JobEntry) -> None:
        del self.jobs[e.job_id]     # the store keeps the record; memory keeps only live jobs
        self._home(e, "")
        self.clone_budget.release(e.clone_cpu)
        if e.admitted:
            self._granted -= e.tokens
            self._slack.discard(e.job_id)
            self._admitted_in[e.queue] -= 1
            self._user_in[(e.queue, e.spec.user)] -= 1
        else:
            self._waiting_in[e.queue] -= 1
            self.positions.pop(e.job_id, None)
        self._tokens_dirty = True

    def _on_done(self, msg: JobDone, now: float, told_submitter: bool = False) -> list:
        """A job ended: stored, then its submitter told (now, unless a JM host, which sends
        ``told_submitter`` JobDones to the submitter too, already did: then at the next tick)."""
        e = self.jobs.get(msg.job_id)
        if e is None or e.state != "running":
            return []
        e.state = msg.state
        self._forget(e)
        self.outcomes[msg.job_id] = msg
        out: list = [Persist("finish", (msg.job_id, e.state, msg.reason, now))]
        if told_submitter:
            self._copies_due.append((e.reply_to, msg))
        else:
            out.append(Send(e.reply_to, msg))
        if e.admitted and self.positions:
            out += self._soon_round()       # its place may go to a waiting job
        return out

    def _on_cancel(self, msg: CancelJob, now: float) -> list:
        e = self.jobs.get(msg.job_id)
        if e is None or e.state != "running":
            return []
        if e.admitted:
            return [Send(e.host, msg)]
        # Still waiting: no JM exists; the RM ends it.
        return self._on_done(JobDone(msg.job_id, False, "cancelled", now, 0), now)

    def _recover(self, now: float, stored: StoredJobs | None) -> list:
        """After a restart, re-admit (or queue again) every stored job that had not finished; ids
        continue after the highest ever stored, finished jobs included."""
        self._started_at = now
        self.host_seen = {h: now for h in self.host_seen}
        if stored is None:
            return []
        boots = stored.boots + 1
        if stored.boots:
            self._heard = set(self.host_seen)
        self._seq = boots << 32          # above every seq an earlier incarnation sent
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
        e = JobEntry(sj.job_id, sj.spec, sj.submitted_at, sj.reply_to, _first_demand(sj.spec), leaf, key=sj.key,
                     generation=sj.generation, done=sj.done)
        self._home(e, sj.host)
        self.jobs[sj.job_id] = e
        if sj.key:
            self.by_key[sj.key] = sj.job_id
        self.next_job_id = max(self.next_job_id, sj.job_id + 1)
        return self._admit_now(e, now)

    def validate(self) -> None:
        if self._checked is not None:
            self.policy.validate(*self._checked)
            self._checked = None
        assert self.matrices.shape == (self.cfg.servers, self.cfg.shapes)
        assert all(e.tokens >= 0 for e in self.jobs.values())
        homed: dict[str, int] = {}
        for e in self.jobs.values():
            if e.host:
                homed[e.host] = homed.get(e.host, 0) + 1
        assert homed == {h: n for h, n in self._host_jobs.items() if n}, "jobs per JM host out of sync"
        adm = [e for e in self.jobs.values() if e.admitted]
        assert self._granted == sum(e.tokens for e in adm), "granted tokens out of sync"
        assert self._granted <= self._grant_cap or not adm, "more tokens granted than cores"
        assert all(e.tokens == 0 for e in self.jobs.values() if not e.admitted)
        assert self._alive_n == int(self.alive.sum())
        assert all(j < self.next_job_id for j in self.jobs)
        for leaf in set(self._admitted_in) | set(self._waiting_in):
            assert self._admitted_in.get(leaf, 0) == sum(e.queue == leaf for e in adm)
            assert self._waiting_in.get(leaf, 0) == sum(e.queue == leaf and not e.admitted
                                                         for e in self.jobs.values())
        assert set(self.positions) == {e.job_id for e in self.jobs.values() if not e.admitted}
        granted = sum(e.clone_cpu for e in self.jobs.values())
        assert abs(self.clone_budget.used - granted) < 1e-6, "clone budget out of sync"
        per_job: dict[int, int] = {}
        for s, (jobs, milli) in enumerate(self._pn_held):
            assert not jobs or self.alive[s], "a dead server holds CPUs"
            assert sum(milli) <= self.cfg.server_cores * 1000 + 1e-6, "a server holds more than its cores"
            for j, m in zip(jobs, milli):
                per_job[j] = per_job.get(j, 0) + m
        assert per_job == {j: m for j, m in self._held.items() if m}, "held CPUs out of sync"
        assert sum(self.holding().values()) <= self.capacity + 1e-6, "more CPUs held than the cluster has"


def _first_demand(spec: JobSpec) -> float:
    """CPUs a job can use when it starts: its first stages' tasks."""
    return float(sum(s.cpu * s.tasks for s in spec.stages if not s.depends_on))
