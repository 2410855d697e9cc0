"""Cluster topology, input-block placement and the I/O model shared by every runtime.

Block placement is a pure function of (dataset, block, topology): every JM,
the simulator and a live cluster agree on where a block lives without
asking anyone. It follows HDFS's default policy: the first replica on one
server, the second and third on two different servers of one other rack.
"""
from __future__ import annotations

from typing import Final

import zlib
from dataclasses import dataclass

import numpy as np

NODE: Final = 0
RACK: Final = 1
REMOTE: Final = 2
LOCALITY_NAMES = ("node", "rack", "remote")

# (0-d uint64 arrays, not numpy scalars: an operation with a scalar converts it first, which
# made up a third of a small job's replica placement)
# (Final: compiled, kept in a C static rather than looked up in the module's globals per use)
_GOLDEN: Final = np.array(0x9E3779B97F4A7C15, dtype=np.uint64)
_MIX1: Final = np.array(0xBF58476D1CE4E5B9, dtype=np.uint64)
_MIX2: Final = np.array(0x94D049BB133111EB, dtype=np.uint64)
_S27: Final = np.array(27, dtype=np.uint64)
_S30: Final = np.array(30, dtype=np.uint64)
_S31: Final = np.array(31, dtype=np.uint64)
_S32: Final = np.array(32, dtype=np.uint64)
_BLOCK_MUL: Final = np.array(0x632BE59BD9B4E019, dtype=np.uint64)
_ONE: Final = np.array(1, dtype=np.uint64)


def _splitmix(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser over a uint64 array: a cheap, well-mixed hash, into a new array.
    (Array arithmetic wraps silently; only numpy scalars warn on overflow. A job's start
    computes three; in place, as their allocations cost about what their arithmetic does.)"""
    x = x + _GOLDEN
    t = x >> _S30
    x ^= t
    x *= _MIX1
    np.right_shift(x, _S27, out=t)
    x ^= t
    x *= _MIX2
    np.right_shift(x, _S31, out=t)
    x ^= t
    return x


@dataclass
class Topology:
    servers: int
    racks: int
    cores: float = 4.0
    mem_gb: float = 16.0

    def __post_init__(self) -> None:
        if self.servers < 1 or self.racks < 1 or self.racks > self.servers:
            raise ValueError(f"need 1 <= racks <= servers, got servers={self.servers} racks={self.racks}")
        # Servers are dealt to racks round-robin-free: contiguous blocks of (almost) equal size.
        self.rack_of = (np.arange(self.servers) * self.racks // self.servers).astype(np.int32)
        starts = np.searchsorted(self.rack_of, np.arange(self.racks + 1))
        self.rack_start = starts[:-1].astype(np.int64)
        self.rack_size = np.diff(starts).astype(np.int64)
        # (replicas' columns, in uint64)
        self._rack_of_u = self.rack_of.astype(np.uint64)
        self._rack_start_u = self.rack_start.astype(np.uint64)
        self._rack_size_u = self.rack_size.astype(np.uint64)
        self._rack_size_m1_u = np.maximum(self.rack_size - 1, 1).astype(np.uint64)
        self._racks_u = np.array(self.racks, dtype=np.uint64)
        self._racks_m1_u = np.array(max(self.racks - 1, 1), dtype=np.uint64)

    @property
    def total_cores(self) -> float:
        return self.servers * self.cores

    def replicas(self, dataset: str, blocks: np.ndarray) -> np.ndarray:
        """int32[len(blocks), 3] server ids holding each block of ``dataset``."""
        blocks = np.asarray(blocks, dtype=np.uint64).reshape(-1)   # arrays wrap; scalars would warn
        h1 = blocks * _BLOCK_MUL
        h1 ^= np.array(zlib.crc32(dataset.encode()) * 0x100000001, dtype=np.uint64)
        h1 = _splitmix(h1)
        h2 = _splitmix(h1)
        h3 = _splitmix(h2)
        first = h1 % np.array(self.servers, dtype=np.uint64)
        out = np.empty((len(blocks), 3), dtype=np.int32)
        out[:, 0] = first
        if self.racks == 1:
            # One rack: three distinct servers where possible.
            n = self.servers
            first = first.astype(np.int64)
            out[:, 1] = (first + 1 + (h2 % np.uint64(max(n - 1, 1))).astype(np.int64)) % n
            out[:, 2] = (first + 1 + (h3 % np.uint64(max(n - 1, 1))).astype(np.int64)) % n
            return out
        # (in uint64 throughout, in place, from per-rack columns made once: every value is below
        # 2**63, so these are the int64 figures, with a third fewer numpy calls per job)
        rack1 = self._rack_of_u[first]
        other = h2 % self._racks_m1_u
        other += rack1
        other += _ONE
        other %= self._racks_u
        size = self._rack_size_u[other]
        a = h3 % size
        b = (h3 >> _S32) % self._rack_size_m1_u[other]
        b += a
        b += _ONE
        b %= size
        start = self._rack_start_u[other]
        a += start
        b += start
        out[:, 1] = a
        out[:, 2] = b
        return out


@dataclass(slots=True, frozen=True)
class IoModel:
    """Input read bandwidth by locality, plus a fixed per-task start-up cost.

    Figures are of the order the Apollo and delay-scheduling papers assume for
    2010-era clusters: local disk, an in-rack link shared by a few tasks, and an
    oversubscribed core for cross-rack reads.
    """
    node_bytes_per_s: float = 200e6
    rack_bytes_per_s: float = 100e6
    remote_bytes_per_s: float = 25e6
    init_s: float = 0.2

    def bandwidths(self) -> np.ndarray:
        return np.array([self.node_bytes_per_s, self.rack_bytes_per_s, self.remote_bytes_per_s])

    def io_time(self, input_bytes: float, locality: int) -> float:
        return self.init_s + input_bytes / (self.node_bytes_per_s, self.rack_bytes_per_s,
                                            self.remote_bytes_per_s)[locality]


def locality_of(server: int, replicas: np.ndarray | None, rack_of: np.ndarray) -> int:
    """NODE if ``server`` holds a replica, RACK if one is in its rack, else REMOTE (and REMOTE with no input)."""
    if replicas is None or len(replicas) == 0:
        return REMOTE
    if server in replicas:
        return NODE
    r = rack_of[server]
    for s in replicas:
        if rack_of[s] == r:
            return RACK
    return REMOTE
