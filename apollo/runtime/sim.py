"""SimRuntime: a discrete-event kernel that carries out actors' effects.

An event queue (apollo.runtime.events) of ``(time, seq, kind, slot, item,
epoch)``; ``seq`` breaks ties, so a run is a pure function of its inputs and seed. Every message crosses a
modelled network (latency with jitter, optional loss) and, unless ``wire`` is
off, is packed to MessagePack bytes and decoded on arrival, so the protocol
is exercised exactly as on a live cluster. Nodes can crash and restart: a
crashed actor's messages, timers and running tasks vanish with it. Message
types an actor lists in ``batched`` reach it as one list per BATCH_WINDOW_S
(the live runtime delivers them one by one; the actor takes either).
A PN is a plain state object; its timers and its tasks' exits are queue
entries, never coroutines, which is what lets a run reach 20,000 servers.
An actor whose class lists address prefixes in ``watches`` hears PeerLost and
PeerBack of those addresses when the kernel crashes, restarts or cuts them off
(``crash``, ``restart``, ``add_partition``), as the live transport would tell it.
"""
from __future__ import annotations

import gc
import random
from dataclasses import dataclass
from itertools import islice
from typing import Any, Callable, Final

import numpy as np

from apollo.core.effects import (CancelTimer, Kill, Launch, Log, PeerBack, PeerLost, Persist, Send, SetTimer, Spawn,
                                 Start, TaskExited, Timer)
from apollo.core.messages import TaskSpec, pack, unpack

from .events import BY_TIME, EventQueue
from .hugepages import HeapPager

# Event kinds (Final: compiled, a constant, not a lookup in the module's globals per event)
DELIVER: Final = 0
TIMER: Final = 1
EXIT: Final = 2
CALL: Final = 3
BATCH: Final = 4
EXIT_FAILED: Final = 5
# An actor that lists message types in ``batched`` (the RM: heartbeats; a JM host: status
# batches) gets those that arrive within one window of this width together, as one list in
# arrival order, at the window's end: a busy server reads its sockets in batches, and an event
# per heartbeat was a fifth of a run (per status batch, -3.4% at 20,000 servers).
BATCH_WINDOW_S: Final = 0.001
# A run of at least this many slots has its heap moved onto huge pages (apollo.runtime.hugepages)
# when it starts and again every HUGEPAGES_EVERY events, as the heap grows. A pass copies only
# what is new (~2.5 ms per MB here) and reads /proc/self/maps (~1 ms); at 20,000 servers that
# is ~0.7 s of wall time between passes, and passes cost ~2.5% of a run in all, against -5%.
HUGEPAGES_MIN_ACTORS = 1000
HUGEPAGES_EVERY = 1 << 18
# How long a cut-off peer goes unnoticed: the live transport's keepalive timeout
# (apollo.runtime.transport.KEEPALIVE_TIMEOUT_S), after which both sides hear PeerLost. A crash is
# heard at once (the peer's kernel closes its connections).
KEEPALIVE_TIMEOUT_S = 3.0


@dataclass(slots=True)
class NetModel:
    latency_s: float = 0.0005     # one-way base latency
    jitter_s: float = 0.0002      # mean of an exponential extra delay (a large one reorders)
    loss: float = 0.0             # probability a message is dropped
    dup: float = 0.0              # probability a message is delivered twice (each copy its own delay)


@dataclass(slots=True)
class Partition:
    """From ``start`` to ``end`` no message crosses between ``inside`` and everyone else."""
    start: float
    end: float
    inside: frozenset


class _Slot:
    """One address of the simulated cluster: its actor, its incarnation, its timers and store. Queue
    entries point at the slot itself, so delivering costs no lookup by address."""
    __slots__ = ("address", "actor", "handle", "epoch", "up", "timers", "batched", "windows", "store", "watches")

    def __init__(self, address: str, actor: Any, check: bool = False) -> None:
        self.address = address
        self.store: Any = None            # its durable store (Persist effects)
        self.epoch = 0
        self.up = True
        self.timers: dict = {}            # key -> seq of the entry that fires it
        self.windows: dict = {}           # batch window -> [(arrival, seq, message, epoch)]
        self.set_actor(actor, check)

    def set_actor(self, actor: Any, check: bool = False) -> None:
        self.actor = actor
        # The class's function, called with the actor: a bound method per slot would be one
        # more cold object to touch per event (~2.5% of a 20,000-server run).
        self.handle = type(actor).handle
        if check and hasattr(actor, "validate"):
            self.handle = _checked(self.handle)
        self.batched = tuple(getattr(actor, "batched", ()))
        self.watches = tuple(getattr(actor, "watches", ()))     # prefixes it hears PeerLost/PeerBack of


def _checked(handle: Callable) -> Callable:
    """``handle``, then the actor's ``validate()`` (its invariants) after every event."""
    def checked(actor, event, now, rng):
        out = handle(actor, event, now, rng)
        actor.validate()
        return out
    return checked


def _no_task_model(address: str, task: Any, locality: int, slowdown: float) -> tuple[float, bool]:
    raise TypeError(f"{address} launched task {task.key} but this simulation has no task model")


class SimRuntime:
    def __init__(self, seed: int = 0, net: NetModel | None = None, wire: bool = True,
                 task_model: Callable | None = None, log_sink: Callable | None = None,
                 hugepages: bool | None = None, check: bool = False,
                 keepalive_timeout_s: float = KEEPALIVE_TIMEOUT_S) -> None:
        """``keepalive_timeout_s``: how long a partition lasts before the actors it separates hear
        PeerLost of each other. ``hugepages``: move the heap onto huge pages while running (None: when the run has
        at least HUGEPAGES_MIN_ACTORS slots). It changes speed only, never results. ``check``:
        call every actor's ``validate()`` after every event it handles (tests)."""
        self.check = check
        self.now = 0.0
        self.hugepages = hugepages
        self.pager: HeapPager | None = None
        # Entries: (time, seq, kind, slot, item, epoch). A timer's or a task exit's token is
        # its entry's own seq; ``epoch`` is the slot's incarnation when the entry was made.
        self.queue = EventQueue()
        self.seq = 0
        self.rng = np.random.default_rng(seed)           # handed to actors
        self._rand = random.Random(seed ^ 0x5EED)         # the runtime's own draws (message loss)
        # Network delays are drawn in blocks (one numpy call per 64k messages, not one each).
        self._delay_rng = np.random.default_rng(seed ^ 0xD1A7)
        self._delays: list[float] = []
        self._next_delay = 0
        self.net = net or NetModel()
        self.wire = wire
        self.task_model: Callable = task_model or _no_task_model
        self.log_sink = log_sink or (lambda kind, data, now: None)
        self.slots: dict[str, _Slot] = {}
        self.routes: dict[str, str] = {}                  # address prefix -> actor address ("jm" -> "jmhost")
        self._routed: dict[str, _Slot] = {}               # address prefix -> its route's slot
        # Running tasks' exits are queue entries; a killed task's entry is skipped when it comes
        # up (kills are rare: the set stays small and a plain exit costs no lookup).
        self.killed: set[tuple] = set()
        self.partitions: list[Partition] = []             # (add_partition: with its connection events)
        self.keepalive_timeout_s = keepalive_timeout_s
        self.events = 0
        self.messages = 0
        self.dropped = 0
        self.stopped = False

    # ---- wiring ----------------------------------------------------------------
    @property
    def actors(self) -> dict[str, Any]:
        return {a: n.actor for a, n in self.slots.items()}

    def add(self, address: str, actor: Any, start: bool = True, store: Any = None) -> None:
        """Host ``actor`` at ``address``; ``store``: its durable store (rm.store.JobStore), if it
        persists anything (it outlives the actor's crashes, as a disk would)."""
        slot = self.slots.get(address)
        if slot is None:
            self.slots[address] = slot = _Slot(address, actor, self.check)
        else:
            slot.set_actor(actor, self.check)
        if store is not None:
            slot.store = store
        self._routed.clear()
        if start:
            self._push(self.now, CALL, None, lambda: self._deliver_local(address, self._start_event(slot)))

    @staticmethod
    def _start_event(slot: _Slot) -> Start:
        return Start(slot.store.recovered() if slot.store is not None else None)

    def route_prefix(self, prefix: str, address: str) -> None:
        self.routes[prefix] = address
        self._routed.clear()

    def _routed_slot(self, to: str) -> "_Slot | None":
        """The slot of an address that has none of its own: its prefix route's ("jm:42" -> the
        JM host), cached by prefix (per address, the cache would grow by one entry per job)."""
        prefix = to.partition(":")[0]
        slot = self._routed.get(prefix)
        if slot is None:
            slot = self.slots.get(self.routes.get(prefix, ""))
            if slot is None:
                self.log_sink("warn", (f"message to unknown address {to!r}",), self.now)
                return None
            self._routed[prefix] = slot
        return slot

    def call_at(self, t: float, fn: Callable[[], None]) -> None:
        self._push(t, CALL, None, fn)

    def crash(self, address: str) -> None:
        """The slot dies: its state, timers, queued messages and running tasks are lost. Its
        watchers hear PeerLost at once (the live peer's kernel closes its connections; a cut
        one's keepalive would find out later, but a crash inside a partition is rare enough
        not to model that)."""
        slot = self.slots[address]
        slot.up = False
        slot.epoch += 1
        slot.timers.clear()
        self._push(self.now, CALL, None, lambda: self._tell_watchers(slot, PeerLost(address), across_cuts=True))

    def restart(self, address: str, actor: Any) -> None:
        """The slot comes back with ``actor``, which gets Start; its watchers that no partition
        cuts off hear PeerBack after it (its new connections; a cut-off one hears it when the
        partition ends)."""
        slot = self.slots[address]
        slot.up = True
        slot.epoch += 1
        slot.timers.clear()
        slot.set_actor(actor, self.check)
        self._deliver_local(address, self._start_event(slot))
        self._tell_watchers(slot, PeerBack(address), across_cuts=False)

    def add_partition(self, p: Partition) -> None:
        """Cut ``p.inside`` off from everyone else from ``p.start`` to ``p.end``. The actors on
        either side that watch one on the other hear PeerLost once the cut has lasted the
        keepalive timeout, and PeerBack when it ends, however short it was: live, what the cut
        held back would arrive late (TCP retransmits); here it was dropped, and PeerBack is
        what makes its sender say its state again."""
        self.partitions.append(p)
        if p.end - p.start > self.keepalive_timeout_s:
            self.call_at(p.start + self.keepalive_timeout_s, lambda: self._tell_across(p, PeerLost))
        self.call_at(p.end, lambda: self._tell_across(p, PeerBack))

    def _tell_watchers(self, slot: "_Slot", event: Any, across_cuts: bool) -> None:
        """``event`` (about ``slot``) to every up actor that watches its prefix."""
        prefix = slot.address.partition(":")[0]
        for w in list(self.slots.values()):
            if w is not slot and w.up and prefix in w.watches and \
                    (across_cuts or not self.partitions or not self._cut(w.address, slot)):
                self._deliver_local(w.address, event)

    def _tell_across(self, p: Partition, kind: Callable[[str], Any]) -> None:
        """``kind`` (PeerLost or PeerBack) to each up watcher on one side of ``p`` about each up
        actor it watches on the other, in address order (deterministic); PeerBack not where
        another partition still cuts them."""
        by_prefix: dict[str, list[_Slot]] = {}
        for a in sorted(self.slots):
            by_prefix.setdefault(a.partition(":")[0], []).append(self.slots[a])
        for a in sorted(self.slots):
            w = self.slots[a]
            if not w.watches:
                continue
            w_in = a in p.inside
            for prefix in w.watches:
                for x in by_prefix.get(prefix, ()):
                    if x is w or not x.up or not w.up or (x.address in p.inside) == w_in:
                        continue
                    if kind is PeerBack and self._cut(a, x):
                        continue
                    self._deliver_local(a, kind(x.address))

    def inject(self, to: str, msg: Any, delay: float = 0.0) -> None:
        """Send from outside any actor (a client, a test)."""
        self._send(to, msg, delay)

    def deliver_now(self, address: str, event: Any) -> None:
        """Hand ``event`` to the actor at ``address`` now, as if it came from within (a client's
        own decision to submit)."""
        self._deliver_local(address, event)

    # ---- the loop ----------------------------------------------------------------
    def _push(self, t: float, kind: int, slot: "_Slot | None", item: Any, epoch: int = 0) -> None:
        self.seq += 1
        self.queue.push((t, self.seq, kind, slot, item, epoch))

    def run(self, until: float = float("inf")) -> None:
        wire = self.wire
        killed = self.killed
        rng = self.rng
        events = 0
        # A run makes millions of short-lived objects (messages, effects, queue entries) and no
        # cyclic garbage (reference counting frees everything), but the cycle collector kept
        # scanning the ~100,000 entries waiting in the queue: ~15% of a run. Off while it runs.
        if self.stopped:
            return
        pager = self._pager()
        chunk = HUGEPAGES_EVERY if pager is not None else 1 << 62
        entries = self.queue.drain(until)
        gc_was = gc.isenabled()
        gc.disable()
        kind: int       # (typed: compiled, the kind and epoch are compared as C integers)
        epoch: int
        try:
            while True:
                if pager is not None:
                    pager.collapse()
                began = events
                for t, seq, kind, nd, item, epoch in islice(entries, chunk):
                    self.now = t
                    events += 1
                    if kind == CALL:
                        item()
                        if self.stopped:
                            break
                        continue
                    slot: _Slot = nd      # (typed: compiled, its fields are read as struct members)
                    if kind == DELIVER:
                        if slot.epoch != epoch or not slot.up:
                            self.dropped += 1           # the slot crashed (or is down) since
                        else:
                            self._apply(slot, slot.handle(slot.actor, unpack(item) if wire else item, t, rng))
                    elif kind == EXIT or kind == EXIT_FAILED:     # item: the task's TaskSpec
                        task: TaskSpec = item
                        if slot.epoch != epoch or not slot.up:
                            pass                        # the slot crashed under it
                        elif killed and (slot.address, task.key) in killed:
                            killed.discard((slot.address, task.key))
                        else:
                            ok = kind == EXIT
                            self._apply(slot, slot.handle(slot.actor, TaskExited(task.key, ok, 0 if ok else 1,
                                                                           "" if ok else "task failed"), t, rng))
                    elif kind == BATCH:
                        arrived = slot.windows.pop(item)
                        arrived.sort(key=BY_TIME)     # (appended in seq order: stable by time = by (time, seq))
                        msgs = [unpack(m) if wire else m for _, _, m, e in arrived if e == slot.epoch]
                        if msgs and slot.up:
                            self._apply(slot, slot.handle(slot.actor, msgs if len(msgs) > 1 else msgs[0], t, rng))
                    elif kind == TIMER:
                        timers = slot.timers
                        if timers.get(item) == seq and slot.epoch == epoch:   # not re-set or cancelled since
                            del timers[item]
                            self._apply(slot, slot.handle(slot.actor, Timer(item), t, rng))
                    if self.stopped:
                        break
                if self.stopped or events - began < chunk:
                    break
        finally:
            self.events += events
            if gc_was:
                gc.enable()

    def _pager(self) -> HeapPager | None:
        on = self.hugepages if self.hugepages is not None else len(self.slots) >= HUGEPAGES_MIN_ACTORS
        if on and self.pager is None:
            self.pager = HeapPager()
        pager = self.pager
        return pager if on and pager is not None and pager.available else None

    def _deliver_local(self, addr: str, event: Any) -> None:
        slot = self.slots[addr]
        if slot.up:
            self._apply(slot, slot.handle(slot.actor, event, self.now, self.rng))

    # ---- effects ------------------------------------------------------------------
    def _draw_delays(self) -> None:
        """Draw the next block of messages' network delays: base latency plus exponential jitter."""
        net = self.net
        jitter = self._delay_rng.exponential(net.jitter_s, 1 << 16) if net.jitter_s > 0 else np.zeros(1 << 16)
        self._delays = (jitter + net.latency_s).tolist()
        self._next_delay = 0

    def _cut(self, src: str, slot: "_Slot") -> bool:
        """Whether a partition now separates ``src`` from ``slot``."""
        now = self.now
        for p in self.partitions:
            if p.start <= now < p.end and ((src in p.inside) != (slot.address in p.inside)):
                return True
        return False

    def _send(self, to: str, msg: Any, extra_delay: float = 0.0, src: str = "") -> None:
        net = self.net
        if net.loss and self._rand.random() < net.loss:
            self.dropped += 1
            return
        slot = self.slots.get(to) or self._routed_slot(to)
        if slot is None:
            return
        if self.partitions and self._cut(src, slot):
            self.dropped += 1
            return
        # (twice: a duplicated message, each copy with its own delay; the body is inline, as this
        # is the hottest path of a run)
        copies = 2 if net.dup and self._rand.random() < net.dup else 1
        while copies:
            copies -= 1
            self.messages += 1
            self.seq += 1
            i = self._next_delay             # this message's network delay: the next drawn
            if i >= len(self._delays):
                self._draw_delays()
                i = 0
            self._next_delay = i + 1
            at = self.now + self._delays[i] + extra_delay
            if slot.batched and type(msg) in slot.batched:
                w = int(at * (1.0 / BATCH_WINDOW_S))
                arrived = slot.windows.get(w)
                if arrived is None:
                    slot.windows[w] = arrived = []
                    self.queue.push((max((w + 1) * BATCH_WINDOW_S, at), self.seq, BATCH, slot, w, 0))
                arrived.append((at, self.seq, pack(msg) if self.wire else msg, slot.epoch))
                continue
            self.queue.push((at, self.seq, DELIVER, slot, pack(msg) if self.wire else msg, slot.epoch))

    def _apply(self, slot: _Slot, effects: list) -> None:
        if not effects:
            return
        now = self.now
        queue = self.queue
        epoch = slot.epoch
        for e in effects:
            te = type(e)
            # (each branch names its effect with its type: compiled, the fields are then read as
            # struct members rather than looked up by name)
            if te is Send:
                send: Send = e
                self._send(send.to, send.msg, 0.0, slot.address)
            elif te is SetTimer:
                timer: SetTimer = e
                self.seq = seq = self.seq + 1
                slot.timers[timer.key] = seq
                queue.push((now + timer.delay, seq, TIMER, slot, timer.key, epoch))
            elif te is Log:
                log: Log = e
                self.log_sink(log.kind, log.data, now)
            elif te is Launch:
                launch: Launch = e
                dur, ok = self.task_model(slot.address, launch.task, launch.locality, launch.slowdown)
                self.seq = seq = self.seq + 1
                # The exit event is made when it fires: ~50,000 tasks run at once at 20,000
                # servers, and an object each kept meanwhile is memory every event pays for.
                queue.push((now + dur, seq, EXIT if ok else EXIT_FAILED, slot, launch.task, epoch))
            elif te is Kill:
                self.killed.add((slot.address, e.task_key))
            elif te is CancelTimer:
                slot.timers.pop(e.key, None)
            elif te is Persist:
                if slot.store is None:
                    raise TypeError(f"actor {slot.address} asked to persist {e.op!r} but has no store")
                slot.store.apply(e)
            elif te is Spawn:
                self.add(e.address, e.actor)
            else:
                raise TypeError(f"actor {slot.address} returned an unknown effect {e!r}")
