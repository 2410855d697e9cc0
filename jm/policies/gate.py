"""Dispatch gates: how many of a job's placed tasks may go out, and as what.

Every profile dispatches regular tasks while the job's tokens last. A gate adds, per
profile: opportunistic tasks beyond the tokens (Apollo section 3.4: an allowance of
``opportunistic_factor`` x tokens, only where the task should start about now); lookahead
(match several ready tasks per free token and send the ones that lose least time); and
pipelining (a token may keep a few short tasks queued behind the one it runs).
"""
from __future__ import annotations

from dataclasses import dataclass


# (Here, not beside Filter and Matcher in jm.policies.base, which the native build compiles: a
# compiled base's class-level switches would hide a dataclass subclass's fields.)
class Gate:
    """How many of a job's placed tasks may go out, and as what. Every profile dispatches regular
    tasks while the job's tokens last; a gate may add more (DispatchGate)."""
    __slots__ = ()
    opportunistic: bool = False      # beyond tokens, as opportunistic tasks (if JmConfig allows)
    lookahead: bool = False          # match PlacementConfig.lookahead tasks per free token, best first
    pipelining: bool = False         # short tasks: DispatchConfig.pipeline_s of work per token

    def describe(self, opportunistic: bool = True) -> list[str]:
        """What the report lists of this gate (``opportunistic``: whether the run allows them)."""
        return [n for n, on in (("opportunistic", self.opportunistic and opportunistic), ("lookahead", self.lookahead),
                                ("pipelining", self.pipelining)) if on]


@dataclass(frozen=True, slots=True)
class DispatchGate(Gate):
    """A gate made of the three switches (Gate says what each does)."""
    opportunistic: bool = False
    lookahead: bool = False
    pipelining: bool = False


TOKENS = DispatchGate()
LOOKAHEAD = DispatchGate(lookahead=True)
APOLLO = DispatchGate(opportunistic=True, lookahead=True, pipelining=True)
