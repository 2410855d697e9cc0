"""The RM's sharing seam: a sharing kind is one class and one line in ``KINDS`` (rm/sharing.py),
a queue order one object in ``ORDERS`` (rm/queue_order.py). Shown by registering test-local
ones and running the plane with them."""
import numpy as np
import pytest

from apollo.tools.simulate import SimConfig, run_simulation
from apollo.workloads import load_workload
from apollo.workloads.assign import assign
from rm.queue_order import ORDERS, QueueOrder, split_in_queue
from rm.queues import QueueError, QueueTree
from rm.sharing import KINDS, FairSharing, JobView, SharingKind, Snapshot, make_sharing_policy
from rm.share_math import sum_up


class Reserved(SharingKind):
    """Static partitioning: each leaf gets its guarantee while it has the demand, and nothing
    is lent. Nobody borrows, so nobody is owed anything back: the base's defaults do."""
    name = "reserved"
    default_order = "fifo"

    def shares(self, capacity, leaf_demand):
        lim = self.tree.resolve(capacity)
        share = {self.tree.root.path: 0.0}
        share.update({q.path: min(lim[q.path].guarantee, leaf_demand.get(q.path, 0.0)) for q in self._leaves})
        return sum_up(self.tree, share)


class Lifo(QueueOrder):
    """The latest job takes all it can use (a test-local order)."""
    name = "lifo"
    token_of_right = False

    def split(self, share, demand, weight, rank):
        return ORDERS["fifo"].split(share, demand, weight, -rank)


RESERVED = 'sharing = "reserved"\n[queues.a]\nguarantee = "25%"\n[queues.b]\nguarantee = "75%"\n'


@pytest.fixture
def reserved(monkeypatch):
    monkeypatch.setitem(KINDS, "reserved", Reserved)        # the one registry line
    return QueueTree.parse_text(RESERVED, "reserved.toml")


def job(i, queue, demand, user="u", admitted=True, running=0.0):
    return JobView(i, queue, user, 1.0, 0, float(i), float(demand), int(running), float(running), admitted)


def test_a_registered_kind_is_picked_by_its_name_and_gives_its_queues_its_order(reserved):
    pol = make_sharing_policy(reserved)
    assert type(pol) is Reserved and reserved.leaf("a").order == "fifo"
    snap = Snapshot(0.0, 40.0, (job(1, "a", 30), job(2, "b", 5)))
    alloc = pol.allocate(snap)
    pol.validate(snap, alloc)
    assert alloc.shares == {"root": 15.0, "a": 10.0, "b": 5.0}        # a's idle 25 cores of b stay idle
    assert alloc.tokens == {1: 10, 2: 5} and alloc.reclaim == [] and alloc.next_run_s is None


def test_an_unknown_kind_is_named_with_the_registered_ones(reserved):
    with pytest.raises(QueueError, match='sharing must be "fair" or "capacity" or "reserved", got \'drf\''):
        QueueTree.parse_text('sharing = "drf"\n', "t.toml")


def test_the_plane_runs_a_registered_kind_with_every_invariant_checked(reserved):
    w = load_workload("heavytail:jobs=30", seed=4)
    assign(w, ["a", "b"], "random:users=2", seed=4)
    w.scaled_to_load(1.2, 24.0)
    r = run_simulation(w, SimConfig(servers=12, racks=2, cores=2.0, scheduler="apollo", seed=4, queues=reserved,
                                    check=True))
    assert r["jobs"]["completed"] == 30 and r["jobs"]["failed"] == 0
    # Nothing is lent: a's share never passes its guarantee, though b is idle at times.
    assert 0 < r["queues"]["a"]["fair_share_mean"] <= 0.25 + 1e-9
    assert r["queues"]["b"]["fair_share_mean"] <= 0.75 + 1e-9


def test_a_registered_order_splits_a_queue(monkeypatch):
    monkeypatch.setitem(ORDERS, "lifo", Lifo())
    t = QueueTree.parse_text('[queues.a]\norder = "lifo"\n', "t.toml")
    jobs = [job(1, "a", 6), job(2, "a", 6), job(3, "a", 6)]
    assert split_in_queue(t.leaf("a"), 10, jobs) == {1: 0.0, 2: 4.0, 3: 6.0}
    snap = Snapshot(0.0, 10.0, tuple(jobs))
    pol = make_sharing_policy(t)
    alloc = pol.allocate(snap)
    pol.validate(snap, alloc)
    assert alloc.tokens == {1: 0, 2: 4, 3: 6}              # no token of right: the first waits


def test_every_kind_and_order_is_registered_under_its_own_name():
    assert all(k.name == n and k.default_order in ORDERS for n, k in KINDS.items())
    assert all(o.name == n for n, o in ORDERS.items())
    with pytest.raises(QueueError, match='order must be "fifo" or "fair"'):
        QueueTree.parse_text('[queues.a]\norder = "lifo"\n', "t.toml")


def test_hooks_read_a_round_they_cannot_write():
    seen = []

    class Peek(FairSharing):
        def owed(self, r):
            seen.append(r)
            return super().owed(r)

    pol = Peek(QueueTree.parse_text('[queues.a]\n[queues.b]\n', "t.toml"))
    pol.allocate(Snapshot(0.0, 8.0, (job(1, "a", 4, running=2), job(2, "b", 8, admitted=False))))
    r = seen[0]
    assert r.holding.tolist() == [2.0, 0.0] and r.admitted.tolist() == [True, True]
    assert r.user_names == ("u",) and np.allclose(r.allocation, [4.0, 4.0])
    with pytest.raises(ValueError):
        r.holding[0] = 1.0
