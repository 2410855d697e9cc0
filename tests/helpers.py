"""What tests share: small builders, waiting for a condition with a deadline, reading a live
cluster's event files, and the scheduler profiles seeded simulations run under. (Every seeded
simulation validates every actor after every event: conftest.py sees to it.)"""
from __future__ import annotations

import asyncio
import inspect
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple

import numpy as np
import pytest

from apollo.core.messages import ClusterView, TaskSpec
from apollo.tools import native

# A test that patches a class or function of the native build (a spy on a method, a subclass, a
# flag set on an instance), or asks for the interpreted modules in this process: the compiled
# build makes those read-only, so under `APOLLO_NATIVE=1 pytest` it is skipped, not failed. (The
# check after every event, which conftest.py turns on by patching SimRuntime, is off then too.)
interpreted_only = pytest.mark.skipif(native.will_load(), reason="needs the interpreted modules in this process")


def task(job=1, t=0, attempt=1, cpu=1.0, mem=2.0, est=10.0, dur=10.0, opp=False, in_bytes=0.0, loc=2):
    return TaskSpec(job, t, attempt, 0, cpu, mem, dur, in_bytes, loc, est, opp, None, {}, None, None, False)


class Rng:
    """A numpy Generator with a fixed seed (actors take one as ``rng``)."""
    def __new__(cls, seed=0):
        return np.random.default_rng(seed)


def examples(n: int) -> int:
    """A property test's example count: ``n`` in the full suite, a sixth of it (at least 2) in the
    fast tier, whose Hypothesis profile conftest.py loads before the tests are collected."""
    from hypothesis import settings
    return n if settings.default.max_examples >= 60 else max(2, n // 6)


# ---------------------------------------------------------------------------- waiting with a deadline
# A test never asserts after a fixed sleep: it waits for the condition it means, and fails with
# what it waited for once the deadline passes. The sync and async forms share one clock rule.

class _Deadline:
    def __init__(self, timeout: float, what: str) -> None:
        self.timeout, self.what = timeout, what
        self.at = time.monotonic() + timeout

    def check(self) -> None:
        if time.monotonic() > self.at:
            raise AssertionError(f"timed out after {self.timeout:g} s waiting for {self.what}")


def wait_until(predicate: Callable[[], Any], timeout: float = 5.0, what: str = "the condition",
               interval: float = 0.02) -> Any:
    """Poll ``predicate`` until it returns something true (returned) or ``timeout`` s pass."""
    deadline = _Deadline(timeout, what)
    while True:
        v = predicate()
        if v:
            return v
        deadline.check()
        time.sleep(interval)


async def await_until(predicate: Callable[[], Any], timeout: float = 5.0, what: str = "the condition",
                      interval: float = 0.005) -> Any:
    """``wait_until`` inside an event loop (the loop keeps running); ``predicate`` may be async."""
    deadline = _Deadline(timeout, what)
    while True:
        v = predicate()
        if inspect.isawaitable(v):
            v = await v
        if v:
            return v
        deadline.check()
        await asyncio.sleep(interval)


def holds_for(predicate: Callable[[], Any], seconds: float, what: str = "the condition",
              interval: float = 0.02) -> None:
    """That something does NOT happen can only be watched for a while: ``predicate`` must stay
    true for ``seconds`` (checked all along, failing at the first moment it is not)."""
    end = time.monotonic() + seconds
    while True:
        assert predicate(), f"{what} stopped holding"
        if time.monotonic() > end:
            return
        time.sleep(interval)


async def await_holds_for(predicate: Callable[[], Any], seconds: float, what: str = "the condition",
                          interval: float = 0.005) -> None:
    """``holds_for`` inside an event loop."""
    end = time.monotonic() + seconds
    while True:
        assert predicate(), f"{what} stopped holding"
        if time.monotonic() > end:
            return
        await asyncio.sleep(interval)


# ---------------------------------------------------------------------------- a live cluster's event files

class Record(NamedTuple):
    file: str          # the event file's name, e.g. "events-jm0.msgpack"
    kind: str
    now: float
    data: list


def records(folder: Path, *kinds: str) -> list[Record]:
    """Every record of ``kinds`` (all kinds if none) in a cluster's event files, file by file in
    name order, each file in its order, as the tools read them (apollo.tools.eventlog)."""
    from apollo.tools import eventlog
    return [Record(*r) for r in eventlog.records(Path(folder), *kinds)]


# ---------------------------------------------------------------------------- seeded simulations

def profiles() -> list[str]:
    """Every scheduler profile's name, from the one table: a test parametrized over these covers a
    new profile without an edit."""
    from jm.policies import PROFILES
    return list(PROFILES)


def full_view(time: float, matrices, stamps, boots, alive, light, grows=None, seq: int = 1) -> ClusterView:
    """A full ClusterView (base 0: a row for every server, in order)."""
    n = len(stamps)
    return ClusterView(time, seq, 0, np.arange(n, dtype=np.int32), np.asarray(matrices, np.float32),
                       np.asarray(stamps, np.float64), np.asarray(boots, np.float64), np.asarray(alive, np.uint8),
                       np.full(n, -1.0, np.float32) if grows is None else np.asarray(grows, np.float32),
                       np.asarray(light, np.int32))
