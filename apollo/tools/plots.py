"""Plots of a run from its records: job completion CDF, queue delay CDF, utilization over time."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from apollo.core.records import A_OUTCOME, A_READY, A_START, Recorder
from apollo.tools.report import utilization_series


def _cdf(ax, values, label):
    v = np.sort(np.asarray(values, dtype=float))
    if len(v):
        ax.plot(v, np.arange(1, len(v) + 1) / len(v), label=label)


def write_plots(rec: Recorder, capacity: float, out: Path) -> list[Path]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    jct = [d[3] - d[2] for d in rec.done if d[1]]
    small = [d[3] - d[2] for d in rec.done if d[1] and d[4] <= 10]
    fig, ax = plt.subplots(figsize=(6, 4))
    _cdf(ax, jct, "all jobs")
    _cdf(ax, small, "jobs of <= 10 tasks")
    ax.set(xlabel="job completion time (s)", ylabel="fraction of jobs", title="Job completion time")
    ax.grid(alpha=0.3)
    ax.legend()
    paths.append(out / "job_completion_cdf.png")
    fig.tight_layout()
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    qd = [r[A_START] - r[A_READY] for r in rec.attempts if r[A_OUTCOME] == "done" and r[A_START] >= 0]
    fig, ax = plt.subplots(figsize=(6, 4))
    _cdf(ax, qd, "tasks")
    ax.set(xlabel="task queue delay (s): ready to running", ylabel="fraction of tasks", title="Queue delay")
    ax.grid(alpha=0.3)
    paths.append(out / "queue_delay_cdf.png")
    fig.tight_layout()
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    t0 = min((s[1] for s in rec.submitted), default=0.0)
    t1 = max((d[3] for d in rec.done), default=t0)
    util, dt = utilization_series(rec, capacity, t0, t1, bins=200)
    fig, ax = plt.subplots(figsize=(6, 4))
    if len(util):
        ax.plot(np.arange(len(util)) * dt, util * 100)
    ax.set(xlabel="time (s)", ylabel="busy CPU (%)", title="Cluster utilization", ylim=(0, 105))
    ax.grid(alpha=0.3)
    paths.append(out / "utilization.png")
    fig.tight_layout()
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths
