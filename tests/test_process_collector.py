"""The cyclic collector of a live process runs from its loop (apollo.tools.process.quiet_collector)."""
import gc
import weakref

from apollo.tools import process
from helpers import await_until


class _Node:
    def __init__(self) -> None:
        self.other: "_Node | None" = None


async def test_the_collector_runs_on_the_loop_and_still_frees_cycles(monkeypatch):
    import asyncio
    monkeypatch.setattr(process, "COLLECT_YOUNG_S", 0.02)
    monkeypatch.setattr(process, "COLLECT_ALL_EVERY", 3)
    seen: list[int] = []

    def note(phase, info):
        if phase == "stop":
            seen.append(info["generation"])
    was_enabled, was_threshold = gc.isenabled(), gc.get_threshold()
    gc.callbacks.append(note)
    try:
        process.quiet_collector(asyncio.get_running_loop())
        assert not gc.isenabled()               # nothing collects on allocation counts
        assert gc.get_freeze_count() > 0        # what start-up made is never scanned again
        seen.clear()
        a, b = _Node(), _Node()
        a.other, b.other = b, a                 # a cycle: reference counts alone never free it
        gone = weakref.ref(a)
        del a, b
        for _ in range(10_000):                 # allocations that once set off collections
            [object() for _ in range(3)]
        assert seen == []
        await await_until(lambda: gone() is None, 2.0, "the cycle collected by the loop's collector")
        await await_until(lambda: 2 in seen, 2.0, "a collection of every generation")
        assert set(seen) <= {1, 2}
    finally:
        gc.callbacks.remove(note)
        gc.unfreeze()
        gc.set_threshold(*was_threshold)
        if was_enabled:
            gc.enable()
