"""Two of the three seams of a scheduler profile, Filter and Matcher, as base classes whose
defaults do nothing (the third, Gate, is in jm.policies.gate).

A placement pass hands a Batch (jm.policies.batch: a read-only snapshot of the tasks being
placed) to the profile's parts, in this order:

1. each Filter's ``light_pool``: where the lightly loaded candidates are drawn from;
2. the Matcher's ``candidates``: the servers each task may go to;
3. when the matcher ``uses_estimates()``, the pipeline prices every candidate (C, E, W);
4. each Filter's ``cut``: drop candidates, or hold a task back this round;
5. the Matcher's ``match``: a server per task (or none).

The JM then dispatches what the Gate lets out, tells every filter with a memory what went
where (``dispatched``), and decides when to look again (``rematches_on_news``, ``wake_at``).

A subclass overrides only what it needs: a filter is usually ``name`` and ``cut``, a matcher
``name`` and ``match``. docs/policies.md has the recipe.
"""
from __future__ import annotations

from typing import Any, ClassVar

from apollo.core.compiled import mypyc_attr

from ..candidates import candidate_rows

# Capability flags that are methods now (jm.placement and the pipeline call the methods); the old
# names remain as read-only properties below.
_OLD_FLAGS = ("needs_costs", "single", "one_per_slot", "bounded")


def _no_old_flags(cls) -> None:
    # A subclass setting an old flag (``single = True``) would shadow the property and go unseen
    # by the methods: it must override the method instead.
    for flag in _OLD_FLAGS:
        if flag in cls.__dict__:
            raise TypeError(f"{cls.__name__}.{flag}: override the method instead (docs/policies.md)")


@mypyc_attr(allow_interpreted_subclasses=True)
class Filter:
    """Drops candidates or holds tasks back, with an optional memory per job."""
    name: ClassVar[str] = "filter"

    def __init_subclass__(cls, **kw) -> None:
        super().__init_subclass__(**kw)
        _no_old_flags(cls)

    def uses_estimates(self) -> bool:
        """Whether ``cut`` reads the estimates (E, C, W): under a matcher that makes none, the
        filter is skipped."""
        return False

    def new_state(self) -> Any:
        """This filter's memory of one job (None: it keeps none, and never hears ``dispatched``)."""
        return None

    def light_pool(self, b) -> Any:
        """Where the lightly loaded candidates are drawn from (an int array of servers), or None
        for the RM's list as it is. The first filter with an answer wins."""
        return None

    def cut(self, b, state) -> Any:
        """A jm.policies.batch.Cut to apply to the batch ``b``, or None to leave it be. ``b``'s
        per-task fields are arrays (one entry per task, a batch of one task included)."""
        return None

    def rematches_on_news(self, cfg) -> bool:
        """Whether a task this filter held back is matched again on the next status report or
        view (True), or the job must poll for it (False, the safe answer: it looks again every
        DispatchConfig.retry_s)."""
        return False

    def wake_at(self, state, now: float, cfg) -> float | None:
        """When a task this filter holds back will be let go (the job looks again then), or None."""
        return None

    def dispatched(self, state, where, now: float) -> None:
        """Tasks of the job were dispatched at localities ``where`` (an array); only called for
        a filter with a memory (``new_state`` not None)."""

    @property
    def needs_costs(self) -> bool:
        """``uses_estimates()`` by its old name, read-only (for callers not yet moved)."""
        return self.uses_estimates()


@mypyc_attr(allow_interpreted_subclasses=True)
class Matcher:
    """Pairs a batch's tasks with servers."""
    name: ClassVar[str] = "matcher"

    def __init_subclass__(cls, **kw) -> None:
        super().__init_subclass__(**kw)
        _no_old_flags(cls)

    # ---- capabilities (the JM and the pipeline ask these) -------------------------------
    def uses_estimates(self) -> bool:
        """Whether the pipeline prices every candidate (C, E, W on the batch) before ``match``."""
        return True

    def picks_cheapest_alone(self) -> bool:
        """Whether, for a batch of one task, ``match`` picks the candidate of least C among those
        jm.candidates draws: then the pipeline reads a lone task's answer off its row instead of
        asking ``match`` (a few numpy calls instead of the matcher's machinery for many).
        tests/test_policies_seams.py holds every matcher that says so to it."""
        return False

    def places_one_per_slot(self) -> bool:
        """Whether a batch places at most one task per server slot (the JM then builds no batch
        larger than the live servers times the pipelining depth)."""
        return False

    def has_batch_bound(self) -> bool:
        """Whether ``batch_bound`` may answer (the JM asks it only then: the question has a cost)."""
        return False

    def leaves_queued(self) -> bool:
        """Whether a task this matcher placed may wait in its server's queue (Apollo's do: the
        estimates weigh the wait). A slot scheduler's never do: one its server reports queued
        (the slot it was sent to was gone by then) is taken back and placed again."""
        return True

    # ---- placement ------------------------------------------------------------------------
    def batch_bound(self, view, cpu: float) -> int | None:
        """At most how many tasks of ``cpu`` CPUs a batch could place now (a cheap bound taken
        before the batch is built); None: no bound."""
        return None

    def candidates(self, b, rng):
        """(cand int64[B, K], valid bool[B, K]), or None when there is nowhere to go. By default
        Apollo's: the replicas' servers, servers in their racks, two lightly loaded ones."""
        return candidate_rows(b.reps, b.topology, b.light, rng, per_rack=b.cfg.placement.per_rack,
                              no_replicas=b.no_replicas)

    def match(self, b):
        """(server or UNMATCHED, expected wait, locality) per task, as arrays; wait and locality
        may be None: the pipeline reads them off the candidate each server was."""
        raise NotImplementedError(f"{type(self).__name__}.match")

    # ---- the old flags, read-only, for callers not yet moved to the methods ----------------
    @property
    def needs_costs(self) -> bool:
        return self.uses_estimates()

    @property
    def single(self) -> bool:
        return self.picks_cheapest_alone()

    @property
    def one_per_slot(self) -> bool:
        return self.places_one_per_slot()

    @property
    def bounded(self) -> bool:
        return self.has_batch_bound()
