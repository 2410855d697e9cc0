"""Hypothesis properties: matching, backfill, the wait matrix, water-filling."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from jm.stable_matching import UNMATCHED, greedy_match, is_stable, stable_match
from pn.queue import Profile, release_waits
from pn.state import PnConfig, PnState
from rm.sharing import water_fill


@st.composite
def instances(draw):
    B = draw(st.integers(1, 12))
    K = draw(st.integers(1, 6))
    n_servers = draw(st.integers(K, 15))
    seed = draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    cand = np.stack([rng.choice(n_servers, size=K, replace=False) for _ in range(B)])
    cost = rng.exponential(size=(B, K))
    holes = rng.random((B, K)) < draw(st.floats(0, 0.5))
    cost[holes] = np.inf
    return cand, cost


@given(instances())
def test_batch_gives_no_server_two_tasks_and_stays_in_candidates(inst):
    cand, cost = inst
    for out in (stable_match(cand, cost, 4), stable_match(cand, cost, 10**6)):
        got = out[out != UNMATCHED]
        assert len(got) == len(set(got.tolist()))          # one task per server
        for b, s in enumerate(out):                         # a task gets at most one, from its candidates
            if s != UNMATCHED:
                k = np.flatnonzero(cand[b] == s)
                assert len(k) == 1 and np.isfinite(cost[b, k[0]])


@given(instances())
def test_converged_matching_is_stable_under_the_saving_rule(inst):
    cand, cost = inst
    out = stable_match(cand, cost, 10**6)
    assert is_stable(cand, cost, out)


@given(instances(), st.floats(0.0, 2.0))
def test_deferral_respected_and_still_stable(inst, slack):
    cand, cost = inst
    finite = np.where(np.isfinite(cost), cost, np.nan)
    best = np.nanmin(np.where(np.isnan(finite).all(1, keepdims=True), 0, finite), axis=1)
    defer = best + slack
    out = stable_match(cand, cost, 10**6, defer=defer)
    for b, s in enumerate(out):
        if s != UNMATCHED:
            assert cost[b, np.flatnonzero(cand[b] == s)[0]] <= defer[b] + 1e-12
    assert is_stable(cand, cost, out, defer)


@given(instances())
def test_greedy_places_every_task_with_a_finite_option(inst):
    cand, cost = inst
    out = greedy_match(cand, cost)
    for b in range(len(cand)):
        assert (out[b] != UNMATCHED) == bool(np.isfinite(cost[b]).any())


tasks = st.lists(st.tuples(st.sampled_from([0.5, 1.0, 2.0, 3.0, 4.0]), st.sampled_from([1.0, 2.0, 8.0, 16.0]),
                           st.floats(0.1, 50.0)), min_size=1, max_size=10)
running = st.lists(st.tuples(st.floats(0.0, 40.0), st.sampled_from([1.0, 2.0]), st.sampled_from([1.0, 4.0])),
                   max_size=2)


def plan(run, queue, cores=4.0, mem=16.0):
    free_c = cores - sum(c for _, c, _ in run)
    free_m = mem - sum(m for _, _, m in run)
    prof = Profile(0.0, free_c, free_m, list(run))
    starts = []
    for c, m, d in queue:
        t = prof.earliest_fit(c, m, d)
        starts.append(t)
        if t < float("inf"):
            prof.reserve(t, d, c, m)
    return starts, prof


@given(running, tasks, tasks)
def test_backfill_never_delays_an_earlier_task(run, queue, later):
    before, _ = plan(run, queue)
    after, _ = plan(run, queue + later)
    assert after[:len(queue)] == before


@given(running, tasks)
def test_planned_schedule_never_overcommits(run, queue):
    _, prof = plan(run, queue)
    assert min(prof.cpu) >= -1e-9 and min(prof.mem) >= -1e-9


@given(running, tasks)
def test_bigger_shape_never_waits_less(run, queue):
    _, prof = plan(run, queue)
    grid_c, grid_m = (1.0, 2.0, 4.0), (2.0, 4.0, 8.0, 16.0)
    m = np.array(prof.wait_matrix(grid_c, grid_m)).reshape(3, 4)
    assert np.all(np.diff(m, axis=0) >= 0) and np.all(np.diff(m, axis=1) >= 0)


@given(st.lists(st.tuples(st.floats(0.0, 40.0), st.sampled_from([0.5, 1.0, 2.0]), st.sampled_from([1.0, 4.0])),
                max_size=5), st.floats(0.0, 4.0), st.floats(0.0, 16.0), st.floats(0.0, 10.0))
def test_matrix_of_an_empty_queue_is_the_profiles(run, free_c, free_m, now):
    """The no-queue shortcut reads the same waits as planning off the full profile."""
    grid_c, grid_m = (1.0, 2.0, 4.0), (2.0, 4.0, 8.0, 16.0)
    full = [min(w, 1e9) for w in Profile(now, free_c, free_m, list(run)).wait_matrix(grid_c, grid_m)]
    assert release_waits(now, free_c, free_m, sorted(run), grid_c, grid_m, 1e9) == pytest.approx(full, abs=1e-9)


@given(st.lists(st.floats(0.0, 100.0), min_size=1, max_size=12), st.floats(0.0, 300.0),
       st.lists(st.floats(0.1, 5.0), min_size=12, max_size=12))
def test_water_fill_is_max_min_fair(demands, capacity, weights):
    d = np.array(demands)
    w = np.array(weights[:len(d)])
    a = water_fill(capacity, d, w)
    assert np.all(a <= d + 1e-9) and np.all(a >= -1e-9)
    assert abs(a.sum() - min(capacity, d.sum())) < 1e-6 * max(1.0, capacity)
    # max-min: anyone below demand gets at least the weighted share of everyone else
    short = a < d - 1e-9
    for i in np.flatnonzero(short):
        assert np.all(a[i] / w[i] >= a / w - 1e-6)


@given(instances(), st.integers(2, 4))
def test_capacity_matching_fills_no_server_beyond_capacity_and_is_stable(inst, capacity):
    """Pipelined short tasks: a server takes up to ``capacity`` of a batch (hospitals/residents)."""
    cand, cost = inst
    for rounds in (4, 10**6):
        out = stable_match(cand, cost, rounds, capacity=capacity)
        got = out[out != UNMATCHED].tolist()
        assert all(got.count(s) <= capacity for s in set(got))
        for b, s in enumerate(out):
            if s != UNMATCHED:
                k = np.flatnonzero(cand[b] == s)
                assert len(k) == 1 and np.isfinite(cost[b, k[0]])
    assert is_stable(cand, cost, out, capacity=capacity)
    # With room for everyone, every task with a finite option gets its cheapest one.
    roomy = stable_match(cand, cost, 10**6, capacity=len(cand))
    best = np.where(np.isfinite(cost).any(axis=1), cand[np.arange(len(cand)), cost.argmin(axis=1)], UNMATCHED)
    assert roomy.tolist() == best.tolist()


@given(instances(), st.integers(1, 4), st.integers(0, 2**31))
def test_seat_matching_is_stable_over_seats_and_fills_no_server_beyond_them(inst, seats, seed):
    """Stable matching's seats (jm/policies/matchers.py): a server takes at most ``seats`` of a
    batch, each task at one of its candidates and in one seat; no task would rather have a
    seat held by a task that saves less there (stable over the seats' costs); and a task that
    takes a later seat pays at least what the seats before it cost it."""
    from jm.stable_matching import seat_costs, seat_match
    cand, cost = inst
    rng = np.random.default_rng(seed)
    load = rng.exponential(size=len(cand))
    free = rng.integers(0, 3, size=cand.shape).astype(float)
    srv, seat = seat_match(cand, cost, load, free, seats, 10**6)
    got = srv[srv != UNMATCHED].tolist()
    assert all(got.count(s) <= seats for s in set(got))
    placed = [(int(s), int(q)) for s, q in zip(srv, seat) if s != UNMATCHED]
    assert len(placed) == len(set(placed))                      # one task a seat
    for b, s in enumerate(srv):
        if s != UNMATCHED:
            assert np.isfinite(cost[b, int(np.flatnonzero(cand[b] == s)[0])])
    cx, Cx = seat_costs(cand, cost, load, free, seats)
    assert is_stable(cx, Cx, np.where(srv != UNMATCHED, srv * seats + seat, UNMATCHED))
    # seat prices never fall along a server's seats
    C3 = Cx.reshape(len(cand), cand.shape[1], seats)
    fin = np.isfinite(C3)
    assert np.all(np.diff(np.where(fin, C3, 0.0), axis=2) >= 0) and np.all(fin == fin[:, :, :1])


def _rounds_as_arrays(cand, cost, max_rounds, defer=None, capacity=1):
    """Deferred acceptance as numpy rounds (what stable_match ran before its rounds became a
    loop over proposals): every free task proposes at once, each server keeps the ``capacity``
    largest savings (ties: the lower task id), rejected tasks move one server on."""
    from jm.stable_matching import savings
    B, K = cost.shape
    result = np.full(B, UNMATCHED, dtype=np.int64)
    if B == 0 or K == 0:
        return result
    if defer is not None:
        cost = np.where(cost <= defer[:, None], cost, np.inf)
    sav = savings(cost, defer)
    order = cost.argsort(axis=1, kind="stable")
    n_opts = np.isfinite(cost).sum(axis=1)
    ptr = np.zeros(B, dtype=np.int64)
    match = np.full(B, -1, dtype=np.int64)
    tasks = np.arange(B)
    free = n_opts > 0
    for _ in range(max_rounds):
        pt = tasks[free]
        if len(pt) == 0:
            break
        pk = order[pt, ptr[pt]]
        ht = tasks[match >= 0]
        T = np.concatenate((pt, ht))
        Kc = np.concatenate((pk, match[ht]))
        S = cand[T, Kc]
        o = np.lexsort((T, -sav[T, Kc], S))
        Ss = S[o]
        first = np.empty(len(o), dtype=bool)
        first[0] = True
        np.not_equal(Ss[1:], Ss[:-1], out=first[1:])
        if capacity > 1:
            pos = np.arange(len(o))
            first = pos - np.maximum.accumulate(np.where(first, pos, 0)) < capacity
        lose = T[o[~first]]
        match[lose] = -1
        ptr[lose] += 1
        match[T[o[first]]] = Kc[o[first]]
        free = (match < 0) & (ptr < n_opts)
    ok = match >= 0
    result[ok] = cand[tasks[ok], match[ok]]
    return result


@given(instances(), st.integers(1, 6), st.integers(1, 3), st.booleans(), st.integers(0, 3))
def test_proposals_end_where_array_rounds_end_however_many_rounds(inst, rounds, capacity, deferring, ties):
    """stable_match's loop over proposals gives what the round-at-once numpy version gave, cut
    after the same number of rounds: tied costs and tied savings included."""
    cand, cost = inst
    if ties:      # costs on a coarse grid: equal costs, and so equal savings, are common
        cost = np.where(np.isfinite(cost), np.round(cost * ties) / ties, np.inf)
    finite = np.where(np.isfinite(cost), cost, np.nan)
    best = np.nanmin(np.where(np.isnan(finite).all(1, keepdims=True), 0, finite), axis=1)
    defer = best + 0.5 if deferring else None
    for r in (rounds, 10**6):
        assert stable_match(cand, cost, r, defer, capacity).tolist() == \
            _rounds_as_arrays(cand, cost, r, defer, capacity).tolist()
