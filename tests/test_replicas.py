"""Block placement (Topology.replicas): a pure function every JM, the simulator and a live
cluster agree on, so its values are pinned (they place every seeded run's input), and HDFS's
rule holds: the second and third replicas on two servers of one rack other than the first's."""
import numpy as np
from hypothesis import given, settings, strategies as st

from apollo.core.cluster import Topology


def test_pinned_values():
    # (as written before the placement was vectorised in place; any change moves seeded reports)
    assert Topology(40, 4).replicas("x", np.arange(6)).tolist() == [
        [38, 5, 7], [22, 37, 36], [29, 32, 36], [9, 27, 23], [21, 18, 11], [5, 33, 35]]
    assert Topology(10, 1).replicas("y", np.arange(4)).tolist() == [[7, 9, 4], [0, 1, 8], [4, 1, 1], [3, 7, 8]]
    assert Topology(20000, 500).replicas("job17-input", np.array([0, 2**40])).tolist() == [
        [18904, 16249, 16255], [10764, 7271, 7268]]


@settings(max_examples=60, deadline=None)
@given(servers=st.integers(2, 3000), racks=st.integers(2, 60), name=st.text(max_size=12),
       blocks=st.lists(st.integers(0, 2**62), min_size=1, max_size=40))
def test_hdfs_rule(servers, racks, name, blocks):
    racks = min(racks, servers)
    topo = Topology(servers, racks)
    out = topo.replicas(name, np.array(blocks))
    assert out.shape == (len(blocks), 3) and out.dtype == np.int32
    assert ((out >= 0) & (out < servers)).all()
    r = topo.rack_of[out]
    assert (r[:, 1] == r[:, 2]).all() and (r[:, 0] != r[:, 1]).all()
    two = topo.rack_size[r[:, 1]] >= 2
    assert (out[two, 1] != out[two, 2]).all()
    assert (topo.replicas(name, np.array(blocks)) == out).all()      # a pure function
