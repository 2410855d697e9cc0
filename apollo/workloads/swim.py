"""SWIM Facebook traces (``.tsv``) and the MapReduce task model built on them.

The SWIM workload files (FB-2009, FB-2010) give, per job, only a submit time
and three byte counts: map input, shuffle and reduce output. They carry no
task counts and no durations, so this module turns bytes into tasks with the
model below. The same model is reused by the synthetic ``fb2009`` generator
(see :func:`mapreduce_job`), so both produce jobs of the same shape.

File format (tab-separated, no header, one job per line)::

    new_unique_job_id  submit_time_seconds  inter_job_submit_gap_seconds
    map_input_bytes    shuffle_bytes        reduce_output_bytes
    [anonymized_input_path  ""  ""]

Rows have 6 fields, or 9 in the ``withInputPaths`` file (whose fields 8 and
9 are always empty). Rows of 7 or 8 fields are accepted too, as long as every
field after the 7th is empty. Blank lines are skipped.

Model
-----
1. Byte scaling (SWIM's own rule): when ``cluster_servers`` is given, every
   byte count is multiplied by ``cluster_servers / source_servers``, where the
   source cluster had 600 machines for FB-2009 and 3000 for FB-2010 (picked
   from "2009"/"2010" in the file name; 3000 when neither appears).
   SWIM's replay generator also raises inputs below 64 MB to 64 MB; this model
   does *not* (a tiny input stays tiny and still gets one map task), but it
   does apply SWIM's floor of ``MIN_SHUFFLE_OUTPUT_BYTES`` (1 KiB) to non-zero
   shuffle and to output sizes.
2. Map stage ``"map"``: ``max(1, ceil(input / BLOCK_BYTES))`` tasks (128 MiB
   blocks by default; ``block_mb`` overrides). Task *i* reads block *i*: every
   block is full except the last, which holds the remainder. cpu=1, mem=2 GB.
   The dataset is the job's input path (field 7) when present, so jobs that
   read the same path share blocks; otherwise ``f"job{idx}-input"`` with
   ``idx`` the 0-based job index in the file.
   Duration = ``MAP_STARTUP_S + task_bytes / MAP_BYTES_PER_S``.
3. Reduce stage ``"reduce"`` (depends on ``"map"``): none when the trace's
   shuffle is 0 (a map-only job); otherwise
   ``max(1, ceil(shuffle / REDUCE_BYTES_PER_TASK))`` tasks sharing shuffle and
   output evenly. cpu=1, mem=4 GB, input_bytes = shuffle share, no dataset.
   Duration = ``REDUCE_STARTUP_S + (shuffle_share + output_share) /
   REDUCE_BYTES_PER_S``.
4. Jitter: every task duration is multiplied by a lognormal factor with
   sigma ``JITTER_SIGMA`` (0.3) and log-mean ``-sigma**2 / 2`` (so the factor's
   mean is 1). The factors come from a numpy Generator seeded by
   ``(seed, job index)`` (:func:`job_rng`): map tasks draw first, then reduce
   tasks, so a job's durations do not depend on which other jobs are read.

Job name = field 1, ``arrival_s`` = field 2 as in the file (``load_workload``
later shifts the first arrival to 0).
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from apollo.core.spec import JobSpec, SpecError, StageSpec, Workload

MiB = 1 << 20
GiB = 1 << 30

BLOCK_BYTES = 128 * MiB               # default HDFS block: one map task per block
MAP_STARTUP_S = 1.0                   # per map task fixed cost (JVM start, setup)
MAP_BYTES_PER_S = 50e6                # map processing rate, 50 MB/s
REDUCE_BYTES_PER_TASK = GiB           # shuffle bytes per reduce task
REDUCE_STARTUP_S = 2.0                # per reduce task fixed cost
REDUCE_BYTES_PER_S = 20e6             # reduce rate over shuffle + output, 20 MB/s
MIN_SHUFFLE_OUTPUT_BYTES = 1024       # SWIM's 1 KB floor on shuffle and output
JITTER_SIGMA = 0.3                    # lognormal sigma of the per-task duration factor
MAP_CPU, MAP_MEM_GB = 1.0, 2.0
REDUCE_CPU, REDUCE_MEM_GB = 1.0, 4.0

SOURCE_CLUSTER_SERVERS = {"2009": 600, "2010": 3000}   # machines in the traced clusters
DEFAULT_SOURCE_CLUSTER_SERVERS = 3000

FIELDS = (
    "new_unique_job_id",
    "submit_time_seconds",
    "inter_job_submit_gap_seconds",
    "map_input_bytes",
    "shuffle_bytes",
    "reduce_output_bytes",
    "anonymized_input_path",
)

_UINT = re.compile(r"\d+")


# --------------------------------------------------------------------------- model

def job_rng(seed: int, index: int) -> np.random.Generator:
    """The Generator for job ``index`` under ``seed`` (independent per job)."""
    _check_seed(seed)
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(int(index),)))


def jitter(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` mean-one lognormal duration factors with sigma ``JITTER_SIGMA``."""
    return rng.lognormal(mean=-JITTER_SIGMA ** 2 / 2, sigma=JITTER_SIGMA, size=n)


def split_blocks(input_bytes: float, block_bytes: float = BLOCK_BYTES) -> np.ndarray:
    """Bytes read by each map task: full blocks then the remainder; at least one task."""
    if block_bytes <= 0:
        raise SpecError(f"block size must be > 0, got {block_bytes}")
    n = max(1, math.ceil(input_bytes / block_bytes))
    sizes = np.full(n, float(block_bytes))
    sizes[-1] = float(input_bytes) - (n - 1) * float(block_bytes)
    return sizes


def map_base_s(task_bytes: np.ndarray | float) -> np.ndarray | float:
    """Modelled map compute seconds before jitter."""
    return MAP_STARTUP_S + np.asarray(task_bytes, dtype=np.float64) / MAP_BYTES_PER_S


def reduce_base_s(shuffle_per_task: np.ndarray | float, output_per_task: np.ndarray | float) -> np.ndarray | float:
    """Modelled reduce compute seconds before jitter."""
    total = np.asarray(shuffle_per_task, dtype=np.float64) + np.asarray(output_per_task, dtype=np.float64)
    return REDUCE_STARTUP_S + total / REDUCE_BYTES_PER_S


def reduce_tasks_for(shuffle_bytes: float) -> int:
    """Reduce task count: 0 for a map-only job (shuffle 0), else one per GiB, at least 1."""
    if shuffle_bytes <= 0:
        return 0
    return max(1, math.ceil(shuffle_bytes / REDUCE_BYTES_PER_TASK))


def mapreduce_job(name: str, arrival_s: float, input_bytes: float, shuffle_bytes: float,
                  output_bytes: float, *, dataset: str, rng: np.random.Generator,
                  block_bytes: float = BLOCK_BYTES) -> JobSpec:
    """Build a map (+ reduce) job from byte counts with the module's model.

    Byte counts are taken as already scaled; the 1 KiB floor is applied here
    to a non-zero shuffle and to the output. ``shuffle_bytes == 0`` gives a
    map-only job.
    """
    blocks = split_blocks(input_bytes, block_bytes)
    map_d = map_base_s(blocks) * jitter(rng, blocks.size)
    stages = [StageSpec("map", int(blocks.size), map_d, cpu=MAP_CPU, mem_gb=MAP_MEM_GB,
                        input_bytes=blocks, dataset=dataset)]
    if shuffle_bytes > 0:
        shuffle = max(float(shuffle_bytes), MIN_SHUFFLE_OUTPUT_BYTES)
        output = max(float(output_bytes), MIN_SHUFFLE_OUTPUT_BYTES)
        r = reduce_tasks_for(shuffle)
        shuffle_each = np.full(r, shuffle / r)
        red_d = reduce_base_s(shuffle_each, output / r) * jitter(rng, r)
        stages.append(StageSpec("reduce", r, red_d, cpu=REDUCE_CPU, mem_gb=REDUCE_MEM_GB,
                                input_bytes=shuffle_each, dataset=None, depends_on=("map",)))
    return JobSpec(name=name, stages=stages, arrival_s=float(arrival_s))


def sort_and_shift(jobs: list[JobSpec]) -> list[JobSpec]:
    """Sort jobs by arrival (stable) and shift arrivals so the first is 0 (in place on the jobs)."""
    jobs = sorted(jobs, key=lambda j: j.arrival_s)
    if jobs:
        t0 = jobs[0].arrival_s
        for j in jobs:
            j.arrival_s = j.arrival_s - t0
    return jobs


def source_cluster_servers(path: str | Path) -> int:
    """Machines in the cluster a SWIM file was sampled from, by its file name."""
    name = Path(path).name
    for key, servers in SOURCE_CLUSTER_SERVERS.items():
        if key in name:
            return servers
    return DEFAULT_SOURCE_CLUSTER_SERVERS


# --------------------------------------------------------------------------- reader

def read_swim(path: str | Path, *, seed: int = 0, cluster_servers: int | None = None,
              block_mb: float = 128, max_jobs: int | None = None,
              source_servers: int | None = None) -> Workload:
    """Read a SWIM ``.tsv`` file into a Workload (model in the module docstring).

    ``max_jobs`` stops after that many jobs. ``source_servers`` overrides the
    source cluster size guessed from the file name.
    """
    path = Path(path)
    _check_seed(seed)
    if block_mb is None or not block_mb > 0:
        raise SpecError(f"block_mb must be > 0, got {block_mb}")
    if max_jobs is not None and max_jobs < 0:
        raise SpecError(f"max_jobs must be >= 0, got {max_jobs}")
    factor = 1.0
    if cluster_servers is not None:
        if not cluster_servers > 0:
            raise SpecError(f"cluster_servers must be > 0, got {cluster_servers}")
        src = source_servers if source_servers is not None else source_cluster_servers(path)
        if not src > 0:
            raise SpecError(f"source_servers must be > 0, got {src}")
        factor = cluster_servers / src
    block_bytes = float(block_mb) * MiB
    fname = path.name
    jobs: list[JobSpec] = []
    try:
        fh = open(path, encoding="utf-8", newline="")
    except OSError as e:
        raise SpecError(f"{path}: cannot read SWIM trace: {e.strerror or e}") from None
    with fh:
        for lineno, raw in enumerate(fh, start=1):
            if max_jobs is not None and len(jobs) >= max_jobs:
                break
            line = raw.rstrip("\r\n")
            if not line.strip():
                continue
            fields = line.split("\t")
            nf = len(fields)
            if not 6 <= nf <= 9:
                raise SpecError(
                    f"{fname} line {lineno}: expected 6 tab-separated fields "
                    f"({', '.join(FIELDS[:6])}), or 9 with {FIELDS[6]}; got {nf}")
            for k in range(7, nf):
                if fields[k].strip():
                    raise SpecError(f"{fname} line {lineno}, field {k + 1}: expected empty, got {fields[k]!r}")

            def bad(k: int, what: str) -> SpecError:
                return SpecError(f"{fname} line {lineno}, field {FIELDS[k]}: expected {what}, got {fields[k]!r}")

            job_id = fields[0].strip()
            if not job_id:
                raise bad(0, "a job id")
            try:
                submit = float(fields[1])
            except ValueError:
                submit = math.nan
            if not (math.isfinite(submit) and submit >= 0):
                raise bad(1, "a non-negative number")
            counts = []
            for k in (2, 3, 4, 5):
                text = fields[k].strip()
                if not _UINT.fullmatch(text):
                    raise bad(k, "a non-negative integer")
                counts.append(int(text))
            _gap, input_b, shuffle_b, output_b = counts
            in_path = fields[6].strip() if nf >= 7 else ""
            idx = len(jobs)
            dataset = in_path if in_path else f"job{idx}-input"
            jobs.append(mapreduce_job(
                job_id, submit, input_b * factor, shuffle_b * factor, output_b * factor,
                dataset=dataset, rng=job_rng(seed, idx), block_bytes=block_bytes))
    return Workload(path.stem, jobs)


def _check_seed(seed: int) -> None:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise SpecError(f"seed must be a non-negative integer, got {seed!r}")
