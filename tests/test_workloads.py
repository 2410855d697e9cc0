"""Tests for apollo.workloads: trace readers, the SWIM task model, generators, load_workload."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from apollo.core.spec import JobSpec, SpecError, StageSpec, Workload
from apollo.workloads import WORKLOAD_NAMES, generator_params, load_workload
from apollo.workloads import swim
from apollo.workloads.hawk import read_hawk
from apollo.workloads.swim import (BLOCK_BYTES, GiB, MAP_BYTES_PER_S, MAP_STARTUP_S, MIN_SHUFFLE_OUTPUT_BYTES,
                                   REDUCE_BYTES_PER_S, REDUCE_BYTES_PER_TASK, REDUCE_STARTUP_S, MiB, read_swim)
from apollo.workloads import synthetic

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
FB2009_50 = TRACES / "FB-2009_samples_24_times_1hr_0_first50jobs.tsv"
YH1 = TRACES / "YH1_sub.tr"


def write(tmp_path: Path, name: str, rows: list[str]) -> Path:
    p = tmp_path / name
    p.write_text("".join(r + "\n" for r in rows))
    return p


def tsv(*fields) -> str:
    return "\t".join(str(f) for f in fields)


# --------------------------------------------------------------------------- SWIM parsing

def test_swim_six_fields(tmp_path):
    p = write(tmp_path, "fb.tsv", [
        tsv("job0", 5, 5, 1000, 0, 10),
        "",
        tsv("job1", 9, 4, 3 * BLOCK_BYTES + 7, 2 * GiB + 1, 500),
    ])
    wl = read_swim(p)
    assert wl.name == "fb"
    assert [j.name for j in wl.jobs] == ["job0", "job1"]
    assert [j.arrival_s for j in wl.jobs] == [5.0, 9.0]
    a, b = wl.jobs
    assert [s.name for s in a.stages] == ["map"]
    assert a.stages[0].tasks == 1 and a.stages[0].input_bytes.tolist() == [1000.0]
    assert a.stages[0].cpu == 1.0 and a.stages[0].mem_gb == 2.0
    assert [s.name for s in b.stages] == ["map", "reduce"]
    m, r = b.stages
    assert m.tasks == 4
    assert m.input_bytes.tolist() == [BLOCK_BYTES] * 3 + [7.0]
    assert r.tasks == 3 and r.depends_on == ("map",) and r.dataset is None
    assert r.cpu == 1.0 and r.mem_gb == 4.0
    assert r.input_bytes.sum() == pytest.approx(2 * GiB + 1)
    for j in wl.jobs:
        j.validate()


def test_swim_nine_fields_and_shared_datasets(tmp_path):
    p = write(tmp_path, "FB-2010_x.tsv", [
        tsv("job0", 1, 1, 10, 0, 10, "inputPath1", "", ""),
        tsv("job1", 2, 1, 20, 0, 10, "inputPath2", "", ""),
        tsv("job2", 3, 1, 30, 5, 10, "inputPath1", "", ""),
    ])
    wl = read_swim(p)
    ds = [j.stages[0].dataset for j in wl.jobs]
    assert ds == ["inputPath1", "inputPath2", "inputPath1"]


def test_swim_without_paths_gets_unique_datasets(tmp_path):
    p = write(tmp_path, "t.tsv", [tsv(f"job{i}", i, 1, 10, 0, 0) for i in range(4)])
    ds = [j.stages[0].dataset for j in read_swim(p).jobs]
    assert ds == ["job0-input", "job1-input", "job2-input", "job3-input"]


def test_swim_max_jobs(tmp_path):
    p = write(tmp_path, "t.tsv", [tsv(f"job{i}", i, 1, 10, 0, 0) for i in range(10)])
    assert len(read_swim(p, max_jobs=3).jobs) == 3
    assert len(read_swim(p, max_jobs=0).jobs) == 0


@pytest.mark.parametrize("row, field, value", [
    (tsv("job0", 1, 1, "abc", 0, 0), "map_input_bytes", "'abc'"),
    (tsv("job0", 1, 1, 10, "-5", 0), "shuffle_bytes", "'-5'"),
    (tsv("job0", 1, 1, 10, 0, "1.5"), "reduce_output_bytes", "'1.5'"),
    (tsv("job0", "soon", 1, 10, 0, 0), "submit_time_seconds", "'soon'"),
    (tsv("job0", 1, "x", 10, 0, 0), "inter_job_submit_gap_seconds", "'x'"),
    (tsv("", 1, 1, 10, 0, 0), "new_unique_job_id", "''"),
])
def test_swim_field_errors(tmp_path, row, field, value):
    p = write(tmp_path, "FB-2009.tsv", [tsv("job9", 0, 0, 1, 0, 0), "", row])
    with pytest.raises(SpecError) as e:
        read_swim(p)
    msg = str(e.value)
    assert "FB-2009.tsv line 3" in msg
    assert f"field {field}" in msg
    assert value in msg


def test_swim_error_message_format(tmp_path):
    p = write(tmp_path, "FB-2009.tsv", [tsv("job0", 1, 1, "abc", 0, 0)])
    with pytest.raises(SpecError, match=r"^FB-2009\.tsv line 1, field map_input_bytes: "
                                        r"expected a non-negative integer, got 'abc'$"):
        read_swim(p)


def test_swim_wrong_field_count(tmp_path):
    p = write(tmp_path, "bad.tsv", [tsv("job0", 1, 1, 10, 0, 0), tsv("job1", 2, 1, 10)])
    with pytest.raises(SpecError, match=r"bad\.tsv line 2: expected 6 .*got 4"):
        read_swim(p)
    p = write(tmp_path, "bad9.tsv", [tsv("job0", 1, 1, 10, 0, 0, "inputPath1", "junk", "")])
    with pytest.raises(SpecError, match=r"bad9\.tsv line 1, field 8"):
        read_swim(p)


def test_swim_missing_file(tmp_path):
    with pytest.raises(SpecError, match="nope.tsv"):
        read_swim(tmp_path / "nope.tsv")


# --------------------------------------------------------------------------- SWIM model

@pytest.mark.parametrize("input_bytes, tasks", [
    (0, 1), (1, 1), (BLOCK_BYTES - 1, 1), (BLOCK_BYTES, 1), (BLOCK_BYTES + 1, 2),
    (10 * BLOCK_BYTES, 10), (10 * BLOCK_BYTES + 5, 11),
])
def test_map_task_count(input_bytes, tasks):
    blocks = swim.split_blocks(input_bytes)
    assert blocks.size == tasks
    assert blocks.sum() == pytest.approx(input_bytes)
    assert np.all(blocks[:-1] == BLOCK_BYTES)
    assert 0 <= blocks[-1] <= BLOCK_BYTES


def test_block_mb_parameter(tmp_path):
    p = write(tmp_path, "t.tsv", [tsv("job0", 0, 0, 100 * MiB, 0, 0)])
    assert read_swim(p).jobs[0].stages[0].tasks == 1
    assert read_swim(p, block_mb=64).jobs[0].stages[0].tasks == 2
    assert read_swim(p, block_mb=10).jobs[0].stages[0].tasks == 10
    with pytest.raises(SpecError):
        read_swim(p, block_mb=0)


@pytest.mark.parametrize("shuffle, reducers", [
    (0, 0), (1, 1), (REDUCE_BYTES_PER_TASK, 1), (REDUCE_BYTES_PER_TASK + 1, 2), (5 * REDUCE_BYTES_PER_TASK, 5),
])
def test_reduce_task_count(tmp_path, shuffle, reducers):
    p = write(tmp_path, "t.tsv", [tsv("job0", 0, 0, 1000, shuffle, 100)])
    job = read_swim(p).jobs[0]
    if reducers == 0:
        assert [s.name for s in job.stages] == ["map"]
    else:
        assert [s.name for s in job.stages] == ["map", "reduce"]
        assert job.stages[1].tasks == reducers


def test_duration_model_and_jitter():
    rng = np.random.default_rng(1)
    job = swim.mapreduce_job("j", 0.0, 2000 * BLOCK_BYTES + 12345, 3000 * GiB, 600 * GiB,
                             dataset="d", rng=rng)
    m, r = job.stages
    base_m = MAP_STARTUP_S + m.input_bytes / MAP_BYTES_PER_S
    assert base_m[0] == pytest.approx(1.0 + BLOCK_BYTES / 50e6)
    f = m.durations_s / base_m
    assert np.log(f).std() == pytest.approx(swim.JITTER_SIGMA, rel=0.1)
    assert f.mean() == pytest.approx(1.0, abs=0.03)           # mean-one jitter
    assert r.tasks == 3000
    base_r = REDUCE_STARTUP_S + (GiB + 0.2 * GiB) / REDUCE_BYTES_PER_S
    f = r.durations_s / base_r
    assert np.log(f).std() == pytest.approx(swim.JITTER_SIGMA, rel=0.15)
    assert f.mean() == pytest.approx(1.0, abs=0.05)


def test_tiny_shuffle_and_output_get_1k_floor():
    # jitter is the only randomness; compare against the same rng stream
    job = swim.mapreduce_job("j", 0.0, 10.0, 3.0, 0.0, dataset="d", rng=np.random.default_rng(7))
    factor = swim.jitter(np.random.default_rng(7), 2)[1]    # draw 0 went to the map task
    r = job.stages[1]
    assert r.input_bytes.tolist() == [MIN_SHUFFLE_OUTPUT_BYTES]
    expected = (REDUCE_STARTUP_S + 2 * MIN_SHUFFLE_OUTPUT_BYTES / REDUCE_BYTES_PER_S) * factor
    assert r.durations_s[0] == pytest.approx(expected)
    # tiny input is not raised: still one task reading 10 bytes
    assert job.stages[0].input_bytes.tolist() == [10.0]


def test_cluster_servers_scaling(tmp_path):
    rows = [tsv("job0", 0, 0, 100 * BLOCK_BYTES, 10 * GiB, 10 * GiB)]
    p09 = write(tmp_path, "FB-2009_s.tsv", rows)
    p10 = write(tmp_path, "FB-2010_s.tsv", rows)
    other = write(tmp_path, "other.tsv", rows)
    assert read_swim(p09).jobs[0].stages[0].tasks == 100
    j = read_swim(p09, cluster_servers=60).jobs[0]          # 60 / 600 = 0.1
    assert j.stages[0].tasks == 10 and j.stages[1].tasks == 1
    assert j.stages[0].input_bytes.sum() == pytest.approx(10 * BLOCK_BYTES)
    assert read_swim(p10, cluster_servers=300).jobs[0].stages[0].tasks == 10     # 300 / 3000
    assert read_swim(other, cluster_servers=300).jobs[0].stages[0].tasks == 10   # default 3000
    assert read_swim(other, cluster_servers=300, source_servers=600).jobs[0].stages[0].tasks == 50
    assert swim.source_cluster_servers("x/FB-2009_samples.tsv") == 600
    assert swim.source_cluster_servers("FB-2010_samples.tsv") == 3000


def test_swim_determinism(tmp_path):
    p = write(tmp_path, "t.tsv", [tsv(f"job{i}", i, 1, (i + 1) * 300 * MiB, i * GiB, GiB) for i in range(6)])
    a, b, c = read_swim(p, seed=3), read_swim(p, seed=3), read_swim(p, seed=4)
    for ja, jb in zip(a.jobs, b.jobs):
        for sa, sb in zip(ja.stages, jb.stages):
            assert np.array_equal(sa.durations_s, sb.durations_s)
    assert not np.array_equal(a.jobs[-1].stages[0].durations_s, c.jobs[-1].stages[0].durations_s)
    # a job's durations do not depend on how many jobs were read
    d = read_swim(p, seed=3, max_jobs=2)
    assert np.array_equal(d.jobs[1].stages[0].durations_s, a.jobs[1].stages[0].durations_s)


# --------------------------------------------------------------------------- Hawk

def test_hawk_parse(tmp_path):
    p = write(tmp_path, "yh.tr", [
        "1000 2 1.5  1.0  2.0",
        "",
        "1010 1 7 7",
        "1004  3 2 1 2 3",
    ])
    wl = read_hawk(p)
    assert wl.name == "yh"
    assert [j.arrival_s for j in wl.jobs] == [0.0, 4.0, 10.0]
    assert [j.name for j in wl.jobs] == ["job0", "job2", "job1"]
    j = wl.jobs[0]
    assert [s.name for s in j.stages] == ["tasks"]
    s = j.stages[0]
    assert s.tasks == 2 and s.durations_s.tolist() == [1.0, 2.0]
    assert s.input_bytes is None and s.dataset is None and s.cpu == 1.0 and s.mem_gb == 2.0
    for j in wl.jobs:
        j.validate()
    assert len(read_hawk(p, max_jobs=2).jobs) == 2


@pytest.mark.parametrize("row, field", [
    ("10 3 1 1 2", "num_tasks"),
    ("10 2 1 1 2 3", "num_tasks"),
    ("10 x 1 1", "num_tasks"),
    ("10 0 0", "num_tasks"),
    ("t0 1 1 1", "arrival_time"),
    ("10 1 nope 1", "mean_task_duration"),
    ("10 2 1 1 abc", "d_2"),
    ("10 3 1 1 1 -2", "d_3"),
    ("10 1 1 inf", "d_1"),
])
def test_hawk_errors(tmp_path, row, field):
    p = write(tmp_path, "YH.tr", ["5 1 1 1", row])
    with pytest.raises(SpecError) as e:
        read_hawk(p)
    msg = str(e.value)
    assert "YH.tr line 2" in msg and f"field {field}" in msg


def test_hawk_too_few_fields(tmp_path):
    p = write(tmp_path, "YH.tr", ["5 1"])
    with pytest.raises(SpecError, match=r"YH\.tr line 1: expected at least 3"):
        read_hawk(p)


# --------------------------------------------------------------------------- Workload helpers

def _job(name, arrival, durations, cpu=1.0):
    d = np.asarray(durations, dtype=float)
    return JobSpec(name, [StageSpec("s", d.size, d, cpu=cpu)], arrival_s=arrival)


def test_workload_first():
    wl = Workload("w", [_job(f"j{i}", i, [1.0]) for i in range(5)])
    assert [j.name for j in wl.first(2).jobs] == ["j0", "j1"]
    assert wl.first(None) is wl
    assert len(wl.first(10).jobs) == 5


def test_scaled_to_load():
    # work = 10 + 10 + 2 * (10 + 10) = 60 cpu-s over a 10 s span
    wl = Workload("w", [_job("a", 10.0, [10.0]), _job("b", 15.0, [10.0]), _job("c", 20.0, [10.0, 10.0], cpu=2.0)])
    assert sum(j.work_cpu_s for j in wl.jobs) == 60.0
    wl.scaled_to_load(0.5, 6.0)     # target span 60 / (0.5 * 6) = 20 s: factor 2, start at 0
    assert [j.arrival_s for j in wl.jobs] == pytest.approx([0.0, 10.0, 20.0])
    offered = sum(j.work_cpu_s for j in wl.jobs) / (6.0 * 20.0)
    assert offered == pytest.approx(0.5)
    with pytest.raises(SpecError):
        wl.scaled_to_load(0, 7.0)


# --------------------------------------------------------------------------- generators

SMALL = {
    "fb2009": "fb2009:jobs=200",
    "heavytail": "heavytail:jobs=100",
    "smalljobs": "smalljobs:jobs=100",
    "scale": "scale:servers=50,seconds=5",
    "dag": "dag:jobs=30",
}


def test_every_generator_is_covered():
    assert sorted(SMALL) == sorted(WORKLOAD_NAMES)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_generator_valid_and_deterministic(name):
    a = load_workload(SMALL[name], seed=5)
    b = load_workload(SMALL[name], seed=5)
    c = load_workload(SMALL[name], seed=6)
    assert a.jobs, name
    assert a.jobs[0].arrival_s == 0.0
    arr = [j.arrival_s for j in a.jobs]
    assert arr == sorted(arr)
    assert len({j.name for j in a.jobs}) == len(a.jobs)
    for j in a.jobs:
        j.validate()
        for s in j.stages:
            if s.dataset is not None:
                assert s.input_bytes is not None
    assert [j.name for j in a.jobs] == [j.name for j in b.jobs]
    for ja, jb in zip(a.jobs, b.jobs):
        assert ja.arrival_s == jb.arrival_s
        for sa, sb in zip(ja.stages, jb.stages):
            assert np.array_equal(sa.durations_s, sb.durations_s)
    da = np.concatenate([s.durations_s for j in a.jobs for s in j.stages])
    dc = np.concatenate([s.durations_s for j in c.jobs for s in j.stages])
    assert da.shape != dc.shape or not np.array_equal(da, dc)


def test_fb2009_shape():
    wl = synthetic.fb2009(jobs=2000, seed=0)
    maps = np.array([j.stages[0].tasks for j in wl.jobs])
    assert abs((maps == 1).mean() - 0.859) < 0.03
    assert abs((maps <= 10).mean() - 0.903) < 0.03
    assert abs((maps > 100).mean() - 0.052) < 0.02
    assert maps.max() <= 2000
    map_only = np.mean([len(j.stages) == 1 for j in wl.jobs])
    assert abs(map_only - 0.75) < 0.04
    gaps = np.diff([j.arrival_s for j in wl.jobs])
    assert 12.0 < gaps.mean() < 17.5 and 6.0 < np.median(gaps) < 8.0
    # shared inputs: several jobs name the same dataset
    names = [j.stages[0].dataset for j in wl.jobs]
    shared = [n for n in names if n.startswith("shared")]
    assert 0.3 < len(shared) / len(names) < 0.45
    assert len(set(shared)) < len(shared)
    for j in wl.jobs:
        m = j.stages[0]
        assert m.tasks == max(1, math.ceil(m.input_bytes.sum() / BLOCK_BYTES))


def test_fb2009_max_tasks():
    wl = synthetic.fb2009(jobs=500, max_tasks=50, seed=1)
    assert max(j.stages[0].tasks for j in wl.jobs) <= 50


def test_heavytail_stragglers():
    plain = synthetic.heavytail(jobs=300, stragglers=0.0, seed=2)
    slow = synthetic.heavytail(jobs=300, stragglers=0.5, seed=2)
    assert max(j.total_tasks for j in plain.jobs) <= 5000
    mp = np.mean(np.concatenate([j.stages[0].durations_s for j in plain.jobs]))
    ms = np.mean(np.concatenate([j.stages[0].durations_s for j in slow.jobs]))
    assert ms > 2.5 * mp


def test_scale_rate():
    wl = synthetic.scale(servers=100, seconds=10, tasks_per_job=20, task_s=2.0, seed=0)
    assert len(wl.jobs) == 50 and wl.total_tasks == 1000          # 100 tasks/s for 10 s
    span = wl.jobs[-1].arrival_s + (wl.jobs[1].arrival_s - wl.jobs[0].arrival_s)
    assert wl.total_tasks / span == pytest.approx(100.0)
    assert len({j.stages[0].dataset for j in wl.jobs}) == 50
    assert all(np.all(j.stages[0].input_bytes == 64 * MiB) for j in wl.jobs)
    d = np.concatenate([j.stages[0].durations_s for j in wl.jobs])
    assert d.mean() == pytest.approx(2.0, rel=0.05)


def test_smalljobs_shape():
    wl = synthetic.smalljobs(jobs=300, seed=0)
    sizes = [j.total_tasks for j in wl.jobs]
    assert min(sizes) >= 1 and max(sizes) <= 20
    tables = {j.stages[0].dataset.split("/")[0] for j in wl.jobs}
    assert len(tables) == 3
    d = np.concatenate([j.stages[0].durations_s for j in wl.jobs])
    assert d.min() >= 2.0 and d.max() <= 4.0


def test_dag_shapes():
    wl = synthetic.dag(jobs=60, seed=0)
    counts = {len(j.stages) for j in wl.jobs}
    assert counts == {2, 3, 4}
    for j in wl.jobs:
        roots = [s for s in j.stages if not s.depends_on]
        assert roots and all(s.dataset for s in roots)
        if len(j.stages) == 4:
            assert j.stages[-1].depends_on == ("join_a", "join_b")


# --------------------------------------------------------------------------- load_workload

def test_load_workload_spec_parsing():
    assert len(load_workload("fb2009:jobs=30").jobs) == 30
    assert len(load_workload(" dag : jobs = 7 ").jobs) == 7
    assert load_workload("dag:jobs=7").name == "dag:jobs=7"
    assert load_workload("dag").name == "dag"
    wl = load_workload("scale:seconds=2,tasks_per_job=10", cluster_servers=20)
    assert wl.total_tasks == 40           # servers defaults to cluster_servers
    assert generator_params("fb2009") == {"jobs": 600, "max_tasks": 2000}


@pytest.mark.parametrize("spec, needle", [
    ("nosuch", "fb2009"),
    ("nosuch", "not found"),
    ("fb2009:bogus=1", "jobs"),
    ("fb2009:bogus=1", "bogus"),
    ("fb2009:jobs=abc", "integer"),
    ("fb2009:jobs", "key=value"),
    ("fb2009:jobs=0", "jobs"),
    ("heavytail:stragglers=2", "stragglers"),
    ("missing/dir/trace.tsv", "not found"),
    ("", "fb2009"),
])
def test_load_workload_errors(spec, needle):
    with pytest.raises(SpecError, match=needle):
        load_workload(spec)


def test_load_workload_files(tmp_path):
    p = write(tmp_path, "w.tsv", [tsv("job1", 30, 20, 10, 0, 0), tsv("job0", 10, 10, 10, 0, 0)])
    wl = load_workload(str(p))
    assert [j.name for j in wl.jobs] == ["job0", "job1"]       # sorted by arrival
    assert [j.arrival_s for j in wl.jobs] == [0.0, 20.0]        # shifted to 0
    h = write(tmp_path, "w.tr", ["50 1 2 2", "40 2 1 1 1"])
    wl = load_workload(str(h))
    assert [j.arrival_s for j in wl.jobs] == [0.0, 10.0]
    other = write(tmp_path, "w.csv", ["x"])
    with pytest.raises(SpecError, match="unsupported"):
        load_workload(str(other))


def test_load_workload_seed_and_servers(tmp_path):
    p = write(tmp_path, "FB-2009_t.tsv", [tsv("job0", 0, 0, 20 * BLOCK_BYTES, 0, 0)])
    assert load_workload(str(p), cluster_servers=60).jobs[0].stages[0].tasks == 2
    a = load_workload(str(p), seed=1).jobs[0].stages[0].durations_s
    b = load_workload(str(p), seed=2).jobs[0].stages[0].durations_s
    assert not np.array_equal(a, b)


# --------------------------------------------------------------------------- real traces

def test_real_fb2009_first50():
    if not FB2009_50.is_file():
        pytest.skip(f"trace not available: {FB2009_50}")
    wl = read_swim(FB2009_50)
    assert len(wl.jobs) == 50
    assert wl.jobs[0].name == "job0" and wl.jobs[0].arrival_s == 49.0
    rows = [line.split("\t") for line in FB2009_50.read_text().splitlines() if line.strip()]
    for job, row in zip(wl.jobs, rows):
        job.validate()
        assert job.name == row[0]
        assert job.stages[0].tasks == max(1, math.ceil(int(row[3]) / BLOCK_BYTES))
        assert len(job.stages) == (1 if int(row[4]) == 0 else 2)
    loaded = load_workload(str(FB2009_50))
    assert loaded.jobs[0].arrival_s == 0.0 and len(loaded.jobs) == 50


def test_real_yh1_first100():
    if not YH1.is_file():
        pytest.skip(f"trace not available: {YH1}")
    wl = read_hawk(YH1, max_jobs=100)
    assert len(wl.jobs) == 100
    with open(YH1) as fh:
        lines = [next(fh).split() for _ in range(100)]
    assert wl.total_tasks == sum(int(parts[1]) for parts in lines)
    assert sum(len(parts) - 3 for parts in lines) == wl.total_tasks
    by_name = {j.name: j for j in wl.jobs}
    t0 = min(float(parts[0]) for parts in lines)
    for i, parts in enumerate(lines):
        j = by_name[f"job{i}"]
        assert j.stages[0].tasks == int(parts[1])
        assert j.arrival_s == pytest.approx(float(parts[0]) - t0)
        assert j.stages[0].durations_s.mean() == pytest.approx(float(parts[2]), rel=1e-6)
