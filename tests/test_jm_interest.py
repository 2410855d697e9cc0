"""The JM host asks only the jobs a cluster view can move (jm.interest): one test per index,
an event in, the right jobs asked; and the same jobs' on_view, in the same order, as asking all."""
import numpy as np
import pytest

from apollo.core.cluster import Topology
from apollo.core.effects import Send, Timer
from apollo.core.lifecycle import TaskState
from apollo.core.messages import ClusterView, Dispatch, JobDemand, StartJob, StatusBatch, TaskReport, TokenGrant
from apollo.core.spec import JobSpec, StageSpec
from jm.host import JmHost
from jm.state import JmConfig, JmState
from jm.view import ViewCache

from helpers import full_view, interpreted_only, Rng

TOPO = Topology(20, 4)


def job(tasks=2, seconds=600.0):
    return JobSpec("j", [StageSpec("s", tasks, np.full(tasks, seconds))])


def cluster_view(h, at, wait=0.0):
    n, shapes = TOPO.servers, h.view.shapes
    return full_view(at, np.full(n * shapes, wait), np.full(n, at), np.zeros(n), np.ones(n), np.arange(n))


@pytest.fixture
def asked(monkeypatch):
    """The jobs asked wants_view, in order, as the host handles an event."""
    calls: list[int] = []
    real = JmState.wants_view

    def spy(self, now):
        calls.append(self.job_id)
        return real(self, now)
    monkeypatch.setattr(JmState, "wants_view", spy)

    def handle(h, event, now):
        calls.clear()
        out = h.handle(event, now, Rng())
        h.validate()
        return list(calls), out
    return handle


def demands(out):
    return sorted(e.msg.job_id for e in out if isinstance(e, Send) and isinstance(e.msg, JobDemand))


def dispatched(out):
    return [t for e in out if isinstance(e, Send) and isinstance(e.msg, Dispatch) for t in e.msg.tasks]


@interpreted_only
def test_a_job_with_ready_tasks_is_asked_until_they_are_placed(asked):
    h = JmHost(JmConfig(topology=TOPO))
    h.handle(StartJob(1, job(), 0, 0.0, ""), 0.0, Rng())          # no tokens: its tasks stay ready
    h.handle(StartJob(2, job(), 2, 0.0, ""), 0.0, Rng())          # placed at once
    got, out = asked(h, cluster_view(h, 1.0), 1.0)
    assert got == [1, 2] and demands(out) == [1, 2]               # neither had reported yet
    got, _ = asked(h, cluster_view(h, 2.0), 2.0)
    assert got == [1]                                             # ready tasks; job 2 has nothing
    asked(h, TokenGrant(1, 2, 1), 2.5)
    got, out = asked(h, cluster_view(h, 3.0), 3.0)
    assert got == [1] and demands(out) == [1]                     # placed: a new report for the RM
    got, _ = asked(h, cluster_view(h, 4.0), 4.0)
    assert got == []


@interpreted_only
def test_a_job_whose_report_moved_is_asked_once(asked):
    h = JmHost(JmConfig(topology=TOPO))
    out = h.handle(StartJob(1, job(), 2, 0.0, ""), 0.0, Rng())
    h.handle(StartJob(2, job(), 2, 0.0, ""), 0.0, Rng())
    asked(h, cluster_view(h, 1.0), 1.0)
    t = dispatched(out)[0]
    jm = h.jms[1]
    done = TaskReport(1, t.task, t.attempt, int(TaskState.DONE), 1.0, 1.5, 0, "")
    asked(h, StatusBatch(1, int(jm.tasks.server[t.task]), [done], np.zeros(12, np.float32), 1.5), 1.5)
    got, out = asked(h, cluster_view(h, 2.0), 2.0)
    assert got == [1] and demands(out) == [1]                     # one CPU less out: the RM hears it
    got, _ = asked(h, cluster_view(h, 3.0), 3.0)
    assert got == []


@interpreted_only
def test_a_job_is_asked_when_its_watchdog_falls_due(asked):
    h = JmHost(JmConfig(topology=TOPO))
    h.handle(StartJob(1, job(seconds=5.0), 2, 0.0, ""), 0.0, Rng())
    h.handle(StartJob(2, job(seconds=600.0), 2, 0.0, ""), 0.0, Rng())
    asked(h, cluster_view(h, 1.0), 1.0)
    due = h.jms[1].watchdog.watch_at                              # its silent attempts get probed
    assert 1.0 < due < h.jms[2].watchdog.watch_at
    got, _ = asked(h, cluster_view(h, due - 0.5), due - 0.5)
    assert got == []
    got, out = asked(h, cluster_view(h, due), due)
    assert got == [1] and "ProbeTask" in {type(e.msg).__name__ for e in out}
    assert h.jms[1].watchdog.watch_at > due
    got, _ = asked(h, cluster_view(h, due + 0.5), due + 0.5)
    assert got == []


@interpreted_only
def test_a_job_with_clone_grant_to_give_back_is_asked(asked):
    h = JmHost(JmConfig(topology=TOPO))
    h.handle(StartJob(1, job(), 2, 0.0, "", clones=2, clone_cpu=10.0), 0.0, Rng())
    h.handle(StartJob(2, job(), 2, 0.0, ""), 0.0, Rng())
    asked(h, cluster_view(h, 1.0), 1.0)
    jm = h.jms[1]
    assert jm.attempts.clone_cpu == 2.0                          # what it needs: the rest went back
    jm.attempts.clone_cpu = 10.0                                   # (as if granted more again)
    h.interest.touch(1)
    got, out = asked(h, cluster_view(h, 2.0), 2.0)
    assert got == [1] and demands(out) == [1] and jm.attempts.clone_cpu == 2.0
    got, _ = asked(h, cluster_view(h, 3.0), 3.0)
    assert got == []


@interpreted_only
def test_a_job_with_queued_tasks_is_asked_and_moves_them_only_to_an_idle_server(asked):
    h = JmHost(JmConfig(topology=TOPO))
    out = h.handle(StartJob(1, job(), 2, 0.0, ""), 0.0, Rng())
    h.handle(StartJob(2, job(), 2, 0.0, ""), 0.0, Rng())
    h.handle(cluster_view(h, 1.0, wait=100.0), 1.0, Rng())
    t = dispatched(out)[0]
    srv = int(h.jms[1].tasks.server[t.task])
    queued = TaskReport(1, t.task, t.attempt, int(TaskState.DISPATCHED), 0.0, 0.0, 0, "queued")
    asked(h, StatusBatch(1, srv, [queued], np.full(12, 100.0, np.float32), 1.5), 1.5)
    asked(h, cluster_view(h, 2.0, wait=100.0), 2.0)               # (its report moved: asked once)
    got, out = asked(h, cluster_view(h, 3.0, wait=100.0), 3.0)
    assert got == [1] and out == []                               # waiting, but nothing idle
    got, out = asked(h, cluster_view(h, 4.0, wait=0.0), 4.0)
    assert got == [1] and [d.task for d in dispatched(out)] == [t.task]   # a duplicate on an idle server


class AskingAll(JmHost):
    """The host as it was: every job asked on every view."""

    def _view_to_asked(self, now, rng):
        out = []
        for job_id, jm in list(self.jms.items()):
            if jm.wants_view(now):
                self.interest.touch(job_id)
                out.extend(self._wrap(job_id, jm.on_view(now, rng)))
                self._reap(job_id, jm)
        return out


@interpreted_only
def test_the_jobs_moved_by_a_view_and_the_idle_servers_found_are_as_asking_all():
    """Hosts asking all jobs and asking the indexed ones, fed the same events, send the same:
    the idle servers a view shows are found once per view, at the same point of the loop."""
    rng = np.random.default_rng(7)
    hosts = [AskingAll(JmConfig(topology=TOPO)), JmHost(JmConfig(topology=TOPO))]
    outs = [[], []]
    progressed = [[], []]
    sent: dict[int, list] = {}
    now = 0.0
    for step in range(60):
        now += 0.5
        kind = rng.integers(4)
        events = []
        if kind == 0 or step < 6:
            job_id = step + 1
            events.append(StartJob(job_id, job(int(rng.integers(1, 5)), float(rng.choice([3.0, 600.0]))),
                                   int(rng.integers(0, 3)), now, ""))
        elif kind == 1 and sent:
            job_id = int(rng.choice(sorted(sent)))
            t = sent[job_id][int(rng.integers(len(sent[job_id])))]
            state = int(rng.choice([TaskState.DONE, TaskState.DISPATCHED, TaskState.RUNNING]))
            events.append(StatusBatch(job_id, int(t[1]), [TaskReport(job_id, t[0], t[2], state, now, now, 0, "queued")],
                                      np.full(12, 50.0, np.float32), now))
        elif kind == 2 and sent:
            events.append(TokenGrant(int(rng.choice(sorted(sent))), int(rng.integers(0, 4)), step + 100))
        events.append(cluster_view(hosts[0], now, wait=float(rng.choice([0.0, 100.0]))))
        if step % 3 == 0:
            events.append(Timer("report"))
        for i, h in enumerate(hosts):
            for e in events:
                got = h.handle(e, now, Rng())
                h.validate()
                if type(e) is Timer:
                    check_report(h, got[0].msg)
                    progressed[i].append((got[0].msg.progress_jobs.tolist(), got[0].msg.progress))
                    continue
                outs[i].append(got)
                if i == 1:
                    for d in [e for e in got if isinstance(e, Send) and isinstance(e.msg, Dispatch)]:
                        for ts in d.msg.tasks:
                            sent.setdefault(ts.job_id, []).append((ts.task, int(d.to[3:]), ts.attempt))
            assert h.view._idle_checked_at == hosts[0].view._idle_checked_at
            assert np.array_equal(h.view.idle_servers(now), hosts[0].view.idle_servers(now))
    assert outs[0] == outs[1] and progressed[0] == progressed[1]


def check_report(h, r):
    """A HostReport made from the rows kept per job is the one made from every JM afresh."""
    assert r.jobs.tolist() == list(h.jms)
    assert r.seqs.tolist() == [jm.token_seq for jm in h.jms.values()]
    assert list(zip(r.demand.tolist(), r.in_use.tolist())) == [jm._report() for jm in h.jms.values()]


def test_a_view_no_job_is_asked_about_still_finds_its_idle_servers_as_before(asked):
    """Asked, a job with nothing of its own to do looked for the view's idle servers (found once
    per view, kept IDLE_CHECK_S): they are still found then, for whatever comes at that time."""
    h = JmHost(JmConfig(topology=TOPO))
    h.handle(StartJob(1, job(), 2, 0.0, ""), 0.0, Rng())
    asked(h, cluster_view(h, 1.0), 1.0)
    got, _ = asked(h, cluster_view(h, 2.0), 2.0)
    assert got == [] and h.view._idle_checked_at == 2.0 and len(h.view._idle) == TOPO.servers   # (4 cores each)


def test_an_idle_finding_taken_is_made_from_the_view_it_was_taken_of_when_first_asked():
    """The host takes a view's idle finding once per view (look_for_idle) but makes it only when
    a JM asks: from the view as it was then, even if a dispatch came in between."""
    v = ViewCache(2, cores=4.0)
    free = [0.0] * v.shapes
    v.apply_row(0, free, 1.0, now=1.0)
    v.apply_row(1, free, 1.0, now=1.0)
    v.look_for_idle(2.0)
    v.record_dispatches(np.array([0]), np.array([50.0]), np.array([4.0]), 2.001)   # fills server 0
    assert v.idle_servers(2.002).tolist() == [0, 1]      # the finding as of 2.0, before the dispatch
    assert v.idle_servers(2.02).tolist() == [1]          # IDLE_CHECK_S later: found again
    v.look_for_idle(3.0)                                  # taken, never asked in its time ...
    v.record_dispatches(np.array([1]), np.array([50.0]), np.array([4.0]), 3.5)
    assert v.idle_servers(3.6).tolist() == []            # ... and a later ask finds afresh
    v.look_for_idle(4.0)
    v.apply_row(0, free, 4.001, now=4.002)               # a reading within its time: made first
    assert v.idle_servers(4.005).tolist() == []          # (server 0's new reading is not in it)
    assert v.idle_servers(4.02).tolist() == [0]


def test_the_heap_of_watchdog_times_stays_of_the_order_of_the_live_jobs():
    from jm.interest import ViewInterest

    class Jm:       # (what the index reads of a JM)
        def __init__(self):
            self.tasks = type("T", (), {"waiting": np.zeros(1, bool)})()
            self.watchdog = type("W", (), {"watch_at": 0.0})()

        def needs_view(self):
            return False
    vi = ViewInterest(dups=True)
    jms = {1: Jm(), 2: Jm()}
    for j in jms:
        vi.started(j)
    for k in range(1000):                  # times moved far ahead at every stimulus
        jms[1].watchdog.watch_at = 1e6 + k
        vi.touch(1)
        vi.to_ask(jms, 0.0)
    assert len(vi.due) <= 2 * len(vi.due_at) + 64 + 1 and vi.due_at == {1: 1e6 + 999}   # (2's was due at once)
    jms[1].watchdog.watch_at = 5.0
    vi.touch(1)
    assert vi.to_ask(jms, 5.0)[0] == [1]
