"""What a JM is told: the knobs of every JM of a host (one JmConfig, shared), by concern.

- PlacementConfig: where tasks go (batches, lookahead, deferral, delay scheduling, matching);
- DispatchConfig: what goes out and when (opportunistic tasks, pipelining, polling, coalescing);
- AttemptsConfig: Apollo's corrections (duplicates, straggler copies) and Dolly's delay assignment;
- WatchdogConfig: attempts not heard of;
- and the host's own: addresses, its report to the RM, adoption.

The profile (jm.policies) is derived from ``policy`` and ``placement.delay`` whenever a
JmConfig is made, ``dataclasses.replace`` included: nothing is patched onto it afterwards.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from apollo.core.cluster import IoModel, Topology
from apollo.core.shapes import GRID, ShapeGrid

from . import estimate as est
from .policies import Profile, profile as find_profile
from .policies.delay import DelayScheduling


@dataclass(slots=True)
class PlacementConfig:
    max_batch: int = 2000
    # Apollo matches up to this many ready tasks per free token and dispatches the best
    # matches (least time lost first): with tokens freeing one at a time, this is what lets the
    # JM pick the task whose data sits on the server that just freed up, rather than the next
    # task in line wherever it can go. 1 = match only as many tasks as there are tokens.
    lookahead: int = 8
    # ...but a task passed over for this long goes first, in priority order (as in delay
    # scheduling): otherwise the task that never finds a good server ends last and holds up
    # its stage and everything downstream of it.
    patience_s: float = 2.0
    # Apollo defers a task rather than queue it where it would cost this much more than an idle
    # server reading its input remotely: the token is better spent on a server that is free,
    # and the task is matched again in the next batch or pass. <= 0: never defer.
    defer_s: float = 1.0
    max_batches_per_pass: int = 64
    max_rounds: int = 64
    per_rack: int = 2
    # Delay scheduling (a filter some profiles compose; ``delay``: add it to any profile): W1,
    # how long a job waits for a node-local slot, and W2, how long more for a rack-local one
    # (the HFS paper's Fig. 11 ran with W1 = 5 s; its sensitivity study shows 5 s is enough for
    # ~100% node locality).
    delay: bool = False
    delay_node_s: float = 5.0
    delay_rack_s: float = 5.0


@dataclass(slots=True)
class DispatchConfig:
    opportunistic: bool = True        # where the profile's gate allows: dispatch beyond tokens as opportunistic
    opportunistic_factor: float = 1.0  # allowance = factor * tokens
    # Pipelining (Apollo): a token may keep short tasks queued at a server behind the one it
    # runs, up to pipeline_s of expected work per token (at most max_pipeline tasks), so the
    # next task starts the moment the last one ends instead of a JM round trip later (Ray
    # pipelines tasks to a leased worker the same way). Tasks longer than pipeline_s get one
    # task per token, as before. <= 0: never.
    pipeline_s: float = 0.05
    max_pipeline: int = 32
    retry_s: float = 0.5              # a blocked job (or a polling profile) looks again this often
    # Coalesce scheduling passes: a status change arms a zero-delay "sched" timer instead of
    # scheduling inline, so every report that arrives before it fires (in the live runtime: the
    # rest of the same network read) shares one pass and one batch. Off by default (the
    # simulator and the unit tests see a pass per message); the live cluster turns it on.
    coalesce: bool = False


@dataclass(slots=True)
class AttemptsConfig:
    # Corrections (Apollo, section 3.4; jm/attempts.py). Duplicate scheduling: a queued first
    # attempt whose expected or elapsed wait is "significantly" above the decision's or its
    # stage's average (above dup_factor x it + dup_slack_s) is placed again, and a server that
    # would start it that much sooner gets a duplicate; the first of the two to start wins.
    dup_factor: float = 2.0
    dup_slack_s: float = 1.0
    # Straggler copies: a running first attempt not done straggler_after x its expected time
    # (+ slack) after its expected start is asked for its progress; if its time left is above
    # copy_factor x what a copy elsewhere would take (+ slack), a copy starts on a free token.
    copies: bool = True
    straggler_after: float = 2.0
    straggler_slack_s: float = 1.0
    copy_factor: float = 2.0
    # Dolly's delay assignment: a cloned stage's clones run on after the first wins (more copies
    # of its output), and the clones of the stage reading it wait for copies (jm/attempts.py).
    delay_assignment: bool = True


@dataclass(slots=True)
class WatchdogConfig:
    # Every policy: an attempt not heard of for 2 x (expected wait + runtime) plus this is
    # probed at its server; one the server does not know (a lost Dispatch, or a report lost
    # with a connection) is placed again. <= 0: never.
    probe_slack_s: float = 30.0


@dataclass(slots=True)
class JmConfig:
    topology: Topology
    policy: str = "apollo"           # a profile's name (jm.policies.PROFILES)
    io: IoModel = field(default_factory=IoModel)
    estimate: est.EstimateConfig = field(default_factory=est.EstimateConfig)
    grid: ShapeGrid = GRID
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    dispatch: DispatchConfig = field(default_factory=DispatchConfig)
    attempts: AttemptsConfig = field(default_factory=AttemptsConfig)
    watchdog: WatchdogConfig = field(default_factory=WatchdogConfig)
    rm: str = "rm"
    host: str = "jmhost"              # the address of the JM host carrying the JMs (PNs report there)
    host_report_s: float = 1.0        # the host tells the RM its jobs this often (HostReport)
    # A JM adopting a job (its host died) asks every PN for the job's attempts and waits this
    # long for the answers before it places anything.
    adopt_wait_s: float = 0.2
    profile: Profile = field(init=False)     # what ``policy`` (and ``placement.delay``) name

    def __post_init__(self) -> None:
        prof = find_profile(self.policy)
        if self.placement.delay:
            prof = prof.with_filter(DelayScheduling())
        self.profile = prof
