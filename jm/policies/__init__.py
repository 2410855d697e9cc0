"""Placement policies, composed into scheduler profiles by name in one table.

A profile is what ``--scheduler NAME`` picks: a matcher (how tasks are paired with servers),
candidate filters (which may drop candidates or hold a task back, each in its own module),
a dispatch gate (what may go out beyond the tokens), and two switches of the JM's own:
Apollo's corrections (move a task stuck in a queue) and polling (look again every
JmConfig.retry_s while tasks wait, as Hadoop's heartbeat-driven assignment does).
``tokens`` names the RM's default sharing of tokens for the profile.

Adding a policy: write its class in a new module here, then add or change a profile line
below. JmState never looks at a profile's name.
"""
from __future__ import annotations

from dataclasses import dataclass

from .deferral import Deferral
from .gate import APOLLO, TOKENS, DispatchGate
from .matchers import FreeSlot, GreedyMatching, Matcher, RandomPlacement, StableMatching


@dataclass(frozen=True)
class Profile:
    name: str
    matcher: Matcher
    filters: tuple = ()
    gate: DispatchGate = TOKENS
    corrections: bool = False        # Apollo's: withdraw a task still queued long past its expected wait
    polls: bool = False              # look again every retry_s while tasks are ready (not only on news)
    tokens: str = "even"             # the RM's token policy when none is named

    def describe(self) -> list[str]:
        """The report's ``scheduler.policies``: what this profile is made of."""
        return [self.matcher.name] + [f.name for f in self.filters] + self.gate.describe() + \
            (["corrections"] if self.corrections else [])


PROFILES: dict[str, Profile] = {p.name: p for p in (
    Profile("apollo", StableMatching(), (Deferral(),), APOLLO, corrections=True),
    Profile("greedy", GreedyMatching()),
    Profile("random", RandomPlacement()),
    Profile("fifo", FreeSlot(), polls=True, tokens="fifo"),
)}


def profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown scheduler {name!r}; choose one of {', '.join(PROFILES)}") from None
