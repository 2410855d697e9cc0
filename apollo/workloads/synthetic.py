"""Synthetic workload generators that the project carries itself.

Every generator is a pure function of its parameters and ``seed``: all
randomness comes from numpy Generators built from the seed, so the same call
returns identical jobs. Each returns a Workload with jobs sorted by arrival and
the first arrival at 0. Parameters are keyword-only; ``load_workload`` maps
``NAME:key=value,...`` onto them (every keyword except ``seed`` is a key).

- ``fb2009``: shaped like the SWIM Facebook 2009 trace, from its published
  statistics; durations from the SWIM byte model in ``swim.py``.
- ``heavytail``: Pareto job sizes, lognormal task times and stragglers.
- ``smalljobs``: the delay-scheduling small-jobs setting (many small jobs over
  a few shared large datasets).
- ``scale``: the Apollo-style matching/scale experiment: about one task per
  server per second.
- ``dag``: multi-stage DAG jobs for exercising job-manager DAG handling.
"""
from __future__ import annotations

import math

import numpy as np

from apollo.core.spec import JobSpec, SpecError, StageSpec, Workload
from apollo.workloads.swim import (BLOCK_BYTES, MAP_CPU, MAP_MEM_GB, MiB, REDUCE_BYTES_PER_TASK,
                                   _check_seed, job_rng, mapreduce_job, sort_and_shift)

# --------------------------------------------------------------------------- fb2009
# Figures from the SWIM FB-2009 trace statistics (SWIM workloadSuite,
# FB-2009_samples_24_times_1hr_0: 5,894 jobs; summarised in
# shared/traces/README.md). Job size = map tasks at 64 MiB per task there; here
# the same *task-count* distribution is reproduced directly, and input bytes
# are then drawn to fit that count under this project's BLOCK_BYTES.
FB2009_P_ONE_TASK = 0.859          # jobs with 1 map task
FB2009_P_LE10 = 0.903              # jobs with <= 10 map tasks
FB2009_P_GT100 = 0.052             # jobs with > 100 map tasks
FB2009_P_GT1000 = 78 / 5894        # jobs with > 1000 map tasks (78 jobs)
FB2009_P_MAP_ONLY = 0.75           # shuffle == 0
FB2009_GAP_MEAN_S = 14.7           # inter-arrival mean
FB2009_GAP_MEDIAN_S = 7.0          # inter-arrival median
# Shared-input figures: the FB-2009 file has no input paths, so these come
# from the FB-2010 withInputPaths file of the same cluster: 38 % of jobs read a
# path that other jobs read too, 9,645 jobs over 1,375 such paths.
FB2009_SHARED_FRACTION = 0.38
FB2009_JOBS_PER_SHARED_INPUT = 9645 / 1375
FB2009_ZIPF_S = 1.0                # popularity of shared inputs ~ 1/rank (assumed)
# Input size of 1-task jobs: lognormal chosen so the whole workload has median
# input ~20 KB and ~77.5 % of jobs under 1 MB (4,568 of 5,894), as in the trace.
FB2009_SMALL_INPUT_MEDIAN = 9.5e3
FB2009_SMALL_INPUT_SIGMA = 3.6
# Shuffle/output ratios of map+reduce jobs are not in the published figures;
# assumed: shuffle = input x lognormal(median 1, sigma 1.5), output = shuffle x
# lognormal(median 0.5, sigma 1).
FB2009_SHUFFLE_RATIO_SIGMA = 1.5
FB2009_OUTPUT_RATIO_MEDIAN = 0.5
FB2009_OUTPUT_RATIO_SIGMA = 1.0


def fb2009(*, jobs: int = 600, max_tasks: int = 2000, seed: int = 0) -> Workload:
    """A workload shaped like SWIM FB-2009 (see the constants above for the figures).

    Map-task counts: 1 with p=0.859; log-uniform over 2..10 and 11..100 for
    the next two bands; above 100 a Pareto tail whose index makes
    P(>1000 | >100) match the trace. ``max_tasks`` caps map tasks (the real
    maximum is 112,523); reduce tasks are capped at ``max(1, max_tasks // 10)``.
    25 % of jobs have a reduce stage. Inter-arrival gaps are lognormal with
    mean 14.7 s and median 7 s. About 38 % of jobs read one of a set of shared
    inputs (``shared{k}``, Zipf popularity, about 7 jobs per input); the rest
    read their own (``job{i}-input``). Durations: SWIM model (swim.py), with
    per-job jitter streams from ``job_rng(seed, i)``.
    """
    _check_seed(seed)
    jobs = _pos_int("jobs", jobs)
    max_tasks = _pos_int("max_tasks", max_tasks)
    rng = np.random.default_rng(seed)
    tasks = _fb2009_map_tasks(rng, jobs, max_tasks)

    # Input bytes consistent with the task count: 1 task -> small lognormal
    # below a block; n tasks -> ((n-1) + u) blocks with u in (0, 1].
    small = rng.lognormal(math.log(FB2009_SMALL_INPUT_MEDIAN), FB2009_SMALL_INPUT_SIGMA, size=jobs)
    small = np.minimum(small, BLOCK_BYTES)
    frac = 1.0 - rng.random(jobs)
    input_b = np.where(tasks == 1, small, (tasks - 1 + frac) * BLOCK_BYTES)

    map_only = rng.random(jobs) < FB2009_P_MAP_ONLY
    shuffle = input_b * rng.lognormal(0.0, FB2009_SHUFFLE_RATIO_SIGMA, size=jobs)
    shuffle = np.minimum(shuffle, max(1, max_tasks // 10) * REDUCE_BYTES_PER_TASK)
    shuffle = np.where(map_only, 0.0, np.maximum(shuffle, 1.0))
    output = np.where(map_only, input_b, shuffle) * rng.lognormal(
        math.log(FB2009_OUTPUT_RATIO_MEDIAN), FB2009_OUTPUT_RATIO_SIGMA, size=jobs)

    # Lognormal gaps: median = exp(mu), mean = exp(mu + s^2/2).
    mu = math.log(FB2009_GAP_MEDIAN_S)
    s = math.sqrt(2.0 * math.log(FB2009_GAP_MEAN_S / FB2009_GAP_MEDIAN_S))
    arrivals = _arrivals_from_gaps(rng.lognormal(mu, s, size=jobs))

    n_shared = max(1, round(jobs * FB2009_SHARED_FRACTION / FB2009_JOBS_PER_SHARED_INPUT))
    weights = 1.0 / np.arange(1, n_shared + 1) ** FB2009_ZIPF_S
    shares = rng.random(jobs) < FB2009_SHARED_FRACTION
    which = rng.choice(n_shared, size=jobs, p=weights / weights.sum())

    out = []
    for i in range(jobs):
        dataset = f"shared{which[i]}" if shares[i] else f"job{i}-input"
        out.append(mapreduce_job(f"fb2009-{i}", arrivals[i], float(input_b[i]), float(shuffle[i]),
                                 float(output[i]), dataset=dataset, rng=job_rng(seed, i)))
    return Workload("fb2009", sort_and_shift(out))


def _fb2009_map_tasks(rng: np.random.Generator, n: int, max_tasks: int) -> np.ndarray:
    u = rng.random(n)
    tasks = np.ones(n, dtype=np.int64)
    mid = (u >= FB2009_P_ONE_TASK) & (u < FB2009_P_LE10)
    big = (u >= FB2009_P_LE10) & (u < 1.0 - FB2009_P_GT100)
    tail = u >= 1.0 - FB2009_P_GT100
    tasks[mid] = _log_uniform_int(rng, 2, 10, int(mid.sum()))
    tasks[big] = _log_uniform_int(rng, 11, 100, int(big.sum()))
    # Pareto above 100 with P(X > 1000 | X > 100) = p_gt1000 / p_gt100.
    alpha = math.log(FB2009_P_GT100 / FB2009_P_GT1000) / math.log(10.0)
    x = 100.0 * (1.0 - rng.random(int(tail.sum()))) ** (-1.0 / alpha)
    tasks[tail] = np.maximum(101, np.ceil(np.minimum(x, 1e9))).astype(np.int64)
    return np.minimum(tasks, max_tasks)


# --------------------------------------------------------------------------- heavytail

def heavytail(*, jobs: int = 500, stragglers: float = 0.05, alpha: float = 1.2, max_tasks: int = 5000,
              task_s: float = 5.0, gap_s: float = 2.0, seed: int = 0) -> Workload:
    """Heavy-tailed job sizes with stragglers (a stress shape, not a trace replay).

    Tasks per job: classic Pareto with index ``alpha`` (1.2) and minimum 1,
    floored to an integer and capped at ``max_tasks``; heavy-tailed job sizes
    are the common finding across published cluster traces (e.g. the FB-2009
    figures above: 85.9 % 1-task jobs but a tail past 100,000 tasks). Task
    times: lognormal with median ``task_s`` and sigma 0.5; each task
    independently, with probability ``stragglers``, is a straggler whose time
    is multiplied by U(5, 10). Poisson arrivals with mean gap ``gap_s``.
    Map-only; each job reads its own dataset ``ht-{i}``, one block per task.
    """
    _check_seed(seed)
    jobs = _pos_int("jobs", jobs)
    max_tasks = _pos_int("max_tasks", max_tasks)
    _frac("stragglers", stragglers)
    _pos("alpha", alpha)
    _pos("task_s", task_s)
    _pos("gap_s", gap_s)
    rng = np.random.default_rng(seed)
    sizes = np.minimum(np.floor(rng.pareto(alpha, size=jobs) + 1.0), max_tasks).astype(np.int64)
    arrivals = _arrivals_from_gaps(rng.exponential(gap_s, size=jobs))
    out = []
    for i in range(jobs):
        n = int(sizes[i])
        d = rng.lognormal(math.log(task_s), 0.5, size=n)
        slow = rng.random(n) < stragglers
        d[slow] *= rng.uniform(5.0, 10.0, size=int(slow.sum()))
        stage = StageSpec("map", n, d, cpu=MAP_CPU, mem_gb=MAP_MEM_GB,
                          input_bytes=np.full(n, float(BLOCK_BYTES)), dataset=f"ht-{i}")
        out.append(JobSpec(f"heavytail-{i}", [stage], arrival_s=arrivals[i]))
    return Workload("heavytail", sort_and_shift(out))


# --------------------------------------------------------------------------- smalljobs

def smalljobs(*, jobs: int = 200, datasets: int = 3, parts: int = 100, max_tasks: int = 20,
              gap_s: float = 2.0, seed: int = 0) -> Workload:
    """Many small jobs over a few shared large datasets.

    The setting of the small-jobs experiment in delay scheduling (Zaharia et
    al., "Delay Scheduling", EuroSys 2010): most jobs are small, each reads a
    few blocks of a large shared table, and with short tasks a scheduler that
    launches on the first free slot rarely gets a local one.

    Here: ``datasets`` tables, each split in ``parts`` files of ``max_tasks``
    blocks (dataset names ``table{d}/part{p}``); a job picks a table and a file
    uniformly and runs 1..``max_tasks`` (uniform) map tasks over that file's
    first blocks, one 128 MiB block each, 2-4 s of compute (uniform). Poisson
    arrivals with mean gap ``gap_s``.
    """
    _check_seed(seed)
    jobs = _pos_int("jobs", jobs)
    datasets = _pos_int("datasets", datasets)
    parts = _pos_int("parts", parts)
    max_tasks = _pos_int("max_tasks", max_tasks)
    _pos("gap_s", gap_s)
    rng = np.random.default_rng(seed)
    arrivals = _arrivals_from_gaps(rng.exponential(gap_s, size=jobs))
    sizes = rng.integers(1, max_tasks + 1, size=jobs)
    table = rng.integers(0, datasets, size=jobs)
    part = rng.integers(0, parts, size=jobs)
    out = []
    for i in range(jobs):
        n = int(sizes[i])
        stage = StageSpec("map", n, rng.uniform(2.0, 4.0, size=n), cpu=MAP_CPU, mem_gb=MAP_MEM_GB,
                          input_bytes=np.full(n, float(BLOCK_BYTES)),
                          dataset=f"table{table[i]}/part{part[i]}")
        out.append(JobSpec(f"smalljobs-{i}", [stage], arrival_s=arrivals[i]))
    return Workload("smalljobs", sort_and_shift(out))


# --------------------------------------------------------------------------- scale

SCALE_INPUT_BYTES_PER_TASK = 64 * MiB
SCALE_GAMMA_SHAPE = 4.0


def scale(*, servers: int = 1000, seconds: float = 60.0, tasks_per_job: int = 50, task_s: float = 2.0,
          seed: int = 0) -> Workload:
    """About one new task per server per second, for ``seconds`` of arrivals.

    Shaped after the Apollo scheduling-at-scale setting (Boutin et al., OSDI
    2014): a steady, high rate of scheduling decisions with input locality at
    stake. ``round(servers * seconds / tasks_per_job)`` jobs of
    ``tasks_per_job`` map tasks arrive evenly spaced, so tasks offered per
    second ~= ``servers``. Task times: gamma with shape 4 and mean ``task_s``.
    Each job reads its own dataset ``scale-{k}``, 64 MiB per task.
    """
    _check_seed(seed)
    servers = _pos_int("servers", servers)
    tasks_per_job = _pos_int("tasks_per_job", tasks_per_job)
    _pos("seconds", seconds)
    _pos("task_s", task_s)
    rng = np.random.default_rng(seed)
    n_jobs = max(1, round(servers * seconds / tasks_per_job))
    gap = seconds / n_jobs
    out = []
    for k in range(n_jobs):
        d = rng.gamma(SCALE_GAMMA_SHAPE, task_s / SCALE_GAMMA_SHAPE, size=tasks_per_job)
        stage = StageSpec("map", tasks_per_job, d, cpu=MAP_CPU, mem_gb=MAP_MEM_GB,
                          input_bytes=np.full(tasks_per_job, float(SCALE_INPUT_BYTES_PER_TASK)),
                          dataset=f"scale-{k}")
        out.append(JobSpec(f"scale-{k}", [stage], arrival_s=k * gap))
    return Workload("scale", out)


# --------------------------------------------------------------------------- dag

DAG_DIM_DATASET = "dag-dim"       # a small table every two-input join reads


def dag(*, jobs: int = 50, gap_s: float = 5.0, seed: int = 0) -> Workload:
    """Multi-stage DAG jobs (for exercising the job manager), Poisson arrivals.

    Each job takes one of three shapes, uniformly:

    - 2 stages: ``extract -> aggregate``
    - 3 stages: ``extract_a, extract_b -> join`` (two roots)
    - 4 stages: ``extract -> {join_a, join_b} -> aggregate`` (a diamond)

    Extract stages read blocks (``extract``/``extract_a``: the job's own
    dataset ``dag-{i}``, 1-30 tasks; ``extract_b``: the shared ``dag-dim``,
    1-5 tasks). Later stages read shuffled data (no dataset): joins 1-10 tasks
    at 4 GB, aggregate 1-3 tasks at 4 GB. Task times lognormal (sigma 0.3) with
    medians 4 s (extract), 6 s (join), 3 s (aggregate).
    """
    _check_seed(seed)
    jobs = _pos_int("jobs", jobs)
    _pos("gap_s", gap_s)
    rng = np.random.default_rng(seed)
    arrivals = _arrivals_from_gaps(rng.exponential(gap_s, size=jobs))

    def stage(name: str, lo: int, hi: int, median_s: float, mem: float, dataset: str | None,
              deps: tuple[str, ...] = ()) -> StageSpec:
        n = int(rng.integers(lo, hi + 1))
        d = rng.lognormal(math.log(median_s), 0.3, size=n)
        per_task = float(BLOCK_BYTES) if dataset else 256.0 * MiB
        return StageSpec(name, n, d, cpu=1.0, mem_gb=mem, input_bytes=np.full(n, per_task),
                         dataset=dataset, depends_on=deps)

    out = []
    for i in range(jobs):
        shape = int(rng.integers(2, 5))
        own = f"dag-{i}"
        if shape == 2:
            stages = [stage("extract", 1, 30, 4.0, 2.0, own),
                      stage("aggregate", 1, 3, 3.0, 4.0, None, ("extract",))]
        elif shape == 3:
            stages = [stage("extract_a", 1, 30, 4.0, 2.0, own),
                      stage("extract_b", 1, 5, 4.0, 2.0, DAG_DIM_DATASET),
                      stage("join", 1, 10, 6.0, 4.0, None, ("extract_a", "extract_b"))]
        else:
            stages = [stage("extract", 1, 30, 4.0, 2.0, own),
                      stage("join_a", 1, 10, 6.0, 4.0, None, ("extract",)),
                      stage("join_b", 1, 10, 6.0, 4.0, None, ("extract",)),
                      stage("aggregate", 1, 3, 3.0, 4.0, None, ("join_a", "join_b"))]
        out.append(JobSpec(f"dag-{i}", stages, arrival_s=arrivals[i]))
    return Workload("dag", sort_and_shift(out))


# --------------------------------------------------------------------------- helpers

def _arrivals_from_gaps(gaps: np.ndarray) -> list[float]:
    """First job at 0, then cumulative gaps."""
    if gaps.size == 0:
        return []
    return [0.0] + np.cumsum(gaps[:-1]).tolist()


def _log_uniform_int(rng: np.random.Generator, lo: int, hi: int, n: int) -> np.ndarray:
    x = np.floor(np.exp(rng.uniform(math.log(lo), math.log(hi + 1), size=n))).astype(np.int64)
    return np.clip(x, lo, hi)


def _pos_int(name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise SpecError(f"{name} must be an integer >= 1, got {v!r}")
    return int(v)


def _pos(name: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.number)) or not (math.isfinite(v) and v > 0):
        raise SpecError(f"{name} must be a number > 0, got {v!r}")
    return float(v)


def _frac(name: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.number)) or not 0 <= v <= 1:
        raise SpecError(f"{name} must be a number in [0, 1], got {v!r}")
    return float(v)
