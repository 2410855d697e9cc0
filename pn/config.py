"""A Process Node's settings and the constants of its queues (pn.state uses them)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from apollo.core.cluster import IoModel
from apollo.core.lifecycle import TaskState
from apollo.core.shapes import GRID, ShapeGrid
from apollo.core.stragglers import NONE as NO_STRAGGLERS, StragglerModel

# How many ended attempts a PN remembers (between this many and twice as many): enough to answer
# a probe or an adopting JM about an attempt that ended just before (its report may have been
# lost) with its end instead of having it run again. Few: every entry is memory all 20,000 PNs
# of a large run keep (a dict of every attempt cost 10% of its speed); a report lost beyond
# these costs a re-run, never a wrong result.
ENDED_KEEP: Final = 4
# Jobs whose JM host a PN remembers before it forgets those it holds nothing of.
JOBS_KEPT: Final = 32
# Dispatches a PN remembers (the last 8-16) to drop a duplicated one, which comes within
# milliseconds of the first copy.
DISPATCHES_KEPT: Final = 8
INF: Final = float("inf")      # (a constant: compiled, float("inf") would parse the string each time)
# The lifecycle states a PN sets, as constants (compiled, TaskState.X is a class attribute lookup)
DISPATCHED: Final = TaskState.DISPATCHED
FAILED: Final = TaskState.FAILED
READY: Final = TaskState.READY
DONE: Final = TaskState.DONE
NEVER_S: Final = 1e9  # a wait that cannot happen (the shape exceeds the server); finite for the wire
ABOUT_NOW_S: Final = 1e-3   # the wait of a shape whose room should have freed by now but has not
# At a give-back's deadline, a queued first attempt that still would not start within this long
# goes back to its JM to be placed again (PnState._move_stuck).
MOVE_AFTER_S: Final = 0.5


@dataclass(slots=True)
class PnConfig:
    cores: float = 4.0
    mem_gb: float = 16.0
    grid: ShapeGrid = GRID           # the shapes its wait-time matrix covers (apollo.core.shapes)
    heartbeat_s: float = 1.0         # soonest re-report after the queue changed
    # Send a report once more this long after it, if nothing changed since (0: never). Only for
    # a network that loses messages while the connection stands (the simulator's loss model):
    # a report is sent only on change, so a lost one would stand until the next change. Live,
    # TCP loses nothing on a connection that stays up; one that breaks is PeerBack, and the
    # whole state again.
    repeat_after_s: float = 0.0
    # Status batches carry a reading planned now (True) or the last one planned, with its older
    # timestamp (False: no re-planning per report; the heartbeat within heartbeat_s is fresh).
    # A JM host counts everything it sent a server after that server's reading as still
    # queued there, so with short tasks an old reading makes a server that just drained look
    # busy; the live cluster, whose PNs have time to plan, asks for fresh readings.
    fresh_reports: bool = False
    # ...but a reading planned less than this long ago is fresh enough (planning walks the whole
    # queue; a deep queue of short tasks would re-plan on every report).
    replan_after_s: float = 0.005
    # A running task past its runtime estimate is expected to run on for this fraction of the
    # time it has run so far (runtimes are heavy-tailed: the longer a task has run, the longer
    # it is likely to go on); planning it as about to end would advertise a busy server as free.
    overrun_factor: float = 0.1
    revise_every_s: float = 5.0      # report a running task's planned end at most this often
    # A regular task still queued this long after it arrived is reported queued (a JM moves a
    # task only once it knows the task is stuck in a queue, never a running one); a task that
    # starts sooner reports only when it ends, like one that started on arrival. This keeps a
    # deep queue of short tasks from costing three reports each. Far below the JMs' move slack.
    queued_report_s: float = 1.0
    # Advertise running opportunistic tasks as occupying their server: a regular task sent
    # there would preempt one (wasting its work), so JMs should prefer a server that is free.
    # The queue itself still preempts them for any regular task that arrives. Their room is
    # advertised as free within opportunistic_room_s all the same: a server that is really free
    # reads better, but one holding only opportunistic work reads better than a queue behind
    # regular work (a queue owed its share would otherwise wait behind a long regular task while
    # opportunistic work holds a core it could take at once).
    advertise_opportunistic: bool = True
    opportunistic_room_s: float = 0.1
    rm: str = "rm"
    # How much slower than modelled this server's attempts run (apollo.core.stragglers), and the I/O
    # model its synthetic tasks read their input at: together what their progress is.
    stragglers: StragglerModel = NO_STRAGGLERS
    io: IoModel = field(default_factory=IoModel)
