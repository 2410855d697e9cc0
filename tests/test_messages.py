from dataclasses import dataclass, field

import msgpack
import numpy as np
import pytest

from pathlib import Path

from apollo.core import messages as M
from apollo.core.messages import (REGISTRY, ClusterView, DemoteTask, Dispatch, Heartbeat, SubmitJob, WireError, YieldJob, decode,
                             encode, pack, unpack)
from apollo.core.spec import JobSpec, StageSpec

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
            ClusterView(1.0, 7, 0, np.arange(2, dtype=np.int32), np.zeros(24, np.float32), np.zeros(2), np.zeros(2),
                        np.ones(2, np.uint8), np.full(2, -1.0, np.float32), np.array([1], np.int32))]
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
    ([8, 1, 0.0, 1.0, b"abc", 0, 0, 1.0, [], [], -1.0], "Heartbeat.matrix: 3 bytes"),
])
def test_decode_errors_name_the_field(raw, needle):
    with pytest.raises(WireError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        decode(raw)


def test_a_field_declared_without_a_codec_is_refused():
    @dataclass
    class Bare(M.Message):
        a: int = field(metadata=M.NAT)
        b: int

    with pytest.raises(TypeError, match=r"Bare: fields without a codec .*\['b'\]"):
        M.wire(Bare)
    assert Bare not in REGISTRY.values()


def test_undecodable_bytes():
    with pytest.raises(WireError, match="undecodable"):
        unpack(b"\xc1\xc1\xc1")


def test_nan_rejected_in_arrays_and_floats():
    with pytest.raises(WireError, match="nan is not allowed"):
        decode([8, 1, float("nan"), 1.0, b"", 0, 0, 1.0, [], [], -1.0])
    with pytest.raises(WireError, match="Heartbeat.time: inf is not allowed"):
        decode([8, 1, 0.0, float("inf"), b"", 0, 0, 1.0, [], [], -1.0])
    bad = np.array([np.inf], np.float32).tobytes()
    with pytest.raises(WireError, match="infinity"):
        decode([8, 1, 0.0, 1.0, bad, 0, 0, 1.0, [], [], -1.0])
    with pytest.raises(WireError, match=r"Heartbeat.job_cpus\[0\]"):
        decode([8, 1, 0.0, 1.0, b"", 0, 0, 1.0, [3], [float("nan")], -1.0])


def test_invalid_job_spec_in_submit_is_refused():
    j = job()
    w = encode(SubmitJob(1, j, "c"))
    w[2][1][1][7] = ["nope"]       # reduce depends on an unknown stage
    with pytest.raises(WireError, match="unknown stage 'nope'"):
        decode(msgpack.unpackb(msgpack.packb(w), raw=False))


# The bytes every message type packed to before its fields were declared once (captured from the
# code that named them twice): the wire format is a protocol, so it may not drift by accident.
WIRE_FIXTURE = Path(__file__).with_name("messages_wire.hex")


def samples():
    """One or two of every message type, defaults left out and given, optional fields empty and set."""
    j = job()
    t0 = task()
    t1 = M.TaskSpec(7, 3, 2, 1, 0.5, 1.5, 9.25, 1e6, 1, 8.0, True, ("sh", "-c", "true"), {"K": "v"}, "/tmp",
                    30.0, True, 2)
    r0 = M.TaskReport(7, 3, 2, 4, 1.0, 2.5, 0, "")
    r1 = M.TaskReport(7, 3, 2, 5, 1.0, 2.5, -9, "killed", 0.75)
    mat = np.arange(6, dtype=np.float32) / 4
    return [
        ("TaskSpec", t0), ("TaskSpec-full", t1), ("TaskReport", r0), ("TaskReport-progress", r1),
        ("SubmitJob", M.SubmitJob(-1, j, "client")), ("SubmitJob-key", M.SubmitJob(5, j, "client", "k1")),
        ("JobAccepted", M.JobAccepted(5, "j", True, "")), ("JobAccepted-key", M.JobAccepted(5, "j", False, "no", "k1")),
        ("StartJob", M.StartJob(5, j, 3, 1.5, "rm")),
        ("StartJob-full", M.StartJob(5, j, 3, 1.5, "rm", 4, 1, b"\x05", 2, 1.5, True)),
        ("TokenGrant", M.TokenGrant(5, 2)), ("TokenGrant-seq", M.TokenGrant(5, 2, 9)),
        ("Dispatch", M.Dispatch(4, [t0, t1])), ("Dispatch-reply", M.Dispatch(4, [], "jmhost:1")),
        ("KillTask", M.KillTask(4, 1, 2)),
        ("StatusBatch", M.StatusBatch(4, 9, [r0, r1], mat, 2.0)),
        ("StatusBatch-list", M.StatusBatch(4, 9, [], [1.0, 2.5], 2.0, 3.5)),
        ("StatusBatch-grow", M.StatusBatch(4, 9, [], [1.0, 2.5], 2.0, 3.5, 0.0)),
        ("Heartbeat", M.Heartbeat(1, 0.5, 2.0, mat, 2, 3, 1.0)),
        ("Heartbeat-jobs", M.Heartbeat(1, 0.5, 2.0, [0.25, 1.0], 2, 3, 1.0, [4, 9], [1.0, 0.5])),
        ("Heartbeat-grow", M.Heartbeat(1, 0.5, 2.0, [0.25, 1.0], 2, 3, 1.0, [4], [1.0], 0.1)),
        ("ClusterView", M.ClusterView(1.0, 3, 0, np.arange(2, dtype=np.int32), np.zeros(4, np.float32), np.arange(2.0),
                                      np.ones(2), np.ones(2, np.uint8), np.array([-1.0, 0.1], np.float32),
                                      np.array([1], np.int32))),
        ("ClusterView-delta", M.ClusterView(2.0, (3 << 32) + 9, (3 << 32) + 7, np.array([5], np.int32),
                                            np.zeros(2, np.float32), np.ones(1), np.ones(1), np.zeros(1, np.uint8),
                                            np.array([-1.0], np.float32), np.zeros(0, np.int32))),
        ("JobDemand", M.JobDemand(5, 3)), ("JobDemand-full", M.JobDemand(5, 3, 2, 0.5, 7)),
        ("JobDone", M.JobDone(5, False, "cancelled", 9.5, 3)), ("CancelJob", M.CancelJob(5)),
        ("UpgradeTask", M.UpgradeTask(5, 1, 2)), ("DemoteTask", M.DemoteTask(5, 1, 2)),
        ("YieldJob", M.YieldJob(5, -1.0)),
        ("ProbeTask", M.ProbeTask(5, 1, 2)), ("ProbeTask-reply", M.ProbeTask(5, 1, 2, "jmhost:0")),
        ("ReclaimTokens", M.ReclaimTokens(5, 1, 2, 0.5)), ("ReclaimTokens-seq", M.ReclaimTokens(5, 1, 2, 0.5, 3)),
        ("HostReport", M.HostReport("jmhost:0", np.array([5, 6]), np.array([1, 2]), np.array([0, 3]),
                                    np.array([1, 1]), np.array([6]), [b"\x80"])),
        ("HostReport-view", M.HostReport("jmhost:0", np.array([5]), np.array([1]), np.array([0]),
                                         np.array([1]), np.array([], np.int64), [], (3 << 32) + 7)),
        ("HostReport-delta", M.HostReport("jmhost:0", np.array([6]), np.array([2]), np.array([3]), np.array([1]),
                                          np.array([], np.int64), [], 4, 9, 7, np.array([5]), 2, (1 << 62) + 3)),
        ("ReportAck", M.ReportAck(9)),
        ("ReleaseJob", M.ReleaseJob(5, True)), ("ProbeJob", M.ProbeJob(5, 2, "jmhost:1")),
        ("Holding", M.Holding(5, 9, [t1], [r1], [r0])),
        ("JoinRequest", M.JoinRequest("pn", 2, -1, 4.0, 8.0, "10.0.0.2:7000", "x")),
        ("JoinReply", M.JoinReply(True, "", [3, 4], 0, "{}")),
        ("Leave", M.Leave("cluster down")),
        ("ListLogs", M.ListLogs(5, "logs-reader:1")),
        ("LogList", M.LogList(5, "pn0", "/c/work/pn0", [0, 2], [1, 65537], [12, 0], [0, 40], [0, None], [-1, 3])),
        ("ReadLog", M.ReadLog(5, 2, 1, True, 4096, 1 << 20, "logs-reader:1")),
        ("LogChunk", M.LogChunk(5, 2, 1, False, 0, 6, b"hello\n")),
        ("LogChunk-none", M.LogChunk(5, 2, 1, True, 0, -1, b"")),
        ("JobQuery", M.JobQuery("k1", "client")),
    ]


def _wire_bytes(msg) -> bytes:
    # a nested struct has no code of its own: its encoding is what its container carries
    return pack(msg) if msg.CODE >= 0 else msgpack.packb(msg.to_wire(), use_bin_type=True)


def test_samples_cover_every_message_type():
    covered = {type(m) for _, m in samples()}
    assert set(REGISTRY.values()) | {M.TaskSpec, M.TaskReport} <= covered


def test_every_message_encodes_to_the_bytes_it_always_did():
    want = dict(line.split() for line in WIRE_FIXTURE.read_text().splitlines() if line.strip())
    got = {name: _wire_bytes(m).hex() for name, m in samples()}
    assert got == want
    for name, m in samples():
        if m.CODE >= 0:
            assert pack(unpack(bytes.fromhex(want[name]))).hex() == want[name], name


if __name__ == "__main__":       # (re)write the fixture: only for a deliberate change of the protocol
    WIRE_FIXTURE.write_text("".join(f"{n} {_wire_bytes(m).hex()}\n" for n, m in samples()))
