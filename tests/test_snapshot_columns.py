"""A round's columns kept from the last round (rm/snapshot_columns.py) equal a fresh read, for
any sequence of rounds in which jobs arrive, end and move (Hypothesis)."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rm.sharing_types import JobView
from rm.snapshot_columns import SnapshotColumns, read_columns

LEAVES = ("root.a", "root.b", "root.c")
USERS = ("ann", "bob", "cyd", "dee")


def _leaf_index(queue: str) -> int:
    return LEAVES.index(queue)


def _view(job_id: int, queue: str, user: str, priority: int, demand: float, tokens: int, admitted: bool) -> JobView:
    return JobView(job_id, queue, user, 1.0, priority, float(job_id), demand, tokens, demand / 2, admitted)


def _same(a, b) -> bool:
    return (np.array_equal(a.cols, b.cols) and np.array_equal(a.leaf, b.leaf) and np.array_equal(a.users, b.users)
            and a.user_names == b.user_names and a.ids == b.ids and np.array_equal(a.rank, b.rank))


# One round's change: (new jobs as (queue, user, priority), job positions that end, positions whose
# view is made anew with another demand)
changes = st.lists(st.tuples(
    st.lists(st.tuples(st.sampled_from(LEAVES), st.sampled_from(USERS), st.integers(0, 2)), max_size=4),
    st.lists(st.integers(0, 30), max_size=3),
    st.lists(st.integers(0, 30), max_size=3)), min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(changes)
def test_kept_columns_equal_a_fresh_read(rounds):
    cols = SnapshotColumns(_leaf_index)
    jobs: list[JobView] = []
    next_id = 1
    for new, ends, moves in rounds:
        for i in sorted({e % len(jobs) for e in ends} if jobs else set(), reverse=True):
            del jobs[i]
        for i in {m % len(jobs) for m in moves} if jobs else set():
            v = jobs[i]
            jobs[i] = _view(v.job_id, v.queue, v.user, v.priority, v.demand + 1.0, v.tokens + 1, True)
        for queue, user, priority in new:
            jobs.append(_view(next_id, queue, user, priority, 2.0, 0, False))
            next_id += 1
        snap = tuple(jobs)
        got = cols.of(snap)
        assert _same(got, read_columns(snap, _leaf_index))
        cols.validate(snap)


def test_a_job_whose_unmoving_fields_changed_is_read_afresh():
    cols = SnapshotColumns(_leaf_index)
    a, b = _view(1, "root.a", "ann", 0, 2.0, 0, False), _view(2, "root.b", "bob", 0, 2.0, 0, False)
    cols.of((a, b))
    # job 2 under another user and queue (a snapshot not made by the RM), and a job 3 arrives
    moved = (a, _view(2, "root.c", "cyd", 1, 2.0, 0, False), _view(3, "root.a", "bob", 0, 1.0, 0, False))
    got = cols.of(moved)
    assert _same(got, read_columns(moved, _leaf_index))
    assert got.user_names == ("ann", "cyd", "bob")


def test_user_codes_go_by_first_appearance_after_a_job_ends():
    cols = SnapshotColumns(_leaf_index)
    jobs = (_view(1, "root.a", "bob", 0, 2.0, 0, False), _view(2, "root.a", "ann", 0, 2.0, 0, False),
            _view(3, "root.b", "bob", 0, 2.0, 0, False))
    assert cols.of(jobs).user_names == ("bob", "ann")
    later = jobs[1:] + (_view(4, "root.c", "dee", 0, 2.0, 0, False),)
    got = cols.of(later)
    assert got.user_names == ("ann", "bob", "dee")
    assert got.users.tolist() == [0, 1, 2]
    assert _same(got, read_columns(later, _leaf_index))


def test_jobs_out_of_order_are_read_right():
    cols = SnapshotColumns(_leaf_index)
    jobs = tuple(_view(i, LEAVES[i % 3], USERS[i % 4], i % 2, 2.0, 0, False) for i in range(1, 40))
    cols.of(jobs)
    for shuffled in (tuple(reversed(jobs)), jobs[20:] + jobs[:20], jobs[::2] + jobs[1::2]):
        got = cols.of(shuffled)
        assert _same(got, read_columns(shuffled, _leaf_index))
        cols.validate(shuffled)
