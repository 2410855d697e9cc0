"""The Resource Monitor: aggregated server load, admission and the token plane.

Never on the critical path: JMs schedule on their last ClusterView whether or
not the RM answers. The RM keeps every server's last wait-time matrix with
its timestamp, marks servers dead when their heartbeats stop, publishes a
lightly-loaded list, admits jobs (refusing ones no server could ever run) and
hands out tokens through a pluggable TokenPolicy.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from apollo.effects import Log, Persist, Send, SetTimer, Start, Timer
from apollo.messages import (CancelJob, ClusterView, Heartbeat, JobAccepted, JobDemand, JobDone,
                             StartJob, SubmitJob, TokenGrant)
from apollo.spec import JobSpec

from .store import StoredJobs
from .tokens import JobDemandView, TokenPolicy, EvenSplit


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


@dataclass(slots=True)
class JobEntry:
    job_id: int
    spec: JobSpec
    submitted_at: float
    reply_to: str
    demand: float
    tokens: int = 0
    state: str = "running"           # running | done | failed | cancelled
    host: str = ""

    @property
    def usable(self) -> float:
        """Tokens the job holds and can use: no more than its demand."""
        return min(self.tokens, self.demand)


class RmState:
    # Heartbeats may come as a list of several (a runtime collects those arriving close
    # together): they are folded in with a few array operations instead of one event each.
    batched = (Heartbeat,)

    def __init__(self, config: RmConfig, policy: TokenPolicy | None = None) -> None:
        self.cfg = config
        self.policy = policy or EvenSplit()
        n, k = config.servers, config.shapes
        self.matrices = np.zeros((n, k), dtype=np.float32)
        self.stamps = np.full(n, -1.0)
        self.boot_times = np.zeros(n)
        self.alive = np.zeros(n, dtype=np.uint8)
        self._alive_n = 0                # alive.sum(), kept (capacity is read per admission)
        self.jobs: dict[int, JobEntry] = {}
        self.next_job_id = 0
        self._host_rr = 0
        self._tokens_dirty = False
        self._running = 0                # admitted jobs not yet done
        self._held = 0.0                 # the tokens they hold and can use (JobEntry.usable)
        self._started_at = 0.0

    @property
    def capacity(self) -> float:
        return float(self._alive_n) * self.cfg.server_cores

    def handle(self, event, now: float, rng) -> list:
        t = type(event)
        if t is Heartbeat:
            return self._on_heartbeat(event, now)
        if t is list:
            return self._on_heartbeats(event, now)
        if t is Timer:
            return self._tick(now)
        if t is SubmitJob:
            return self._on_submit(event, now)
        if t is JobDemand:
            e = self.jobs.get(event.job_id)
            if e is not None and e.state == "running":
                self._held -= e.usable
                e.demand = float(event.remaining)
                self._held += e.usable
                self._tokens_dirty = True
            return []
        if t is JobDone:
            return self._on_done(event, now)
        if t is CancelJob:
            e = self.jobs.get(event.job_id)
            if e is None or e.state != "running":
                return []
            return [Send(f"jm:{event.job_id}", event)]
        if t is Start:
            return self._recover(now, event.stored) + [SetTimer(self.cfg.view_interval_s, "tick")]
        return [Log("warn", (f"rm ignored {t.__name__}",))]

    # ---- load aggregation --------------------------------------------------
    def _on_heartbeat(self, hb: Heartbeat, now: float) -> list:
        s = hb.server
        if s >= self.cfg.servers:
            return [Log("warn", (f"heartbeat from unknown server {s}",))]
        if hb.time < self.stamps[s]:
            return []  # reordered: an older reading
        self.matrices[s] = hb.matrix
        self.stamps[s] = hb.time
        if self.boot_times[s] != hb.boot_time:
            self.boot_times[s] = hb.boot_time
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
        if now - self._started_at < self.cfg.dead_after_s and not self.alive.all():
            # Just (re)started: servers we have not heard from yet are unknown, not dead. A view
            # now would tell every JM to give up its running tasks; their stale view is better.
            return out
        stale = (self.alive == 1) & (now - self.stamps > self.cfg.dead_after_s)
        if stale.any():
            self.alive[stale] = 0
            self._alive_n = int(self.alive.sum())
            self._tokens_dirty = True
            out.append(Log("servers_dead", tuple(int(x) for x in np.flatnonzero(stale))))
        view = ClusterView(now, self.matrices.ravel().copy(), self.stamps.copy(), self.boot_times.copy(),
                           self.alive.copy(), self.lightly_loaded())
        out.extend(Send(h, view) for h in self.cfg.jm_hosts)
        if self._tokens_dirty:
            out.extend(self._regrant())
        return out

    # ---- jobs and tokens -----------------------------------------------------
    def _fits_somewhere(self, spec: JobSpec) -> str:
        for s in spec.stages:
            if s.cpu > self.cfg.server_cores or s.mem_gb > self.cfg.server_mem_gb:
                return (f"stage {s.name!r} asks for {s.cpu} cpu / {s.mem_gb} GB per task; the largest "
                        f"server has {self.cfg.server_cores} cpu / {self.cfg.server_mem_gb} GB")
        return ""

    def _on_submit(self, msg: SubmitJob, now: float) -> list:
        spec = msg.spec
        why = self._fits_somewhere(spec)
        job_id = msg.job_id if msg.job_id >= 0 else self.next_job_id
        if job_id in self.jobs:
            why = why or f"job id {job_id} is already in use"
        if why:
            return [Send(msg.reply_to, JobAccepted(max(job_id, 0), spec.name, False, why)),
                    Log("job_refused", (job_id, spec.name, why))]
        self.next_job_id = max(self.next_job_id, job_id + 1)
        demand = float(sum(s.cpu * s.tasks for s in spec.stages if not s.depends_on))
        e = JobEntry(job_id, spec, now, msg.reply_to, demand)
        self.jobs[job_id] = e
        out: list = [Persist("put", (job_id, spec, now, msg.reply_to)),     # stored, then acknowledged
                     Send(msg.reply_to, JobAccepted(job_id, spec.name, True, "")),
                     Log("job_submitted", (job_id, now, spec.total_tasks))]
        return out + self._admit(e, now)

    def _admit(self, e: JobEntry, now: float) -> list:
        self._running += 1
        cap = self.capacity or self.cfg.servers * self.cfg.server_cores
        me = JobDemandView(e.job_id, e.submitted_at, e.demand)
        e.tokens = self.policy.initial(me, self._running, cap, self._demand_views, self._held)
        self._held += e.usable
        hosts = self.cfg.jm_hosts
        e.host = hosts[self._host_rr % len(hosts)]
        self._host_rr += 1
        self._tokens_dirty = True  # the others' shares moved; sent on the next tick
        return [Send(e.host, StartJob(e.job_id, e.spec, e.tokens, e.submitted_at, e.reply_to))]

    def _demand_views(self) -> list[JobDemandView]:
        return [JobDemandView(e.job_id, e.submitted_at, e.demand)
                for e in self.jobs.values() if e.state == "running"]

    def _allocate(self) -> dict[int, int]:
        cap = self.capacity or self.cfg.servers * self.cfg.server_cores
        return self.policy.allocate(self._demand_views(), cap)

    def _regrant(self) -> list:
        self._tokens_dirty = False
        out = []
        for job_id, tokens in self._allocate().items():
            e = self.jobs[job_id]
            if tokens != e.tokens:
                self._held -= e.usable
                e.tokens = tokens
                self._held += e.usable
                out.append(Send(f"jm:{job_id}", TokenGrant(job_id, tokens)))
        return out

    def _on_done(self, msg: JobDone, now: float) -> list:
        e = self.jobs.get(msg.job_id)
        if e is None or e.state != "running":
            return []
        e.state = msg.state
        del self.jobs[msg.job_id]   # the store keeps the record; memory keeps only live jobs
        self._running -= 1
        self._held -= e.usable
        self._tokens_dirty = True
        return [Persist("finish", (msg.job_id, e.state, msg.reason, now)), Send(e.reply_to, msg)]

    def _recover(self, now: float, stored: StoredJobs | None) -> list:
        """After a restart, re-admit every stored job that had not finished; ids continue
        after the highest ever stored, finished jobs included."""
        self._started_at = now
        if stored is None:
            return []
        self.next_job_id = max(self.next_job_id, stored.max_job_id + 1)
        out: list = []
        for job_id, spec, submitted_at, reply_to in stored.unfinished:
            if job_id in self.jobs:
                continue
            e = JobEntry(job_id, spec, submitted_at, reply_to,
                         float(sum(s.cpu * s.tasks for s in spec.stages if not s.depends_on)))
            self.jobs[job_id] = e
            self.next_job_id = max(self.next_job_id, job_id + 1)
            out.extend(self._admit(e, now))
        return out

    def validate(self) -> None:
        assert self.matrices.shape == (self.cfg.servers, self.cfg.shapes)
        assert all(e.tokens >= 0 for e in self.jobs.values())
        assert abs(self._held - sum(e.usable for e in self.jobs.values())) < 1e-6
        assert self._alive_n == int(self.alive.sum())
        assert all(j < self.next_job_id for j in self.jobs)
