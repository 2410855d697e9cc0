"""A server's resource profile over time: planning of the local queue and the wait-time matrix.

The profile is a step function of free (cpu, mem) from ``now`` onwards, built
from the running tasks' expected ends. Queued tasks are planned in FIFO
order, each at the earliest time it fits for its whole expected runtime
(conservative backfilling): a later task can start early only in a gap that
no earlier task was planned into, so backfill never delays an earlier task's
expected start. The wait-time matrix asks the same question for a
hypothetical task of each grid shape appended to the queue, held until the
end of the horizon, so a bigger shape never waits less than a smaller one.
"""
from __future__ import annotations

from typing import Final

import bisect
import math

INF: Final = math.inf


class Profile:
    """Free resources as a step function: free[k] holds on [times[k], times[k+1])."""
    __slots__ = ("times", "cpu", "mem")

    def __init__(self, now: float, free_cpu: float, free_mem: float,
                 releases: list[tuple[float, float, float]]) -> None:
        # releases: (time, cpu, mem) freed at that time by running tasks.
        times = [now]
        cpu = [free_cpu]
        mem = [free_mem]
        for t, c, m in sorted(releases):
            t = max(t, now)
            if t == times[-1]:
                cpu[-1] += c
                mem[-1] += m
            else:
                times.append(t)
                cpu.append(cpu[-1] + c)
                mem.append(mem[-1] + m)
        self.times, self.cpu, self.mem = times, cpu, mem

    def _split(self, t: float) -> int:
        """Ensure a breakpoint at t (t >= times[0]); return its index."""
        i = bisect.bisect_right(self.times, t) - 1
        if self.times[i] == t:
            return i
        self.times.insert(i + 1, t)
        self.cpu.insert(i + 1, self.cpu[i])
        self.mem.insert(i + 1, self.mem[i])
        return i + 1

    def earliest_fit(self, c: float, m: float, duration: float, not_before: float | None = None) -> float:
        """Earliest breakpoint time at which (c, m) stays free for ``duration``; the search starts
        at the breakpoint ``not_before`` (a time known to be no later than the answer)."""
        times, cpu, mem = self.times, self.cpu, self.mem
        n = len(times)
        k = 0 if not_before is None else max(bisect.bisect_right(times, not_before) - 1, 0)
        eps = 1e-9
        while k < n:
            if cpu[k] + eps < c or mem[k] + eps < m:
                k += 1
                continue
            end = times[k] + duration
            j = k + 1
            while j < n and times[j] < end:
                if cpu[j] + eps < c or mem[j] + eps < m:
                    break
                j += 1
            else:
                return times[k]
            k = j + 1
        return INF  # never fits (larger than the server)

    def reserve(self, start: float, duration: float, c: float, m: float) -> None:
        i = self._split(start)
        j = self._split(start + duration) if duration < INF else len(self.times)
        for k in range(i, j):
            self.cpu[k] -= c
            self.mem[k] -= m

    def wait_matrix(self, cpu_grid: tuple[float, ...], mem_grid: tuple[float, ...]) -> list[float]:
        """Expected wait (from times[0]) for each grid shape held forever, row-major cpu x mem."""
        n = len(self.times)
        suf_c = [0.0] * n
        suf_m = [0.0] * n
        lc = lm = INF
        for k in range(n - 1, -1, -1):
            lc = min(lc, self.cpu[k])
            lm = min(lm, self.mem[k])
            suf_c[k] = lc
            suf_m[k] = lm
        t0 = self.times[0]
        out = []
        eps = 1e-9
        for c in cpu_grid:
            # suffix minima are non-decreasing in k, so the first fit is a binary search
            kc = bisect.bisect_left(suf_c, c - eps)
            for m in mem_grid:
                km = bisect.bisect_left(suf_m, m - eps)
                k = max(kc, km)
                out.append(self.times[k] - t0 if k < n else INF)
        return out


def release_waits(now: float, free_cpu: float, free_mem: float, releases: list[tuple[float, float, float]],
                  cpu_grid: tuple[float, ...], mem_grid: tuple[float, ...], never: float) -> list[float]:
    """The wait matrix of a server with nothing queued: free room only grows as running tasks
    end, so each shape waits until the first release after which it fits. The same numbers as
    ``Profile(...).wait_matrix`` (capped at ``never``) without building a profile: this is
    most servers' reading most of the time. ``releases`` must be in time order (PnState._room
    gives them so).

    Both grids are ascending, so walking the releases in time order, each release lets the
    next few cpu (and memory) sizes fit, and a shape waits for the later of its cpu's and its
    memory's first fit (waits never decrease along the walk)."""
    eps = 1e-9
    fc, fm = free_cpu + eps, free_mem + eps
    nc, nm = len(cpu_grid), len(mem_grid)
    ic = im = 0
    while ic < nc and cpu_grid[ic] <= fc:
        ic += 1
    while im < nm and mem_grid[im] <= fm:
        im += 1
    wait_c = [0.0] * ic        # wait of each cpu size (at any memory), then of each memory size
    wait_m = [0.0] * im
    if ic < nc or im < nm:
        for t, c, m in releases:
            w = t - now if t > now else 0.0
            fc += c
            fm += m
            while ic < nc and cpu_grid[ic] <= fc:
                wait_c.append(w)
                ic += 1
            while im < nm and mem_grid[im] <= fm:
                wait_m.append(w)
                im += 1
            if ic == nc and im == nm:
                break
        if ic < nc:
            wait_c += [never] * (nc - ic)
        if im < nm:
            wait_m += [never] * (nm - im)
    return [a if a > b else b for a in wait_c for b in wait_m]
