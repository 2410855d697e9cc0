"""A task attempt's lifecycle: the one transition table of the project.

JM and PN both move task attempts through it (the JM's view of an attempt and
the PN's own copy); an illegal transition raises IllegalTransition, which
is a bug, not a runtime condition.
"""
from __future__ import annotations

from typing import Final

from enum import IntEnum


class TaskState(IntEnum):
    PENDING = 0      # waiting for upstream stages
    READY = 1        # inputs complete, not placed
    DISPATCHED = 2   # sent to a PN (queued there, as far as the JM knows)
    RUNNING = 3
    DONE = 4
    FAILED = 5       # this attempt failed; the task may be retried
    KILLED = 6       # stopped on purpose (a duplicate lost the race, job cancelled)
    DEAD = 7         # failed and out of retries


S = TaskState

TRANSITIONS: dict[tuple[int, str], TaskState] = {      # (keyed by int: a TaskState is one)
    (S.PENDING, "inputs_ready"): S.READY,
    (S.PENDING, "kill"): S.KILLED,
    (S.PENDING, "done_before"): S.DONE,    # finished under an earlier home of the job (a JM adopting it)
    (S.READY, "dispatch"): S.DISPATCHED,
    (S.READY, "kill"): S.KILLED,
    (S.DISPATCHED, "start"): S.RUNNING,
    (S.DISPATCHED, "finish"): S.DONE,      # status of start and end may arrive together
    (S.DISPATCHED, "fail"): S.FAILED,
    (S.DISPATCHED, "kill"): S.KILLED,
    (S.DISPATCHED, "requeue"): S.READY,    # preempted or refused before it ran: not a failure
    (S.RUNNING, "finish"): S.DONE,
    (S.RUNNING, "fail"): S.FAILED,
    (S.RUNNING, "kill"): S.KILLED,
    (S.RUNNING, "requeue"): S.READY,       # an opportunistic task preempted
    (S.FAILED, "retry"): S.READY,
    (S.FAILED, "give_up"): S.DEAD,
}

TERMINAL = frozenset({S.DONE, S.KILLED, S.DEAD})
ACTIVE = frozenset({S.DISPATCHED, S.RUNNING})


class AttemptKind(IntEnum):
    """Why an attempt of a task exists. A task has one FIRST attempt at a time (regular or
    opportunistic; retries are first attempts again) and may have extra ones beside it; the
    first of them all to finish wins and the rest are killed."""
    FIRST = 0
    DUPLICATE = 1    # Apollo's correction: the first queued somewhere much worse than expected
    COPY = 2         # a straggler's copy, started while the first still runs
    CLONE = 3        # Dolly: launched with the first, from the cluster's clone budget


KIND_NAMES = {int(k): k.name.lower() for k in AttemptKind}


class IllegalTransition(Exception):
    """A bug, not a runtime condition: an Exception, so that the CLI's one-line report of runtime
    errors (RuntimeError) shows it with its traceback. (Compiled: mypyc subclasses Exception.)"""


# TRANSITIONS by event, then by state (None: no such transition): step's lookup without making
# and hashing a (state, event) tuple (~1,000 instructions a call, compiled; a few calls a task)
_BY_EVENT: Final[dict[str, list[TaskState | None]]] = {}
for (_frm, _event), _to in TRANSITIONS.items():
    _BY_EVENT.setdefault(_event, [None] * len(TaskState))[_frm] = _to


def step(state: int, event: str) -> TaskState:
    """The state an attempt in ``state`` (a TaskState, or its int value) moves to on ``event``."""
    row = _BY_EVENT.get(event)
    if row is not None and 0 <= state < len(row):
        to = row[state]
        if to is not None:
            return to
    raise IllegalTransition(f"task in state {TaskState(state).name} cannot take event {event!r}")
