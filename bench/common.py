"""Helpers of the benchmarks: who held how much of the cluster, when (from a simulated run's
attempt records), and writing their JSON and plots."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from apollo.core.records import A_CPU, A_END, A_JOB, A_OPP, A_OUTCOME, A_START
from apollo.tools.simulate import SimConfig, build


def run(cfg: SimConfig, workload, until: float = float("inf")):
    """Run a simulation; returns (recorder, runtime, client)."""
    rt, rec, client, _ = build(cfg, workload)
    rt.run(until=until)
    return rec, rt, client


def held(rec, jobs: set[int], times: np.ndarray) -> np.ndarray:
    """CPUs that regular attempts of ``jobs`` held (started, not ended) at each of ``times``."""
    rows = np.array([(r[A_START], r[A_END], r[A_CPU]) for r in rec.attempts
                     if r[A_JOB] in jobs and r[A_START] >= 0 and not r[A_OPP]], dtype=float).reshape(-1, 3)
    if len(rows) == 0:
        return np.zeros(len(times))
    on = (rows[:, 0][None, :] <= times[:, None]) & (times[:, None] < rows[:, 1][None, :])
    return (on * rows[:, 2][None, :]).sum(axis=1)


def first_time(times: np.ndarray, ok: np.ndarray) -> float:
    """The first of ``times`` where ``ok`` holds (inf: never)."""
    i = np.flatnonzero(ok)
    return float(times[i[0]]) if len(i) else float("inf")


def preempted(rec, jobs: set[int]) -> int:
    return sum(1 for r in rec.attempts if r[A_JOB] in jobs and r[A_OUTCOME] == "preempted")


def write_json(out: dict, path: str | None) -> None:
    if path:
        Path(path).write_text(json.dumps(out, indent=2) + "\n")
        print(f"results: {path}")


def axes(figsize=(6.5, 4), ncols: int = 1):
    """(figure, axes) of a new matplotlib figure drawn off-screen."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt.subplots(1, ncols, figsize=figsize)


def save_plot(fig, path: str) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def shared_trace(name: str) -> str:
    """The path of a shared trace: $APOLLO_TRACES/NAME, else ../shared/traces/NAME beside the
    checkout; a clear error if neither has it."""
    import os
    here = Path(__file__).resolve().parents[1]
    for d in (os.environ.get("APOLLO_TRACES"), here.parent / "shared" / "traces", Path("../shared/traces")):
        if d and (Path(d) / name).is_file():
            return str(Path(d) / name)
    raise SystemExit(f"trace {name} not found: give --trace PATH, or set APOLLO_TRACES to its directory")


def ensure_native(bench: str, mode: str, argv: list[str]) -> None:
    """``--native auto|on|off`` of a simulated benchmark: with auto or on, run it again loading the
    compiled modules, built first if need be (apollo.tools.native.relaunch)."""
    from apollo.tools import native
    native.relaunch(["bench", bench, *argv], mode)
