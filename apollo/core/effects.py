"""What an actor asks its runtime to do. Actors return these; they never act themselves."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class Send:
    to: str            # actor address: "rm", "pn:17", "jm:42", "client:..."
    msg: Any           # an apollo.core.messages message


@dataclass(slots=True)
class SetTimer:
    delay: float
    key: Any           # fires back as Timer(key) to the same actor; re-setting a key replaces it


@dataclass(slots=True)
class CancelTimer:
    key: Any


@dataclass(slots=True)
class Launch:
    """PN only: start running a task. The runtime answers with a TaskExited event."""
    task: Any          # apollo.core.messages.TaskSpec
    locality: int      # apollo.core.cluster.NODE/RACK/REMOTE: how far its input is
    slowdown: float = 1.0   # its compute time runs this many times the modelled (apollo.core.stragglers)


@dataclass(slots=True)
class Kill:
    """PN only: stop a running task. No TaskExited follows."""
    task_key: tuple


@dataclass(slots=True)
class Spawn:
    """Create a new actor at ``address`` (the JM host spawns one JM per admitted job)."""
    address: str
    actor: Any


@dataclass(slots=True)
class Persist:
    """Write to the actor's durable store (its runtime's, which survives the actor's restarts)
    before carrying out any effect after this one: the RM stores a job before acknowledging
    it. ``op`` and ``args``: see rm.store.JobStore.apply."""
    op: str
    args: tuple


@dataclass(slots=True)
class Log:
    """A record for the run's report (apollo.tools.report) or the process log; ``kind`` names it."""
    kind: str
    data: tuple


# Events that runtimes deliver to actors besides messages.

@dataclass(slots=True)
class Timer:
    key: Any


@dataclass(slots=True)
class Start:
    """Delivered once when an actor (re)starts; a restarted PN begins empty. ``stored``: what
    its durable store held at the start (rm.store.StoredJobs), None for an actor without one."""
    stored: Any = None


@dataclass(slots=True)
class TaskExited:
    task_key: tuple    # (job_id, task_index, attempt)
    ok: bool
    exit_code: int = 0
    detail: str = ""


# Connection events (docs/design.md, "Liveness"): an actor that lists address prefixes in its
# class's ``watches`` (the RM: "pn"; a PN: "rm") hears when the connection to an actor of one
# goes or comes back. Live, they are the transport's (a closed connection, or one silent past
# its keepalive timeout; a connection made again); simulated, the kernel's crashes, restarts and
# partitions, after the delay the live transport would take. They replace a periodic "nothing
# changed" report per server: liveness is a property of connections, not of messages.

@dataclass(slots=True)
class PeerLost:
    """The connection to the actor at ``address`` is gone: it crashed, or it is cut off."""
    address: str


@dataclass(slots=True)
class PeerBack:
    """The connection to the actor at ``address`` is up again (a restart, a healed partition,
    a connection made again): what was sent to it while it was away may be lost."""
    address: str
