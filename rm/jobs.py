"""What the RM keeps of a live job: one ``JobEntry`` per job submitted and not yet ended (the
store keeps the record of every job; rm/store.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from apollo.core.spec import JobSpec

from .sharing import JobView


class HeldCell:
    """The milli-CPUs a job's regular attempts run on, as the live servers last said: one per
    job in ClusterLoad's count, and the admitted job's entry holds the same cell, so that a
    round reads it without looking it up (rm/cluster_load.py)."""
    __slots__ = ("milli",)

    def __init__(self) -> None:
        self.milli = 0


@dataclass(slots=True)
class JobEntry:
    job_id: int
    spec: JobSpec
    submitted_at: float
    reply_to: str
    demand: float                    # CPUs it could use now (as its JM last said)
    queue: str                       # its leaf queue's path
    tokens: int = 0
    in_use: float = 0.0              # CPUs its regular attempts have out, queued or running (its JM's word)
    # The most CPUs it may be running, as far as the RM can tell: its tokens, or more after a cut
    # until its JM, having heard the cut, says how many it has out (a queue's max counts this)
    may_run: float = 0.0
    admitted: bool = False
    state: str = "running"           # running | done | failed | cancelled
    host: str = ""
    reclaim: tuple = ()              # the last give-back asked: (kill line, deadline)
    settle_until: float = -1.0       # no kill asked of it before then (the last one's effect is unknown)
    key: str = ""                    # the client's idempotency key
    seq: int = 0                     # seq of the last token message sent to its JM
    last_tokens: Any = None          # that message (re-sent to a JM that reports an older seq)
    generation: int = 0              # JM homes it has had (a JM host died: the next one adopts)
    offered_at: float = -1.0         # when StartJob was last sent to its host
    done: bytes = b""                # its finished tasks, as its JM host last reported
    demand_at: float = -1.0          # when its JM last sent a JobDemand
    tokens_at: float = -1.0          # when the last token message was sent to its JM
    clones: int = 1                  # Dolly: attempts per task (1: not cloned) ...
    clone_cpu: float = 0.0           # ... and the CPUs of the clone budget granted for them ...
    clones_low: bool = False         # ... running at low priority (granted above tau)
    # its last JobView and what it showed that moves: milli-CPUs held, demand, tokens, admission
    # (views_of rebuilds it only on a change; kept here, these are compared as the entry's own
    # fields, where the view's would each be a lookup by name)
    last_view: Any = None
    last_view_held: int = -1
    last_view_demand: float = 0.0
    last_view_tokens: int = 0
    last_view_admitted: bool = False
    held_cell: HeldCell | None = None    # while admitted: its ClusterLoad cell

    def view(self, held: float) -> JobView:
        s = self.spec
        return JobView(self.job_id, self.queue, s.user, 1.0, s.priority, self.submitted_at, self.demand,
                       self.tokens, held, self.admitted)


def first_demand(spec: JobSpec) -> float:
    """CPUs a job can use when it starts: its first stages' tasks."""
    return float(sum(s.cpu * s.tasks for s in spec.stages if not s.depends_on))


def views_of(entries: Iterable[JobEntry], held: dict[int, HeldCell]) -> tuple[JobView, ...]:
    """Every job's view for an allocation round's snapshot (``held``: job -> the milli-CPUs its
    regular attempts run on; an admitted job's entry holds its cell). A round reads every job
    and few move between rounds, so a job's view is rebuilt only when what it shows moved
    (demand, tokens, admission, CPUs held; the rest is its spec's)."""
    # (typed, and the dict and list called on their objects: compiled, the entries' fields are
    # struct reads and the calls C calls)
    out: list[JobView] = []
    e: JobEntry
    c: HeldCell | None
    for e in entries:
        c = e.held_cell
        if c is None:
            c = held.get(e.job_id)      # (a waiting job: rarely any)
        m = c.milli if c is not None else 0
        v = e.last_view
        if (v is None or e.last_view_held != m or e.last_view_demand != e.demand or e.last_view_tokens != e.tokens
                or e.last_view_admitted != e.admitted):
            v = e.last_view = e.view(m / 1000.0)
            e.last_view_held = m
            e.last_view_demand, e.last_view_tokens, e.last_view_admitted = e.demand, e.tokens, e.admitted
        out.append(v)
    return tuple(out)
