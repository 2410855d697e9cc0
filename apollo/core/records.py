"""What a run records as it goes: the actors' Log effects, kept for the report (apollo.tools.report).

Both runtimes hand every Log effect to a Recorder; the simulator's keeps its attempt records
packed in an AttemptLog. Compiled with the simulator's hot modules (apollo.tools.native): a
20,000-server run records over a million attempts.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

# Columns of an "attempt" record (logged by the JM when an attempt ends).
A_JOB, A_STAGE, A_TASK, A_ATTEMPT, A_SERVER, A_LOC, A_READY, A_DISPATCH, A_START, A_END, A_OUTCOME, \
    A_OPP, A_CPU, A_HAS_INPUT, A_KIND = range(15)


# The columns of an attempt record but its outcome, packed (AttemptLog): little-endian, no padding,
# as struct lays them out ("<"), so that numpy reads back what struct wrote.
ATTEMPT_DTYPE = np.dtype([("job", "<i8"), ("stage", "<i8"), ("task", "<i8"), ("attempt", "<i8"), ("server", "<i8"),
                          ("loc", "<i8"), ("ready", "<f8"), ("dispatch", "<f8"), ("start", "<f8"), ("end", "<f8"),
                          ("opp", "?"), ("cpu", "<f8"), ("has_input", "?"), ("kind", "i1")])
_ATTEMPT_ROW: Final = struct.Struct("<6q4d?d?b")


class AttemptLog:
    """A run's attempt records, packed as they come: the numbers of each row into a block of
    CHUNK rows (~75 bytes a row, against ~350 as a tuple of Python numbers), its outcome (one of
    a few shared strings) into a list beside them. The 20,000-server benchmark logs 1.2 million
    attempts; kept as tuples they grew the heap under every event of the simulator by ~400 MB,
    which cost ~7% of its wall time (measured). A row is packed by struct, at a fraction of what
    numpy's conversion of a tuple to a record cost (~6,500 instructions a row, 3.6% of a run's).
    Reads as a list of the same tuples (rows as the simulator's JMs log them: ints, floats, str,
    bools), made when first read."""
    CHUNK = 8192
    __slots__ = ("_blocks", "_block", "_rows", "_outcomes", "_list")

    def __init__(self) -> None:
        self._blocks: list[bytearray] = []       # full blocks of CHUNK rows
        self._block = bytearray(self.CHUNK * _ATTEMPT_ROW.size)   # the block being filled ...
        self._rows = 0                           # ... and how many rows it holds
        self._outcomes: list[str] = []           # every row's outcome, in order
        self._list: list | None = None           # everything as tuples, made when read

    def append(self, row: tuple) -> None:
        _ATTEMPT_ROW.pack_into(self._block, self._rows * _ATTEMPT_ROW.size, row[0], row[1], row[2], row[3], row[4],
                               row[5], row[6], row[7], row[8], row[9], row[11], row[12], row[13], row[14])
        self._outcomes.append(row[10])
        self._rows += 1
        if self._rows >= self.CHUNK:
            self._blocks.append(self._block)
            self._block = bytearray(self.CHUNK * _ATTEMPT_ROW.size)
            self._rows = 0
        self._list = None

    def _all(self) -> list:
        if self._list is None:
            numbers: list = []
            for b in self._blocks:
                numbers += np.frombuffer(b, dtype=ATTEMPT_DTYPE).tolist()
            numbers += np.frombuffer(self._block, dtype=ATTEMPT_DTYPE, count=self._rows).tolist()
            self._list = [r[:10] + (o,) + r[10:] for r, o in zip(numbers, self._outcomes)]
        return self._list

    def __len__(self) -> int:
        return len(self._outcomes)

    def __bool__(self) -> bool:
        return bool(self._outcomes)

    def __iter__(self):
        return iter(self._all())

    def __getitem__(self, i):
        return self._all()[i]


# What the control plane did, counted in the report's "control": attempts a JM adopted from the
# PNs after its host died, jobs moved to another JM host, JM hosts found dead or back, jobs a
# host was told to drop.
CONTROL_EVENTS: Final = ("adopted", "rehomed", "host_dead", "host_up", "released")
# What the JMs' corrections did (jm/attempts.py): duplicate triggers fired and duplicates sent, by
# trigger; straggler copies started.
CORRECTION_EVENTS: Final = ("dup_trigger", "duplicate", "copy")
KINDS = ("first", "duplicate", "copy", "clone")     # apollo.core.lifecycle.AttemptKind, by value


@dataclass
class Recorder:
    attempts: Any = field(default_factory=list)   # a list, or an AttemptLog (the simulator)
    submitted: list = field(default_factory=list)     # (job_id, t, n_tasks)
    done: list = field(default_factory=list)          # (job_id, ok, submitted_at, t, n_tasks, reason)
    refused: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    decisions: int = 0
    admitted: list = field(default_factory=list)      # (job_id, t, queue)
    allocations: list = field(default_factory=list)   # (t, capacity, {leaf: (share, holding, demand, guarantee, ...)})
    preempted: int = 0
    upgraded: int = 0
    control: dict = field(default_factory=dict)       # control-plane events (CONTROL_EVENTS) -> count
    corrections: dict = field(default_factory=dict)   # (CORRECTION_EVENTS, detail) -> count

    def __call__(self, kind: str, data: tuple, now: float) -> None:
        if kind == "attempt":            # (one per attempt: the rest are rare)
            att = self.attempts
            if type(att) is AttemptLog:
                log: AttemptLog = att    # (typed: compiled, a C call, not a Python method call)
                log.append(data)
            else:
                att.append(data)
            return
        if kind in CONTROL_EVENTS:
            self.control[kind] = self.control.get(kind, 0) + 1
        elif kind in CORRECTION_EVENTS:
            key = (kind, data[2] if kind != "copy" else "")
            self.corrections[key] = self.corrections.get(key, 0) + 1
        if kind == "decisions":
            self.decisions += data[0]
        elif kind == "job_submitted":
            self.submitted.append(data)
        elif kind == "job_done":
            self.done.append(data)
        elif kind == "job_refused":
            self.refused.append(data)
        elif kind == "job_admitted":
            self.admitted.append(data)
        elif kind == "allocation":
            self.allocations.append(data)
        elif kind == "preempted":
            self.preempted += 1
        elif kind == "upgraded":
            self.upgraded += 1
        elif kind == "warn":
            if len(self.warnings) < 1000:
                self.warnings.append((now, data))
