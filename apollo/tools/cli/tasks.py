"""Commands about one job's tasks on a live cluster: job (outcomes, placements, failures)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .options import add_cluster_option, count


def _job(args: argparse.Namespace) -> int:
    """One job: state, per-stage progress, placements and locality (from the event records),
    and the failure reason (with the failing task's stderr tail) if it failed."""
    from apollo.tools.client import job_status
    from apollo.core.cluster import LOCALITY_NAMES
    folder = Path(args.cluster).expanduser()
    st = job_status(folder, args.id) if (folder / "jobs.db").exists() else None
    if st is None:
        print(f"apollo job: no job {args.id} in {folder / 'jobs.db'}", file=sys.stderr)
        return 1
    from apollo.tools.client import waiting_position
    took = f", {st.finished_at - st.submitted_at:.2f} s" if st.finished_at is not None else ""
    pos = waiting_position(folder, args.id) if st.state == "running" else None
    state = f"waiting for admission in queue {pos[0]} at position {pos[1]}" if pos else st.state
    print(f"job {args.id} {st.name!r}: {state}{took}")
    for s in st.stages:
        print(f"  stage {s.name:<12} {s.done:>6}/{s.tasks} done, {s.failed_attempts} failed attempts")
    reads = sum(st.locality.values())
    if reads:
        print("  locality of input reads: " + ", ".join(
            f"{LOCALITY_NAMES[k]} {st.locality[k] / reads:.0%}" for k in range(3)))
    if st.placements:
        print("  placements: " + ", ".join(f"pn:{s} x{n}" for s, n in sorted(st.placements.items())))
    if st.reason:
        print(f"  reason: {st.reason}")
    return 0 if st.state in ("done", "running") else 1


def register(sub) -> None:
    jb = sub.add_parser("job", help="one job: state, progress, placements, failures")
    jb.set_defaults(run=_job, on_cluster=True)
    jb.add_argument("id", type=count(0), help="the job's id")
    add_cluster_option(jb)
