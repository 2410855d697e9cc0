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
  complete soonest given the tasks already placed.
* stable  -- batches of ``jm.matching.stable_match``: the cost of task b on server k is its
  completion time if appended to k now; each batch places at most one task per server;
  placed tasks are appended and the rest go into the next batch.
* optimal -- exact minimum of the summed completion times, via
  ``scipy.optimize.linear_sum_assignment`` on the positional expansion (see
  ``optimal_schedule``).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Sequence

import numpy as np
from scipy.optimize import linear_sum_assignment

from jm.matching import UNMATCHED, stable_match

SERVERS = 100
PREFERRED_FACTOR = 0.5      # runtime multiplier on a task's preferred server
DEFAULT_NS = (10, 30, 100, 300, 1000)
DEFAULT_REPS = 20
# stable_match rounds per batch: None = B * K + 1, a bound that guarantees deferred
# acceptance finishes (each round that does not end it rejects at least one proposal, and
# there are at most B * K proposals). The loop stops as soon as nobody is left to propose,
# so the bound costs nothing. 64 is NOT enough here: with 100 servers a batch of 100+
# tasks needs ~100-128 rounds, and a cut-off batch places only ~70-90 tasks.
STABLE_MAX_ROUNDS: int | None = None
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

    Implemented directly rather than with ``jm.matching.greedy_match``: that adds one
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


def stable_schedule(wait: np.ndarray, runtime: np.ndarray,
                    max_rounds: int | None = STABLE_MAX_ROUNDS) -> Schedule:
    """Repeated batches of Apollo's stable matching until every task is placed.

    With the default (converging) ``max_rounds`` and every server a candidate of every
    task, a batch of B tasks places exactly min(B, S) of them; that is checked."""
    n, S = runtime.shape
    w = np.asarray(wait, dtype=float).copy()
    sched: Schedule = [[] for _ in range(S)]
    left = np.arange(n)
    cand_row = np.arange(S, dtype=np.int64)
    while len(left):
        cand = np.broadcast_to(cand_row, (len(left), S))
        cost = w[None, :] + runtime[left]
        rounds = len(left) * S + 1 if max_rounds is None else max_rounds
        got = stable_match(cand, cost, rounds)
        placed = np.flatnonzero(got != UNMATCHED)
        if len(placed) == 0:
            raise RuntimeError(f"stable_match placed none of {len(left)} tasks")
        if max_rounds is None and len(placed) != min(len(left), S):
            raise RuntimeError(f"stable_match placed {len(placed)} of {len(left)} tasks on "
                               f"{S} servers; expected {min(len(left), S)}")
        servers = got[placed]
        if len(np.unique(servers)) != len(servers):
            raise RuntimeError("stable_match gave a server two tasks in one batch")
        # Shorter completions first; with one task per server per batch this order does
        # not change any server's sequence, it only fixes a deterministic append order.
        done = cost[placed, servers]
        for i in np.argsort(done, kind="stable"):
            b, s = int(placed[i]), int(servers[i])
            j = int(left[b])
            sched[s].append(j)
            w[s] += runtime[j, s]
        keep = np.ones(len(left), dtype=bool)
        keep[placed] = False
        left = left[keep]
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

def run_instance(rng: np.random.Generator, n_tasks: int,
                 servers: int = SERVERS) -> dict[str, float]:
    wait, runtime = make_instance(rng, n_tasks, servers)
    order = rng.permutation(n_tasks)
    greedy = mean_completion(wait, runtime, greedy_schedule(wait, runtime, order))
    stable = mean_completion(wait, runtime, stable_schedule(wait, runtime))
    opt_sched, objective = optimal_schedule(wait, runtime)
    optimal = mean_completion(wait, runtime, opt_sched)
    lsa_mean = objective / n_tasks
    if abs(optimal - lsa_mean) > 1e-9 * abs(lsa_mean):
        raise AssertionError(f"optimal schedule mean {optimal!r} != LSA objective/N {lsa_mean!r}")
    return {"greedy": greedy, "stable": stable, "optimal": optimal}


def run(reps: int = DEFAULT_REPS, seed: int = 0, ns: Sequence[int] = DEFAULT_NS) -> dict:
    """Mean completion time per scheduler and N, averaged over ``reps`` seeded instances.

    The ratios are of those averages (mean stable / mean optimal, ...)."""
    out: dict = {"measure": MEASURE, "servers": SERVERS, "preferred_factor": PREFERRED_FACTOR,
                 "reps": reps, "seed": seed, "tasks": [int(n) for n in ns],
                 "greedy": [], "stable": [], "optimal": [],
                 "stable_over_optimal": [], "greedy_over_optimal": []}
    for n in ns:
        acc = {"greedy": 0.0, "stable": 0.0, "optimal": 0.0}
        for r in range(reps):
            rng = np.random.default_rng([seed, int(n), r])
            for k, v in run_instance(rng, int(n)).items():
                acc[k] += v
        for k in acc:
            out[k].append(acc[k] / reps)
        out["stable_over_optimal"].append(out["stable"][-1] / out["optimal"][-1])
        out["greedy_over_optimal"].append(out["greedy"][-1] / out["optimal"][-1])
    return out


def format_table(result: dict) -> str:
    lines = [f"measure: {result['measure']}; {result['servers']} servers, "
             f"averaged over {result.get('reps', '?')} reps",
             f"{'N':>6} {'greedy':>9} {'stable':>9} {'optimal':>9} {'stable/opt':>11} {'greedy/opt':>11}"]
    for i, n in enumerate(result["tasks"]):
        lines.append(f"{n:>6} {result['greedy'][i]:>9.4f} {result['stable'][i]:>9.4f} "
                     f"{result['optimal'][i]:>9.4f} {result['stable_over_optimal'][i]:>11.4f} "
                     f"{result['greedy_over_optimal'][i]:>11.4f}")
    return "\n".join(lines)


def plot(result: dict, png_path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for key, marker in (("greedy", "s"), ("stable", "o"), ("optimal", "^")):
        ax.plot(result["tasks"], result[key], marker=marker, label=key)
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
    ap = argparse.ArgumentParser(prog="apollo bench matching",
                                 description="Greedy vs stable vs optimal matching "
                                             "(Apollo paper, Figure 12).")
    ap.add_argument("--json", metavar="PATH", help="write the results as JSON")
    ap.add_argument("--plot", metavar="PNG", help="write a plot")
    ap.add_argument("--reps", type=int, default=DEFAULT_REPS, help="instances per N")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.reps < 1:
        ap.error("--reps must be >= 1")
    t0 = time.perf_counter()
    result = run(reps=args.reps, seed=args.seed)
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
