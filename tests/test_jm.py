"""JM state: estimation, candidates, scheduling passes, status handling, retries, DAGs."""
import dataclasses

import numpy as np
import pytest

from apollo.core.cluster import NODE, RACK, REMOTE, IoModel, Topology
from apollo.core.effects import Log, Send, SetTimer
from apollo.core.lifecycle import TaskState
from apollo.core.messages import CancelJob, ClusterView, Dispatch, JobDone, KillTask, StartJob, StatusBatch, TaskReport, TokenGrant
from apollo.core.spec import JobSpec, StageSpec
from jm import estimate as est
from jm.candidates import candidate_rows
from jm.host import JmHost
from jm.config import DispatchConfig, PlacementConfig
from jm.state import JmConfig, JmState
from jm.view import ViewCache

from helpers import full_view, Rng

TOPO = Topology(20, 4)


def view(wait=0.0, stamp=0.0):
    v = ViewCache(20)
    v.matrices[:] = wait
    v.stamps[:] = stamp
    return v


def jm(spec, tokens=100, policy="apollo", v=None, opportunistic=False):
    cfg = JmConfig(topology=TOPO, policy=policy, dispatch=DispatchConfig(opportunistic=opportunistic))
    j = JmState(1, spec, tokens, 0.0, cfg, v or view())
    return j, j.start(0.0, Rng())


def dispatched(effects):
    return [(e.to, t) for e in effects if isinstance(e, Send) and isinstance(e.msg, Dispatch) for t in e.msg.tasks]


def report(j, t, state, t0=0.0, t1=1.0, server=0, detail=""):
    return StatusBatch(1, server, [TaskReport(1, t, int(j.tasks.attempt[t]), int(state), t0, t1, 0, detail)],
                       np.zeros(12, np.float32), t1)


def mapred(maps=4, reds=1, dataset="ds"):
    m = StageSpec("map", maps, np.full(maps, 2.0), input_bytes=np.full(maps, 64e6), dataset=dataset)
    r = StageSpec("reduce", reds, np.full(reds, 5.0), depends_on=("map",))
    return JobSpec("mr", [m, r], max_retries=1)


def test_localities_and_io_cost():
    reps = np.array([[0, 7, 8]])
    cand = np.array([[0, 5, 9, 15]])
    loc = est.localities(cand, reps, TOPO.rack_of)
    assert loc.tolist() == [[NODE, RACK, RACK, REMOTE]]  # rack_of: 0-4, 5-9, 10-14, 15-19
    v = view()
    C, E, _ = est.costs(cand, loc, np.array([100e6]), np.array([1.0]), np.array([0]), np.ones(1), 0.0, v, None, IoModel(), est.EstimateConfig(tie_noise_s=0.0), Rng())
    io = IoModel()
    assert E[0, 0] == pytest.approx(io.init_s + 100e6 / io.node_bytes_per_s + 1.0)
    assert E[0, 3] == pytest.approx(io.init_s + 100e6 / io.remote_bytes_per_s + 1.0)
    assert np.all(np.diff(C[0, [0, 1, 3]]) > 0)


def test_wait_from_matrix_is_pessimistic_with_age():
    v = view(wait=10.0, stamp=0.0)
    cfg = est.EstimateConfig(tie_noise_s=0.0, stale_penalty=0.5)
    cand = np.array([[1]])
    loc = np.array([[REMOTE]], dtype=np.uint8)
    args = (cand, loc, np.zeros(1), np.zeros(1), np.array([0]), np.ones(1))
    _, fresh, _ = est.costs(*args, 0.0, v, None, IoModel(init_s=0.0), cfg, Rng())
    _, old, _ = est.costs(*args, 4.0, v, None, IoModel(init_s=0.0), cfg, Rng())
    assert fresh[0, 0] == pytest.approx(10.0)
    assert old[0, 0] == pytest.approx(6.0 + 2.0)   # drained 4 s, plus 0.5 s per second of age


def test_dead_servers_cost_infinite():
    v = view()
    v.alive[3] = False
    C, _, _ = est.costs(np.array([[3, 4]]), np.array([[2, 2]], dtype=np.uint8), np.zeros(1), np.ones(1),
                     np.array([0]), np.ones(1), 0.0, v, None, IoModel(), est.EstimateConfig(), Rng())
    assert np.isinf(C[0, 0]) and np.isfinite(C[0, 1])


def test_candidates_hold_replicas_racks_and_light_servers():
    reps = np.array([[0, 7, 8], [-1, -1, -1]])
    cand, valid = candidate_rows(reps, TOPO, np.array([19], np.int32), Rng())
    row = set(cand[0][valid[0]].tolist())
    assert {0, 7, 8, 19} <= row
    assert all(TOPO.rack_of[s] in (0, 1) for s in row - {19})
    assert valid[1].sum() >= 2


def test_start_releases_roots_and_dispatches_within_tokens():
    j, out = jm(mapred(maps=4), tokens=3)
    d = dispatched(out)
    assert len(d) == 3                       # three tokens, no opportunistic allowance
    assert all(t.opportunistic is False for _, t in d)
    assert int((j.tasks.state == TaskState.PENDING).sum()) == 1     # the reduce waits for the maps
    assert any(isinstance(e, Log) and e.kind == "decisions" for e in out)
    j.validate()


def test_tasks_prefer_their_replicas():
    j, out = jm(mapred(maps=4))
    for to, t in dispatched(out):
        s = int(to.split(":")[1])
        st = j.tasks.stages[0]
        if t.stage == 0:
            assert t.locality == NODE and s in st.reps[t.task].tolist()


def test_one_task_per_server_per_batch():
    spec = JobSpec("one", [StageSpec("s", 10, np.ones(10), input_bytes=np.full(10, 1e9), dataset="same")])
    j, out = jm(spec)
    servers = [to for to, _ in dispatched(out)]
    assert len(servers) == 10
    # Every batch gives a server at most one task; a later batch may add more.


def test_status_done_completes_stage_releases_reduce_and_job():
    j, out = jm(mapred(maps=2))
    effects = []
    for t in (0, 1):
        effects += j.handle(report(j, t, TaskState.DONE, 0.0, 3.0), 3.0, Rng())
    red = [t for _, t in dispatched(effects) if t.stage == 1]
    assert len(red) == 1 and red[0].task == 2
    out = j.handle(report(j, 2, TaskState.DONE, 3.0, 8.0), 8.0, Rng())
    done = [e.msg for e in out if isinstance(e, Send) and isinstance(e.msg, JobDone)]
    assert done and done[0].ok and j.finished


def test_runtime_estimate_refined_from_finished_tasks():
    j, _ = jm(mapred(maps=2))
    before = j.tasks.stages[0].est_runtime
    j.handle(report(j, 0, TaskState.DONE, 0.0, 50.0), 50.0, Rng())
    assert j.tasks.stages[0].est_runtime > before


def test_failure_retries_elsewhere_then_fails_job():
    j, out = jm(mapred(maps=1))
    first = dispatched(out)[0][0]
    out = j.handle(report(j, 0, TaskState.FAILED, server=int(first[3:]), detail="boom"), 1.0, Rng())
    again = dispatched(out)
    assert len(again) == 1 and again[0][1].attempt == 2
    out = j.handle(report(j, 0, TaskState.FAILED, detail="boom"), 2.0, Rng())
    done = [e.msg for e in out if isinstance(e, Send) and isinstance(e.msg, JobDone)][0]
    assert not done.ok and "map[0] failed 2 times" in done.reason and "boom" in done.reason


def test_stale_attempt_reports_are_ignored():
    j, _ = jm(mapred(maps=1))
    stale = StatusBatch(1, 0, [TaskReport(1, 0, 99, int(TaskState.DONE), 0, 1, 0, "")],
                        np.zeros(12, np.float32), 1.0)
    assert j.handle(stale, 1.0, Rng()) == []
    assert j.done == 0


def test_preempted_task_requeued_without_counting_a_failure():
    j, _ = jm(mapred(maps=1))
    out = j.handle(report(j, 0, TaskState.READY, detail="preempted"), 1.0, Rng())
    assert j.tasks.failures[0] == 0 and dispatched(out)[0][1].attempt == 2


def test_lost_server_tasks_rerun():
    j, out = jm(mapred(maps=2))
    victim = int(j.tasks.server[0])
    j.view.alive[victim] = False
    out = j.on_view(5.0, Rng(), np.array([victim]))
    re = [t for to, t in dispatched(out)]
    assert any(t.task == 0 and t.attempt == 2 for t in re)
    assert all(to != f"pn:{victim}" for to, _ in dispatched(out))


def test_token_grant_unblocks_and_cancel_kills():
    j, out = jm(mapred(maps=4), tokens=1)
    assert len(dispatched(out)) == 1
    out = j.handle(TokenGrant(1, 4), 1.0, Rng())
    assert len(dispatched(out)) == 3
    out = j.handle(CancelJob(1), 2.0, Rng())
    kills = [e for e in out if isinstance(e, Send) and isinstance(e.msg, KillTask)]
    assert len(kills) == 4 and j.finished


def test_opportunistic_beyond_tokens_for_apollo_only():
    j, out = jm(mapred(maps=4), tokens=2, opportunistic=True)
    d = dispatched(out)
    assert sum(t.opportunistic for _, t in d) == 2 and len(d) == 4
    j, out = jm(mapred(maps=4), tokens=2, policy="greedy", opportunistic=True)
    assert len(dispatched(out)) == 2


@pytest.mark.parametrize("policy", ["greedy", "random", "fifo"])
def test_baselines_place_tasks(policy):
    j, out = jm(mapred(maps=4), policy=policy)
    assert len(dispatched(out)) == 4
    j.validate()


def test_fifo_waits_for_free_slots():
    v = view(wait=5.0)
    j, out = jm(mapred(maps=2), policy="fifo", v=v)
    assert dispatched(out) == []
    assert any(isinstance(e, SetTimer) and e.key == "retry" for e in out)


def test_dag_priorities_follow_critical_path():
    a = StageSpec("a", 1, np.array([1.0]))
    b = StageSpec("b", 1, np.array([100.0]), depends_on=("a",))
    c = StageSpec("c", 1, np.array([1.0]))
    j, _ = jm(JobSpec("dag", [a, b, c]))
    pr = {s.spec.name: s.priority for s in j.tasks.stages}
    assert pr["a"] > pr["c"] and pr["a"] == pytest.approx(101.0)


def _one_token_pass(policy):
    """Eight equal map tasks, every server busy for 5 s except one holding task 5's input."""
    spec = JobSpec("m", [StageSpec("map", 8, np.full(8, 2.0), input_bytes=np.full(8, 64e6), dataset="ds")])
    v = view(wait=5.0)
    j = JmState(1, spec, 0, 0.0, JmConfig(topology=TOPO, policy=policy, placement=PlacementConfig(defer_s=0.0),
                                           dispatch=DispatchConfig(opportunistic=False)), v)
    j.start(0.0, Rng())
    reps = j.tasks.stages[0].reps
    free = int(reps[5][0])
    v.matrices[free] = 0.0
    return j, j.handle(TokenGrant(1, 1), 0.0, Rng()), free


def test_lookahead_spends_a_lone_token_on_the_task_with_an_idle_local_server():
    j, out, free = _one_token_pass("apollo")
    assert dispatched(out) == [(f"pn:{free}", dispatched(out)[0][1])]
    assert dispatched(out)[0][1].task == 5 and j.tasks.locality[5] == NODE
    j.validate()
    g, out, _ = _one_token_pass("greedy")           # greedy takes the next task in line
    assert [t.task for _, t in dispatched(out)] == [0]


def test_apollo_defers_rather_than_queue_behind_a_long_wait_when_a_server_is_idle():
    spec = JobSpec("m", [StageSpec("map", 1, np.full(1, 2.0), input_bytes=np.full(1, 64e6), dataset="ds")])
    v = view(wait=60.0)
    j = JmState(1, spec, 0, 0.0, JmConfig(topology=TOPO), v)
    j.start(0.0, Rng())
    cand = set(j.tasks.stages[0].reps[0].tolist())
    idle = next(s for s in range(20) if TOPO.rack_of[s] not in {TOPO.rack_of[c] for c in cand})
    v.matrices[idle] = 0.0
    v.lightly_loaded = np.array([idle], dtype=np.int32)
    rng = Rng()
    out = j.handle(TokenGrant(1, 1), 0.0, rng)
    # Its candidates: its input's servers and racks (60 s queues) and the idle server, remote.
    assert [s for s, _ in dispatched(out)] == [f"pn:{idle}"]
    v.matrices[idle] = 60.0                          # nothing idle any more: queueing is best
    j2 = JmState(2, spec, 1, 0.0, JmConfig(topology=TOPO), v)
    out = j2.start(0.0, Rng())
    assert len(dispatched(out)) == 1


def test_apollo_names_the_idle_server_instead_of_holding_the_task_for_it():
    # Every server queues 60 s but one; the lightly loaded list holds it among busy ones. A
    # task does not wait (token idle) for a later pass to draw it: it goes there at once.
    spec = JobSpec("m", [StageSpec("map", 1, np.full(1, 2.0), input_bytes=np.full(1, 64e6), dataset="ds")])
    for seed in range(20):
        v = view(wait=60.0)
        j = JmState(1, spec, 0, 0.0, JmConfig(topology=TOPO), v)
        j.start(0.0, Rng(seed))
        cand = set(j.tasks.stages[0].reps[0].tolist())
        idle = next(s for s in range(20) if TOPO.rack_of[s] not in {TOPO.rack_of[c] for c in cand})
        v.matrices[idle] = 0.0
        busy = [s for s in range(20) if TOPO.rack_of[s] != TOPO.rack_of[idle]][:9]
        v.lightly_loaded = np.array(sorted(busy + [idle]), dtype=np.int32)
        out = j.handle(TokenGrant(1, 1), 1.0, Rng(seed))       # (the host's idle finding is fresh)
        assert [s for s, _ in dispatched(out)] == [f"pn:{idle}"]
        j.validate()


def test_an_attempt_not_heard_of_is_probed_and_placed_again_if_its_server_lost_it():
    from apollo.core.messages import ProbeTask
    from pn.state import PnConfig, PnState
    spec = JobSpec("m", [StageSpec("map", 1, np.full(1, 2.0))])
    j, out = jm(spec, policy="greedy")
    (to, t), = dispatched(out)                     # ... and this Dispatch is lost
    limit = float(j.watchdog.silence_limits(np.array([0]))[0])
    assert not [e for e in j.on_view(limit - 1.0, Rng()) if isinstance(e, Send) and isinstance(e.msg, ProbeTask)]
    out = j.on_view(limit, Rng())
    probes = [e for e in out if isinstance(e, Send) and isinstance(e.msg, ProbeTask)]
    assert [(p.to, p.msg.task, p.msg.attempt) for p in probes] == [(to, 0, 1)]
    # The server never got it: it says so, and the task goes out again.
    pn = PnState(int(to[3:]), PnConfig())
    answer = [e.msg for e in pn.handle(probes[0].msg, limit, Rng()) if isinstance(e, Send) and e.to == j.cfg.host]
    assert answer[0].reports[0].state == int(TaskState.READY)
    out = j.handle(answer[0], limit, Rng())
    assert [t.attempt for _, t in dispatched(out)] == [2]
    j.validate()


def test_a_probed_attempt_that_is_running_stays():
    from apollo.core.effects import Start
    from apollo.core.messages import ProbeTask
    from pn.state import PnConfig, PnState
    spec = JobSpec("m", [StageSpec("map", 1, np.full(1, 2.0))])
    j, out = jm(spec, policy="greedy")
    (to, task), = dispatched(out)
    pn = PnState(int(to[3:]), PnConfig())
    pn.handle(Start(), 0.0, Rng())
    pn.handle(Dispatch(1, [task]), 0.0, Rng())      # started on arrival: no report yet
    limit = float(j.watchdog.silence_limits(np.array([0]))[0])
    probe = next(e.msg for e in j.on_view(limit, Rng()) if isinstance(e, Send) and isinstance(e.msg, ProbeTask))
    answer = next(e.msg for e in pn.handle(probe, limit, Rng()) if isinstance(e, Send) and e.to == j.cfg.host)
    out = j.handle(answer, limit, Rng())
    assert j.tasks.state[0] == TaskState.RUNNING and not dispatched(out)
    assert j.watchdog.watch_at > limit                      # next probe only after another quiet period


def jm_noinit(spec, tokens):
    """A JM whose tasks pay no start-up time (as on the throughput bench's cluster)."""
    cfg = JmConfig(topology=TOPO, io=IoModel(init_s=0.0), dispatch=DispatchConfig(opportunistic=False))
    j = JmState(1, spec, tokens, 0.0, cfg, view())
    return j, j.start(0.0, Rng())


def test_short_tasks_are_pipelined_behind_each_token_and_refilled_at_half():
    noop = JobSpec("noop", [StageSpec("s", 400, np.zeros(400))])
    j, out = jm_noinit(noop, tokens=4)
    depth = j.tasks.depth(j.tasks.stages[0])
    assert depth == j.cfg.dispatch.max_pipeline                 # 0 s tasks: the deepest pipeline
    sent = dispatched(out)
    assert len(sent) == 4 * depth                      # tokens x depth in flight
    per_server = {}
    for to, _ in sent:
        per_server[to] = per_server.get(to, 0) + 1
    assert max(per_server.values()) > 1                # a server takes several per batch
    j.validate()
    # Reports of a few finished tasks do not trigger a pass; half the pipeline drained does.
    ids = [t.task for _, t in sent]
    out = []
    for t in ids[:4]:
        out += j.handle(report(j, t, TaskState.DONE, 1.0, 1.0, server=int(j.tasks.server[t])), 1.0, Rng())
    assert dispatched(out) == []
    for t in ids[4:2 * depth]:                          # no-op tasks: 0 s each
        out += j.handle(report(j, t, TaskState.DONE, 1.0, 1.0, server=int(j.tasks.server[t])), 1.0, Rng())
    assert len(dispatched(out)) == 2 * depth           # half drained: refilled to tokens x depth
    j.validate()


def test_depth_follows_the_expected_time_per_task():
    for seconds, depth in ((0.012, 5), (0.02, 3), (0.06, 1), (2.0, 1)):
        j, out = jm_noinit(JobSpec("s", [StageSpec("s", 50, np.full(50, seconds))]), tokens=4)
        assert j.tasks.depth(j.tasks.stages[0]) == depth, seconds
        assert len(dispatched(out)) == 4 * depth
    # The default 0.2 s start-up makes even a 0 s task too long to pipeline.
    j, out = jm(JobSpec("s", [StageSpec("s", 50, np.zeros(50))]), tokens=4)
    assert j.tasks.depth(j.tasks.stages[0]) == 1 and len(dispatched(out)) == 4


def test_host_takes_status_batches_as_a_list_or_one_by_one_alike():
    def host_with_two_jobs():
        h = JmHost(JmConfig(topology=TOPO, policy="apollo"))
        sent = []
        for job_id in (1, 2):
            out = h.handle(StartJob(job_id, mapred(maps=3, dataset=f"ds{job_id}"), 10, 0.0, ""), 0.0, Rng())
            sent += [(job_id, t) for _, t in dispatched(out)]
        return h, sent

    def reports(h, sent):
        # every map of both jobs done, interleaved across jobs; the last one from a busy server
        out = []
        for i, (job_id, task) in enumerate(sent):
            j = h.jms[job_id]
            m = np.full(12, 9.0 if i == len(sent) - 1 else 0.0, np.float32)
            rep = TaskReport(job_id, task.task, int(j.tasks.attempt[task.task]), int(TaskState.DONE), 0.0, 1.0, 0, "")
            out.append(StatusBatch(job_id, int(j.tasks.server[task.task]), [rep], m, 1.0 + i * 1e-3))
        return out

    a, sent_a = host_with_two_jobs()
    b, sent_b = host_with_two_jobs()
    assert len(sent_a) == 6 and [(j, t.task, t.attempt) for j, t in sent_a] == [(j, t.task, t.attempt) for j, t in sent_b]
    rng_a, rng_b = Rng(), Rng()
    one_by_one = [e for sb in reports(a, sent_a) for e in a.handle(sb, 2.0, rng_a)]
    together = b.handle(reports(b, sent_b), 2.0, rng_b)
    assert together == one_by_one
    # both reduces went out, and the view holds the last reading of each server
    assert sorted(j for j, t in [(e.msg.job_id, t) for e in together if isinstance(e, Send)
                                 and isinstance(e.msg, Dispatch) for t in e.msg.tasks]) == [1, 2]
    assert np.array_equal(a.view.matrices, b.view.matrices) and np.array_equal(a.view.stamps, b.view.stamps)


def test_a_second_running_report_for_a_running_attempt_is_only_news_of_it():
    """A probe's answer for an attempt the JM already knows is running (a long task that was
    queued first, then stayed quiet): it resets the silence clock and changes nothing else."""
    spec = JobSpec("m", [StageSpec("map", 1, np.full(1, 2.0))])
    j, out = jm(spec, policy="greedy")
    (to, task), = dispatched(out)
    srv = int(to[3:])
    started = TaskReport(1, 0, task.attempt, int(TaskState.RUNNING), 1.0, 0.0, 0, "")
    j.handle(StatusBatch(1, srv, [started], np.zeros(12, np.float32), 1.0), 1.0, Rng())
    assert j.tasks.state[0] == TaskState.RUNNING
    probed = TaskReport(1, 0, task.attempt, int(TaskState.RUNNING), 1.0, 0.0, 0, "probed")
    out = j.handle(StatusBatch(1, srv, [probed], np.zeros(12, np.float32), 50.0), 50.0, Rng())
    assert j.tasks.state[0] == TaskState.RUNNING and j.tasks.start_t[0] == 1.0 and j.tasks.last_heard[0] == 50.0
    assert not dispatched(out)
    j.validate()


def test_the_first_view_that_knows_a_servers_boot_is_no_restart_of_it():
    """Tasks sent before the JM host's first view of the cluster stay where they are when that
    view brings the servers' boot times (a live JM may start a job before it); a boot time
    that later moves is a restart, and the tasks sent there before it go elsewhere."""
    h = JmHost(JmConfig(topology=TOPO, policy="apollo"))
    out = h.handle(StartJob(1, JobSpec("j", [StageSpec("s", 3, np.full(3, 30.0))]), 3, 0.0, ""), 0.0, Rng())
    sent = {t.task: int(to[3:]) for to, t in dispatched(out)}
    assert len(sent) == 3
    n, shapes = TOPO.servers, h.view.shapes

    def view(at, boots):
        return full_view(at, np.zeros(n * shapes), np.full(n, at), boots, np.ones(n), np.arange(n))
    boots = np.linspace(0.1, 0.3, n)
    out = h.handle(view(0.5, boots), 0.5, Rng())
    assert not dispatched(out) and all(h.jms[1].tasks.state[t] == TaskState.DISPATCHED for t in sent)
    moved = boots.copy()
    moved[sent[0]] = 0.6                          # that server restarted at 0.6
    out = h.handle(view(1.0, moved), 1.0, Rng())
    again = [t.task for _, t in dispatched(out)]
    assert 0 in again and h.jms[1].tasks.attempt[0] == 2
    h.jms[1].validate()


def test_a_delay_filter_is_part_of_the_config_and_survives_replace():
    """--delay adds delay scheduling to any profile: the profile is derived from the config
    whenever one is made, so a copy for another host (dataclasses.replace) keeps the filter
    (it was set on the profile afterwards, and replace re-derived it from the name alone)."""
    cfg = JmConfig(topology=TOPO, policy="greedy",
                   placement=PlacementConfig(delay=True, delay_node_s=1.0, delay_rack_s=2.0))
    names = [f.name for f in cfg.profile.filters]
    assert names == ["delay-scheduling"]
    copy = dataclasses.replace(cfg, host="jmhost:1")
    assert [f.name for f in copy.profile.filters] == names and copy.placement.delay_node_s == 1.0
    assert not JmConfig(topology=TOPO, policy="greedy").profile.filters


def test_the_task_tables_state_constants_are_the_lifecycles():
    """jm.tasks spells the states and attempt kinds as literals (compiled, constants): the
    same values as apollo.core.lifecycle's enums."""
    from apollo.core.lifecycle import AttemptKind
    from jm import tasks
    for s in TaskState:
        if hasattr(tasks, s.name):
            assert getattr(tasks, s.name) == s, s.name
    assert (tasks.DUPLICATE, tasks.COPY, tasks.CLONE) == (AttemptKind.DUPLICATE, AttemptKind.COPY, AttemptKind.CLONE)
