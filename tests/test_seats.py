"""Stable matching's seats: tasks of one batch that all prefer one server share it while it has
cores free for them, and then only while queueing there behind each other beats the
alternatives (jm/policies/matchers.py, _match_seats)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from apollo.core.cluster import Topology
from apollo.core.effects import Send
from apollo.core.messages import Dispatch
from apollo.core.spec import JobSpec, StageSpec
from jm.state import JmConfig, JmState
from jm.view import ViewCache

from helpers import Rng

TOPO = Topology(20, 4)      # 4 cores a server


def placed(busy_wait: float, free_at_3: bool, tasks: int = 3, dur: float = 2.0):
    """Server 3 is the one lightly loaded server (idle, or busy with a short queue); every other
    server reads ``busy_wait`` s for any shape. Returns the servers the job's tasks went to."""
    v = ViewCache(20, cores=4.0)
    v.matrices[:] = busy_wait
    v.matrices[3] = 0.0 if free_at_3 else 0.5
    v.stamps[:] = 0.0
    v.lightly_loaded = np.array([3], dtype=np.int32)
    spec = JobSpec("j", [StageSpec("map", tasks, np.full(tasks, dur))])
    j = JmState(1, spec, tasks, 0.0, JmConfig(topology=TOPO), v)
    out = j.start(0.0, Rng())
    return sorted(int(e.to.split(":")[1]) for e in out if isinstance(e, Send) and isinstance(e.msg, Dispatch)
                  for _ in e.msg.tasks)


def test_an_idle_server_takes_as_many_of_a_batch_as_it_has_cores_free():
    assert placed(busy_wait=100.0, free_at_3=True, tasks=3) == [3, 3, 3]


def test_a_busy_server_takes_more_only_while_queueing_there_is_cheaper():
    # server 3 busy with a short queue: each batch-mate ahead adds 2 s x 1 cpu / 4 cores there,
    # far less than 100 s elsewhere
    assert placed(busy_wait=100.0, free_at_3=False, tasks=3) == [3, 3, 3]
    # ... but not when the other servers are nearly as good
    got = placed(busy_wait=0.6, free_at_3=False, tasks=3)
    assert got.count(3) == 1


def _servers_of(waits: list[float], tasks: int, cores: int, seats_only: bool, monkeypatch) -> list[int]:
    from jm.policies import matchers
    if seats_only:
        monkeypatch.setattr(matchers, "_seats_hold_first_choices", lambda *a: False)
    else:
        monkeypatch.undo()
    topo = Topology(len(waits), 2, cores=float(cores))
    v = ViewCache(len(waits), cores=float(cores))
    v.matrices[:] = np.array(waits, dtype=np.float32)[:, None]
    v.stamps[:] = 0.0
    spec = JobSpec("j", [StageSpec("map", tasks, np.full(tasks, 3.0), input_bytes=np.full(tasks, 64e6),
                                   dataset="d")])
    j = JmState(1, spec, tasks, 0.0, JmConfig(topology=topo), v)
    out = j.start(0.0, Rng())
    return [int(e.to.split(":")[1]) for e in out if isinstance(e, Send) and isinstance(e.msg, Dispatch)
            for _ in e.msg.tasks]


@settings(max_examples=60, deadline=None)
@given(waits=st.lists(st.sampled_from([0.0, 0.0, 0.3, 2.0, 50.0]), min_size=4, max_size=12),
       tasks=st.integers(2, 16), cores=st.integers(1, 4))
def test_first_choices_that_fit_their_seats_are_placed_as_the_seats_would_place_them(waits, tasks, cores):
    """The shortcut of crowded first choices (matchers._seats_hold_first_choices) places every
    batch as the seats' rounds do: a data-local server chosen by several tasks of one job."""
    with pytest.MonkeyPatch.context() as mp:
        fast = _servers_of(waits, tasks, cores, False, mp)
        full = _servers_of(waits, tasks, cores, True, mp)
    assert fast == full
