"""`apollo demo`: a local cluster, a Facebook-2009-shaped workload for about a minute, a report.

Starts a local multi-process cluster, replays the ``fb2009`` generator (or a
trace given with --trace) with a live progress display, prints a summary,
writes report.json and plots into the out folder, and always shuts the
cluster down, Ctrl-C included.
"""
from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from apollo.tools import livecluster
from apollo.tools.plots import write_plots
from apollo.tools.replay import replay
from apollo.tools.report import write_report
from apollo.runtime.live import run
from apollo.workloads import load_workload

DEMO_WORKLOAD = "fb2009:jobs=120,max_tasks=60"
DEMO_ARRIVAL_SPAN_S = 45.0
DEMO_LOAD = 0.6


def summary_table(r: dict) -> Table:
    t = Table(title=f"apollo demo: {r['workload']['name']} on {r['cluster']['servers']} PNs "
                    f"({r['cluster']['racks']} racks, {r['cluster'].get('processes', '?')} processes)")
    t.add_column("measure")
    t.add_column("value", justify="right")
    j, tk, loc, q, c, u, th = (r["jobs"], r["tasks"], r["locality"], r["task_queue_delay_s"],
                               r["job_completion_s"], r["utilization"], r["throughput"])
    rows = [("jobs completed / submitted", f"{j['completed']} / {j['submitted']}"),
            ("jobs failed", str(j["failed"])),
            ("tasks completed", str(tk["completed"])),
            ("locality node / rack / remote", f"{loc['node']:.0%} / {loc['rack']:.0%} / {loc['remote']:.0%}"),
            ("queue delay p50 / p95", f"{q['p50']:.2f} s / {q['p95']:.2f} s"),
            ("job completion p50 / p95", f"{c['p50']:.2f} s / {c['p95']:.2f} s"),
            ("utilization mean / p80", f"{u['mean']:.0%} / {u['p80']:.0%}"),
            ("throughput", f"{th['tasks_per_wall_s']:.0f} tasks/s over {th['wall_s']:.0f} s")]
    for k, v in rows:
        t.add_row(k, v)
    return t


def demo(out: Path, trace: str | None = None, pns: int = 16, racks: int = 4, procs: int = 2,
         jobs: int | None = None, seed: int = 0) -> int:
    console = Console()
    out = Path(out)
    folder = out / "cluster"
    cores = 2.0
    spec = trace or DEMO_WORKLOAD
    workload = load_workload(spec, seed=seed, cluster_servers=pns).first(jobs)
    # Fit the run into about a minute: arrivals over ~45 s of wall time, and task durations
    # divided so that the offered work is ~60% of the cluster's cores over that span.
    span = max((j.arrival_s for j in workload.jobs), default=0.0) or 1.0
    work = sum(j.work_cpu_s for j in workload.jobs)
    speedup = max(work / (DEMO_LOAD * pns * cores * DEMO_ARRIVAL_SPAN_S), 1.0)
    for j in workload.jobs:     # replay divides arrivals by speedup too: pre-stretch them
        j.arrival_s *= DEMO_ARRIVAL_SPAN_S / span * speedup
    console.print(f"starting a local cluster: {pns} PNs in {racks} racks over {procs} PN processes "
                  f"(+ RM, JM host) in {folder}")
    # SIGTERM (a `timeout`, a service manager) takes the same way out as Ctrl-C.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    info = livecluster.up(folder, pns=pns, racks=racks, procs=procs, cpus=cores, mem_gb=8.0)
    console.print(f"cluster up in {info['startup_s']:.2f} s; replaying {len(workload.jobs)} jobs / "
                  f"{workload.total_tasks} tasks of {workload.name} (task times / {speedup:.1f})")
    if info.get("http"):
        console.print(f"dashboard while it runs: http://{info['http']}/")
    try:
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=console) as bar:
            sub = bar.add_task("submitted", total=len(workload.jobs))
            fin = bar.add_task("finished", total=len(workload.jobs))

            def progress(s):
                bar.update(sub, completed=s["submitted"])
                bar.update(fin, completed=s["done"])
            report, rec = run(replay(folder, workload, speedup=speedup, on_progress=progress))
        console.print(summary_table(report))
        write_report(report, out / "report.json")
        plots = write_plots(rec, pns * cores, out)
        console.print(f"report: {out / 'report.json'}; plots: " + ", ".join(str(p) for p in plots))
        return 0 if report["jobs"]["failed"] == 0 else 1
    except KeyboardInterrupt:
        console.print("interrupted: stopping the cluster")
        return 130
    finally:
        for line in livecluster.down(folder):
            pass
        console.print("cluster down")
