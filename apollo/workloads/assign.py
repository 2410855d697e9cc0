"""Spreading a trace's jobs over leaf queues and users (traces carry neither).

``--assign RULE[:key=value,...]``, one of:
- ``size``: by job size, as the HFS paper's Facebook deployment put small, medium and large
  jobs in separate pools. The leaves in the queue file's order take jobs of at most ``small``
  (20) tasks, at most ``medium`` (500) tasks (the paper's Facebook job-size bins), and the
  rest; with two leaves, ``small`` splits; with more than three, each further bound is 10x
  the last.
- ``rr``: round robin over the leaves, in submission order.
- ``random``: a seeded uniform draw per job.
Every rule takes ``users=N`` (default 3): jobs of a leaf go to ``user0``..``user{N-1}`` in turn
(``random``: drawn).
"""
from __future__ import annotations

import numpy as np

from apollo.core.spec import SpecError, Workload



def _by_size(jobs, k: int, opts: dict, rng) -> list[int]:
    bounds = [opts.get("small", 20), opts.get("medium", 500)]
    while len(bounds) < k - 1:
        bounds.append(bounds[-1] * 10)
    return np.searchsorted(bounds[:k - 1], [j.total_tasks for j in jobs], side="left").tolist()


def _round_robin(jobs, k: int, opts: dict, rng) -> list[int]:
    return [i % k for i in range(len(jobs))]


def _at_random(jobs, k: int, opts: dict, rng) -> list[int]:
    return rng.integers(k, size=len(jobs)).tolist()


RULES = {"size": _by_size, "rr": _round_robin, "random": _at_random}


def parse_rule(text: str) -> tuple[str, dict[str, int]]:
    name, _, rest = text.partition(":")
    if name not in RULES:
        raise SpecError(f"--assign: unknown rule {name!r}; choose one of {', '.join(RULES)}")
    opts: dict[str, int] = {}
    for kv in filter(None, rest.split(",")):
        k, eq, v = kv.partition("=")
        if not eq or k not in ("users", "small", "medium"):
            raise SpecError(f"--assign {text!r}: expected key=value with keys users, small, medium; got {kv!r}")
        try:
            opts[k] = int(v)
        except ValueError:
            raise SpecError(f"--assign {text!r}: {k} must be a whole number, got {v!r}") from None
        if opts[k] < 1:
            raise SpecError(f"--assign {text!r}: {k} must be >= 1")
    return name, opts


def assign(workload: Workload, leaves: list[str], rule: str, seed: int = 0) -> Workload:
    """Set each job's ``queue`` and ``user`` (in place; returns the workload)."""
    name, opts = parse_rule(rule)
    users = opts.get("users", 3)
    rng = np.random.default_rng(seed + 101)
    picks = RULES[name](workload.jobs, len(leaves), opts, rng)
    drawn = rng.integers(users, size=len(picks)).tolist() if name == "random" else None
    turn = [0] * len(leaves)
    for i, (job, q) in enumerate(zip(workload.jobs, picks)):
        job.queue = leaves[q]
        job.user = f"user{drawn[i] if drawn else turn[q] % users}"
        turn[q] += 1
    return workload
