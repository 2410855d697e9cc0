"""The simulator's huge-page pager: best effort, never an error, never a change in results."""
import ctypes
import errno
import json

import apollo.runtime.sim as sim
from apollo.runtime.hugepages import HeapPager
from apollo.tools.simulate import SimConfig, run_simulation
from apollo.workloads import load_workload


def test_collapse_never_raises_and_does_each_range_once():
    pager = HeapPager()
    first = pager.collapse()
    assert first >= 0
    if pager.available and first:
        done = set(pager._tried)
        pager.collapse()
        assert done <= pager._tried          # a range collapsed is not asked again


def fake_madvise(code, calls):
    def madvise(addr, length, advice):
        calls.append((addr, length, advice))
        ctypes.set_errno(code)
        return -1
    return madvise


def test_a_kernel_without_the_call_turns_the_pager_off():
    for code in (errno.ENOSYS, errno.EINVAL):     # no syscall / an advice the kernel does not know
        calls = []
        pager = HeapPager()
        pager._madvise = fake_madvise(code, calls)
        assert pager.collapse() == 0
        assert calls and not pager.available
        n = len(calls)
        assert pager.collapse() == 0 and len(calls) == n      # not asked again


def test_busy_memory_is_tried_again_later():
    calls = []
    pager = HeapPager()
    pager._madvise = fake_madvise(errno.EAGAIN, calls)
    pager.collapse()
    n = len(calls)
    assert n and pager.available and not pager._tried
    pager.collapse()
    assert len(calls) >= 2 * n - 2                # the same ranges again (give or take a mapping)


def test_results_are_the_same_with_and_without_it(monkeypatch):
    w = load_workload("scale:servers=60,seconds=3", seed=4)
    cfg = SimConfig(servers=60, racks=3, seed=4, fail_prob=0.02, crashes=[(1.0, 5, 1.0)])
    monkeypatch.setattr(sim, "HUGEPAGES_MIN_ACTORS", 10 ** 9)
    off = run_simulation(w, cfg)
    monkeypatch.setattr(sim, "HUGEPAGES_MIN_ACTORS", 1)
    monkeypatch.setattr(sim, "HUGEPAGES_EVERY", 100)     # many passes within the run
    passes = []
    real = HeapPager.collapse
    monkeypatch.setattr(HeapPager, "collapse", lambda self: passes.append(1) or real(self))
    on = run_simulation(w, cfg)
    assert len(passes) > 5
    for r in (off, on):
        r.pop("throughput")
    assert json.dumps(on, sort_keys=True) == json.dumps(off, sort_keys=True)
