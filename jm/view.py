"""A JM host's picture of the cluster: every server's last wait-time matrix, with its age.

One ViewCache is shared read-only by all JMs of a host: the host folds in
the RM's ClusterView and every matrix a PN piggybacks on a status batch
(whichever reading is newer wins), so JMs schedule on the freshest reading
they have and carry on with a stale one when the RM is away.
"""
from __future__ import annotations

from typing import Any, Final

import numpy as np

from apollo.core.clocks import Offsets
from apollo.core.messages import ClusterView
from apollo.core.nonzero import count_nonzero
from apollo.core.rows import RowWriter
from apollo.core.shapes import GRID, ShapeGrid

IDLE_CHECK_S: Final = 0.01     # has_idle re-scans the lightly loaded servers at most this often
SMALL_BATCH: Final = 8         # dispatches recorded one by one up to this many (record_dispatches)
BOOT_JITTER_S: Final = 0.01    # boot times from the RM closer than this to ours are the same boot
# A reading taken less than this after this host's last send to its server may not show that
# send yet (it was still on its way): the send stays in the ledger (a server a slot scheduler just
# filled must not look free again, from a reading taken while the task was in flight).
IN_FLIGHT_S: Final = 0.005
# Up to this many servers, _fits compares all CPU columns in one step (measured crossover ~80:
# below it the fewer numpy calls win, above it the reduction's per-server loop does not).
_ONE_SHOT_FITS: Final = 64
# Up to this many servers, _free_cpus works each one out on Python numbers (free_cpu_one): the
# ~12 numpy calls of the array form cost more than the servers themselves.
FEW_SERVERS: Final = 8


class ViewCache:
    def __init__(self, servers: int, grid: ShapeGrid = GRID, cores: float = float("inf")) -> None:
        self.servers = servers
        self.cpu_grid = grid.cpu
        self.mem_grid = grid.mem
        self.shapes = shapes = grid.size
        # k shapes fit -> CPUs free; never more than a server has (a server not heard from yet
        # reads as all zeros, "everything fits", and a 2-core one must not look like 4 free)
        self.free_of_fits = np.minimum(np.array((0.0,) + tuple(grid.cpu)), cores)
        self.matrices = np.zeros((servers, shapes), dtype=np.float32)
        self._rows = RowWriter(self.matrices)        # (a reading as a list: packed into its row)
        self.stamps = np.full(servers, -np.inf)
        # How each reading moves after its stamp (Heartbeat.grow): < 0, its waits count down; else
        # those above zero grow at that rate (a server whose tasks overran reports once, not
        # every few seconds, and this is its extrapolation). ``growing``: how many rows grow (0:
        # every reading counts down, and the estimates take the plain path).
        self.grows = np.full(servers, -1.0)
        self.growing = 0
        self.boot_times = np.zeros(servers)
        # Whether a server's boot time is known (the RM had heard it when a view came): learning
        # it is not a restart (tasks sent there before the first view stay where they are)
        self.boot_known = np.zeros(servers, dtype=bool)
        self.alive = np.ones(servers, dtype=bool)   # optimistic until the RM says otherwise
        self.alive_count = servers                   # as of the last view (bounds batch sizes)
        self.lightly_loaded = np.arange(servers, dtype=np.int32)
        self.time = -np.inf                          # when the RM's last view was taken
        self.seq = 0                                 # ... and its number (HostReport.view_seq)
        # The host's own dispatch ledger: work its JMs sent to each server after that server's
        # last reading (expected busy seconds per core, and CPUs). Co-located JMs thereby see
        # each other's placements before any PN reports them.
        self.sent_wait = np.zeros(servers)
        self.sent_cpu = np.zeros(servers)
        self.sent_at = np.full(servers, -np.inf)
        self._idle = np.zeros(0, dtype=np.int32)     # idle_servers' last finding, and when
        self._idle_checked_at = -np.inf
        self._idle_owed = False                      # ... that finding is owed, not made yet (look_for_idle)
        self.version = 0                             # bumped by every change below (caches key on it)
        # Other processes' clocks against this host's (apollo.core.clocks): every time kept here is
        # on this host's clock, turned from the sender's on arrival.
        self.pn_clocks = Offsets(servers)
        self.rm_clock = Offsets(1)
        self._free: np.ndarray = np.zeros(0)         # free_slots_reported's CPUs per server ...
        self._free_at = -1                           # ... as of this view version ...
        self._slots: dict[float, int] = {}           # ... and its answers by task size

    def free_slots_reported(self, cpu: float) -> int:
        """How many tasks of ``cpu`` CPUs the live servers could start now as reported (less
        this host's sends): a slot scheduler need not build a larger batch. The free CPUs per
        server are recomputed only after the view changed."""
        if self._free_at != self.version:
            every = np.arange(self.servers)
            self._free = np.where(self.alive, self.free_cpu_reported(every), 0.0)
            self._free_at = self.version
            self._slots = {}
        n = self._slots.get(cpu)
        if n is None:
            n = self._slots[cpu] = int(np.floor(self._free / cpu + 1e-9).sum()) if cpu > 0 else 0
        return n

    def record_dispatches(self, servers: Any, wait_s: Any, cpu: Any, now: float) -> None:
        """Note tasks sent now: ``wait_s`` expected busy seconds per core, ``cpu`` CPUs, per task
        (arrays, or numbers for one task)."""
        if self._idle_owed:
            self._settle_idle(now)
        self.version += 1
        if type(servers) is int or len(servers) <= SMALL_BATCH:
            # (item by item, in order: the same sums as numpy's calls below, without their
            # ~10 us of overhead on a small job's start)
            sent_wait, sent_cpu, sent_at, stamps = self.sent_wait, self.sent_cpu, self.sent_at, self.stamps
            if type(servers) is int:
                srv, waits, cpus = [servers], [wait_s], [cpu]
            else:
                srv, waits, cpus = servers.tolist(), wait_s.tolist(), cpu.tolist()
            for s in [s for s in srv if sent_at[s] + IN_FLIGHT_S < stamps[s]]:   # a reading that shows our sends
                sent_wait[s] = sent_cpu[s] = 0.0
            for s, w, c in zip(srv, waits, cpus):
                sent_wait[s] += w
                sent_cpu[s] += c
                sent_at[s] = now
            return
        fresh = self.sent_at[servers] + IN_FLIGHT_S < self.stamps[servers]   # a reading that shows our sends
        if count_nonzero(fresh):
            self.sent_wait[servers[fresh]] = 0.0
            self.sent_cpu[servers[fresh]] = 0.0
        np.add.at(self.sent_wait, servers, wait_s)
        np.add.at(self.sent_cpu, servers, cpu)
        self.sent_at[servers] = now

    def free_cpu(self, servers: np.ndarray, now: float) -> np.ndarray:
        """CPUs free at ``now`` per the servers' readings (largest grid shape with no wait, at the
        smallest memory), less what this host sent since those readings."""
        return self._free_cpus(servers, now, False)

    def free_cpu_reported(self, servers: np.ndarray) -> np.ndarray:
        """CPUs free per the servers' readings when they were taken (a slot the server said was
        free, not one its running tasks are expected to have freed by now), less what this host
        sent since: what a slot-based scheduler may count on without queueing behind a task
        that runs longer than expected."""
        return self._free_cpus(servers, 0.0, True)

    def _free_cpus(self, servers: np.ndarray, now: float, as_reported: bool) -> np.ndarray:
        """The CPUs free on each of ``servers``: less this host's sends there where the reading
        predates the last of them (the sends are not in the reading yet); ``as_reported``: free
        when the reading was taken (else by ``now``, the waits counted down)."""
        if servers.ndim == 1 and len(servers) <= FEW_SERVERS:
            return np.array([self.free_cpu_one(s, now, as_reported) for s in servers.tolist()])
        return self._free_rows(servers, now, as_reported)

    def _free_rows(self, servers: np.ndarray, now: float, as_reported: bool) -> np.ndarray:
        """_free_cpus as arrays, any number of servers at once."""
        # (take: the same gather as indexing, at a third of its cost for a 1-D index)
        stamps = self.stamps.take(servers)
        mine = stamps <= self.sent_at.take(servers) + IN_FLIGHT_S
        elapsed: Any = 0.0 if as_reported else now - stamps
        if self.growing and not as_reported:
            # a growing reading's waits above zero never count down to "fits"
            elapsed = np.where(self.grows.take(servers) < 0.0, elapsed, 0.0)
        free = self.free_of_fits.take(self._fits(servers, elapsed))
        if count_nonzero(mine):
            free = free - np.where(mine, self.sent_cpu.take(servers), 0.0)
        return free

    def free_cpu_one(self, s: int, now: float, as_reported: bool = False) -> float:
        """free_cpu (or free_cpu_reported) of server ``s`` on Python numbers, the same float (a
        few servers: a job's crowded first choices, a small cluster's idle finding, one task's
        costs)."""
        stamp: float = self.stamps.item(s)
        elapsed = 0.0
        if not as_reported:
            elapsed = now - stamp
            if self.growing:
                g: float = self.grows.item(s)
                if not g < 0.0:
                    elapsed = 0.0
        step = len(self.mem_grid)
        row: list[float] = self.matrices[s].tolist()
        fits = 0
        for j in range(len(self.cpu_grid)):
            if row[j * step] <= elapsed:
                fits += 1
        free: float = self.free_of_fits.item(fits)
        sent_at: float = self.sent_at.item(s)
        if stamp <= sent_at + IN_FLIGHT_S:
            sent: float = self.sent_cpu.item(s)
            free -= sent
        return free

    def _fits(self, servers: np.ndarray, elapsed: Any) -> np.ndarray:
        """How many of the CPU shapes (at the smallest memory) each of ``servers`` could start
        within ``elapsed`` (a number, or one per server) of its reading: a bigger shape never
        waits less, so those are a prefix, and their count picks the free CPUs. (Whole rows are
        gathered, then a column per CPU shape compared and the columns added: numpy's reduction
        over a short last axis, with the float32 -> float64 cast on the way, pays its loop per
        server; the same counts.)"""
        rows = self.matrices.take(servers, axis=0)
        step = len(self.mem_grid)
        if servers.size <= _ONE_SHOT_FITS:
            # (a few servers: every CPU column compared and counted at once, fewer numpy calls)
            return np.add.reduce((rows[..., :len(self.cpu_grid) * step:step] <= (
                elapsed[..., None] if type(elapsed) is np.ndarray else elapsed)).view(np.uint8), axis=-1, dtype=np.uint8)
        fits = (rows[..., 0] <= elapsed).view(np.uint8)
        for j in range(1, len(self.cpu_grid)):
            fits += (rows[..., j * step] <= elapsed).view(np.uint8)
        return fits

    def has_idle(self, now: float) -> bool:
        """Whether any lightly loaded server has a CPU free now, as far as this host knows."""
        return len(self.idle_servers(now)) > 0

    def idle_servers(self, now: float) -> np.ndarray:
        """The lightly loaded servers with a CPU free now, as far as this host knows (a finding
        at most IDLE_CHECK_S old: every placement pass of every JM asks, and the lightly loaded
        list is a tenth of the cluster; the view itself is older than that)."""
        if now - self._idle_checked_at < IDLE_CHECK_S:
            if self._idle_owed:
                self._find_idle(self._idle_checked_at)
            return self._idle
        self._find_idle(now)
        return self._idle

    def look_for_idle(self, now: float) -> None:
        """Take the finding of idle_servers as of ``now`` (unless one is at most IDLE_CHECK_S
        old), as if asked, but make it only when first asked within IDLE_CHECK_S, or before the
        view changes if that comes first: the same finding, from the same view and time, and
        none at all when nobody asks (the JM host takes one per view, whoever asks)."""
        if now - self._idle_checked_at >= IDLE_CHECK_S:
            self._idle_checked_at = now
            self._idle_owed = True

    def _find_idle(self, at: float) -> None:
        light = self.lightly_loaded
        self._idle = light[self.free_cpu(light, at) >= 1.0 - 1e-9] if len(light) else light
        self._idle_checked_at = at
        self._idle_owed = False

    def _settle_idle(self, now: float) -> None:
        """Before the view changes at ``now``: an owed finding is made from the view it was
        taken of, if it can still be asked for (its IDLE_CHECK_S not past), else dropped."""
        if now - self._idle_checked_at < IDLE_CHECK_S:
            self._find_idle(self._idle_checked_at)
        else:
            self._idle_owed = False

    def add_pending_wait(self, W: np.ndarray, cand: np.ndarray, cpu: np.ndarray, elapsed: np.ndarray,
                         mine: np.ndarray) -> None:
        """Add to the waits ``W`` (in place) what this host's own sends add that the readings do not
        show yet (``mine``: the candidates whose reading predates this host's last send there;
        ``elapsed``: the time since each reading): nothing while the server still has ``cpu``
        free after them, else their expected work per core."""
        # (free_cpu's arithmetic; the sum is taken only where it adds anything, which leaves the
        # rest as adding 0.0 would)
        el = elapsed
        if self.growing:
            el = np.where(self.grows[cand] < 0.0, el, 0.0)   # (as _free_cpus)
        free = self.free_of_fits.take(self._fits(cand, el)) - self.sent_cpu[cand]
        np.add(W, self.sent_wait[cand], out=W, where=mine & (free < cpu[:, None] - 1e-9))

    def apply_view(self, v: ClusterView, now: float = 0.0) -> "np.ndarray | None":
        """Fold in the RM's view (its times on the RM's clock, turned into ours; ``now``: when it
        arrived): a full one (``base`` 0), or a delta from a view this host applied (``base`` at
        most ``seq``: its rows are every row changed since, so it brings this host to the RM's
        view ``v.seq``). A delta from a view this host has not got (it restarted; the view
        before was lost), or one older than the last applied, is left (None): the next starts
        from what this host's report acknowledges. Returns the servers it shows lost (dead, or
        restarted)."""
        n, shapes = self.servers, self.shapes
        rows = v.servers
        k = len(rows)
        if len(v.stamps) != k or len(v.matrices) != k * shapes or len(v.boot_times) != k or len(v.alive) != k \
                or len(v.grows) != k or (v.base == 0 and k != n) \
                or (k and (int(rows.min()) < 0 or int(rows.max()) >= n)):
            raise ValueError(f"cluster view of {k} rows x {len(v.matrices) // max(k, 1)} shapes (base {v.base})"
                             f" does not fit this host's {n} servers x {shapes} shapes")
        if v.base != 0 and (v.base > self.seq or v.seq <= self.seq):
            return None
        shift = self.rm_clock.observe(0, now, v.time)
        lost = rows[:0]
        if k:
            stamps = v.stamps + shift
            newer = stamps > self.stamps[rows]
            if count_nonzero(newer):
                r = rows[newer]
                self.matrices[r] = v.matrices.reshape(k, shapes)[newer]
                self.stamps[r] = stamps[newer]
                self._set_grows(r, v.grows[newer])
            # (a boot time moves only when the server restarted, not by an estimate's jitter; it
            # is learnt from the first view in which the RM had heard the server)
            boots = v.boot_times + shift
            alive = v.alive.astype(bool)
            was_alive, was_boot, known = self.alive[rows], self.boot_times[rows], self.boot_known[rows]
            take = alive & (~known | (boots > was_boot + BOOT_JITTER_S))
            now_boot = np.where(take, boots, was_boot)
            self.boot_times[rows] = now_boot
            self.boot_known[rows] = known | alive
            self.alive[rows] = alive
            self.alive_count = int(self.alive.sum())
            # (a boot time learnt, not changed, is no restart: tasks sent before the first view
            # stay put)
            lost = rows[(was_alive & ~alive) | ((now_boot > was_boot) & known)]
        if len(v.lightly_loaded):
            self.lightly_loaded = v.lightly_loaded
        self.time = v.time + shift
        self.seq = v.seq
        self.version += 1
        self._idle_checked_at = -np.inf              # a new view: look again
        self._idle_owed = False
        return lost

    def _set_grows(self, rows, grows) -> None:
        """Rows ``rows`` now move by ``grows`` (keeping the count of growing rows)."""
        was = int(count_nonzero(self.grows[rows] >= 0.0))
        self.grows[rows] = grows
        self.growing += int(count_nonzero(self.grows[rows] >= 0.0)) - was

    def apply_row(self, server: int, matrix: "np.ndarray | list[float]", time: float, sent: float = -1.0, now: float = 0.0,
                  grow: float = -1.0) -> None:
        """A PN's reading taken at ``time`` (its clock), in a message it sent at ``sent`` (< 0:
        unknown) that arrived at ``now`` (ours), moving by ``grow`` after it."""
        if sent >= 0:
            time += self.pn_clocks.observe(server, now, sent)
        stamp: float = self.stamps.item(server)      # (typed: compiled, compared as C doubles)
        if time > stamp:
            if self._idle_owed:
                self._settle_idle(now)
            self._rows.write(server, matrix)
            self.stamps[server] = time
            was: float = self.grows.item(server)
            if was != grow:
                self.grows[server] = grow
                self.growing += int(grow >= 0.0) - int(was >= 0.0)
            self.version += 1
