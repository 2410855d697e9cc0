"""LiveRuntime: the actors on asyncio (uvloop when available) and TCP.

One process hosts many actors and carries out the same effects as
SimRuntime:

- Send: to an actor of this process (or a local prefix route, "jm" ->
  "jmhost") the message is delivered with ``loop.call_soon``, never
  re-entrantly; any other address goes to the transport Endpoint, which routes
  it to the process hosting it.
- SetTimer / CancelTimer: ``loop.call_later``, keyed per (actor, key);
  re-setting a key replaces the timer.
- Launch / Kill: the Executor (synthetic timer or subprocess); the PN gets
  TaskExited back, never after a Kill. An actor whose class sets
  ``batch_exits = True`` (PnState) gets the exits of one loop iteration
  together, as one list, on the next iteration (one queue pass and one status
  batch for them all), every such actor of the process in one callback whose
  sends go out in one write per peer; others get each TaskExited at once.
- Spawn: adds an actor. Log: ``log_sink(kind, data, now)``, by default the
  python logger "apollo.live".

An actor whose class lists address prefixes in ``watches`` (the RM: "pn"; a PN:
"rm") gets PeerLost(address) when the transport loses the last connection to
the process hosting that address (closed, or silent past the keepalive
timeout), and PeerBack(address) when a connection brings it back; an actor of
this process taken away (``remove``) and added again is the same to its
neighbours here. ``keep(address)``: stay connected to the process hosting it.

``now`` is ``loop.time()`` minus the runtime's start (or a shared ``epoch``
given by the caller, so that several runtimes on one host read the same
clock). An actor that raises has that one event dropped, with the traceback
logged; the process keeps going.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import os
import tempfile
from typing import Any, Callable

import numpy as np

from apollo.core.cluster import IoModel
from apollo.core.effects import (CancelTimer, Kill, Launch, Log, PeerBack, PeerLost, Persist, Send, SetTimer, Spawn,
                                 Start, Timer)
from apollo.core.messages import pack, unpack

from .executor import Executor
from .transport import MAX_FRAME, Endpoint

log = logging.getLogger("apollo.live")


def _default_sink(kind: str, data: tuple, now: float) -> None:
    if kind in ("warn", "error"):
        log.warning("[%.3f] %s %s", now, kind, " ".join(map(str, data)))
    elif log.isEnabledFor(logging.DEBUG):
        log.debug("[%.3f] %s %r", now, kind, data)


class LiveRuntime:
    """Hosts actors in this process and connects them to the rest of the cluster.

    secret: the cluster's shared secret (the transport handshake proves it).
    seed: for the one numpy Generator handed to actors; None draws it from os.urandom.
    log_sink: ``(kind, data, now)``, e.g. an apollo.core.records.Recorder; default: python logging.
    workdir: where command tasks write ``<job>-<task>-<attempt>.out/.err`` (default: a temp dir).
    io, speedup: the synthetic-task time model (see apollo.runtime.executor).
    epoch: the time origin of ``now``, a ``time.monotonic()`` reading (uvloop's and asyncio's
        ``loop.time()`` use the same clock). Give every process of a cluster on one host the
        same value: the actors compare timestamps taken in different processes.
    wire_local: pack and unpack messages between actors of this process too (as SimRuntime's
        ``wire`` does); off by default, since local delivery needs no copy.
    """

    def __init__(self, secret: bytes, seed: int | None = None, log_sink: Callable | None = None,
                 workdir: str | os.PathLike | None = None, *, io: IoModel | None = None,
                 speedup: float = 1.0, epoch: float | None = None, wire_local: bool = False,
                 listen_host: str = "127.0.0.1", max_frame: int = MAX_FRAME) -> None:
        seed = int.from_bytes(os.urandom(8), "little") if seed is None else seed
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.log_sink = log_sink or _default_sink
        self.workdir = workdir if workdir is not None else tempfile.mkdtemp(prefix="apollo-live-")
        self.executor = Executor(self.workdir, io=io, speedup=speedup)
        self.epoch = epoch
        self.wire_local = wire_local         # pack/unpack local messages too, as the simulator does
        self.actors: dict[str, Any] = {}
        self.stores: dict[str, Any] = {}     # address -> its durable store (Persist effects)
        self.routes: dict[str, str] = {}     # local prefix routes: "jm" -> "jmhost"
        self.timers: dict[tuple, asyncio.TimerHandle] = {}
        self._exits: dict[str, tuple] = {}   # batching actors: (actor, [TaskExited]) to deliver
        self._exits_armed = False            # a callback to deliver them is scheduled
        self.endpoint = Endpoint(secret, [], self._on_remote, listen_host=listen_host, max_frame=max_frame)
        self.endpoint.on_peer_lost = self._peer_lost
        self.endpoint.on_peer_back = self._peer_back
        self._removed: set[str] = set()      # local actors taken away (their return is PeerBack)
        self._loop: Any = None              # (the running loop, from start())
        self._t0 = 0.0
        self._early: list[tuple] = []        # work asked for before start()
        self.started = False
        self.stopped = False
        # counters
        self.events = 0
        self.errors = 0
        self.local_messages = 0
        self.unknown = 0

    # ---- wiring -------------------------------------------------------------------------
    @property
    def address(self) -> str:
        return self.endpoint.address

    @property
    def now(self) -> float:
        return self._loop.time() - self._t0 if self._loop is not None else 0.0

    def add(self, address: str, actor: Any, start: bool = True, store: Any = None) -> None:
        """Host ``actor`` at ``address``; it gets Start (asynchronously) unless start=False, with
        what ``store`` (its durable store, rm.store.JobStore, if it persists anything) holds."""
        old = self.actors.get(address)
        if old is not None and old is not actor:
            self._forget(address)
        self.actors[address] = actor
        if store is not None:
            self.stores[address] = store
        self.endpoint.host(address)
        if start:
            store = self.stores.get(address)
            self._soon(self._deliver_to, address, actor, Start(store.recovered() if store is not None else None))
        if address in self._removed:
            self._removed.discard(address)
            self._soon(self._tell, [address], PeerBack)

    def remove(self, address: str) -> None:
        """Take an actor away (a crash, as far as the cluster can tell): its timers and tasks go too."""
        if self.actors.pop(address, None) is not None:
            self._forget(address)
            self._removed.add(address)
            self._soon(self._tell, [address], PeerLost)

    def route_prefix(self, prefix: str, address: str) -> None:
        """Messages to "prefix:..." go to the local actor ``address`` (the JM host carries "jm:*")."""
        self.routes[prefix] = address
        self.endpoint.host(prefix)

    def add_route(self, address_or_prefix: str, hostport: str) -> None:
        """A static route to another process: where to connect for this address or prefix."""
        self.endpoint.add_route(address_or_prefix, hostport)

    def keep(self, address: str) -> None:
        """Stay connected to the process hosting ``address`` (its route's), dialling it again
        while it is away: a PN process keeps its RM's (Endpoint.keep)."""
        self.endpoint.keep(address)

    def inject(self, to: str, msg: Any) -> None:
        """Send from outside any actor (a client, a test)."""
        if self._loop is None:
            self._early.append((self._send, to, msg))
        else:
            self._send(to, msg)

    # ---- life cycle ------------------------------------------------------------------------
    async def start(self, listen_port: int | None = 0) -> None:
        self._loop = asyncio.get_running_loop()
        self._t0 = self._loop.time() if self.epoch is None else self.epoch
        self.endpoint.listen_port = listen_port
        await self.endpoint.start()
        self.started = True
        early, self._early = self._early, []
        for fn, *args in early:                 # Starts and injections, in the order asked
            self._loop.call_soon(fn, *args)

    async def stop(self) -> None:
        self.stopped = True
        for h in self.timers.values():
            h.cancel()
        self.timers.clear()
        await self.executor.close()
        await self.endpoint.close()

    def _soon(self, fn: Callable, *args: Any) -> None:
        if self._loop is None:
            self._early.append((fn, *args))
        else:
            self._loop.call_soon(fn, *args)

    def _forget(self, address: str) -> None:
        self._exits.pop(address, None)
        for k in [k for k in self.timers if k[0] == address]:
            self.timers.pop(k).cancel()
        self.executor.kill_owner(address)

    # ---- delivery -------------------------------------------------------------------------
    def _local(self, to: str) -> str | None:
        if to in self.actors:
            return to
        r = self.routes.get(to.split(":", 1)[0])
        return r if r is not None and r in self.actors else None

    def _send(self, to: str, msg: Any) -> None:
        dst = self._local(to)
        if dst is None:
            self.endpoint.send(to, msg)
            return
        if self.wire_local:
            msg = unpack(pack(msg))
        self.local_messages += 1
        self._loop.call_soon(self._deliver, dst, msg)

    def _on_remote(self, to: str, msg: Any) -> None:
        dst = self._local(to)
        if dst is None:
            self.unknown += 1
            self.log_sink("warn", (f"message to unknown address {to!r} ({type(msg).__name__}) dropped",),
                          self.now)
            return
        self._deliver(dst, msg)

    def _deliver(self, addr: str, event: Any) -> None:
        actor = self.actors.get(addr)
        if actor is None:
            self.unknown += 1
            return
        self._deliver_to(addr, actor, event)

    def _deliver_to(self, addr: str, actor: Any, event: Any) -> None:
        handle = actor.handle       # (bound first: after the identity test mypy takes actor for None)
        if self.stopped or self.actors.get(addr) is not actor:
            return                              # removed or replaced since this was scheduled
        now = self._loop.time() - self._t0
        self.events += 1
        try:
            effects = handle(event, now, self.rng)
        except Exception:
            self.errors += 1
            log.exception("actor %s raised on %s at t=%.3f; the event is dropped",
                          addr, type(event).__name__, now)
            return
        if effects:
            self._apply(addr, actor, effects, now)

    def _exited(self, addr: str, actor: Any, ev: Any) -> None:
        """A task of ``addr`` ended. An actor with ``batch_exits`` gets every exit of this loop
        iteration together, as one list event (one queue pass, one status batch), on the next
        iteration; any other actor gets each TaskExited now. (One callback delivers the
        iteration's exits to every such actor and writes what they sent once: tasks that end
        together, as a burst dispatched together does, cost one write per connection, not one
        per actor.)"""
        if not getattr(actor, "batch_exits", False):
            self._deliver_to(addr, actor, ev)
            return
        pending = self._exits.get(addr)
        if pending is None or pending[0] is not actor:
            self._exits[addr] = (actor, [ev])
            if not self._exits_armed:
                self._exits_armed = True
                self._loop.call_soon(self._deliver_exits)
        else:
            pending[1].append(ev)

    def _deliver_exits(self) -> None:
        self._exits_armed = False
        exits = self._exits
        self.endpoint.hold()
        try:
            while exits:
                # (each actor's are taken off only as they go: until then a Kill still drops one)
                addr = next(iter(exits))
                actor, q = exits.pop(addr)
                if q:                                   # (_deliver_to skips an actor removed since)
                    self._deliver_to(addr, actor, q if len(q) > 1 else q[0])
        finally:
            self.endpoint.flush_now()

    def _drop_exit(self, addr: str, task_key: tuple) -> None:
        """A Kill: an exit of that attempt still waiting for delivery is dropped (no TaskExited
        follows a Kill)."""
        pending = self._exits.get(addr)
        if pending:
            key = tuple(task_key)
            pending[1][:] = [ev for ev in pending[1] if tuple(ev.task_key) != key]

    def _fire(self, addr: str, actor: Any, key: Any) -> None:
        self.timers.pop((addr, key), None)
        self.endpoint.hold()
        try:
            self._deliver_to(addr, actor, Timer(key))
        finally:
            self.endpoint.flush_now()

    def _peer_lost(self, addresses: list[str]) -> None:
        shown = ", ".join(addresses[:8]) + (f" and {len(addresses) - 8} more" if len(addresses) > 8 else "")
        self.log_sink("peer_lost", (shown,), self.now)
        self._tell(addresses, PeerLost)

    def _peer_back(self, addresses: list[str]) -> None:
        self._tell(addresses, PeerBack)

    def _tell(self, addresses: list[str], kind: Callable[[str], Any]) -> None:
        """``kind(address)`` to every local actor watching that address's prefix, now (PeerBack
        must reach them before the new connection's first data frame does)."""
        if self.stopped:
            return
        watchers = [(a, act) for a, act in self.actors.items() if getattr(act, "watches", ())]
        for address in addresses:
            prefix = address.partition(":")[0]
            for a, act in watchers:
                if prefix in act.watches and a != address:
                    self._deliver_to(a, act, kind(address))

    # ---- effects ---------------------------------------------------------------------------
    def _apply(self, addr: str, actor: Any, effects: list, now: float) -> None:
        loop = self._loop
        sent = False
        for i, e in enumerate(effects):
            te = type(e)
            try:
                if te is Send:
                    self._send(e.to, e.msg)
                    sent = True
                elif te is SetTimer:
                    k = (addr, e.key)
                    old = self.timers.pop(k, None)
                    if old is not None:
                        old.cancel()
                    self.timers[k] = loop.call_later(max(0.0, e.delay), self._fire, addr, actor, e.key)
                elif te is CancelTimer:
                    old = self.timers.pop((addr, e.key), None)
                    if old is not None:
                        old.cancel()
                elif te is Log:
                    self.log_sink(e.kind, e.data, now)
                elif te is Launch:
                    self.executor.launch(addr, e.task, e.locality,
                                         functools.partial(self._exited, addr, actor), e.slowdown)
                elif te is Kill:
                    self.executor.kill(addr, e.task_key)
                    if self._exits:
                        self._drop_exit(addr, e.task_key)
                elif te is Persist:
                    store = self.stores.get(addr)
                    if store is None:
                        raise TypeError(f"asked to persist {e.op!r} but has no store")
                    if sent:        # (what was sent before the write goes out before it blocks)
                        self.endpoint.write_queued()
                        sent = False
                    store.apply(e)
                elif te is Spawn:
                    self.add(e.address, e.actor)
                else:
                    raise TypeError(f"unknown effect {e!r}")
            except Exception:
                self.errors += 1
                log.exception("actor %s: effect %s failed at t=%.3f", addr, te.__name__, now)
                if te is Persist:
                    # What follows may rely on it being stored (an acknowledgement): not done.
                    log.error("actor %s: %d effects after the failed write dropped", addr, len(effects) - i - 1)
                    break


def run(main_coro) -> Any:
    """Run ``main_coro`` to completion on a uvloop event loop (asyncio's own if uvloop is absent).

    The loop is made for this call only; the process-wide event loop policy is left alone.
    """
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main_coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main_coro)


__all__ = ["LiveRuntime", "run"]
