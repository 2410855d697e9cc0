"""The RM's Prometheus metrics, on a registry of their own (``/metrics``).

Two sources: gauges read RmState (and the heartbeat tap) when scraped (``StateCollector``);
counters and histograms are fed by the records of the cluster's folder as rm/http/watch.py folds
them (``RecordMetrics``: figures that exist only there, such as queue delay and locality,
defined as in apollo/tools/report.py). Units are in the names (seconds, cores).
"""
from __future__ import annotations

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

# Live tasks take milliseconds to minutes; jobs seconds to hours.
DELAY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
JOB_BUCKETS = (0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)


class BatchHistogram:
    """A Prometheus histogram counted a batch at a time (one numpy pass over the values a fold
    of the records noted, not a locked observe() per task attempt) and exposed by
    prometheus_client as any histogram: a collector yielding a HistogramMetricFamily."""

    def __init__(self, name: str, doc: str, buckets: tuple) -> None:
        self.name, self.doc = name, doc
        self.bounds = np.array(buckets, dtype=float)
        self.counts = np.zeros(len(buckets) + 1, dtype=np.int64)    # per bucket; the last: above them all
        self.sum = 0.0
        self.pending: list[float] = []

    def count_pending(self) -> None:
        if self.pending:
            v = np.maximum(np.array(self.pending, dtype=float), 0.0)
            self.pending = []
            # le semantics: a value counts in the first bucket whose bound is >= it
            self.counts += np.bincount(np.searchsorted(self.bounds, v, side="left"), minlength=len(self.counts))
            self.sum += float(v.sum())

    def describe(self):
        return [HistogramMetricFamily(self.name, self.doc)]

    def collect(self):
        cum = np.cumsum(self.counts).tolist()
        buckets = [(floatToGoString(b), c) for b, c in zip(self.bounds.tolist(), cum)] + [("+Inf", cum[-1])]
        yield HistogramMetricFamily(self.name, self.doc, buckets=buckets, sum_value=self.sum)


class RecordMetrics:
    """Counters and histograms fed from the records (see Watch.fold)."""

    def __init__(self, registry: CollectorRegistry, queues: tuple[str, ...] = ()) -> None:
        r = registry
        # (per task attempt: counted a fold at a time, see BatchHistogram)
        self.queue_delay = BatchHistogram("apollo_task_queue_delay_seconds",
                                          "Ready to start of completed tasks (at the JM and in a PN queue)",
                                          DELAY_BUCKETS)
        self.sched_latency = BatchHistogram("apollo_scheduling_latency_seconds",
                                            "Ready to dispatch of task attempts (the JM's decision time)",
                                            DELAY_BUCKETS)
        r.register(self.queue_delay)
        r.register(self.sched_latency)
        self.admission_wait = Histogram("apollo_admission_wait_seconds", "Submission to admission of jobs",
                                        ["queue"], buckets=DELAY_BUCKETS, registry=r)
        self.job_duration = Histogram("apollo_job_duration_seconds", "Submission to end of finished jobs",
                                      buckets=JOB_BUCKETS, registry=r)
        self.started = Counter("apollo_tasks_started", "Task attempts that started, by where their input was "
                               "(none: no input); counted when the attempt ends", ["locality"], registry=r)
        self.attempts = Counter("apollo_task_attempts", "Ended task attempts by outcome", ["outcome"], registry=r)
        self.preemptions = Counter("apollo_preemptions", "Task attempts killed to give tokens back", ["queue"],
                                   registry=r)
        self.submitted = Counter("apollo_jobs_submitted", "Jobs accepted by the RM", ["queue"], registry=r)
        self.finished = Counter("apollo_jobs_finished", "Jobs that ended, by result", ["result"], registry=r)
        # every series from the start (at 0): a rate() over a series that appears late misses its first step
        for loc in ("node", "rack", "remote", "none"):
            self.started.labels(loc)
        for outcome in ("done", "failed", "preempted", "superseded", "lost", "killed", "moved", "withdrawn"):   # jm/state.py's
            self.attempts.labels(outcome)
        for result in ("ok", "failed"):
            self.finished.labels(result)
        for q in queues:
            self.preemptions.labels(q)
            self.submitted.labels(q)
            self.admission_wait.labels(q)
        # The labelled series an attempt counts in, looked up once each (every ended attempt of
        # the cluster is counted here; ``labels()`` is the dearer half of a count)
        self._by_outcome: dict = {}
        self._by_locality: dict = {}

    def attempt(self, queue: str, outcome: str, locality: str | None, queue_delay: float | None,
                sched_latency: float | None) -> None:
        c = self._by_outcome.get(outcome)
        if c is None:
            c = self._by_outcome[outcome] = self.attempts.labels(outcome)
        c.inc()
        if locality is not None:
            c = self._by_locality.get(locality)
            if c is None:
                c = self._by_locality[locality] = self.started.labels(locality)
            c.inc()
        if outcome == "preempted":
            self.preemptions.labels(queue).inc()
        if queue_delay is not None:
            self.queue_delay.pending.append(queue_delay)
        if sched_latency is not None:
            self.sched_latency.pending.append(sched_latency)

    def flush(self) -> None:
        """Count what attempt() noted into the histograms (Watch.fold calls this at its end)."""
        self.queue_delay.count_pending()
        self.sched_latency.count_pending()

    def job_submitted(self, queue: str) -> None:
        self.submitted.labels(queue).inc()

    def job_admitted(self, queue: str, wait: float) -> None:
        self.admission_wait.labels(queue).observe(max(0.0, wait))

    def job_done(self, ok: bool, seconds: float) -> None:
        self.finished.labels("ok" if ok else "failed").inc()
        self.job_duration.observe(max(0.0, seconds))


class StateCollector:
    """Gauges read from RmState at scrape time (in-memory arrays and dicts: no I/O)."""

    def __init__(self, rm, tap, now) -> None:
        self.rm, self.tap, self.now = rm, tap, now

    def describe(self):
        return []      # no sample at registration (the RM may not have started yet)

    def collect(self):
        rm, tap = self.rm, self.tap
        alive = rm.alive == 1
        n_alive = int(alive.sum())
        g = GaugeMetricFamily("apollo_servers", "Servers (PNs) by liveness as the RM sees them", labels=["state"])
        g.add_metric(["alive"], n_alive)
        g.add_metric(["dead"], len(alive) - n_alive)
        yield g
        cores = rm.cfg.server_cores
        busy = float(np.sum(np.where(alive, cores - tap.cpu_free, 0.0)))
        g = GaugeMetricFamily("apollo_cores", "CPU cores of live servers, busy or idle (last heartbeats)",
                              labels=["state"])
        g.add_metric(["busy"], busy)
        g.add_metric(["idle"], n_alive * cores - busy)
        yield g
        g = GaugeMetricFamily("apollo_tasks", "Tasks on live servers by state (last heartbeats)", labels=["state"])
        g.add_metric(["running"], float(tap.running[alive].sum()))
        g.add_metric(["queued"], float(tap.queued[alive].sum()))
        yield g
        stamps = rm.stamps[alive]
        yield GaugeMetricFamily("apollo_heartbeat_age_seconds", "Age of the oldest live server's last heartbeat",
                                value=float(self.now() - stamps.min()) if len(stamps) else 0.0)
        yield from self._queues()

    def _queues(self):
        rm = self.rm
        leaves = [q.path for q in rm.tree.leaves()]
        lim = rm.tree.resolve(rm.capacity or rm.cfg.servers * rm.cfg.server_cores)
        figs = rm.queue_figures()
        held = {q: f[0] for q, f in figs.items()}
        tokens = {q: f[1] for q, f in figs.items()}
        demand = {q: f[2] for q, f in figs.items()}
        fams = [("apollo_pending_jobs", "Jobs waiting for admission", lambda q: rm.waiting_in.get(q, 0)),
                ("apollo_running_jobs", "Admitted jobs", lambda q: rm.admitted_in.get(q, 0)),
                ("apollo_queue_share_cores", "The sharing policy's share at its last round",
                 lambda q: rm.shares.get(q, 0.0)),
                ("apollo_queue_guarantee_cores", "Guaranteed capacity (min share)", lambda q: lim[q].guarantee),
                ("apollo_queue_tokens", "Tokens held by the queue's admitted jobs", lambda q: tokens.get(q, 0)),
                ("apollo_queue_running_cores", "CPUs the queue's regular tasks run on (as the servers last said)",
                 lambda q: held.get(q, 0.0)),
                ("apollo_queue_demand_cores", "CPUs the queue's jobs could use now", lambda q: demand.get(q, 0.0))]
        for name, doc, value in fams:
            g = GaugeMetricFamily(name, doc, labels=["queue"])
            for q in leaves:
                g.add_metric([q], float(value(q)))
            yield g


def make_registry(rm, tap, now) -> tuple[CollectorRegistry, RecordMetrics]:
    # No *_created series: they double every counter and histogram for a figure nobody reads here
    # (process-wide, and this is the RM's process).
    disable_created_metrics()
    reg = CollectorRegistry(auto_describe=True)
    reg.register(StateCollector(rm, tap, now))
    return reg, RecordMetrics(reg, tuple(q.path for q in rm.tree.leaves()))


def exposition(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
