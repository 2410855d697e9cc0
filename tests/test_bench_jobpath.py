"""apollo bench jobpath: a short run times every step of a 1-task job's path and writes its JSON."""
import json

from apollo.bench.jobpath import OFF_PATH, main

from helpers import interpreted_only


@interpreted_only
def test_jobpath_json(tmp_path):
    out = tmp_path / "jobpath.json"
    assert main(["--jobs", "40", "--native", "off", "--json", str(out)]) == 0
    d = json.loads(out.read_text())
    steps = d["steps_us"]
    assert d["jobs"] == 40 and d["native"] is False
    for step in ("rm handle SubmitJob", "jm handle StartJob", "pn handle Dispatch", "jm handle StatusBatch",
                 "client unpack JobDone", *OFF_PATH):
        assert steps[step] > 0, step
    assert d["critical_path_us"] == sum(v for k, v in steps.items() if k not in OFF_PATH)


def test_a_finished_job_leaves_no_cyclic_garbage(tmp_path):
    """A JM's parts are freed by reference counting when its host drops it: no finished job waits
    for the cyclic collector (which the simulator turns off while it runs, and a live process
    runs once a second)."""
    import gc
    from apollo.bench.jobpath import JobPath
    path = JobPath(str(tmp_path / "jobs.db"))
    for _ in range(5):
        path.one()
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(20):
            path.one()
        gc.collect()
        left = sorted({type(o).__name__ for o in gc.garbage})
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was:
            gc.enable()
        path.store.db.close()
    assert left == [], left


def test_closing_a_cloned_jobs_jm_breaks_its_parts_cycle():
    import numpy as np
    from apollo.core.cluster import Topology
    from apollo.core.spec import JobSpec, StageSpec
    from jm.state import JmConfig, JmState
    from jm.view import ViewCache
    cfg = JmConfig(topology=Topology(4, 1, 2.0, 8.0))
    view = ViewCache(4, cfg.grid, cfg.topology.cores)
    spec = JobSpec("cloned", [StageSpec("s", 2, np.full(2, 1.0), cpu=1.0, mem_gb=1.0)])
    jm = JmState(1, spec, 2, 0.0, cfg, view, clones=2)
    assert jm.placement.attempts is jm.attempts          # (its clones go out with its tasks)
    jm.close()
    assert jm.placement.attempts is None
    assert JmState(2, spec, 2, 0.0, cfg, view).placement.attempts is None   # not cloned: no cycle made
