"""ClusterView as deltas (issue 30, docs/perf-longspan.md step 3): the RM numbers its views and
sends a host the rows changed since the view it acknowledged; a lost view is covered by the
next, a (re)started host or RM gets every row."""
import numpy as np
from hypothesis import given, settings, strategies as st

from apollo.core.effects import PeerLost, Send, Start, Timer
from apollo.core.messages import ClusterView, Heartbeat, HostReport, pack, unpack
from jm.view import ViewCache
from rm.cluster_load import ClusterLoad
from rm.state import RmConfig, RmState, single_queue

from helpers import Rng

NONE = np.zeros(0, np.int64)


def hb(s, t, w0=0.0, boot=0.0):
    return Heartbeat(s, boot, t, np.full(12, w0, np.float32), 0, 0, 4.0)


def report(seq, host="jmhost"):
    return HostReport(host, NONE, NONE, NONE, NONE, NONE, [], seq)


def views(out):
    return [e.msg for e in out if isinstance(e, Send) and isinstance(e.msg, ClusterView)]


def rm(n=6):
    r = RmState(RmConfig(n, 12, queues=single_queue(), rejoin_s=0.0))
    r.handle(Start(), 0.0, Rng())
    for s in range(n):
        r.handle(hb(s, 0.5), 0.5, Rng())
    return r


def test_a_host_without_an_acknowledgement_gets_every_row_then_only_what_changed():
    r = rm()
    (v1,) = views(r.handle(Timer("tick"), 1.0, Rng()))
    assert v1.base == 0 and list(v1.servers) == list(range(6)) and len(v1.lightly_loaded)
    r.handle(report(v1.seq), 1.2, Rng())
    r.handle(hb(4, 1.5, w0=3.0), 1.5, Rng())
    (v2,) = views(r.handle(Timer("tick"), 2.0, Rng()))
    assert (v2.base, v2.seq) == (v1.seq, v1.seq + 1)
    assert list(v2.servers) == [4] and v2.matrices[0] == 3.0
    r.handle(report(v2.seq), 2.2, Rng())
    (v3,) = views(r.handle(Timer("tick"), 3.0, Rng()))     # nothing changed: a view of no rows
    assert len(v3.servers) == 0 and len(v3.lightly_loaded) == 0 and v3.time == 3.0
    assert len(pack(v3)) < 100


def test_a_lost_view_is_covered_by_the_next():
    r = rm()
    host = ViewCache(6, cores=4.0)
    (v1,) = views(r.handle(Timer("tick"), 1.0, Rng()))
    host.apply_view(unpack(pack(v1)), 1.0)
    r.handle(report(host.seq), 1.2, Rng())
    r.handle(hb(1, 1.5, w0=2.0), 1.5, Rng())
    (lost,) = views(r.handle(Timer("tick"), 2.0, Rng()))   # never arrives
    r.handle(report(host.seq), 2.2, Rng())                 # the host still acknowledges v1
    r.handle(PeerLost("pn:3"), 2.5, Rng())
    (v3,) = views(r.handle(Timer("tick"), 3.0, Rng()))
    assert v3.base == v1.seq and list(v3.servers) == [1, 3]
    assert len(host.apply_view(unpack(pack(v3)), 3.0)) == 1                  # server 3 shown lost
    assert host.seq == v3.seq and host.matrices[1, 0] == 2.0 and not host.alive[3]
    assert host.apply_view(lost, 3.1) is None                # older than the last applied: left


def test_a_restarted_host_acknowledges_nothing_and_gets_a_full_view():
    r = rm()
    (v1,) = views(r.handle(Timer("tick"), 1.0, Rng()))
    r.handle(report(v1.seq), 1.2, Rng())
    (v2,) = views(r.handle(Timer("tick"), 2.0, Rng()))
    fresh = ViewCache(6, cores=4.0)                          # the host restarted: seq 0
    assert fresh.apply_view(v2, 2.0) is None                 # a delta from a view it never had
    r.handle(report(fresh.seq), 2.2, Rng())
    (v3,) = views(r.handle(Timer("tick"), 3.0, Rng()))
    assert v3.base == 0 and len(v3.servers) == 6
    assert fresh.apply_view(v3, 3.0) is not None and fresh.seq == v3.seq


def test_a_restarted_rm_numbers_its_views_above_the_last_and_sends_every_row():
    load = ClusterLoad(4, 12, 4.0, 0)
    for s in range(4):
        load.observe(hb(s, 1.0), 1.0)
    old = load.next_view()
    again = ClusterLoad(4, 12, 4.0, 0)
    again.restarted(1)
    again.observe(hb(0, 2.0), 2.0)
    seq = again.next_view()
    assert seq > old
    v = again.view(2.0, old)                                 # a host acknowledging the old RM's view
    assert list(v.servers) == [0, 1, 2, 3]


# ---- the property: any sequence of changes, views lost or delivered (in order or not),
# reports lost or delivered and host restarts leaves the host's view equal to the RM's once a
# report and a view get through --------------------------------------------------------------

N = 5
step = st.one_of(
    st.tuples(st.just("hb"), st.integers(0, N - 1), st.floats(0.0, 50.0, allow_nan=False)),
    st.tuples(st.just("lose"), st.integers(0, N - 1), st.just(0.0)),
    st.tuples(st.just("reboot"), st.integers(0, N - 1), st.just(0.0)),
    st.tuples(st.just("tick"), st.sampled_from(["deliver", "drop", "hold", "late"]), st.just(0.0)),
    st.tuples(st.just("report"), st.booleans(), st.just(0.0)),
    st.tuples(st.just("host_restart"), st.just(0), st.just(0.0)),
    st.tuples(st.just("rm_restart"), st.just(0), st.just(0.0)),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(step, max_size=40))
def test_any_sequence_of_views_drops_and_acks_leaves_the_host_view_equal_to_the_rms(steps):
    load = ClusterLoad(N, 12, 4.0, 2)
    host = ViewCache(N, cores=4.0)
    boots = [0.0] * N
    now = 0.0
    held: list = []
    rm_boots = 0
    for kind, a, w in steps:
        now += 1.0
        if kind == "hb":
            load.observe(hb(a, now, w0=w, boot=boots[a]), now)
        elif kind == "lose":
            load.lose(a)
        elif kind == "reboot":
            boots[a] = now
            load.observe(hb(a, now, boot=now), now)
        elif kind == "tick":
            load.next_view()
            v = unpack(pack(load.view(now, load.acked.get("h", 0))))
            # (applied at the RM's time: no transit, so the host's estimate of the RM's clock
            # stays put and the rows compare as they are)
            if a == "deliver":
                host.apply_view(v, v.time)
            elif a == "hold":
                held.append(v)
            elif a == "late" and held:
                late = held.pop(0)
                host.apply_view(late, late.time)
        elif kind == "report" and a:
            load.acked["h"] = host.seq
        elif kind == "host_restart":
            host = ViewCache(N, cores=4.0)
        elif kind == "rm_restart":
            rm_boots += 1
            old = load
            load = ClusterLoad(N, 12, 4.0, 2)
            load.restarted(rm_boots)
            load.acked = dict(old.acked)          # (acks of the old RM's views: reports in flight)
            for s in range(N):                    # its PNs' full state on PeerBack
                if old.alive[s]:
                    load.observe(hb(s, now, w0=float(old.matrices[s, 0]), boot=boots[s]), now)
        load.validate()
    # the repair: a report gets through, then a view
    now += 1.0
    load.acked["h"] = host.seq
    load.next_view()
    assert host.apply_view(unpack(pack(load.view(now, load.acked["h"]))), now) is not None
    assert host.rm_clock.get(0) == 0.0
    heard = load.stamps >= 0
    assert np.array_equal(host.alive[heard], load.alive[heard].astype(bool))
    assert np.array_equal(host.matrices[heard], load.matrices[heard])
    up = load.alive == 1             # (a host learns a boot time from a view showing it alive)
    assert np.array_equal(host.boot_times[up], load.boot_times[up])
    assert np.array_equal(host.grows[heard], load.grows[heard])
    if load.alive.any():
        assert np.array_equal(host.lightly_loaded, load.lightly_loaded())
