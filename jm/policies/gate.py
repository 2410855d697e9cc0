"""Dispatch gates: how many of a job's placed tasks may go out, and as what.

Every profile dispatches regular tasks while the job's tokens last. A gate adds, per
profile: opportunistic tasks beyond the tokens (Apollo section 3.4: an allowance of
``opportunistic_factor`` x tokens, only where the task should start about now); lookahead
(match several ready tasks per free token and send the ones that lose least time); and
pipelining (a token may keep a few short tasks queued behind the one it runs).
"""
from __future__ import annotations

from dataclasses import dataclass

from .base import Gate


@dataclass(frozen=True, slots=True)
class DispatchGate(Gate):
    """A gate made of the three switches (jm.policies.base.Gate says what each does)."""
    opportunistic: bool = False
    lookahead: bool = False
    pipelining: bool = False


TOKENS = DispatchGate()
LOOKAHEAD = DispatchGate(lookahead=True)
APOLLO = DispatchGate(opportunistic=True, lookahead=True, pipelining=True)
