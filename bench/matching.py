"""Matching-quality simulation after Apollo (Boutin et al., OSDI 2014), section 5.5 / Figure 12.

Setup (one *instance*):

* ``SERVERS`` = 100 servers, one slot each; server s starts with a wait ``W_s ~ Exp(1)``.
* N tasks; task j has a base runtime ``R_j ~ Exp(1)`` and one preferred server chosen
  uniformly at random. On its preferred server it runs in ``R_j * PREFERRED_FACTOR``;
  elsewhere in ``R_j``.
* A server runs its tasks back to back after its initial wait, so a task completes at
  ``W_s + (runtimes of the tasks before it on s) + (its own runtime)``.

The measure is the MEAN task completion time of an instance, averaged over seeded
repetitions. Three schedulers place the same instance:

* greedy  -- tasks in a random (seeded) order; each takes the server where it would
  complete soonest given the tasks already placed. (Unchanged baseline.)
* stable  -- a batch scheduler built on ``jm.stable_matching.stable_match`` (below).
* optimal -- exact minimum of the summed completion times, via
  ``scipy.optimize.linear_sum_assignment`` on the positional expansion (see
  ``optimal_schedule``).

The stable scheduler (``stable_schedule``), and what a JM would be doing:

1. Ready list in SPT order (shortest expected runtime first). SPT is the classical rule
   for mean completion time; a JM orders its ready list by priority, so this is the JM
   choosing priorities for a mean-completion objective.
2. Each batch offers the first ``BATCH_SIZE`` = S/4 = 25 tasks of the list to
   ``stable_match`` (every server a candidate), run to convergence (``max_rounds`` =
   B*K+1; the loop exits once nobody is left to propose, so the bound is free). This is
   the JM's scheduling round over the head of its ready list.
3. Cost of task b on server s = ``W_s + r_bs`` (its completion time if appended now, from
   the server's advertised wait) ``+ q_s * r_bs``: the delay it imposes on the ``q_s``
   later tasks expected to queue behind it there. ``q_s`` = ``PREF_SHARE`` (1/2) x (later
   tasks preferring s) + 1/2 x (later tasks) / S. This is each task's marginal
   contribution to the SUM of completion times, with its position estimated (the optimum's
   positional cost is ``W_s + p * r_bs``). JM analogue: the JM knows its own pending tasks
   and their locality preferences (the same data it builds their cost rows from), and
   charges a placement for the delay it inflicts on them.
4. Defer: ``defer[b]`` = b's best cost this batch + the batch's mean runtime on a
   preferred server (``DEFER_SCALE`` = 1): waiting one batch costs roughly one more task
   on its best server. ``stable_match`` never proposes a task to a server costing more,
   and measures savings against deferring. JM analogue: a task stays in the ready list
   rather than take a slot it would only win by queueing behind a long wait -- the servers
   with long initial waits the optimum leaves idle (~40% of them at N = 100).
5. Matched tasks are appended to their servers in order of completion time (one task per
   server per batch, so this only fixes a deterministic order); deferred tasks keep their
   places at the head of the list for the next batch, whose costs include what this batch
   appended. Each batch places at least one task (every task's cheapest server is within
   its defer value), so the loop ends.

Results (``python -m bench.matching``, 20 reps, seed 0), ratio to optimal:

      N    stable   greedy   greedy_spt   greedy_spt_delay
     10     1.003    1.007      1.020          1.001
     30     1.017    1.042      1.043          1.003
    100     1.014    1.154      1.083          1.009
    300     1.013    1.389      1.144          1.014
   1000     1.010    1.842      1.252          1.010

Ablations of the stable scheduler (same instances; ratio to optimal at
N = 10, 30, 100, 300, 1000):

    as above                                    1.003 1.017 1.014 1.013 1.010
    previous: one batch of all tasks, random
      order, completion-time cost, no defer     1.003 1.028 1.616 1.643 1.982
    no SPT (task-id = random order)             1.003 1.017 1.080 1.191 1.422
    no delay term (cost = completion time)      1.003 1.031 1.054 1.108 1.205
    no defer                                    1.003 1.018 1.025 1.032 1.043
    batch = S (100) / S/2 (50) / S/10 (10),
      worst N                                   1.111 (N=100) / 1.044 (N=100) / 1.012
    PREF_SHARE 0 / 1, worst N                   1.061 / 1.026
    DEFER_SCALE 0.5 / 2, worst N                1.014 / 1.018

Without the delay term (cost = completion time, as in Apollo's own cost model) the best
setting found (SPT, batch 50 or 100, defer scale 0.2-0.25) stays ~5-9% above optimal for
N >= 100: a completion-time cost ignores that a short task placed early on a server delays
every later task there, so it cannot learn the optimum's structure (at N = 1000 the
optimum runs 83% of tasks on their preferred server, in SPT order).

Honest reading: the gain over greedy comes from the ORDER and the COST MODEL, not from
stable matching as such. ``greedy_spt`` (greedy's own rule in SPT order) is 8-25% off at
N >= 100, but ``greedy_spt_delay`` (greedy in SPT order with the stable scheduler's
costs, one task at a time, no defer) is as close to optimal as stable. Against the
paper's greedy baseline (random order, own completion time), greedy's mean completion is
14%, 37% and 82% above stable's at N = 100, 300, 1000 (the paper saw greedy ~57% slower).
"""
from __future__ import annotations

import json
import math
import sys
import time
from typing import Sequence

import numpy as np
from apollo.tools.cli.options import Parser, count
from scipy.optimize import linear_sum_assignment

from jm.stable_matching import UNMATCHED, stable_match

SERVERS = 100
PREFERRED_FACTOR = 0.5      # runtime multiplier on a task's preferred server
DEFAULT_NS = (10, 30, 100, 300, 1000)
DEFAULT_REPS = 20
# stable_match rounds per batch: None = B * K + 1, a bound that guarantees deferred
# acceptance finishes (each round that does not end it rejects at least one proposal, and
# there are at most B * K proposals). The loop stops as soon as nobody is left to propose,
# so the bound costs nothing. (With 25-task batches ~6 rounds are typical and up to ~24
# were seen; the earlier all-tasks batches needed ~100-128, so a fixed 64 is not safe.)
STABLE_MAX_ROUNDS: int | None = None
BATCH_SIZE = SERVERS // 4   # stable: tasks offered to stable_match per batch
PREF_SHARE = 0.5            # stable: assumed chance a later task lands on its preferred server
DEFER_SCALE = 1.0           # stable: defer = best cost + this * batch mean preferred runtime
EXTRA_POSITIONS = 3         # optimal: positions per server = ceil(N / servers) + this
MEASURE = "mean task completion time (server initial wait + queued runtimes + own runtime)"

Schedule = list[list[int]]  # per server, task ids in execution order


# --------------------------------------------------------------------------- instances

def make_instance(rng: np.random.Generator, n_tasks: int,
                  servers: int = SERVERS) -> tuple[np.ndarray, np.ndarray]:
    """(wait[S], runtime[N, S]) for one random instance."""
    wait = rng.exponential(1.0, size=servers)
    base = rng.exponential(1.0, size=n_tasks)
    pref = rng.integers(0, servers, size=n_tasks)
    runtime = np.repeat(base[:, None], servers, axis=1)
    runtime[np.arange(n_tasks), pref] *= PREFERRED_FACTOR
    return wait, runtime


def completion_times(wait: np.ndarray, runtime: np.ndarray, sched: Schedule) -> np.ndarray:
    """Completion time of every task under ``sched`` (raises unless each task appears once)."""
    n = runtime.shape[0]
    done = np.full(n, np.nan)
    for s, seq in enumerate(sched):
        t = float(wait[s])
        for j in seq:
            if not np.isnan(done[j]):
                raise ValueError(f"task {j} placed twice")
            t += float(runtime[j, s])
            done[j] = t
    if np.isnan(done).any():
        raise ValueError(f"{int(np.isnan(done).sum())} task(s) not placed")
    return done


def mean_completion(wait: np.ndarray, runtime: np.ndarray, sched: Schedule) -> float:
    return float(completion_times(wait, runtime, sched).mean())


# --------------------------------------------------------------------------- schedulers

def greedy_schedule(wait: np.ndarray, runtime: np.ndarray,
                    order: np.ndarray | None = None) -> Schedule:
    """Tasks in ``order``; each appends itself where it completes soonest.

    Implemented directly rather than with ``jm.stable_matching.greedy_match``: that adds one
    fixed load per task whatever server it picks, but here a task's occupancy depends on
    whether it landed on its preferred server."""
    n, S = runtime.shape
    if order is None:
        order = np.arange(n)
    w = np.asarray(wait, dtype=float).copy()
    sched: Schedule = [[] for _ in range(S)]
    for j in order:
        j = int(j)
        s = int(np.argmin(w + runtime[j]))
        sched[s].append(j)
        w[s] += runtime[j, s]
    return sched


def spt_order(runtime: np.ndarray) -> np.ndarray:
    """Task ids, shortest expected runtime first (ties by id)."""
    return np.argsort(runtime.min(axis=1), kind="stable")


def queue_behind(pref: np.ndarray, later: np.ndarray, servers: int,
                 pref_share: float = PREF_SHARE) -> np.ndarray:
    """Per server: how many of the tasks ``later`` (not yet offered to the matcher) are
    expected to end up queued behind a task placed there now. Each is assumed to land on
    its preferred server with probability ``pref_share`` and otherwise on any server."""
    return (pref_share * np.bincount(pref[later], minlength=servers)
            + (1.0 - pref_share) * len(later) / servers)


def batch_costs(w: np.ndarray, runtime: np.ndarray, batch: np.ndarray, later: np.ndarray,
                pref: np.ndarray, *, delay: bool = True, pref_share: float = PREF_SHARE,
                defer_scale: float | None = DEFER_SCALE) -> tuple[np.ndarray, np.ndarray | None]:
    """(cost[B, S], defer[B] or None) that ``stable_schedule`` hands ``stable_match``.

    cost[b, s] = w_s + r_bs                  (b's completion time if appended to s now)
               + q_s * r_bs                  (delay: the q_s later tasks expected behind it)
    defer[b]   = min_s cost[b, s] + defer_scale * mean_b' min_s r_b's
                 (its best cost now, plus the wait its best server will have gained by the
                 next batch: one more task of this batch, at the batch's mean preferred-server
                 runtime)."""
    r = runtime[batch]
    cost = w[None, :] + r
    if delay and len(later):
        cost = cost + queue_behind(pref, later, len(w), pref_share)[None, :] * r
    defer = None
    if defer_scale is not None:
        defer = cost.min(axis=1) + defer_scale * float(r.min(axis=1).mean())
    return cost, defer


def stable_schedule(wait: np.ndarray, runtime: np.ndarray,
                    max_rounds: int | None = STABLE_MAX_ROUNDS, *,
                    batch_size: int | None = BATCH_SIZE, spt: bool = True, delay: bool = True,
                    pref_share: float = PREF_SHARE,
                    defer_scale: float | None = DEFER_SCALE) -> Schedule:
    """Batches of Apollo's stable matching until every task is placed (module docstring).

    The ready list is in SPT order (``spt``; else task-id order, which is random for these
    instances). Each batch offers the first ``batch_size`` tasks of the list (None: all of
    them) to ``stable_match`` with the costs and defer values of ``batch_costs``; matched
    tasks are appended to their servers, in order of completion time, and the rest keep
    their places at the head of the list. ``defer_scale=None`` disables deferring, and
    ``delay=False`` drops the queued-behind term (cost = completion time). With
    ``batch_size=1, defer_scale=None`` this is greedy in the ready-list order with the same
    costs."""
    n, S = runtime.shape
    B = max(n, 1) if batch_size is None else int(batch_size)
    if B < 1:
        raise ValueError("batch_size must be >= 1")
    w = np.asarray(wait, dtype=float).copy()
    pref = runtime.argmin(axis=1)
    sched: Schedule = [[] for _ in range(S)]
    pool = spt_order(runtime) if spt else np.arange(n)
    cand_row = np.arange(S, dtype=np.int64)
    while len(pool):
        batch, later = pool[:B], pool[B:]
        cost, defer = batch_costs(w, runtime, batch, later, pref, delay=delay,
                                  pref_share=pref_share, defer_scale=defer_scale)
        cand = np.broadcast_to(cand_row, (len(batch), S))
        rounds = len(batch) * S + 1 if max_rounds is None else max_rounds
        got = stable_match(cand, cost, rounds, defer)
        placed = np.flatnonzero(got != UNMATCHED)
        # every task's cheapest server is within its defer value and is proposed to in
        # round 1, so some task is always placed: each batch makes progress
        if len(placed) == 0:
            raise RuntimeError(f"stable_match placed none of {len(batch)} tasks")
        if defer is None and max_rounds is None and len(placed) != min(len(batch), S):
            raise RuntimeError(f"stable_match placed {len(placed)} of {len(batch)} tasks on "
                               f"{S} servers; expected {min(len(batch), S)}")
        servers = got[placed]
        if len(np.unique(servers)) != len(servers):
            raise RuntimeError("stable_match gave a server two tasks in one batch")
        # Shorter completions first; with one task per server per batch this order does
        # not change any server's sequence, it only fixes a deterministic append order.
        done = w[servers] + runtime[batch[placed], servers]
        for i in np.argsort(done, kind="stable"):
            j, s = int(batch[placed[i]]), int(servers[i])
            sched[s].append(j)
            w[s] += runtime[j, s]
        keep = np.ones(len(pool), dtype=bool)
        keep[placed] = False
        pool = pool[keep]
    return sched


def optimal_schedule(wait: np.ndarray, runtime: np.ndarray,
                     extra_positions: int = EXTRA_POSITIONS) -> tuple[Schedule, float]:
    """Exact minimum of the summed completion times; returns (schedule, LSA objective).

    Positional expansion: if server i runs m tasks, the one p-th from last (p = 1 is the
    last) is counted in its own completion and in the completions of the p - 1 after it,
    so its contribution to the sum is ``W_i + p * r_ij``. Columns are (server, position)
    pairs and the task-to-column assignment is solved exactly. Costs rise with p, so an
    optimum fills positions 1..m without gaps.

    Positions per server are limited to P = ceil(N / S) + ``extra_positions``. If no server
    uses position P, that column's dual is 0 and every deeper (costlier) column prices out,
    so the limit does not bind and the answer is the true optimum; otherwise P is doubled
    and the problem re-solved.
    """
    n, S = runtime.shape
    if n == 0:
        return [[] for _ in range(S)], 0.0
    P = math.ceil(n / S) + extra_positions
    while True:
        p = np.arange(1, P + 1, dtype=float)
        # column index = server * P + (p - 1)
        cost = (wait[None, :, None] + p[None, None, :] * runtime[:, :, None]).reshape(n, S * P)
        rows, cols = linear_sum_assignment(cost)
        pos = cols % P + 1
        if pos.max() < P:
            break
        P *= 2
    objective = float(cost[rows, cols].sum())
    srv = cols // P
    sched: Schedule = [[] for _ in range(S)]
    for j in np.lexsort((-pos, srv)):          # per server, largest p (earliest) first
        sched[int(srv[j])].append(int(rows[j]))
    return sched, objective


# --------------------------------------------------------------------------- experiment

def run_instance(rng: np.random.Generator, n_tasks: int, servers: int = SERVERS,
                 max_rounds: int | None = STABLE_MAX_ROUNDS) -> dict[str, float]:
    """Mean completion time of one instance under every scheduler (headline and extras)."""
    wait, runtime = make_instance(rng, n_tasks, servers)
    order = rng.permutation(n_tasks)
    spt = spt_order(runtime)
    out = {
        "greedy": mean_completion(wait, runtime, greedy_schedule(wait, runtime, order)),
        "stable": mean_completion(wait, runtime, stable_schedule(wait, runtime, max_rounds)),
        # informative extras: greedy's own rule in the stable scheduler's SPT order, and
        # greedy with the stable scheduler's order AND costs (one task at a time, no defer)
        "greedy_spt": mean_completion(wait, runtime, greedy_schedule(wait, runtime, spt)),
        "greedy_spt_delay": mean_completion(wait, runtime, stable_schedule(
            wait, runtime, batch_size=1, defer_scale=None)),
    }
    opt_sched, objective = optimal_schedule(wait, runtime)
    out["optimal"] = mean_completion(wait, runtime, opt_sched)
    lsa_mean = objective / n_tasks
    if abs(out["optimal"] - lsa_mean) > 1e-9 * abs(lsa_mean):
        raise AssertionError(f"optimal schedule mean {out['optimal']!r} != LSA objective/N "
                             f"{lsa_mean!r}")
    return out


SCHEDULERS = ("greedy", "stable", "optimal", "greedy_spt", "greedy_spt_delay")


def run(reps: int = DEFAULT_REPS, seed: int = 0, ns: Sequence[int] = DEFAULT_NS,
        max_rounds: int | None = STABLE_MAX_ROUNDS) -> dict:
    """Mean completion time per scheduler and N, averaged over ``reps`` seeded instances.

    Instance r of size N is drawn from ``default_rng([seed, N, r])``; all schedulers see
    the same instance. The ratios are of the averages (mean stable / mean optimal).
    ``max_rounds`` is passed to ``stable_match`` (None: run each batch to convergence)."""
    out: dict = {"measure": MEASURE, "servers": SERVERS, "preferred_factor": PREFERRED_FACTOR,
                 "reps": reps, "seed": seed, "stable_max_rounds": max_rounds,
                 "stable_batch_size": BATCH_SIZE, "stable_order": "SPT",
                 "stable_pref_share": PREF_SHARE, "stable_defer_scale": DEFER_SCALE,
                 "tasks": [int(n) for n in ns]}
    for k in SCHEDULERS:
        out[k] = []
    for k in SCHEDULERS:
        if k != "optimal":
            out[f"{k}_over_optimal"] = []
    for n in ns:
        acc = dict.fromkeys(SCHEDULERS, 0.0)
        for r in range(reps):
            rng = np.random.default_rng([seed, int(n), r])
            for k, v in run_instance(rng, int(n), max_rounds=max_rounds).items():
                acc[k] += v
        for k in SCHEDULERS:
            out[k].append(acc[k] / reps)
        for k in SCHEDULERS:
            if k != "optimal":
                out[f"{k}_over_optimal"].append(out[k][-1] / out["optimal"][-1])
    return out


def format_table(result: dict) -> str:
    lines = [f"measure: {result['measure']}; {result['servers']} servers, "
             f"averaged over {result.get('reps', '?')} reps; stable_match max_rounds: "
             f"{result.get('stable_max_rounds') or 'until converged'}",
             f"{'N':>6} {'greedy':>9} {'stable':>9} {'optimal':>9} {'stable/opt':>11} "
             f"{'greedy/opt':>11} {'gSPT/opt':>9} {'gSPT+dly/opt':>13}"]
    for i, n in enumerate(result["tasks"]):
        extra = ""
        if "greedy_spt_over_optimal" in result:
            extra = (f" {result['greedy_spt_over_optimal'][i]:>9.4f}"
                     f" {result['greedy_spt_delay_over_optimal'][i]:>13.4f}")
        lines.append(f"{n:>6} {result['greedy'][i]:>9.4f} {result['stable'][i]:>9.4f} "
                     f"{result['optimal'][i]:>9.4f} {result['stable_over_optimal'][i]:>11.4f} "
                     f"{result['greedy_over_optimal'][i]:>11.4f}{extra}")
    lines.append("gSPT = greedy in SPT order; gSPT+dly = greedy in SPT order with the stable "
                 "scheduler's costs (informative, not the headline)")
    return "\n".join(lines)


def plot(result: dict, png_path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for key, marker in (("greedy", "s"), ("stable", "o"), ("optimal", "^")):
        ax.plot(result["tasks"], result[key], marker=marker, label=key)
    if "greedy_spt" in result:
        ax.plot(result["tasks"], result["greedy_spt"], marker="x", linestyle="--",
                alpha=0.6, label="greedy, SPT order")
    ax.set_xscale("log")
    ax.set_xlabel("number of tasks")
    ax.set_ylabel("mean task completion time")
    ax.set_title(f"Matching quality: {result['servers']} servers, "
                 f"mean over {result.get('reps', '?')} reps")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png_path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="apollo bench matching",
                                 description="Greedy vs stable vs optimal matching "
                                             "(Apollo paper, Figure 12).")
    ap.add_argument("--json", metavar="PATH", help="write the results as JSON")
    ap.add_argument("--plot", metavar="PNG", help="write a plot")
    ap.add_argument("--reps", type=count(1), default=DEFAULT_REPS, help="instances per N")
    ap.add_argument("--seed", type=count(0), default=0, help="the random seed (default 0)")
    ap.add_argument("--max-rounds", type=count(1), default=None,
                    help="stable_match rounds per batch (default: until converged)")
    args = ap.parse_args(argv)
    if args.reps < 1:
        ap.error("--reps must be >= 1")
    if args.max_rounds is not None and args.max_rounds < 1:
        ap.error("--max-rounds must be >= 1")
    t0 = time.perf_counter()
    result = run(reps=args.reps, seed=args.seed, max_rounds=args.max_rounds)
    print(format_table(result))
    print(f"({time.perf_counter() - t0:.1f} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    if args.plot:
        plot(result, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
