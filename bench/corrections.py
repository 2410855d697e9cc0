"""Apollo's corrections and opportunistic tasks (OSDI'14 sections 3.4-3.5, Table 2).

One workload, FB-2009 day 0 (its first ``--jobs`` jobs) at ``--load`` on ``--servers`` servers,
under the apollo scheduler, with opportunistic tasks off and on, over ``--seeds`` seeds:

- duplicates (Table 2): how often each of the three triggers fired and sent a duplicate, per
  task, and how often the duplicate started before the first attempt (the paper: 0.12-0.17% of
  tasks per trigger, under 0.5% in all, 82% success). From the runs with opportunistic tasks on.
- opportunistic tasks: cluster utilization while work waits (the one-second bins in which at
  least one task is, on average, ready and not running: the only time an idle core is a loss;
  over a whole run utilization is the offered load whatever the scheduler), and the 95th percentile of regular tasks' queue
  delay at their servers (dispatch to start), which opportunistic tasks must not worsen: they run
  only on idle room and are preempted the moment a regular task needs it.

JSON: {"duplicates": {"triggered_frac", "success_frac", "by_trigger"}, "opportunistic":
{"utilization": {"off", "on"}, "utilization_overall": {...}, "regular_queue_delay_p95_s": {"off",
"on"}, "opportunistic_done", "preempted"}, "setup"}.
"""
from __future__ import annotations

import sys

import numpy as np

from apollo.core.records import A_DISPATCH, A_END, A_KIND, A_OPP, A_OUTCOME, A_READY, A_START
from apollo.tools.report import _busy_integral, attempt_figures, utilization_series
from apollo.tools.simulate import SimConfig
from apollo.workloads import load_workload
from apollo.tools.cli.options import Parser, count, number

from .common import run, shared_trace, write_json

TRACE = "FB-2009_samples_24_times_1hr_0.tsv"


def utilization_while_waiting(rec, capacity: float) -> tuple[float, float]:
    """(utilization over the bins where some task waits, over the whole run)."""
    att = rec.attempts
    t0 = min(s[1] for s in rec.submitted)
    t1 = max(d[3] for d in rec.done)
    util, _ = utilization_series(rec, capacity, t0, t1)
    n = len(util)
    edges = np.linspace(t0, t1, n + 1)
    # waiting: ready (or dispatched) and not started, per attempt
    rows = np.array([(r[A_READY], r[A_START] if r[A_START] >= 0 else r[A_END]) for r in att], dtype=float)
    waiting = _busy_integral(rows[:, 0], np.maximum(rows[:, 1], rows[:, 0]), np.ones(len(rows)), edges)
    busy = waiting >= np.diff(edges)          # at least one task waiting, on average over the bin
    return float(util[busy].mean()) if busy.any() else 0.0, float(util.mean())


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="apollo bench corrections", description=__doc__.split("\n\n")[0])
    p.add_argument("--trace", default=None, help=f"a SWIM trace (default: ../shared/traces/{TRACE})")
    p.add_argument("--servers", type=count(1), default=400, help="servers in the simulated cluster (default 400)")
    p.add_argument("--racks", type=count(1), default=8, help="racks (default 8)")
    p.add_argument("--load", type=number(0, 10, lo_open=True), default=0.95, help="CPU utilization the arrivals are scaled to (default 0.95)")
    p.add_argument("--jobs", type=count(1), default=1500, help="the workload's first K jobs (default 1500)")
    p.add_argument("--seeds", type=count(1), default=2, help="seeds per cell (medians are reported) (default 2)")
    p.add_argument("--json", help="write the results (report JSON) here")
    a = p.parse_args(argv)
    trace = a.trace or shared_trace(TRACE)
    cores = 4.0
    util = {"off": [], "on": []}
    overall = {"off": [], "on": []}
    qdelay = {"off": [], "on": []}
    corrections: dict = {}
    rows_on = []
    opp_done = preempted = 0
    tasks_on = 0
    for seed in range(1, a.seeds + 1):
        for mode in ("off", "on"):
            wl = load_workload(trace, seed=seed, cluster_servers=a.servers).first(a.jobs)
            wl.scaled_to_load(a.load, a.servers * cores)
            cfg = SimConfig(servers=a.servers, racks=a.racks, cores=cores, seed=seed, wire=False,
                            opportunistic=mode == "on")
            rec, _, client = run(cfg, wl)
            if client.finished != len(wl.jobs):
                raise RuntimeError(f"opportunistic {mode}, seed {seed}: {client.finished}/{len(wl.jobs)} jobs ended")
            u, uo = utilization_while_waiting(rec, a.servers * cores)
            util[mode].append(u)
            overall[mode].append(uo)
            qdelay[mode] += [r[A_START] - r[A_DISPATCH] for r in rec.attempts
                             if not r[A_OPP] and r[A_START] >= 0 and r[A_KIND] == 0]
            if mode == "on":
                rows_on += list(rec.attempts)
                tasks_on += int(sum(s[2] for s in rec.submitted))
                for k, v in rec.corrections.items():
                    corrections[k] = corrections.get(k, 0) + v
                opp_done += sum(1 for r in rec.attempts if r[A_OPP] and r[A_OUTCOME] == "done")
                preempted += sum(1 for r in rec.attempts if r[A_OUTCOME] == "preempted")
            print(f"seed {seed}, opportunistic {mode:>3}: utilization while work waits {u:.1%} "
                  f"(overall {uo:.1%}), regular queue delay p95 {np.percentile(qdelay[mode], 95):.2f}s", flush=True)
    outcome = np.array([r[A_OUTCOME] for r in rows_on])
    kind = np.array([r[A_KIND] for r in rows_on], dtype=np.int64)
    fig = attempt_figures(rows_on, outcome, outcome == "done", kind, corrections, tasks_on)
    d = fig["duplicates"]
    by_trigger = {k: {"fired_frac": v["fired"] / tasks_on, "duplicates_frac": v["duplicates"] / tasks_on}
                  for k, v in d["triggers"].items()}
    out = {"duplicates": {"triggered_frac": d["triggered_frac"], "success_frac": d["success_frac"],
                          "sent": d["sent"], "succeeded": d["succeeded"], "tasks": tasks_on, "by_trigger": by_trigger},
           "opportunistic": {"utilization": {m: float(np.mean(v)) for m, v in util.items()},
                             "utilization_overall": {m: float(np.mean(v)) for m, v in overall.items()},
                             "regular_queue_delay_p95_s": {m: float(np.percentile(v, 95)) for m, v in qdelay.items()},
                             "opportunistic_done": opp_done, "preempted": preempted},
           "paper": {"duplicates": {"triggered_frac_per_trigger": [0.0012, 0.0017], "success_frac": 0.82}},
           "setup": {"trace": str(trace), "servers": a.servers, "racks": a.racks, "load": a.load, "jobs": a.jobs,
                     "seeds": a.seeds, "scheduler": "apollo"}}
    o = out["opportunistic"]
    print(f"duplicates: {d['triggered_frac']:.2%} of tasks, {d['success_frac']:.0%} started first; by trigger: " +
          ", ".join(f"{k} {v['duplicates_frac']:.2%}" for k, v in by_trigger.items()))
    print(f"opportunistic: utilization while work waits {o['utilization']['off']:.1%} -> {o['utilization']['on']:.1%}; "
          f"regular queue delay p95 {o['regular_queue_delay_p95_s']['off']:.2f}s -> "
          f"{o['regular_queue_delay_p95_s']['on']:.2f}s; {opp_done} opportunistic tasks done, {preempted} preempted")
    write_json(out, a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
