"""The RM's view of the servers: each one's last wait-time matrix and what its heartbeat said
besides (tasks running and queued, free CPUs, the CPUs each job's regular attempts hold on it),
which servers are alive, the capacity they add up to, and the ClusterView sent to JM hosts.

Views are deltas (docs/control-plane.md): each view is numbered, each row remembers the first
view that shows it as it is (``row_seq``), and a host is sent the rows changed since the view it
acknowledged in its last HostReport (``acked``), every row if none: a quiet cluster's view is a
few bytes, whatever its size, and a lost one is covered by the next.

A server is alive from its first heartbeat until the RM hears PeerLost of its PN (the runtime's
word that the connection went: docs/design.md, "Liveness"); a PN reports only when something
changed, so silence says nothing. No scan of the servers' stamps, then: none is ever overdue.

A heartbeat is the RM's most frequent event: ``observe`` writes a few rows and plain-list
slots (running_tasks etc. make arrays of them when asked), never an allocation.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from apollo.core.clocks import RESET_S, Offsets
from apollo.core.messages import ClusterView, Heartbeat
from apollo.core.rows import RowWriter

from .jobs import HeldCell


class ClusterLoad:
    def __init__(self, servers: int, shapes: int, server_cores: float, lightly_loaded: int) -> None:
        self.servers = servers
        self.shapes = shapes
        self.server_cores = server_cores
        self.lightly_loaded_n = lightly_loaded      # list length; 0: max(8, servers // 10)
        n = servers
        self.matrices = np.zeros((n, shapes), dtype=np.float32)
        self._rows = RowWriter(self.matrices)        # (a reading as a list: packed into its row)
        self.stamps = np.full(n, -1.0)
        self.grows = np.full(n, -1.0, dtype=np.float32)    # how each reading moves (Heartbeat.grow)
        # The views: the last one's number, and per row the first view that shows it as it is
        # (a row changed since a host's acknowledged view goes in its next view). Numbers go
        # above every earlier incarnation's (restarted), so an acknowledgement a host gives for
        # an older RM's view asks for every row.
        self.view_seq = 0
        self.row_seq = np.zeros(n, dtype=np.int64)
        self.newest_row = 0               # the largest row_seq (rows are numbered as they move: the last)
        self.row_moves = 0                # rows written (lightly_loaded works its answer out again only after one)
        self.acked: dict[str, int] = {}              # host -> the last view it applied (HostReport)
        self._light_sent = np.zeros(0, dtype=np.int32)   # the lightly-loaded list of the last view
        self._light_seq = 0                          # ... and the first view that showed it
        self.boot_times = np.zeros(n)
        self.alive = np.zeros(n, dtype=np.uint8)
        self.alive_n = 0                 # alive.sum(), kept (capacity is read per admission)
        # Servers lost (PeerLost) whose connection has not come back (PeerBack) since: a
        # heartbeat of the incarnation that was lost is one sent before it went (in flight when
        # the connection broke: live, TCP delivers it before the close; simulated, the network
        # may reorder it after) and must not bring a dead server back. A new incarnation (a
        # restart, another boot time) or the connection back clears it.
        self._lost: set[int] = set()
        # The lightly-loaded list of the last view with the waits and liveness it was worked out
        # from: most views find both the same (idle servers' heartbeats change neither), and
        # comparing them costs a fraction of the partition
        self._light: tuple[tuple[bytes, bytes], np.ndarray] | None = None
        self._light_moves = -1                      # row_moves when _light was last checked
        self._light_from: np.ndarray | None = None  # the answer the last view's list was made from
        self._running = [0] * n
        self._queued = [0] * n
        self._cpu_free = [float(server_cores)] * n
        self._offsets = Offsets(n)                  # each PN's clock against ours
        # What jobs hold: the CPUs their regular attempts run on, as each server's last heartbeat
        # said (queued attempts hold nothing; docs/sharing.md). Per server: (jobs, milli-CPUs);
        # per job: the sum over live servers, in milli-CPUs (integers: no drift).
        self._pn_held: list[tuple] = [((), ())] * n
        # job -> its cell (HeldCell); an admitted job's stays while it is admitted, at 0 too (its
        # entry holds it); another's goes when it falls to 0
        self._held: dict[int, HeldCell] = {}
        # ... and per leaf queue, its admitted jobs' (kept as heartbeats move it: the allocation
        # round's figures do not sum every job): admitted job -> leaf, leaf -> milli-CPUs
        self._leaf_of: dict[int, str] = {}
        self._leaf_held: dict[str, int] = {}
        self._pn_time = [-math.inf] * n             # its last heartbeat's time, on its clock
        self._pn_boot = [math.nan] * n              # ...and boot time, on its clock

    # ---- heartbeats ----------------------------------------------------------------------
    def observe(self, hb: Heartbeat, now: float) -> bool:
        """Fold in a heartbeat of a known server; whether that server came (back) to life (the
        capacity grew)."""
        s = hb.server
        # (its clock is its own: its times are turned into ours, apollo.core.clocks)
        booted = hb.boot_time != self._pn_boot[s]
        if not booted and hb.time < self._pn_time[s]:
            return False  # reordered: an older reading
        if self._lost and s in self._lost:
            if not booted:
                return False      # sent before its connection was lost
            self._lost.discard(s)
        self._pn_time[s] = hb.time
        # (Offsets.observe, inlined: a heartbeat is the RM's most frequent event)
        offs = self._offsets.of
        shift = now - hb.time
        cur = offs[s]
        if shift >= cur and shift <= cur + RESET_S:
            shift = cur
        else:
            offs[s] = shift
        if booted:     # (a new incarnation, or the first heartbeat heard)
            self._pn_boot[s] = hb.boot_time
            self.boot_times[s] = hb.boot_time + shift
        self._rows.write(s, hb.matrix)
        self.stamps[s] = hb.time + shift
        self.grows[s] = hb.grow
        self.row_seq[s] = self.newest_row = self.view_seq + 1
        self.row_moves += 1
        if hb.jobs or self._pn_held[s][0]:
            # (a loop, not a generator: compiled, a generator is an object made per heartbeat)
            milli: list[int] = []
            for c in hb.job_cpus:
                milli.append(int(round(c * 1000)))
            self._set_held(s, tuple(hb.jobs), tuple(milli))
        self._running[s] = hb.running
        self._queued[s] = hb.queued
        self._cpu_free[s] = hb.cpu_free
        if not self.alive[s]:
            self.alive[s] = 1
            self.alive_n += 1
            return True
        return False

    def lose(self, s: int) -> bool:
        """The connection to server ``s``'s PN is gone (PeerLost): the server is dead and holds
        nothing until it is heard again over a connection made since; whether it was alive."""
        self._lost.add(s)
        if not self.alive[s]:
            return False
        self._set_held(s, (), ())       # a dead server holds nothing
        self.alive[s] = 0
        self.alive_n -= 1
        self.row_seq[s] = self.newest_row = self.view_seq + 1
        self.row_moves += 1
        return True

    def back(self, s: int) -> None:
        """The connection to server ``s``'s PN is up again (PeerBack): its next heartbeat, the
        full state it sends on this, brings it back."""
        self._lost.discard(s)

    def all_alive(self) -> bool:
        return bool(self.alive.all())

    # ---- what jobs hold --------------------------------------------------------------------
    def _set_held(self, s: int, jobs: tuple, milli: tuple) -> None:
        """Server ``s`` now runs ``milli`` milli-CPUs of regular attempts of each of ``jobs``."""
        held = self._held
        leaf_of, leaf_held = self._leaf_of, self._leaf_held
        old_jobs, old_milli = self._pn_held[s]
        cell: HeldCell | None
        for j, m in zip(old_jobs, old_milli):
            cell = held[j]
            cell.milli -= m
            q = leaf_of.get(j)
            if q is not None:
                leaf_held[q] -= m
            elif not cell.milli:
                del held[j]
        for j, m in zip(jobs, milli):
            cell = held.get(j)
            if cell is None:
                cell = held[j] = HeldCell()
            cell.milli += m
            q = leaf_of.get(j)
            if q is not None:
                leaf_held[q] += m
        self._pn_held[s] = (jobs, milli)

    def count_in(self, job_id: int, leaf: str) -> HeldCell:
        """The job is admitted to ``leaf``: what it holds counts as the leaf's. Its cell (for
        its entry to keep)."""
        cell = self._held.get(job_id)
        if cell is None:
            cell = self._held[job_id] = HeldCell()
        self._leaf_of[job_id] = leaf
        self._leaf_held[leaf] = self._leaf_held.get(leaf, 0) + cell.milli
        return cell

    def count_out(self, job_id: int) -> None:
        """The admitted job ended: what it holds no longer counts as its leaf's."""
        leaf = self._leaf_of.pop(job_id)
        cell = self._held.get(job_id)
        if cell is not None:
            self._leaf_held[leaf] -= cell.milli
            if not cell.milli:
                del self._held[job_id]

    def leaf_held(self, leaf: str) -> float:
        """CPUs the admitted jobs of ``leaf`` run on, as the live servers last said."""
        return self._leaf_held.get(leaf, 0) / 1000.0

    @property
    def held_cells(self) -> dict[int, HeldCell]:
        """Job -> its cell of milli-CPUs its regular attempts run on (read-only: the round's
        snapshot)."""
        return self._held

    def held(self, job_id: int) -> float:
        """CPUs the job's regular attempts run on, as the live servers last said."""
        cell = self._held.get(job_id)
        return cell.milli / 1000.0 if cell is not None else 0.0

    # ---- capacity and load ----------------------------------------------------------------
    @property
    def capacity(self) -> float:
        """The live servers' cores."""
        return float(self.alive_n) * self.server_cores

    def cores(self) -> float:
        """The live servers' cores, or every server's before any is heard from."""
        return self.capacity or self.servers * self.server_cores

    def whole_cores(self) -> int:
        """``cores()`` in whole tokens."""
        return int(math.floor(self.cores() + 1e-9))

    def busy_cores(self, capacity: float) -> float:
        """CPUs in use, of ``capacity``, as the servers last said."""
        return capacity - sum(self._cpu_free)

    @property
    def running_tasks(self) -> np.ndarray:
        """Tasks running per server, as its last heartbeat said."""
        return np.array(self._running, dtype=np.int64)

    @property
    def queued_tasks(self) -> np.ndarray:
        return np.array(self._queued, dtype=np.int64)

    @property
    def cpu_free(self) -> np.ndarray:
        return np.array(self._cpu_free, dtype=np.float64)

    def lightly_loaded(self) -> np.ndarray:
        """The live servers with the shortest waits (for their first shape), in server order."""
        return self._lightest().copy()

    def _lightest(self) -> np.ndarray:
        """lightly_loaded's answer, shared: worked out again only when the first shape's waits
        or the liveness moved (looked at only after a row was written)."""
        if self._light is None or self._light_moves != self.row_moves:
            key = (self.matrices[:, 0].tobytes(), self.alive.tobytes())
            if self._light is None or self._light[0] != key:
                self._light = (key, self._shortest_waits())
            self._light_moves = self.row_moves
        return self._light[1]

    def _shortest_waits(self) -> np.ndarray:
        n = self.servers
        k = self.lightly_loaded_n or max(8, n // 10)
        wait = np.where(self.alive == 1, self.matrices[:, 0], np.inf)
        k = min(k, self.alive_n)
        if k <= 0:
            return np.zeros(0, dtype=np.int32)
        idx = np.argpartition(wait, k - 1)[:k] if k < n else np.arange(n)
        return np.sort(idx).astype(np.int32)

    def restarted(self, boots: int) -> None:
        """This RM's ``boots``-th start: its views are numbered above every earlier incarnation's,
        and every row is new to a host whatever view of theirs it acknowledges."""
        self.view_seq = boots << 32
        self.row_seq[:] = self.newest_row = self.view_seq + 1
        self._light_seq = self.view_seq + 1

    def next_view(self) -> int:
        """Number the next view (the lightly-loaded list worked out for it); its seq."""
        light = self._lightest()
        self.view_seq += 1
        # (the same answer as the last view's: the list sent then is equal to it)
        if light is not self._light_from and not np.array_equal(light, self._light_sent):
            self._light_sent, self._light_seq = light.copy(), self.view_seq
        self._light_from = light
        return self.view_seq

    def view(self, now: float, base: int = 0) -> ClusterView:
        """The last numbered view as a delta from view ``base`` (0, or one this RM cannot tell
        from: every row). Copies: the RM's rows move on."""
        seq = self.view_seq
        at: Any
        if base <= 0 or base > seq:
            base = 0
            rows = at = np.arange(self.servers, dtype=np.int32)
        elif base >= self.newest_row:
            # No row moved since the host's view (most views of a quiet cluster): empty columns
            # by slicing, without the scan and the gathers (slices of nothing: nobody can write
            # to them)
            rows, at = np.zeros(0, dtype=np.int32), slice(0, 0)
        else:
            rows = at = np.flatnonzero(self.row_seq > base).astype(np.int32)
        light = self._light_sent if base == 0 or self._light_seq > base else np.zeros(0, dtype=np.int32)
        return ClusterView(now, seq, base, rows, self.matrices[at].ravel(), self.stamps[at],
                           self.boot_times[at], self.alive[at], self.grows[at], light.copy())

    def validate(self) -> None:
        assert self.matrices.shape == (self.servers, self.shapes)
        assert self._rows.matrix is self.matrices, "readings written into a matrix no longer kept"
        assert self.alive_n == int(self.alive.sum())
        assert int(self.row_seq.max(initial=0)) <= self.view_seq + 1, "a row newer than the next view"
        assert int(self.row_seq.max(initial=0)) <= self.newest_row, "a row newer than the newest counted"
        assert not any(self.alive[s] for s in self._lost), "a lost server counted alive"
        per_job: dict[int, int] = {}
        for s, (jobs, milli) in enumerate(self._pn_held):
            assert not jobs or self.alive[s], "a dead server holds CPUs"
            assert sum(milli) <= self.server_cores * 1000 + 1e-6, "a server holds more than its cores"
            for j, m in zip(jobs, milli):
                per_job[j] = per_job.get(j, 0) + m
        assert per_job == {j: c.milli for j, c in self._held.items() if c.milli}, "held CPUs out of sync"
        assert all(c.milli or j in self._leaf_of for j, c in self._held.items()), "an empty cell kept"

    def validate_counted(self, leaf_of: dict[int, str]) -> None:
        """``leaf_of``: every admitted job's leaf (the admission's word)."""
        assert self._leaf_of == leaf_of, "admitted jobs counted per leaf out of sync"
        per_leaf: dict[str, int] = {}
        for j, q in leaf_of.items():
            cell = self._held.get(j)
            per_leaf[q] = per_leaf.get(q, 0) + (cell.milli if cell is not None else 0)
        assert {q: m for q, m in self._leaf_held.items() if m} == {q: m for q, m in per_leaf.items() if m}, \
            "held CPUs per leaf out of sync"
