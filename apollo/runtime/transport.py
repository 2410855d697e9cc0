"""The live cluster's wire: length-prefixed MessagePack frames over TCP.

Frame
    4-byte big-endian payload length, then the msgpack payload. A declared
    length above ``max_frame`` closes the connection before any of the payload
    is read.

Handshake (both directions, before anything else)
    Each side sends, as its first frame::

        ["hello", PROTOCOL_VERSION, nonce (16 random bytes), [hosted addresses or prefixes],
         listen address "host:port" or ""]

    On the other side's hello, each side answers its nonce with::

        ["proof", HMAC-SHA256(secret, their_nonce + my_nonce)]

    and checks the proof it receives against HMAC-SHA256(secret, my_nonce +
    their_nonce) with hmac.compare_digest. A hello that echoes one of this
    endpoint's own open nonces is refused (it would let a peer reflect our own
    proof back at us). A wrong version, a wrong proof, a malformed hello or any
    other frame before the handshake completes is refused: the refusing side
    sends ``["refused", reason]`` (best effort), logs the reason on the
    ``apollo.transport`` logger and closes that connection only.

Data frame
    ``[to_address, code, field1, ...]``: the destination actor's address
    followed by ``apollo.core.messages.encode(msg)``. A frame that does not decode
    (bad msgpack, WireError) is logged and closes that connection only.
    ``["", "hosts", [addresses]]`` (empty destination) announces addresses a
    peer started hosting after its hello; ``["", "ping"]`` is a keepalive.

Liveness (docs/design.md, "Liveness")
    A connection on which nothing was written for KEEPALIVE_S gets a ping; one on
    which nothing was heard for KEEPALIVE_TIMEOUT_S is closed (a machine that
    vanished, a cut network: no FIN ever comes). A closed connection is
    ``on_peer_lost(addresses)`` for the addresses no other connection hosts; a
    new one, ``on_peer_back(addresses)`` for those it brings (before any of its
    data frames is handled). Addresses given to ``keep`` are dialled again,
    every KEEPALIVE_S, while their process is not connected: a quiet process
    (PNs that report only on change) must still come back to a restarted RM.

Sending
    ``Endpoint.send`` packs with one reused msgpack.Packer into the connection's
    pending buffer; each connection flushes once per loop iteration
    (``loop.call_soon``) with a single ``transport.write``. There is one
    connection per pair of processes: a peer that connected to us is reached
    back over that connection, both for the addresses in its hello and for its
    listen address.

Routing (``Endpoint.send``): the exact address, then the prefix before ':' (so
"jm:42" goes where "jm" goes); at each step a live peer hosting it wins over a
static route (``add_route``).
"""
from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
import struct
import time
from typing import Any, Callable

import msgpack

from apollo.core.messages import PROTOCOL_VERSION, WireError, decode, encode

log = logging.getLogger("apollo.transport")

MAX_FRAME = 16 * 1024 * 1024
NONCE_BYTES = 16
_LEN = struct.Struct(">I")
_pack_len = _LEN.pack
_unpack_len = _LEN.unpack_from

# connection states
HELLO, PROOF, READY, CLOSED = 0, 1, 2, 3
# A ping on a connection idle this long; a connection silent this long is lost (the peers'
# liveness: a PN process's servers are dead to the RM then, apollo.runtime.sim models the same).
KEEPALIVE_S = 1.0
KEEPALIVE_TIMEOUT_S = 3.0
_PING = msgpack.packb(["", "ping"], use_bin_type=True)


_UNREACHABLE: Any = object()   # _resolve: a route's peer failed to connect just now (not a _Conn: -> Any)


def _split_hostport(hp: str) -> tuple[str, int]:
    host, sep, port = hp.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected 'host:port', got {hp!r}")
    return host, int(port)


def _describe(v: Any) -> str:
    """A short, safe description of an unexpected frame for a log line."""
    if type(v) is list and len(v) >= 2 and type(v[0]) is str and type(v[1]) is int:
        return f"a data frame (to {v[0][:40]!r}, code {v[1]})"
    if type(v) is list:
        head = v[0] if v else None
        return f"an array of {len(v)} starting with {str(head)[:40]!r}"
    return f"a {type(v).__name__}"


class _Conn(asyncio.Protocol):
    """One TCP connection to a peer process, either direction."""

    def __init__(self, endpoint: "Endpoint", target: str = "") -> None:
        self.endpoint = endpoint
        self.target = target                    # outbound: the "host:port" we dialled
        self.outbound = bool(target)
        self.state = HELLO
        self.transport: Any = None           # (an asyncio.Transport once connected)
        self.my_nonce = os.urandom(NONCE_BYTES)
        self.their_nonce = b""
        self.peer_hosted: list[str] = []
        self.peer_listen = ""
        self.peername = target or "?"
        self.buf = bytearray()
        self.out = bytearray()                  # pending data frames, flushed once per iteration
        self.pending = 0                        # frames in ``out``
        self.flush_scheduled = False
        self.paused = False
        self.retired = False                    # a duplicate: read from, never written to
        self.ready_at = 0.0
        self.heard = False                      # something read since the last keepalive tick
        self.wrote = False                      # something written since the last keepalive tick
        self.silent_ticks = 0                   # keepalive ticks in a row with nothing heard
        self._hs_timer: asyncio.TimerHandle | None = None
        endpoint._nonces.add(self.my_nonce)

    def __repr__(self) -> str:
        return f"<peer {self.describe()}>"

    def describe(self) -> str:
        who = self.peer_listen or self.target
        return f"{self.peername}" + (f" (listening on {who})" if who and who != self.peername else "")

    # ---- asyncio.Protocol ----------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        pn = transport.get_extra_info("peername")
        if pn:
            self.peername = f"{pn[0]}:{pn[1]}"
        endpoint = self.endpoint
        endpoint._conns.add(self)
        self._hs_timer = endpoint._loop.call_later(endpoint.handshake_timeout_s, self._handshake_timeout)
        self._write_now(["hello", PROTOCOL_VERSION, self.my_nonce, list(endpoint.hosted), endpoint.address])

    def connection_lost(self, exc: Exception | None) -> None:
        was = self.state
        self.state = CLOSED
        if self._hs_timer is not None:
            self._hs_timer.cancel()
            self._hs_timer = None
        self.endpoint._lost(self, was, exc)

    def pause_writing(self) -> None:
        self.paused = True              # keep collecting; the next flush after resume is bigger

    def resume_writing(self) -> None:
        self.paused = False
        self._schedule_flush()

    def data_received(self, data: bytes) -> None:
        if self.state == CLOSED:
            return
        self.heard = True
        endpoint = self.endpoint
        endpoint.hold()                     # the sends of this read go out together at its end
        try:
            self._read(data)
        finally:
            endpoint.flush_now()            # what handling these frames sent goes out now

    def _read(self, data: bytes) -> None:
        endpoint = self.endpoint
        if self.buf:
            self.buf += data
            src: bytes | bytearray = self.buf
        else:
            src = data                  # the common case: parse the chunk in place, no copy
        n = len(src)
        pos = 0
        payload: Any = None
        limit = endpoint.max_frame if self.state == READY else endpoint.max_handshake_frame
        mv = memoryview(src)
        unpackb = msgpack.unpackb
        while n - pos >= 4:
            size = _unpack_len(src, pos)[0]
            if size > limit:
                endpoint.bad_frames += 1
                self._close(f"declared frame length {size} exceeds the maximum {limit}")
                return
            end = pos + 4 + size
            if end > n:
                break
            payload = mv[pos + 4:end]
            pos = end
            try:
                v = unpackb(payload, raw=False, strict_map_key=True)
            except Exception as e:  # msgpack raises several unrelated types
                endpoint.bad_frames += 1
                self._close(f"undecodable msgpack frame ({type(e).__name__}: {e})")
                return
            if self.state == READY:
                self._on_data(v)
            else:
                self._on_handshake(v)
            if self.state == CLOSED:
                return
            if self.state == READY:
                limit = endpoint.max_frame
        payload = None
        mv.release()
        endpoint.bytes_in += pos
        if src is self.buf:
            if pos:
                self.buf = self.buf[pos:]       # a fresh object: no resize under live views
        elif pos < n:
            self.buf = bytearray(data[pos:])

    # ---- frames --------------------------------------------------------------------
    def _on_data(self, v: Any) -> None:
        endpoint = self.endpoint
        if type(v) is not list or len(v) < 2 or type(v[0]) is not str:
            if type(v) is list and len(v) == 2 and v[0] == "refused" and type(v[1]) is str:
                endpoint.refused_by_peer += 1
                self._close(f"peer refused our handshake: {v[1][:200]}")
                endpoint._handshake_failed(self, v[1][:200], True)
                return
            endpoint.bad_frames += 1
            self._close(f"bad data frame: expected [to, code, ...], got {_describe(v)}")
            return
        to = v[0]
        if not to:
            self._on_control(v)
            return
        try:
            msg = decode(v[1:])
        except WireError as e:
            endpoint.bad_frames += 1
            self._close(f"bad data frame to {to[:60]!r}: {e}")
            return
        endpoint.frames_in += 1
        try:
            endpoint.on_message(to, msg)
        except Exception:
            log.exception("on_message failed for a %s to %r from %s", type(msg).__name__, to, self.describe())

    def _on_control(self, v: list) -> None:
        endpoint = self.endpoint
        if len(v) == 2 and v[1] == "ping":
            return                              # (a keepalive: data_received noted it)
        if len(v) == 3 and v[1] == "hosts" and type(v[2]) is list and all(type(a) is str and a for a in v[2]):
            self.peer_hosted.extend(v[2])
            via = endpoint._by_peer.get(self.peer_listen, self) if self.retired else self
            new = [a for a in v[2] if a not in endpoint._learned]
            for a in v[2]:
                endpoint._learned[a] = via
            endpoint._back(new)
            return
        endpoint.bad_frames += 1
        self._close(f"bad control frame: {_describe(v[1:])}")

    def _on_handshake(self, v: Any) -> None:
        endpoint = self.endpoint
        if type(v) is list and len(v) == 2 and v[0] == "refused" and type(v[1]) is str:
            endpoint.refused_by_peer += 1
            self._close(f"peer refused our handshake: {v[1][:200]}")
            endpoint._handshake_failed(self, v[1][:200], True)
            return
        if self.state == HELLO:
            if type(v) is not list or not v or v[0] != "hello":
                return self._refuse(f"expected a hello, got {_describe(v)}")
            if len(v) != 5:
                return self._refuse(f"malformed hello: {len(v)} fields, expected 5")
            _, version, nonce, hosted, listen = v
            if type(version) is not int or version != PROTOCOL_VERSION:
                return self._refuse(f"protocol version {version!r}, this endpoint speaks {PROTOCOL_VERSION}")
            if type(nonce) is not bytes or len(nonce) != NONCE_BYTES:
                return self._refuse("malformed hello: the nonce must be 16 bytes")
            if type(hosted) is not list or not all(type(a) is str and a for a in hosted):
                return self._refuse("malformed hello: hosted addresses must be non-empty strings")
            if type(listen) is not str:
                return self._refuse("malformed hello: the listen address must be a string")
            if listen:
                try:
                    _split_hostport(listen)
                except ValueError as e:
                    return self._refuse(f"malformed hello: {e}")
            if nonce in endpoint._nonces:
                return self._refuse("hello echoes one of our own nonces")
            self.their_nonce = nonce
            self.peer_hosted = list(hosted)
            self.peer_listen = listen
            self.state = PROOF
            self._write_now(["proof", hmac.new(endpoint._secret, nonce + self.my_nonce, hashlib.sha256).digest()])
            return
        # state == PROOF
        if type(v) is not list or len(v) != 2 or v[0] != "proof" or type(v[1]) is not bytes:
            return self._refuse(f"expected a proof, got {_describe(v)}")
        want = hmac.new(endpoint._secret, self.my_nonce + self.their_nonce, hashlib.sha256).digest()
        if not hmac.compare_digest(want, v[1]):
            return self._refuse("wrong proof: the peer does not hold the cluster secret")
        self.state = READY
        if self._hs_timer is not None:
            self._hs_timer.cancel()
            self._hs_timer = None
        endpoint._ready(self)
        self._schedule_flush()

    def _handshake_timeout(self) -> None:
        self._hs_timer = None
        if self.state in (HELLO, PROOF):
            self._refuse(f"no handshake within {self.endpoint.handshake_timeout_s}s")

    def _refuse(self, reason: str) -> None:
        self.endpoint.refused_handshakes += 1
        if self.transport is not None and not self.transport.is_closing():
            self._write_now(["refused", reason])
        self._close(f"handshake refused: {reason}")
        self.endpoint._handshake_failed(self, reason, False)

    def _close(self, reason: str) -> None:
        if self.state == CLOSED:
            return
        self.state = CLOSED
        log.warning("closing connection with %s: %s", self.describe(), reason)
        if self.transport is not None:
            self.transport.close()

    def _close_quietly(self) -> None:
        if self.state != CLOSED:
            self.state = CLOSED
            if self.transport is not None:
                self.transport.close()

    # ---- writing -------------------------------------------------------------------
    def _write_now(self, obj: Any) -> None:
        p = msgpack.packb(obj, use_bin_type=True)
        self.transport.write(_pack_len(len(p)) + p)

    def _schedule_flush(self) -> None:
        if not self.flush_scheduled and self.out and self.state == READY:
            self.flush_scheduled = True
            self.endpoint._dirty[self] = None
            self.endpoint._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self.flush_scheduled = False
        self.endpoint._dirty.pop(self, None)
        if self.state != READY or not self.out or self.paused or self.transport.is_closing():
            return                      # a closing transport: connection_lost drops and logs these
        data = self.out
        self.out = bytearray()          # never touch ``data`` again: the transport may keep it
        endpoint = self.endpoint
        endpoint.frames_out += self.pending
        endpoint.writes += 1
        endpoint.bytes_out += len(data)
        self.pending = 0
        self.wrote = True
        self.transport.write(data)


class Endpoint:
    """One process's endpoint: a listener, lazily dialled peers, routing, batching.

    ``on_message(to, msg)`` is called for every data frame that arrives (``to`` is
    the destination address written by the sender); ``on_peer_lost(addresses)``
    (optional, assignable) when a connection closes, with the addresses that no
    longer have any live peer, and ``on_peer_back(addresses)`` when one brings addresses no
    other live connection had. For a client that must tell its user why it cannot reach
    the cluster (optional, assignable): ``on_handshake_failed(hostport, reason, by_peer)``
    when the handshake of a connection this endpoint dialled fails (``by_peer``: the peer
    refused us, else we refused the peer), ``on_dial_failed(hostport, reason)`` when a
    connect fails.
    """

    def __init__(self, secret: bytes, hosted: list[str], on_message: Callable[[str, Any], None],
                 listen_host: str = "127.0.0.1", listen_port: int | None = 0, *,
                 max_frame: int = MAX_FRAME, handshake_timeout_s: float = 5.0,
                 connect_timeout_s: float = 5.0, max_backoff_s: float = 5.0,
                 on_peer_lost: Callable[[list[str]], None] | None = None,
                 keepalive_s: float = KEEPALIVE_S, keepalive_timeout_s: float = KEEPALIVE_TIMEOUT_S) -> None:
        if not isinstance(secret, (bytes, bytearray)) or not secret:
            raise ValueError("the cluster secret must be non-empty bytes")
        self._secret = bytes(secret)
        self.hosted = hosted                    # kept by reference: later hellos see additions
        self._hosted_set = set(hosted)
        self.on_message = on_message
        self.on_peer_lost = on_peer_lost
        self.on_peer_back: Callable[[list[str]], None] | None = None
        self.keepalive_s = keepalive_s
        self.keepalive_timeout_s = keepalive_timeout_s
        self._keep: list[str] = []              # addresses whose process is dialled again when lost
        self._ka_timer: asyncio.TimerHandle | None = None
        self._ka_at = 0.0                       # when the last keepalive tick ran
        self.on_handshake_failed: Callable[[str, str, bool], None] | None = None
        self.on_dial_failed: Callable[[str, str], None] | None = None
        self.listen_host = listen_host
        self.listen_port = listen_port          # None: do not listen (a pure client)
        self.max_frame = max_frame
        self.max_handshake_frame = min(max_frame, 4 * 1024 * 1024)
        self.handshake_timeout_s = handshake_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.max_backoff_s = max_backoff_s
        self.retire_grace_s = 2.0               # a duplicate connection stays readable this long
        self.address = ""
        self._loop: Any = None              # (the running loop, from start())
        self._server: asyncio.AbstractServer | None = None
        self._routes: dict[str, str] = {}       # address or prefix -> "host:port"
        self._learned: dict[str, _Conn] = {}    # address or prefix -> a ready connection hosting it
        self._by_peer: dict[str, _Conn] = {}    # "host:port" -> connection (dialling or ready)
        self._conns: set[_Conn] = set()
        self._nonces: set[bytes] = set()        # our nonces of connections still open
        self._dialling: set[asyncio.Task] = set()
        self._backoff: dict[str, tuple[float, float]] = {}   # target -> (retry_after, current backoff)
        self._packer = msgpack.Packer(use_bin_type=True)
        self._dirty: dict[_Conn, None] = {}     # connections with a flush scheduled (flush_now)
        self._held = False      # in a burst that flush_now() ends (hold()): sends schedule no flush of their own
        self._closed = False
        self._warned: dict[str, float] = {}
        self.warn_every_s = 5.0
        # counters
        self.frames_in = 0
        self.frames_out = 0
        self.writes = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.bad_frames = 0
        self.refused_handshakes = 0
        self.refused_by_peer = 0
        self.dropped = 0                        # frames we could not send (no route, dead peer)

    def counters(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in ("frames_in", "frames_out", "writes", "bytes_in", "bytes_out",
                                              "bad_frames", "refused_handshakes", "refused_by_peer",
                                              "dropped")}

    # ---- life cycle -------------------------------------------------------------------
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        if self.listen_port is not None:
            server: Any = await self._loop.create_server(lambda: _Conn(self), self.listen_host, self.listen_port)
            self._server = server
            port = server.sockets[0].getsockname()[1]
            self.address = f"{self.listen_host}:{port}"
            log.info("listening on %s", self.address)
        if self.keepalive_s > 0:
            self._ka_at = self._loop.time()
            self._ka_timer = self._loop.call_later(self.keepalive_s, self._keepalive)

    def _keepalive(self) -> None:
        """Every keepalive_s: a ping on each connection nothing was written to since the last
        tick, a close of each nothing was heard on for keepalive_timeout_s, and a dial of each
        kept address's process that is not connected."""
        if self._closed:
            return
        loop = self._loop
        self._ka_timer = loop.call_later(self.keepalive_s, self._keepalive)   # (first: nothing below stops it)
        try:
            self._keepalive_pass(loop.time())
        except Exception:
            log.exception("keepalive pass failed")

    def _keepalive_pass(self, now: float) -> None:
        # A tick much later than asked: this loop was blocked, and what peers sent meanwhile may
        # be unread yet. Their silence is ours: it does not count.
        late = now - self._ka_at > 2 * self.keepalive_s
        self._ka_at = now
        limit = max(1, round(self.keepalive_timeout_s / self.keepalive_s))
        for c in list(self._conns):
            if c.state != READY or c.retired:
                continue
            if c.heard:
                c.silent_ticks = 0
            elif not late:
                c.silent_ticks += 1
                if c.silent_ticks >= limit:
                    c._close(f"nothing heard for {self.keepalive_timeout_s:.1f} s (keepalive timeout)")
                    continue
            c.heard = False
            if not c.wrote and not c.paused and c.transport is not None and not c.transport.is_closing():
                c.transport.write(_pack_len(len(_PING)) + _PING)
            c.wrote = False
        for a in self._keep:
            hp = self._routes.get(a) or self._routes.get(a.split(":", 1)[0])
            if hp is not None and hp not in self._by_peer and a not in self._learned:
                self._dial(hp)

    def keep(self, address: str) -> None:
        """Keep a connection to the process hosting ``address`` (its route's): dial it again every
        keepalive_s while there is none (a PN process keeps its RM's, so that a restarted RM
        hears of its quiet servers: on_peer_back on both sides)."""
        if address not in self._keep:
            self._keep.append(address)

    async def close(self) -> None:
        self._closed = True
        if self._ka_timer is not None:
            self._ka_timer.cancel()
            self._ka_timer = None
        if self._server is not None:
            self._server.close()
        for t in list(self._dialling):
            t.cancel()
        for c in list(self._conns):
            if c.state == READY and c.out and not c.retired:
                c.paused = False
                c._flush()                      # what is queued goes out before the close
            c.state = CLOSED
            if c.transport is not None:
                c.transport.close()
        if self._dialling:
            await asyncio.gather(*self._dialling, return_exceptions=True)
        for _ in range(3):                      # let connection_lost callbacks run
            if not self._conns:
                break
            await asyncio.sleep(0)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    # ---- routing ---------------------------------------------------------------------
    def add_route(self, address_or_prefix: str, hostport: str) -> None:
        _split_hostport(hostport)
        self._routes[address_or_prefix] = hostport

    def connect(self, hostport: str) -> None:
        """Dial ``hostport`` now (if not connected or dialling already), so that the peer learns
        this endpoint's addresses from its hello and can send to them without a route of its own."""
        _split_hostport(hostport)
        if hostport not in self._by_peer:
            self._dial(hostport)

    def remove_route(self, address_or_prefix: str) -> None:
        self._routes.pop(address_or_prefix, None)

    def host(self, address: str) -> None:
        """Start hosting ``address`` (or a prefix): later hellos carry it; connected peers hear now."""
        if address in self._hosted_set:
            return
        self._hosted_set.add(address)
        self.hosted.append(address)
        for c in self._conns:
            if c.state == READY and not c.retired:
                self._enqueue(c, ["", "hosts", [address]])

    def _warn(self, key: str, fmt: str, *args: Any) -> None:
        """A warning at most once per ``warn_every_s`` per key (a dead peer must not flood the log)."""
        now = time.monotonic()
        if now - self._warned.get(key, -1e9) >= self.warn_every_s:
            self._warned[key] = now
            if len(self._warned) > 10000:
                self._warned.clear()
            log.warning(fmt, *args)

    def _resolve(self, to: str) -> Any:
        c = self._learned.get(to)
        if c is not None:
            return c
        hp = self._routes.get(to)
        if hp is None:
            p = to.split(":", 1)[0]
            c = self._learned.get(p)
            if c is not None:
                return c
            hp = self._routes.get(p)
            if hp is None:
                return None
        c = self._by_peer.get(hp)
        return c if c is not None else self._dial(hp)

    def peers(self) -> list[tuple[str, str, list[str]]]:
        """(peer name, its listen address, what it hosts) for each ready connection."""
        return [(c.peername, c.peer_listen, list(c.peer_hosted)) for c in self._conns
                if c.state == READY and not c.retired]

    # ---- sending ---------------------------------------------------------------------
    def send(self, to: str, msg: Any) -> bool:
        """Queue ``msg`` for the actor at ``to``; False (and a log line) if it cannot be routed."""
        c = self._resolve(to)
        if c is None or c is _UNREACHABLE:
            self.dropped += 1
            why = "no route" if c is None else "its peer is unreachable (a connect failed just now)"
            self._warn(to, "dropping a %s to %r: %s", type(msg).__name__, to, why)
            return False
        v = encode(msg)
        v.insert(0, to)
        return self._enqueue(c, v)

    def _enqueue(self, c: _Conn, v: list) -> bool:
        p = self._packer.pack(v)
        if len(p) > self.max_frame:
            self.dropped += 1
            log.error("a %d-byte frame to %r exceeds the maximum frame size %d: dropped",
                      len(p), v[0], self.max_frame)
            return False
        out = c.out
        out += _pack_len(len(p))
        out += p
        c.pending += 1
        if not c.flush_scheduled and c.state == READY:
            c.flush_scheduled = True
            self._dirty[c] = None
            if not self._held:          # (held: a flush_now() ends this burst; no loop callback)
                self._loop.call_soon(c._flush)
        return True

    def hold(self) -> None:
        """Sends from now until flush_now() are written by that call (the caller promises it, in a
        ``finally``), not each by a loop callback of its own."""
        self._held = True

    def flush_now(self) -> None:
        """Write what the sends since the last flush left in the connections' buffers now, not
        on the loop's next iteration (their scheduled flush then finds nothing to do). Called
        where a burst of work ends: a read of frames handled, a batch of task exits, a timer.
        A message on a job's critical path saves an iteration at each process it crosses."""
        self._held = False
        self.write_queued()

    def write_queued(self) -> None:
        """Write what the sends so far left in the connections' buffers, inside a burst too (its
        hold stays): called before a durable write that blocks the loop, so that the messages
        an actor sent before asking for the write are not held back by it."""
        dirty = self._dirty
        if dirty:
            self._dirty = {}
            for c in dirty:
                c._flush()

    def _dial(self, hp: str) -> Any:
        if self._closed or self._loop is None:
            return None
        retry_after = self._backoff.get(hp, (0.0, 0.0))[0]
        if time.monotonic() < retry_after:
            return _UNREACHABLE                 # a recent connect failed: drop, retry later
        c = _Conn(self, target=hp)
        self._by_peer[hp] = c
        t = self._loop.create_task(self._connect(c, hp))
        self._dialling.add(t)
        t.add_done_callback(self._dialling.discard)
        return c

    async def _connect(self, c: _Conn, hp: str) -> None:
        host, port = _split_hostport(hp)
        try:
            await asyncio.wait_for(self._loop.create_connection(lambda: c, host, port),
                                   self.connect_timeout_s)
        except asyncio.CancelledError:
            self._forget_dial(c, hp, "endpoint closing")
            raise
        except (OSError, asyncio.TimeoutError) as e:
            back = min(max(self._backoff.get(hp, (0.0, 0.05))[1] * 2, 0.1), self.max_backoff_s)
            self._backoff[hp] = (time.monotonic() + back, back)
            self._forget_dial(c, hp, f"connect failed ({type(e).__name__}: {e}); retrying no sooner "
                                     f"than {back:.1f}s from now")
            if self.on_dial_failed is not None and not self._closed:
                try:
                    self.on_dial_failed(hp, str(e) or type(e).__name__)
                except Exception:
                    log.exception("on_dial_failed failed")
        else:
            self._backoff.pop(hp, None)

    def _forget_dial(self, c: _Conn, hp: str, why: str) -> None:
        c.state = CLOSED
        self._nonces.discard(c.my_nonce)
        if self._by_peer.get(hp) is c:
            del self._by_peer[hp]
        if c.pending:
            self.dropped += c.pending
        if not self._closed or c.pending:
            log.warning("connection to %s: %s; %d pending frame(s) dropped", hp, why, c.pending)
        c.out = bytearray()
        c.pending = 0

    # ---- connection events -------------------------------------------------------------
    def _handshake_failed(self, c: _Conn, reason: str, by_peer: bool) -> None:
        if c.outbound and self.on_handshake_failed is not None and not self._closed:
            try:
                self.on_handshake_failed(c.target, reason, by_peer)
            except Exception:
                log.exception("on_handshake_failed failed")

    def _ready(self, c: _Conn) -> None:
        self._nonces.discard(c.my_nonce)
        c.ready_at = time.monotonic()
        winner, loser = c, None
        twin = None
        if c.peer_listen:
            twin = next((o for o in self._conns if o is not c and o.state == READY and not o.retired
                         and o.peer_listen == c.peer_listen), None)
        if twin is not None:
            if c.ready_at - twin.ready_at < self.handshake_timeout_s:
                # Both processes dialled each other at once. Each side keeps the connection
                # opened by the process with the smaller listen address; both reach the same
                # verdict without another message.
                a, b = self._initiator(twin), self._initiator(c)
                winner, loser = (twin, c) if a <= b else (c, twin)
            else:
                # An older connection to the same listen address: the peer restarted and the old
                # connection has not been seen to fail yet. The new one wins.
                winner, loser = c, twin
        self._register(winner)
        log.info("connected %s %s, which hosts %d address(es)",
                 "to" if c.outbound else "from", c.describe(), len(c.peer_hosted))
        if loser is not None:
            self._retire(loser, winner)

    def _initiator(self, c: _Conn) -> str:
        return self.address if c.outbound else c.peer_listen

    def _register(self, c: _Conn) -> None:
        for hp in (c.peer_listen, c.target):
            if not hp:
                continue
            old = self._by_peer.get(hp)
            if old is not None and old is not c and old.state != READY and old.out:
                self._move_pending(old, c)       # frames queued on a dial we no longer need
            self._by_peer[hp] = c
        new = [a for a in c.peer_hosted if a not in self._learned]
        for a in c.peer_hosted:
            self._learned[a] = c
        self._back(new)

    def _back(self, addresses: list[str]) -> None:
        """``addresses`` have a live peer again (or for the first time): on_peer_back, at once,
        so that actors hear it before the connection's first data frame."""
        if addresses and self.on_peer_back is not None and not self._closed:
            try:
                self.on_peer_back(addresses)
            except Exception:
                log.exception("on_peer_back failed")

    def _move_pending(self, src: _Conn, dst: _Conn) -> None:
        if src.out:
            dst.out += src.out
            dst.pending += src.pending
            src.out = bytearray()
            src.pending = 0
            dst._schedule_flush()

    def _retire(self, loser: _Conn, winner: _Conn) -> None:
        """Stop sending on a duplicate connection; keep reading it until it closes (whoever
        opened it closes it after a grace period, when the peer has stopped sending on it too)."""
        loser.retired = True
        self._move_pending(loser, winner)
        for hp in (loser.peer_listen, loser.target):
            if hp and self._by_peer.get(hp) is loser:
                self._by_peer[hp] = winner
        for a in loser.peer_hosted:
            if self._learned.get(a) is loser:
                self._learned[a] = winner
        if loser.outbound:
            self._loop.call_later(self.retire_grace_s, loser._close_quietly)
        log.info("duplicate connection with %s retired", loser.describe())

    def _lost(self, c: _Conn, was: int, exc: Exception | None) -> None:
        self._conns.discard(c)
        self._nonces.discard(c.my_nonce)
        for hp in (c.target, c.peer_listen):
            if hp and self._by_peer.get(hp) is c:
                del self._by_peer[hp]
                # another live connection to the same peer takes over
                for o in self._conns:
                    if o.state == READY and not o.retired and hp in (o.target, o.peer_listen):
                        self._by_peer[hp] = o
                        break
        if c.pending:
            self.dropped += c.pending
            log.warning("connection with %s lost: %d pending frame(s) dropped", c.describe(), c.pending)
            c.out = bytearray()
            c.pending = 0
        elif was == READY and not self._closed:
            log.info("connection with %s closed%s", c.describe(), f" ({exc})" if exc else "")
        lost: list[str] = []
        for a in c.peer_hosted:
            if self._learned.get(a) is c:
                repl = next((o for o in self._conns
                             if o.state == READY and not o.retired and a in o.peer_hosted), None)
                if repl is None:
                    del self._learned[a]
                    lost.append(a)
                    if c.peer_listen and a not in self._routes:
                        # a peer that joined by dialling us (another host's PNs) is dialled back
                        # at its listen address from now on: its connection may come back later
                        self._routes[a] = c.peer_listen
                else:
                    self._learned[a] = repl
        if lost and self.on_peer_lost is not None and not self._closed:
            try:
                self.on_peer_lost(lost)
            except Exception:
                log.exception("on_peer_lost failed")
