"""How much slower than modelled a task attempt runs: the straggler model.

Dolly (NSDI'13, section 2) measured that in phases of jobs with fewer than ten
tasks the slowest task runs a median 6-8x slower than the median one, and that
blacklisting machines removes little of it: stragglers are a property of the
attempt (contention, a bad disk, a noisy neighbour at that moment), not of a
few servers. So the model draws each attempt's slowdown independently:

- with chance ``1 - p`` the attempt is normal: 1 to ``1 + spread`` times its
  modelled time;
- with chance ``p`` it straggles: a Pareto draw from ``tail_min`` (shape
  ``alpha``), capped at ``cap``.

With the defaults of ``DOLLY`` (p 0.2, tail from 6x, alpha 2, cap 20x) phases
of 2-10 tasks see a median slowest/median of about 6.5x and a mean of about 7x
(``tests/test_stragglers.py`` measures it), Dolly's figure. Two clones of a
task both straggle with chance p^2 = 4%: what cloning is for.

The PN draws the slowdown when it starts an attempt (it is that server's
reality; the PN reports the attempt's progress from it) and hands it to the
runtime in the Launch effect, which stretches the attempt's compute time.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StragglerModel:
    p: float = 0.0            # chance an attempt straggles (0: the model is off)
    spread: float = 0.1       # a normal attempt runs 1 to 1 + spread times its modelled time
    tail_min: float = 6.0     # a straggler runs at least this many times slower ...
    alpha: float = 2.0        # ... Pareto-distributed with this shape ...
    cap: float = 20.0         # ... and at most this many times

    @property
    def on(self) -> bool:
        return self.p > 0.0

    def draw(self, rng) -> float:
        """One attempt's slowdown factor (>= 1)."""
        if self.p <= 0.0:
            return 1.0
        if rng.random() >= self.p:
            return 1.0 + self.spread * rng.random()
        return min(self.cap, self.tail_min * (1.0 - rng.random()) ** (-1.0 / self.alpha))

    def mean(self) -> float:
        """The mean slowdown: how much more work the model makes of a workload (so a workload meant
        to load a cluster to U is scaled to U / mean())."""
        if self.p <= 0.0:
            return 1.0
        a, m, c = self.alpha, self.tail_min, self.cap
        # E[min(X, cap)] of a Pareto(m, a): m + integral from m to cap of (m / x)^a dx
        tail = m + (m ** a) * (c ** (1 - a) - m ** (1 - a)) / (1 - a) if a != 1 else m + m * math.log(c / m)
        return (1.0 - self.p) * (1.0 + self.spread / 2) + self.p * tail

    def clones_for(self, tasks: int, risk: float) -> int:
        """Dolly's Pseudocode 1: clones per task so that a job of ``tasks`` tasks straggles with
        chance at most ``risk``: c = ceil(log(1 - (1 - risk)^(1/n)) / log p); 1 when the model
        is off."""
        return clones_needed(self.p, tasks, risk)


def clones_needed(p: float, tasks: int, risk: float) -> int:
    if p <= 0.0 or tasks <= 0:
        return 1
    if p >= 1.0:
        raise ValueError("a straggler probability of 1 leaves nothing to clone for")
    return max(1, math.ceil(math.log(1.0 - (1.0 - risk) ** (1.0 / tasks)) / math.log(p)))


NONE = StragglerModel()
DOLLY = StragglerModel(p=0.2)
MODELS = {"none": NONE, "dolly": DOLLY}


def model(name: str) -> StragglerModel:
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"unknown straggler model {name!r}; choose one of {', '.join(MODELS)}") from None
