"""A queue's max and guarantee, held against what its jobs may run (JobEntry.may_run) or were
granted: the checks the RM makes itself, besides the sharing policy's allocation, because a
job cut may go on running what it had until its JM hears the cut and its attempts end."""
from __future__ import annotations

import math

from .jobs import JobEntry
from .queues import QueueTree


def max_room(tree: QueueTree, jobs: dict[int, JobEntry], leaf: str, total: int) -> float:
    """Tokens ``leaf`` may still be granted under its max and its ancestors' maxes."""
    lim = tree.resolve(float(total))
    caps = []
    p: str | None = leaf
    while p is not None:
        if lim[p].max < total - 1e-9:
            caps.append((p, p + ".", lim[p].max))
        p = tree.parent(p)
    room = math.inf
    for path, under, cap in caps:
        held = sum(e.may_run for e in jobs.values()
                   if e.admitted and (e.queue == path or e.queue.startswith(under)))
        room = min(room, cap - held)
    return room


def under_max(tree: QueueTree, jobs: dict[int, JobEntry], grants: dict[int, int], total: int) -> dict[int, int]:
    """``grants`` (job -> tokens) with what would take a queue past its max held back: a job
    cut may run what it had (JobEntry.may_run) until its attempts end, so tokens given to
    another job of the same queue in the meantime could add up past the max. The jobs that
    would grow give way, the most recently submitted first; they get it as the others'
    attempts end (the next rounds)."""
    lim = tree.resolve(float(total))
    out = dict(grants)
    for q in tree.nodes():
        cap = lim[q.path].max
        if cap >= total - 1e-9:
            continue
        under = q.path + "."
        mine = [jobs[j] for j in out
                if jobs[j].queue == q.path or jobs[j].queue.startswith(under) or q is tree.root]
        excess = sum(max(out[e.job_id], e.may_run) for e in mine) - cap
        for e in sorted(mine, key=lambda e: (-e.submitted_at, -e.job_id)):
            if excess <= 1e-9:
                break
            grow = out[e.job_id] - e.may_run
            if grow > 0:
                cut = min(grow, math.ceil(excess - 1e-9))
                out[e.job_id] -= int(cut)
                excess -= cut
    return out


def below_guarantee(tree: QueueTree, jobs: dict[int, JobEntry], leaf: str, total: int) -> bool:
    """Whether the tokens of ``leaf``'s admitted jobs are below its guarantee (a queue file's
    leaf; the single queue of a cluster without one guarantees nothing)."""
    if tree.is_single:
        return False
    g = tree.resolve(float(total))[leaf].guarantee
    if g <= 0:
        return False
    return sum(e.tokens for e in jobs.values() if e.admitted and e.queue == leaf) < g - 1e-9
