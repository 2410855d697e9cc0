"""What an actor asks its runtime to do. Actors return these; they never act themselves."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Every effect and event spells out its __init__ (init=False): compiled (mypyc), a dataclass's
# generated __init__ stays a Python function (~1,000 instructions per object made; a
# 20,000-server run makes ~8 effects per task, 7% of its instructions), a written one is
# compiled, as the messages' are (apollo.core.messages).


@dataclass(slots=True, init=False)
class Send:
    to: str            # actor address: "rm", "pn:17", "jm:42", "client:..."
    msg: Any           # an apollo.core.messages message

    def __init__(self, to: str, msg: Any) -> None:
        self.to = to
        self.msg = msg


@dataclass(slots=True, init=False)
class SetTimer:
    delay: float
    key: Any           # fires back as Timer(key) to the same actor; re-setting a key replaces it

    def __init__(self, delay: float, key: Any) -> None:
        self.delay = delay
        self.key = key


@dataclass(slots=True, init=False)
class CancelTimer:
    key: Any

    def __init__(self, key: Any) -> None:
        self.key = key


@dataclass(slots=True, init=False)
class Launch:
    """PN only: start running a task. The runtime answers with a TaskExited event."""
    task: Any          # apollo.core.messages.TaskSpec
    locality: int      # apollo.core.cluster.NODE/RACK/REMOTE: how far its input is
    slowdown: float = 1.0   # its compute time runs this many times the modelled (apollo.core.stragglers)

    def __init__(self, task: Any, locality: int, slowdown: float = 1.0) -> None:
        self.task = task
        self.locality = locality
        self.slowdown = slowdown


@dataclass(slots=True, init=False)
class Kill:
    """PN only: stop a running task. No TaskExited follows."""
    task_key: tuple

    def __init__(self, task_key: tuple) -> None:
        self.task_key = task_key


@dataclass(slots=True, init=False)
class Spawn:
    """Create a new actor at ``address`` (the JM host spawns one JM per admitted job)."""
    address: str
    actor: Any

    def __init__(self, address: str, actor: Any) -> None:
        self.address = address
        self.actor = actor


@dataclass(slots=True, init=False)
class Persist:
    """Write to the actor's durable store (its runtime's, which survives the actor's restarts)
    before carrying out any effect after this one: the RM stores a job before acknowledging
    it. ``op`` and ``args``: see rm.store.JobStore.apply."""
    op: str
    args: tuple

    def __init__(self, op: str, args: tuple) -> None:
        self.op = op
        self.args = args


@dataclass(slots=True, init=False)
class Log:
    """A record for the run's report (apollo.tools.report) or the process log; ``kind`` names it."""
    kind: str
    data: tuple

    def __init__(self, kind: str, data: tuple) -> None:
        self.kind = kind
        self.data = data


# Events that runtimes deliver to actors besides messages.

@dataclass(slots=True, init=False)
class Timer:
    key: Any

    def __init__(self, key: Any) -> None:
        self.key = key


@dataclass(slots=True, init=False)
class Start:
    """Delivered once when an actor (re)starts; a restarted PN begins empty. ``stored``: what
    its durable store held at the start (rm.store.StoredJobs), None for an actor without one."""
    stored: Any = None

    def __init__(self, stored: Any = None) -> None:
        self.stored = stored


@dataclass(slots=True, init=False)
class TaskExited:
    task_key: tuple    # (job_id, task_index, attempt)
    ok: bool
    exit_code: int = 0
    detail: str = ""

    def __init__(self, task_key: tuple, ok: bool, exit_code: int = 0, detail: str = "") -> None:
        self.task_key = task_key
        self.ok = ok
        self.exit_code = exit_code
        self.detail = detail


# Connection events (docs/design.md, "Liveness"): an actor that lists address prefixes in its
# class's ``watches`` (the RM: "pn"; a PN: "rm") hears when the connection to an actor of one
# goes or comes back. Live, they are the transport's (a closed connection, or one silent past
# its keepalive timeout; a connection made again); simulated, the kernel's crashes, restarts and
# partitions, after the delay the live transport would take. They replace a periodic "nothing
# changed" report per server: liveness is a property of connections, not of messages.

@dataclass(slots=True, init=False)
class PeerLost:
    """The connection to the actor at ``address`` is gone: it crashed, or it is cut off."""
    address: str

    def __init__(self, address: str) -> None:
        self.address = address


@dataclass(slots=True, init=False)
class PeerBack:
    """The connection to the actor at ``address`` is up again (a restart, a healed partition,
    a connection made again): what was sent to it while it was away may be lost."""
    address: str

    def __init__(self, address: str) -> None:
        self.address = address
