"""Helpers of the benchmarks: who held how much of the cluster, when (from a simulated run's
attempt records), and writing their JSON and plots."""
from __future__ import annotations

import json
import os
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


RELAUNCHED = "APOLLO_BENCH_RELAUNCHED"      # set in the process run_native starts (no second relaunch)


def run_native(bench: str, argv: list[str], required: bool) -> None:
    """Build the compiled modules if need be, then run benchmark ``bench`` again in a process
    that loads them (they must load before the modules are first imported: this process has
    imported them). Returns only when they cannot be built and were not required."""
    from apollo.tools import native
    try:
        if not native.built():
            print("building the compiled kernel and PN (apollo.tools.native; once per source version)...",
                  file=sys.stderr, flush=True)
        native.build()
    except native.NativeBuildError as e:
        if required:
            raise SystemExit(f"apollo bench {bench} --native on: {e}")
        print(f"(running interpreted: {e})", file=sys.stderr)
        return
    code = f"import sys; from apollo.bench.{bench} import main; sys.exit(main(sys.argv[1:]))"
    os.execve(sys.executable, [sys.executable, "-c", code, *argv], dict(os.environ, **{native.ENV: "1", RELAUNCHED: "1"}))


def ensure_native(bench: str, mode: str, argv: list[str]) -> None:
    """``--native auto|on|off`` of a simulated benchmark: with auto or on, relaunch it loading the
    compiled modules (run_native) unless they are loaded; on, and still not loaded: an error."""
    from apollo.tools import native
    if mode == "off" or native.loaded():
        return
    if os.environ.get(RELAUNCHED):
        if mode == "on":
            raise SystemExit(f"apollo bench {bench} --native on: the compiled modules did not load")
        return
    run_native(bench, argv, required=mode == "on")
