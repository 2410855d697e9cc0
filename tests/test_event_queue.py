"""The simulator's calendar queue pops exactly in a binary heap's order."""
import heapq
import math

from hypothesis import given, settings, strategies as st

from apollo.runtime.events import EventQueue
from helpers import examples

# An operation: pop, or push an entry this far after the last popped time (negative: overdue).
ops = st.lists(st.one_of(st.none(), st.floats(-0.01, 3.0, allow_nan=False),
                         st.sampled_from([0.0, 0.0005, 0.001, 1e20])), max_size=300)


@settings(max_examples=examples(300), deadline=None)
@given(ops, st.sampled_from([1e-3, 0.1, 1.0]))
def test_pops_in_heap_order(script, width):
    q, heap = EventQueue(width), []
    now, seq = 0.0, 0
    for op in script:
        if op is None:
            if not heap:
                assert len(q) == 0
                continue
            want = heapq.heappop(heap)
            assert q.pop_due(math.nextafter(want[0], -math.inf)) is None   # not due yet: nothing taken
            got = q.pop_due(want[0])
            assert got == want
            now = got[0]
        else:
            seq += 1
            e = (max(now + op, 0.0), seq, "x")
            q.push(e)
            heapq.heappush(heap, e)
        assert len(q) == len(heap)
    while heap:
        assert q.pop_due() == heapq.heappop(heap)
    assert q.pop_due() is None and len(q) == 0


def test_same_time_pops_in_push_order():
    q = EventQueue()
    for i in range(5):
        q.push((1.0, i, "x"))
    assert [q.pop_due()[1] for _ in range(5)] == list(range(5))


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.floats(0.0, 2.0, allow_nan=False), max_size=40),
       st.lists(st.lists(st.floats(-0.01, 0.01, allow_nan=False), max_size=3), max_size=80),
       st.floats(0.0, 3.0, allow_nan=False))
def test_drain_yields_heap_order_with_pushes_between(initial, pushes_after, until):
    """The simulator's loop: entries pushed while one is handled (at or after its time, or
    overdue) come out in heap order; nothing past ``until`` is taken."""
    q, heap, seq = EventQueue(), [], 0
    for t in initial:
        seq += 1
        q.push((t, seq))
        heapq.heappush(heap, (t, seq))
    step = 0
    for got in q.drain(until):
        want = heapq.heappop(heap)
        assert got == want and got[0] <= until
        for d in (pushes_after[step] if step < len(pushes_after) else []):
            seq += 1
            e = (max(got[0] + d, 0.0), seq)
            q.push(e)
            heapq.heappush(heap, e)
        step += 1
    assert not heap or heap[0][0] > until
    assert len(q) == len(heap)
    assert [q.pop_due() for _ in range(len(heap))] == [heapq.heappop(heap) for _ in range(len(heap))]
