"""Dolly's clone budget (NSDI'13, section 3): part of the capacity plane the RM holds.

A job of at most ``max_tasks`` tasks is cloned when the RM admits it: each of its
tasks is launched ``c`` times, c from Dolly's Pseudocode 1, the fewest clones for
which the job straggles with chance at most ``risk`` when a task straggles with
chance ``p``. Admission control: the job is cloned only if the budget (``beta``
of the cluster's cores, counting the clones beyond each task's first attempt:
the extra resources) allows *all* its tasks ``c - 1`` clones, and the cluster's
utilization with them stays under ``util_max`` (Dolly's tau); otherwise it runs
without clones. This favours small jobs by itself: a large job's clones rarely fit.

Above tau (``low_above_tau``, on by default) a job the budget allows is cloned all the
same, but its clones run at low priority: as opportunistic attempts, in room no regular
task holds, preempted as soon as one needs it. Tau is there so that clones do not take
the cluster from other work when it is busy; Apollo's PNs already keep opportunistic work
out of regular work's way, so the clones use only what would idle. (Measured on FB-2009
with Dolly's stragglers: a fifth of the small jobs arrive while the trace's big jobs hold
the cluster above tau, and those jobs set most of the small-job mean.)
A grant covers the clones of all the job's tasks (with delay assignment one
phase's clones run on while the next phase's start); the JM gives back what its
finished tasks no longer need as it goes (JobDemand.clone_cpu).

``p`` is what the cluster's operator knows of its stragglers (Dolly measured it
from its traces); 0 turns cloning off.
"""
from __future__ import annotations

from dataclasses import dataclass

from apollo.core.spec import JobSpec
from apollo.core.stragglers import clones_needed


@dataclass(slots=True)
class CloneConfig:
    beta: float = 0.05          # the budget: this fraction of the cluster's cores, for clones
    max_tasks: int = 10         # only jobs this small are cloned
    risk: float = 0.05          # Dolly's epsilon: the acceptable chance the job straggles
    util_max: float = 0.8       # Dolly's tau: no cloning that would lift utilization above this
    p: float = 0.0              # the chance a task attempt straggles (0: never clone)
    low_above_tau: bool = True  # above tau: clone at low priority (opportunistic) instead of not at all


class CloneBudget:
    def __init__(self, cfg: CloneConfig) -> None:
        self.cfg = cfg
        self.used = 0.0         # CPUs granted to the clones of running jobs

    def grant(self, spec: JobSpec, capacity: float, busy) -> tuple[int, float, bool]:
        """(attempts per task, CPUs granted for the clones, whether they run at low priority) for
        a job being admitted, on a cluster of ``capacity`` cores with ``busy()`` of them in use;
        (1, 0.0, False): not cloned."""
        cfg = self.cfg
        n = spec.total_tasks
        if cfg.p <= 0.0 or cfg.beta <= 0.0 or n > cfg.max_tasks or capacity <= 0:
            return 1, 0.0, False
        c = clones_needed(cfg.p, n, cfg.risk)
        # every task's clones: with delay assignment a phase's clones run on while the next
        # phase's start (measured: a grant of the largest phase only left the later clones short)
        extra = (c - 1) * sum(s.tasks * s.cpu for s in spec.stages)
        if c <= 1 or self.used + extra > cfg.beta * capacity + 1e-9:
            return 1, 0.0, False
        low = busy() + extra > cfg.util_max * capacity
        if low and not cfg.low_above_tau:
            return 1, 0.0, False
        self.used += extra
        return c, extra, low

    def release(self, cpu: float) -> None:
        self.used = max(0.0, self.used - cpu)
