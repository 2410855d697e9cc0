"""Hawk/Eagle-format traces (``.tr``): per-job task counts and per-task durations.

Each non-blank line is one job, fields separated by one or more spaces::

    arrival_time num_tasks mean_task_duration d_1 d_2 ... d_num_tasks

All in seconds; arrival times are absolute within the source trace and are
shifted here so the earliest job arrives at 0 (jobs are also sorted by
arrival, stably). Each job becomes one stage ``"tasks"`` whose durations are
the d_i, with cpu=1, mem=2 GB and no input data (these traces say nothing
about data, so no locality applies). Jobs are named ``job{idx}`` with ``idx``
the 0-based job index in the file.

Checks: at least the three leading fields; every number finite; num_tasks a
positive integer equal to the count of d_i; mean and d_i >= 0. The mean field
is checked for form only; the stage mean is recomputed from the d_i.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from apollo.core.spec import JobSpec, SpecError, StageSpec, Workload
from apollo.workloads.swim import sort_and_shift

HAWK_CPU, HAWK_MEM_GB = 1.0, 2.0
STAGE_NAME = "tasks"
_UINT = re.compile(r"\d+")


def read_hawk(path: str | Path, *, max_jobs: int | None = None) -> Workload:
    """Read a Hawk/Eagle ``.tr`` file; ``max_jobs`` stops after that many jobs."""
    path = Path(path)
    if max_jobs is not None and max_jobs < 0:
        raise SpecError(f"max_jobs must be >= 0, got {max_jobs}")
    fname = path.name
    jobs: list[JobSpec] = []
    try:
        fh = open(path, encoding="utf-8")
    except OSError as e:
        raise SpecError(f"{path}: cannot read Hawk trace: {e.strerror or e}") from None
    with fh:
        for lineno, line in enumerate(fh, start=1):
            if max_jobs is not None and len(jobs) >= max_jobs:
                break
            parts = line.split()
            if not parts:
                continue
            at = f"{fname} line {lineno}"
            if len(parts) < 3:
                raise SpecError(f"{at}: expected at least 3 space-separated fields "
                                f"(arrival_time num_tasks mean_task_duration d_1 ...), got {len(parts)}")
            arrival = _number(parts[0], f"{at}, field arrival_time", nonneg=False)
            if not _UINT.fullmatch(parts[1]) or int(parts[1]) < 1:
                raise SpecError(f"{at}, field num_tasks: expected a positive integer, got {parts[1]!r}")
            n = int(parts[1])
            _number(parts[2], f"{at}, field mean_task_duration", nonneg=True)
            got = len(parts) - 3
            if got != n:
                raise SpecError(f"{at}, field num_tasks: says {n} tasks but the line has {got} durations")
            durations = _durations(parts[3:], at)
            jobs.append(JobSpec(
                name=f"job{len(jobs)}",
                stages=[StageSpec(STAGE_NAME, n, durations, cpu=HAWK_CPU, mem_gb=HAWK_MEM_GB)],
                arrival_s=arrival))
    return Workload(path.stem, sort_and_shift(jobs))


def _number(text: str, where: str, *, nonneg: bool) -> float:
    try:
        x = float(text)
    except ValueError:
        x = math.nan
    if not math.isfinite(x) or (nonneg and x < 0):
        what = "a non-negative number" if nonneg else "a number"
        raise SpecError(f"{where}: expected {what}, got {text!r}")
    return x


def _durations(tokens: list[str], at: str) -> np.ndarray:
    try:
        d = np.array(tokens, dtype=np.float64)
    except ValueError:
        for i, t in enumerate(tokens):   # find the offender for the message
            _number(t, f"{at}, field d_{i + 1}", nonneg=True)
        raise SpecError(f"{at}: cannot parse durations") from None  # not reached
    bad = np.flatnonzero(~np.isfinite(d) | (d < 0))
    if bad.size:
        i = int(bad[0])
        raise SpecError(f"{at}, field d_{i + 1}: expected a non-negative number, got {tokens[i]!r}")
    return d
