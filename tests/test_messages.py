import msgpack
import numpy as np
import pytest

from apollo.messages import (REGISTRY, ClusterView, DemoteTask, Dispatch, Heartbeat, SubmitJob, WireError, YieldJob, decode,
                             encode, pack, unpack)
from apollo.spec import JobSpec, StageSpec

from helpers import task


def job():
    m = StageSpec("map", 3, np.array([1.0, 2.0, 3.0]), input_bytes=np.array([1e6, 2e6, 3e6]), dataset="d")
    r = StageSpec("reduce", 1, np.array([4.0]), depends_on=("map",), command=("sh", "-c", "true"), env={"A": "b"})
    return JobSpec("j", [m, r], arrival_s=2.0, priority=1, max_retries=2)


def test_every_message_round_trips():
    j = job()
    msgs = [SubmitJob(-1, j, "client"), Dispatch(4, [task(), task(t=1, opp=True)]),
            Heartbeat(1, 0.5, 2.0, np.arange(12, dtype=np.float32), 2, 3, 1.0, [4, 9], [1.0, 0.5]),
            YieldJob(3, 2.5), DemoteTask(3, 1, 2),
            ClusterView(1.0, np.zeros(24, np.float32), np.zeros(2), np.zeros(2), np.ones(2, np.uint8),
                        np.array([1], np.int32))]
    for m in msgs:
        back = unpack(pack(m))
        assert type(back) is type(m)
    s = unpack(pack(msgs[0])).spec
    assert s.stages[1].command == ("sh", "-c", "true") and s.stages[1].depends_on == ("map",)
    assert np.array_equal(s.stages[0].durations_s, [1.0, 2.0, 3.0])


def test_codes_are_unique_and_registered():
    assert len(REGISTRY) == len({c.__name__ for c in REGISTRY.values()})


@pytest.mark.parametrize("raw, needle", [
    ([999], "unknown message type code 999"),
    ("x", "non-empty array"),
    ([4, 1], "expected 3 fields, got 1"),
    ([4, 1, "many", 0], "TokenGrant.tokens: expected an integer"),
    ([4, -1, 2, 0], "TokenGrant.job_id: expected >= 0"),
    ([8, 1, 0.0, 1.0, b"abc", 0, 0, 1.0, [], []], "Heartbeat.matrix: 3 bytes"),
])
def test_decode_errors_name_the_field(raw, needle):
    with pytest.raises(WireError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        decode(raw)


def test_undecodable_bytes():
    with pytest.raises(WireError, match="undecodable"):
        unpack(b"\xc1\xc1\xc1")


def test_nan_rejected_in_arrays_and_floats():
    with pytest.raises(WireError, match="nan is not allowed"):
        decode([8, 1, float("nan"), 1.0, b"", 0, 0, 1.0, [], []])
    with pytest.raises(WireError, match="Heartbeat.time: inf is not allowed"):
        decode([8, 1, 0.0, float("inf"), b"", 0, 0, 1.0, [], []])
    bad = np.array([np.inf], np.float32).tobytes()
    with pytest.raises(WireError, match="infinity"):
        decode([8, 1, 0.0, 1.0, bad, 0, 0, 1.0, [], []])
    with pytest.raises(WireError, match=r"Heartbeat.job_cpus\[0\]"):
        decode([8, 1, 0.0, 1.0, b"", 0, 0, 1.0, [3], [float("nan")]])


def test_invalid_job_spec_in_submit_is_refused():
    j = job()
    w = encode(SubmitJob(1, j, "c"))
    w[2][1][1][7] = ["nope"]       # reduce depends on an unknown stage
    with pytest.raises(WireError, match="unknown stage 'nope'"):
        decode(msgpack.unpackb(msgpack.packb(w), raw=False))
