"""Placement policies, composed into scheduler profiles by name in one table.

A profile is what ``--scheduler NAME`` picks: a matcher (how tasks are paired with servers),
candidate filters (which may drop candidates or hold a task back, each in its own module),
a dispatch gate (what may go out beyond the tokens), and two switches of the JM's own:
Apollo's corrections (move a task stuck in a queue) and polling (look again every
DispatchConfig.retry_s while tasks wait, as Hadoop's heartbeat-driven assignment does).
``tokens`` names the RM's default sharing of tokens for the profile.

The three seams are base classes with defaults for every member: Filter and Matcher in
jm.policies.base, Gate in jm.policies.gate. Adding a policy: subclass one in a new module
here, then add or change a profile line below (docs/policies.md has the recipe). JmState never
looks at a profile's name.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property

from .base import Filter, Matcher
from .deferral import Deferral
from .delay import DelayScheduling
from .gate import APOLLO, LOOKAHEAD, TOKENS, Gate
from .matchers import FreeSlot, GreedyMatching, RandomPlacement, StableMatching
from .offers import SlotOffers
from .sparrow import BatchSampling


@dataclass(frozen=True)
class Profile:
    name: str
    matcher: Matcher
    filters: tuple[Filter, ...] = ()
    gate: Gate = TOKENS
    corrections: bool = False        # Apollo's: withdraw a task still queued long past its expected wait
    polls: bool = False              # look again while tasks are ready (not only on news) ...
    poll_s: float = 0.0              # ... this often (0: DispatchConfig.retry_s)
    tokens: str = "even"             # the RM's token policy when none is named

    def new_states(self) -> tuple:
        """Each filter's memory of one job (None for a filter that keeps none)."""
        if not self.stateful:
            return self._nones
        return tuple(f.new_state() for f in self.filters)

    @cached_property
    def stateful(self) -> bool:
        """Whether some filter keeps a memory per job (then it hears of every dispatch)."""
        return any(f.new_state() is not None for f in self.filters)

    @cached_property
    def _nones(self) -> tuple:
        return (None,) * len(self.filters)

    def with_filter(self, f: Filter) -> "Profile":
        """This profile with candidate filter ``f`` (e.g. delay scheduling on any profile), in place
        of a filter of the same kind it already has."""
        return dataclasses.replace(self, filters=tuple(g for g in self.filters if type(g) is not type(f)) + (f,))

    def describe(self, opportunistic: bool = True) -> list[str]:
        """The report's ``scheduler.policies``: what this profile is made of (``opportunistic``:
        whether the run lets the gate send opportunistic tasks)."""
        return [self.matcher.name] + [f.name for f in self.filters] + self.gate.describe(opportunistic) + \
            (["corrections"] if self.corrections else [])


PROFILES: dict[str, Profile] = {p.name: p for p in (
    Profile("apollo", StableMatching(), (Deferral(),), APOLLO, corrections=True),
    Profile("greedy", GreedyMatching()),
    Profile("random", RandomPlacement()),
    Profile("fifo", FreeSlot(), polls=True, tokens="fifo"),
    # The Hadoop Fair Scheduler: fair shares from the RM, free slots offered as heartbeats
    # bring them (each to the job's closest task), delay scheduling. It looks again every
    # 0.1 s, about as often as 100 servers heartbeating every few seconds offer a slot, and
    # offers each slot to the tasks of several tokens' worth (lookahead), as HFS scans all of
    # a job's pending maps for one with data on the offered node.
    Profile("hfs-delay", SlotOffers(), (DelayScheduling(),), LOOKAHEAD, polls=True, poll_s=0.1),
    # Sparrow (SOSP'13): batch sampling, the m least loaded of 2m probed servers (the view answers the probes)
    Profile("sparrow", BatchSampling(probes=2)),
)}


def profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown scheduler {name!r}; choose one of {', '.join(PROFILES)}") from None
