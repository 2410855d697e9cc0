"""The run report (schema apollo.report/1): every metric is computed here, once.

Both runtimes feed a Recorder with the actors' Log effects; ``build_report``
turns the records into the JSON that benchmarks, plots and checks read.
Definitions:
- task_queue_delay_s: start of the successful attempt minus the time the task
  became ready (time spent waiting for a server, at the JM or in a PN queue);
- locality: fractions of completed tasks that read input, by where it was;
- utilization: busy CPU fraction of the cluster over the run, in time bins;
- fairness: in time bins, each running job's CPU against its max-min fair
  share of the cluster given what it could use (running + waiting tasks);
  jain_index is Jain's index of min(1, got/fair) averaged over bins,
  max_share_deficit the worst job's mean shortfall 1 - min(1, got/fair);
- queues (per leaf queue of the capacity plane; a run without a queue file has one, "root"):
  share_mean / share_p5: the CPU its jobs' attempts held as a fraction of the cluster,
  averaged over the run and its 5th percentile over the seconds the queue had jobs (admitted
  or waiting); fair_share_mean: the sharing policy's share for it, as a fraction, averaged
  over time from its first allocation round (a round's share holds until the next);
  below_guarantee_s: seconds it held less than min(its guarantee or min share, its demand)
  while it had demand (half a core of slack); preempted: attempts
  of its jobs killed to give tokens back; admission_wait_s: submission to admission of its
  jobs; job_mean_s and small_job_mean_s: completion of its jobs. fairness.queue_jain_index is
  Jain's index over the queues of min(1, share_mean / fair_share_mean).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from apollo.core.records import (A_CPU, A_END, A_HAS_INPUT, A_JOB, A_KIND, A_LOC, A_OPP, A_OUTCOME, A_READY, A_STAGE,
                            A_START, A_TASK, CONTROL_EVENTS, KINDS, Recorder)
from rm.sharing import water_fill

SCHEMA = "apollo.report/1"
SMALL_JOB_TASKS = 10

def stats(x, keys=("mean", "p50", "p95", "p99")) -> dict[str, float]:
    a = np.asarray(x, dtype=float)
    if a.size == 0:
        return {k: 0.0 for k in keys}
    out = {}
    for k in keys:
        out[k] = float(a.mean()) if k == "mean" else float(np.percentile(a, float(k[1:])))
    return out


def _busy_integral(starts: np.ndarray, ends: np.ndarray, cpu: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """CPU-seconds busy between consecutive ``edges`` from attempts [start, end) holding ``cpu``."""
    t = np.concatenate((starts, ends))
    d = np.concatenate((cpu, -cpu))
    o = np.argsort(t, kind="stable")
    t, d = t[o], d[o]
    level = np.cumsum(d)
    F = np.concatenate(([0.0], np.cumsum(level[:-1] * np.diff(t)))) if len(t) else np.zeros(0)
    if len(t) == 0:
        return np.zeros(len(edges) - 1)
    j = np.searchsorted(t, edges, side="right") - 1
    Fe = np.where(j >= 0, F[np.maximum(j, 0)] + level[np.maximum(j, 0)] * (edges - t[np.maximum(j, 0)]), 0.0)
    return np.diff(Fe)


def utilization_series(rec: Recorder, capacity: float, t0: float, t1: float, bins: int = 2000):
    att = rec.attempts
    if not att or t1 <= t0 or capacity <= 0:
        return np.zeros(0), 0.0
    a = np.array([(r[A_START], r[A_END], r[A_CPU]) for r in att if r[A_START] >= 0], dtype=float)
    if len(a) == 0:
        return np.zeros(0), 0.0
    n = int(min(bins, max(1, np.ceil(t1 - t0))))
    edges = np.linspace(t0, t1, n + 1)
    busy = _busy_integral(a[:, 0], np.maximum(a[:, 1], a[:, 0]), a[:, 2], edges)
    dt = (t1 - t0) / n
    return np.clip(busy / (dt * capacity), 0.0, 1.0), dt


def fairness(rec: Recorder, capacity: float, t0: float, t1: float, bins: int = 100) -> dict[str, float]:
    att = rec.attempts
    if not att or t1 <= t0:
        return {"jain_index": 1.0, "max_share_deficit": 0.0}
    job = np.array([r[A_JOB] for r in att], dtype=np.int64)
    ready = np.array([r[A_READY] for r in att])
    start = np.array([r[A_START] for r in att])
    end = np.array([r[A_END] for r in att])
    cpu = np.array([r[A_CPU] for r in att])
    uj, jid = np.unique(job, return_inverse=True)
    started = start >= 0
    wait_end = np.where(started, start, end)
    deficit_sum = np.zeros(len(uj))
    deficit_n = np.zeros(len(uj))
    jains = []
    for t in np.linspace(t0, t1, bins + 2)[1:-1]:
        run = started & (start <= t) & (t < end)
        wait = (ready <= t) & (t < wait_end)
        got = np.bincount(jid[run], weights=cpu[run], minlength=len(uj))
        demand = got + np.bincount(jid[wait], weights=cpu[wait], minlength=len(uj))
        act = demand > 0
        if act.sum() < 1:
            continue
        fair = water_fill(capacity, demand[act])
        x = np.minimum(1.0, got[act] / np.maximum(fair, 1e-12))
        if x.sum() > 0:
            jains.append(x.sum() ** 2 / (len(x) * (x ** 2).sum()))
        deficit_sum[act] += 1.0 - x
        deficit_n[act] += 1
    seen = deficit_n > 0
    return {"jain_index": float(np.mean(jains)) if jains else 1.0,
            "max_share_deficit": float((deficit_sum[seen] / deficit_n[seen]).max()) if seen.any() else 0.0}


def build_report(rec: Recorder, *, mode: str, workload: dict, cluster: dict, scheduler: dict,
                 capacity_cpus: float, wall_s: float, sim_time_s: float) -> dict[str, Any]:
    att = rec.attempts
    outcome = np.array([r[A_OUTCOME] for r in att]) if att else np.zeros(0, dtype=str)
    kind = np.array([r[A_KIND] if len(r) > A_KIND else 0 for r in att], dtype=np.int64) if att else np.zeros(0, int)
    ok = outcome == "done"
    # A task's result counts once: a second successful attempt of the same task (a JM host died
    # after its task ended and before the RM heard, and the task ran again) is not a second result.
    dup_results = 0
    seen: set = set()
    for i in np.flatnonzero(ok).tolist():
        r = att[i]
        key = (r[A_JOB], r[A_STAGE], r[A_TASK])
        if key in seen:
            ok[i] = False
            dup_results += 1
        else:
            seen.add(key)
    done_rows = [r for r, o in zip(att, ok) if o]
    qdelay = [r[A_START] - r[A_READY] for r in done_rows if r[A_START] >= 0]
    with_input = [r[A_LOC] for r in done_rows if r[A_HAS_INPUT]]
    loc = np.bincount(np.array(with_input, dtype=np.int64), minlength=3) if with_input else np.zeros(3)
    loc_total = max(loc.sum(), 1)
    ended: dict = {}
    for d in rec.done:                   # a job ends once (a re-homed job's first end counts)
        ended.setdefault(d[0], d)
    jobs_ok = [d for d in ended.values() if d[1]]
    jct = [d[3] - d[2] for d in jobs_ok]
    small_jct = [d[3] - d[2] for d in jobs_ok if d[4] <= SMALL_JOB_TASKS]
    t0 = min((s[1] for s in rec.submitted), default=0.0)
    t1 = max((d[3] for d in rec.done), default=t0)
    util, _ = utilization_series(rec, capacity_cpus, t0, t1)
    util_stats = ({"mean": float(util.mean()), "p20": float(np.percentile(util, 20)),
                   "p50": float(np.percentile(util, 50)), "p80": float(np.percentile(util, 80))}
                  if len(util) else {"mean": 0.0, "p20": 0.0, "p50": 0.0, "p80": 0.0})
    completed = int(ok.sum())
    queues = queue_figures(rec, capacity_cpus, t0, t1)
    fair = fairness(rec, capacity_cpus, t0, t1)
    ratio = [min(1.0, q["share_mean"] / q["fair_share_mean"]) for q in queues.values() if q["fair_share_mean"] > 0]
    fair["queue_jain_index"] = float(sum(ratio) ** 2 / (len(ratio) * sum(x * x for x in ratio))) \
        if ratio and sum(ratio) > 0 else 1.0
    fair["below_guarantee_s"] = {k: q["below_guarantee_s"] for k, q in queues.items()}
    return {
        "schema": SCHEMA,
        "mode": mode,
        "workload": workload,
        "cluster": cluster,
        "scheduler": scheduler,
        "jobs": {"submitted": len(rec.submitted), "completed": len(jobs_ok),
                 "failed": len(ended) - len(jobs_ok), "refused": len(rec.refused)},
        "tasks": {"submitted": int(sum(s[2] for s in rec.submitted)), "completed": completed,
                  "failed": int((outcome == "failed").sum()), "duplicates": int((kind == 1).sum()),
                  "clones": int((kind == 3).sum()),
                  "opportunistic": int(sum(1 for r in att if r[A_OPP])),
                  "preempted": int((outcome == "preempted").sum()), "upgraded": rec.upgraded,
                  "results_discarded": dup_results},
        "job_completion_s": stats(jct),
        "small_job_completion_s": stats(small_jct),
        "task_queue_delay_s": stats(qdelay),
        "locality": {"node": float(loc[0] / loc_total), "rack": float(loc[1] / loc_total),
                     "remote": float(loc[2] / loc_total)},
        "utilization": util_stats,
        "fairness": fair,
        "queues": queues,
        "throughput": {"wall_s": wall_s, "tasks_per_wall_s": completed / wall_s if wall_s > 0 else 0.0,
                       "decisions_per_wall_s": rec.decisions / wall_s if wall_s > 0 else 0.0},
        "sim_time_s": sim_time_s,
        "control": {k: rec.control.get(k, 0) for k in CONTROL_EVENTS},
        "attempts": attempt_figures(att, outcome, ok, kind, rec.corrections, int(sum(s[2] for s in rec.submitted))),
    }


def attempt_figures(att, outcome: np.ndarray, won: np.ndarray, kind: np.ndarray, corrections: dict,
                    tasks: int) -> dict:
    """Attempts by kind (how many, how many won their task, CPU-seconds they ran) and Apollo's
    Table 2 for duplicates: how often each trigger fired, per task, and how often the duplicate
    started before the first attempt (its outcome is then not "lost")."""
    ran = np.array([max(0.0, r[A_END] - r[A_START]) * r[A_CPU] if r[A_START] >= 0 else 0.0 for r in att]) \
        if len(kind) else np.zeros(0)
    by_kind = {}
    for k, name in enumerate(KINDS):
        m = kind == k
        by_kind[name] = {"attempts": int(m.sum()), "won": int((m & won).sum()),
                         "cpu_s": float(ran[m].sum()), "lost_cpu_s": float(ran[m & (outcome == "lost")].sum())}
    dups = kind == 1
    n_dup = int(dups.sum())
    succeeded = int((dups & (outcome != "lost")).sum())
    triggers = {}
    for (ev, detail), n in sorted(corrections.items()):
        if ev == "dup_trigger":
            triggers[detail] = {"fired": n, "duplicates": corrections.get(("duplicate", detail), 0)}
    return {"by_kind": by_kind,
            "duplicates": {"triggers": triggers, "sent": n_dup, "succeeded": succeeded,
                           "triggered_frac": n_dup / tasks if tasks else 0.0,
                           "success_frac": succeeded / n_dup if n_dup else 0.0},
            "copies": {"started": corrections.get(("copy", ""), 0)}}


def queue_figures(rec: Recorder, capacity: float, t0: float, t1: float) -> dict[str, dict]:
    """The per-queue figures (see the module docstring), from the same records as the rest."""
    queue_of = {s[0]: (s[3] if len(s) > 3 else "root") for s in rec.submitted}
    leaves = list(rec.allocations[-1][2]) if rec.allocations else sorted(set(queue_of.values())) or ["root"]
    out: dict[str, dict] = {}
    att = rec.attempts
    n = int(min(2000, max(1, np.ceil(t1 - t0)))) if t1 > t0 else 1
    edges = np.linspace(t0, t1, n + 1) if t1 > t0 else np.array([t0, t0 + 1.0])
    rows = [(queue_of.get(r[A_JOB], "root"), r[A_START], r[A_END], r[A_CPU], r[A_OUTCOME]) for r in att]
    done_at = {d[0]: d[3] for d in rec.done}
    sub_at = {s[0]: s[1] for s in rec.submitted}
    adm_at = {a[0]: a[1] for a in rec.admitted}
    for q in leaves:
        mine = [(st, en, c) for qq, st, en, c, _ in rows if qq == q and st >= 0]
        if mine and capacity > 0 and t1 > t0:
            a = np.array(mine, dtype=float)
            busy = _busy_integral(a[:, 0], np.maximum(a[:, 1], a[:, 0]), a[:, 2], edges)
            share = busy / (np.diff(edges) * capacity)
        else:
            share = np.zeros(n)
        # the seconds the queue had a job submitted and not yet done
        live = np.zeros(n, dtype=bool)
        mid = (edges[:-1] + edges[1:]) / 2
        for j, qq in queue_of.items():
            if qq == q:
                live |= (mid >= sub_at[j]) & (mid < done_at.get(j, np.inf))
        fair_sh, fair_for, below = [], [], 0.0
        allocs = rec.allocations
        for k, (t, cap, row) in enumerate(allocs):
            r = row.get(q)
            if r is None:
                continue
            sh, held, demand, guar = r[0], r[1], r[2], r[3]
            nxt = allocs[k + 1][0] if k + 1 < len(allocs) else t1
            if cap > 0:
                fair_sh.append(sh / cap)
                fair_for.append(max(0.0, nxt - t))      # (a round's share holds until the next)
            if demand > 0 and held < min(guar, demand) - 0.5:
                below += max(0.0, nxt - t)
        jobs = [j for j, qq in queue_of.items() if qq == q]
        waits = [adm_at[j] - sub_at[j] for j in jobs if j in adm_at]
        jct = [d[3] - d[2] for d in rec.done if d[1] and queue_of.get(d[0]) == q]
        small = [d[3] - d[2] for d in rec.done if d[1] and queue_of.get(d[0]) == q and d[4] <= SMALL_JOB_TASKS]
        out[q] = {"jobs": len(jobs),
                  "share_mean": float(share.mean()) if len(share) else 0.0,
                  "share_p5": float(np.percentile(share[live], 5)) if live.any() else 0.0,
                  "fair_share_mean": _time_mean(fair_sh, fair_for),
                  "below_guarantee_s": float(below),
                  "preempted": int(sum(1 for qq, _, _, _, o in rows if qq == q and o == "preempted")),
                  "admission_wait_s": stats(waits),
                  "job_mean_s": float(np.mean(jct)) if jct else 0.0,
                  "small_job_mean_s": float(np.mean(small)) if small else 0.0}
    return out


def _time_mean(values: list[float], spans: list[float]) -> float:
    """The mean of ``values``, each weighted by the seconds it held (``spans``): a figure sampled at
    every allocation round must not move with how often rounds run. All spans zero (rounds only
    at the run's end): the plain mean."""
    if not values:
        return 0.0
    total = sum(spans)
    if total <= 0.0:
        return float(np.mean(values))
    return float(np.dot(values, spans) / total)


def write_report(report: dict, path: str | Path) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(p.suffix + ".tmp")
    tmp.write_text(json.dumps(report, indent=2, sort_keys=False) + "\n")
    tmp.replace(p)


def summary_lines(r: dict) -> list[str]:
    j, t, loc = r["jobs"], r["tasks"], r["locality"]
    return [
        f"{r['mode']} run of {r['workload']['name']} on {r['cluster']['servers']} servers / "
        f"{r['cluster']['racks']} racks, scheduler {r['scheduler']['name']}",
        f"jobs: {j['completed']}/{j['submitted']} completed, {j['failed']} failed; "
        f"tasks: {t['completed']} completed, {t['failed']} failed attempts, "
        f"{t['opportunistic']} opportunistic, {t['preempted']} preempted",
        f"job completion s: mean {r['job_completion_s']['mean']:.1f}  p50 {r['job_completion_s']['p50']:.1f}  "
        f"p95 {r['job_completion_s']['p95']:.1f}  p99 {r['job_completion_s']['p99']:.1f}",
        f"small jobs (<= {SMALL_JOB_TASKS} tasks) s: mean {r['small_job_completion_s']['mean']:.1f}  "
        f"p95 {r['small_job_completion_s']['p95']:.1f}",
        f"task queue delay s: p50 {r['task_queue_delay_s']['p50']:.2f}  p95 {r['task_queue_delay_s']['p95']:.2f}",
        f"locality: node {loc['node']:.1%}  rack {loc['rack']:.1%}  remote {loc['remote']:.1%}",
        f"utilization: mean {r['utilization']['mean']:.1%}  p50 {r['utilization']['p50']:.1%}; "
        f"fairness: Jain {r['fairness']['jain_index']:.3f}",
        f"wall {r['throughput']['wall_s']:.1f} s for {r['sim_time_s']:.0f} simulated s: "
        f"{r['throughput']['decisions_per_wall_s']:.0f} decisions/wall s",
    ]
