"""One task's placement steps on Python numbers against their array forms (a job's start with one
task, and every token freed one at a time, take them): the same results, bit for bit, and the
same random draws.

- Its candidates (jm.candidates._candidate_row against _candidate_arrays): any topology, replicas
  or none, lightly loaded servers or none.
- Its costs (jm.estimate._costs_one against _costs_rows): readings old and fresh, growing ones,
  dead servers, shapes that never fit, this host's own sends not yet in a reading, failures
  seen, input read or not, repeated and invalid candidates."""
import numpy as np
from hypothesis import given, settings, strategies as st

from apollo.core.cluster import IoModel, Topology
from jm.candidates import _candidate_arrays, _candidate_row
from jm.estimate import EstimateConfig, _costs_one, _costs_rows
from jm.view import ViewCache

SERVERS = 6
WAITS = st.sampled_from([0.0, 0.0, 0.5, 1.0, 2.5, 7.0, 30.0, 1e8, 3e9])      # 1e8 and up: never fits
STAMPS = st.sampled_from([-np.inf, 0.0, 1.0, 4.0, 9.5, 9.999, 10.0])
GROWS = st.sampled_from([-1.0, -1.0, 0.0, 0.1, 1.5])


@st.composite
def cases(draw):
    v = ViewCache(SERVERS, cores=4.0)
    rows = draw(st.lists(st.lists(WAITS, min_size=v.shapes, max_size=v.shapes), min_size=SERVERS,
                         max_size=SERVERS))
    v.matrices[:] = np.array(rows, dtype=np.float32)
    v.stamps[:] = draw(st.lists(STAMPS, min_size=SERVERS, max_size=SERVERS))
    v.grows[:] = draw(st.lists(GROWS, min_size=SERVERS, max_size=SERVERS))
    v.growing = int((v.grows >= 0.0).sum())
    v.alive[:] = draw(st.lists(st.booleans(), min_size=SERVERS, max_size=SERVERS))
    v.time = draw(st.sampled_from([-np.inf, 0.0, 8.0, 10.0]))
    # this host's own sends: when, and how much, per server
    v.sent_at[:] = draw(st.lists(st.sampled_from([-np.inf, 0.0, 9.997, 10.0]), min_size=SERVERS, max_size=SERVERS))
    v.sent_cpu[:] = draw(st.lists(st.sampled_from([0.0, 1.0, 1.0000000005, 3.0000000005, 3.5]), min_size=SERVERS, max_size=SERVERS))
    v.sent_wait[:] = draw(st.lists(st.sampled_from([0.0, 0.25, 4.0]), min_size=SERVERS, max_size=SERVERS))
    k = draw(st.integers(1, 12))
    cand = np.array([sorted(draw(st.lists(st.integers(0, SERVERS - 1), min_size=k, max_size=k)))], dtype=np.int64)
    loc = np.array([draw(st.lists(st.integers(0, 2), min_size=k, max_size=k))], dtype=np.uint8)
    valid = np.array([draw(st.lists(st.booleans(), min_size=k, max_size=k))]) if draw(st.booleans()) else None
    fail = np.array(draw(st.lists(st.sampled_from([0.0, 0.001, 0.0025, 0.5, 0.75]), min_size=SERVERS,
                                  max_size=SERVERS))) if draw(st.booleans()) else None
    task = dict(in_bytes=np.array([draw(st.sampled_from([0.0, 64e6, 3.3e9]))]),
                runtime=np.array([draw(st.sampled_from([0.0, 2.0, 61.7]))]),
                shape=np.array([draw(st.integers(0, v.shapes - 1))]),
                cpu=np.array([draw(st.sampled_from([0.5, 1.0, 2.0, 4.0]))]))
    now = draw(st.sampled_from([10.0, 10.002, 12.0, 75.0]))
    cfg = EstimateConfig(tie_noise_s=draw(st.sampled_from([0.0, 0.01])),
                         stale_penalty=draw(st.sampled_from([0.0, 0.25])), max_stale_s=draw(st.sampled_from([1.0, 60.0])))
    io = IoModel(init_s=draw(st.sampled_from([0.0, 0.5])))
    return v, cand, loc, valid, fail, task, now, cfg, io


def _same(a, b):
    """Equal as floats go, bit for bit (an inf for an inf, -0.0 for -0.0)."""
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


# (200 and 150 examples, from 400 and 300: the whole suite's 5 minutes on 2 cores are tight)
@settings(max_examples=200, deadline=None)
@given(cases(), st.integers(0, 2 ** 32 - 1))
def test_one_task_is_priced_as_the_array_form_prices_it(case, seed):
    v, cand, loc, valid, fail, t, now, cfg, io = case
    rng_rows, rng_one = np.random.default_rng(seed), np.random.default_rng(seed)
    with np.errstate(invalid="ignore"):      # (0 x inf: a growing row never heard from, NaN both ways)
        rows = _costs_rows(cand, loc, t["in_bytes"], t["runtime"], t["shape"], t["cpu"], now, v, fail, io, cfg,
                           rng_rows, valid)
    one = _costs_one(cand, loc, t["in_bytes"].item(0), t["runtime"].item(0), t["shape"].item(0), t["cpu"].item(0),
                     now, v, fail, io, cfg, rng_one, valid)
    for name, a, b in zip("CEW", rows, one):
        assert _same(a, b), (name, a, b)
    assert rng_rows.random() == rng_one.random()          # the same draws taken


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 60), st.integers(1, 7), st.integers(0, 3), st.integers(1, 3), st.integers(0, 3),
       st.sampled_from(["none", "none-flagged", "all", "mixed"]), st.integers(0, 2 ** 32 - 1), st.data())
def test_one_task_gets_the_candidates_the_array_form_gives(servers, racks, n_light_pool, per_rack, n_light, kind,
                                                           seed, data):
    topo = Topology(servers, min(racks, servers))
    w = 3
    pick = st.integers(0, servers - 1)
    if kind.startswith("none"):
        reps = np.full((1, w), -1, dtype=np.int64)
    else:
        reps = np.array([data.draw(st.lists(pick, min_size=w, max_size=w))], dtype=np.int32)
        if kind == "mixed":
            reps[0, data.draw(st.integers(0, w - 1))] = -1
    light = np.array(sorted(set(data.draw(st.lists(pick, max_size=n_light_pool)))), dtype=np.int32)
    rng_arrays, rng_row = np.random.default_rng(seed), np.random.default_rng(seed)
    flagged = kind == "none-flagged"
    a = _candidate_arrays(reps, topo, light, rng_arrays, per_rack, n_light, flagged)
    b = _candidate_row(reps, topo, light, rng_row, per_rack, n_light, flagged)
    for x, y in zip(a, b):
        assert _same(x, y), (x, y)
    assert rng_arrays.random() == rng_row.random()


@settings(max_examples=150, deadline=None)
@given(cases(), st.booleans(), st.data())
def test_a_few_servers_free_cpus_are_the_array_forms(case, as_reported, data):
    """The view's free CPUs of a few servers (a job's crowded first choices, a small cluster's idle
    finding) on Python numbers (ViewCache.free_cpu_one) against the array form (_free_rows)."""
    v, _, _, _, _, _, now, _, _ = case
    servers = np.array(data.draw(st.lists(st.integers(0, SERVERS - 1), max_size=12)), dtype=np.int64)
    rows = v._free_rows(servers, now, as_reported)
    few = np.array([v.free_cpu_one(s, now, as_reported) for s in servers.tolist()])
    assert _same(rows, few), (rows, few)
    assert _same(v._free_cpus(servers, now, as_reported), rows)
