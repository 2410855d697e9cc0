"""Liveness as a property of connections (docs/design.md, "Liveness"): PNs report only on change,
the runtimes tell PeerLost and PeerBack, the RM marks a server dead on PeerLost of its PN. The
RM's side is in test_rm.py; here the PN's and the simulator's."""
from apollo.core.effects import PeerBack, PeerLost, Send, SetTimer, Start, TaskExited, Timer
from apollo.core.messages import Dispatch, Heartbeat
from apollo.runtime.sim import NetModel, Partition, SimRuntime
from pn.state import PnConfig, PnState

from helpers import Rng, task


def heartbeats(out):
    return [e.msg for e in out if isinstance(e, Send) and isinstance(e.msg, Heartbeat)]


def test_a_quiet_pn_sends_nothing_and_arms_nothing():
    p = PnState(3, PnConfig())
    out = p.handle(Start(), 0.0, Rng())
    assert len(heartbeats(out)) == 1 and not [e for e in out if isinstance(e, SetTimer)]
    # a timer that fires anyway (one set before it went quiet) finds nothing to say
    assert p.handle(Timer("hb"), 60.0, Rng()) == []
    assert p.handle(Timer("hb"), 3600.0, Rng()) == []


def test_a_pn_reports_a_change_then_goes_quiet_when_idle_again():
    p = PnState(3, PnConfig(heartbeat_s=1.0))
    p.handle(Start(), 0.0, Rng())
    out = p.handle(Dispatch(1, [task(t=0, est=10.0, dur=10.0)]), 1.0, Rng())
    assert [e.delay for e in out if isinstance(e, SetTimer) and e.key == "hb"] == [1.0]
    out = p.handle(Timer("hb"), 2.0, Rng())
    assert len(heartbeats(out)) == 1 and heartbeats(out)[0].running == 1
    p.handle(TaskExited((1, 0, 1), True), 11.0, Rng())
    out = p.handle(Timer("hb"), 12.0, Rng())
    assert len(heartbeats(out)) == 1 and heartbeats(out)[0].running == 0
    assert not [e for e in out if isinstance(e, SetTimer)]          # idle: nothing more to arm
    assert p.handle(Timer("hb"), 500.0, Rng()) == []


def test_a_pn_sends_its_whole_state_on_peer_back_of_the_rm_only():
    p = PnState(3, PnConfig())
    p.handle(Start(), 0.0, Rng())
    p.handle(Dispatch(1, [task(t=0, est=100.0, dur=100.0)]), 1.0, Rng())
    p.handle(Timer("hb"), 2.0, Rng())
    assert p.handle(PeerLost("rm"), 30.0, Rng()) == []
    assert p.handle(PeerBack("jmhost:0"), 40.0, Rng()) == []
    out = p.handle(PeerBack("rm"), 40.0, Rng())
    (hb,) = heartbeats(out)
    assert hb.time == 40.0 and hb.running == 1 and hb.jobs == [1] and hb.job_cpus == [1.0]
    assert hb.boot_time == 0.0                    # the same incarnation: the RM takes it on PeerBack


def test_a_lossy_network_repeats_a_report_once_and_only_once():
    p = PnState(3, PnConfig(repeat_after_s=5.0))
    out = p.handle(Start(), 0.0, Rng())
    assert [e.delay for e in out if isinstance(e, SetTimer)] == [5.0]
    out = p.handle(Timer("hb"), 5.0, Rng())
    assert len(heartbeats(out)) == 1 and not [e for e in out if isinstance(e, SetTimer)]
    assert p.handle(Timer("hb"), 60.0, Rng()) == []


class Watcher:
    """An actor that watches ``prefix`` and records what it hears."""
    def __init__(self, prefix):
        self.watches = (prefix,)
        self.heard = []

    def handle(self, event, now, rng):
        if isinstance(event, (PeerLost, PeerBack)):
            self.heard.append((round(now, 6), type(event).__name__, event.address))
        return []


class Quiet:
    def handle(self, event, now, rng):
        return []


def kernel(timeout=3.0):
    rt = SimRuntime(seed=1, net=NetModel(), keepalive_timeout_s=timeout)
    w = Watcher("pn")
    rt.add("rm", w)
    for s in range(3):
        rt.add(f"pn:{s}", Quiet())
    rt.add("jmhost:0", Quiet())
    return rt, w


def test_the_kernel_tells_a_crash_at_once_and_a_restart_when_it_comes_back():
    rt, w = kernel()
    rt.call_at(10.0, lambda: rt.crash("pn:1"))
    rt.call_at(10.0, lambda: rt.crash("jmhost:0"))          # not watched: nothing
    rt.call_at(25.0, lambda: rt.restart("pn:1", Quiet()))
    rt.run(until=100.0)
    assert w.heard == [(10.0, "PeerLost", "pn:1"), (25.0, "PeerBack", "pn:1")]


def test_the_kernel_tells_a_partition_after_the_keepalive_timeout_and_its_end():
    rt, w = kernel(timeout=3.0)
    rt.add_partition(Partition(10.0, 20.0, frozenset({"pn:0", "pn:2"})))
    rt.add_partition(Partition(30.0, 32.0, frozenset({"rm"})))            # shorter than the timeout
    rt.run(until=100.0)
    assert w.heard == [(13.0, "PeerLost", "pn:0"), (13.0, "PeerLost", "pn:2"),
                       (20.0, "PeerBack", "pn:0"), (20.0, "PeerBack", "pn:2"),
                       # not noticed as lost, but what it dropped is said again
                       (32.0, "PeerBack", "pn:0"), (32.0, "PeerBack", "pn:1"), (32.0, "PeerBack", "pn:2")]


def test_both_sides_of_a_partition_hear_it():
    rt = SimRuntime(seed=1, keepalive_timeout_s=2.0)
    rm, pn = Watcher("pn"), Watcher("rm")
    rt.add("rm", rm)
    rt.add("pn:0", pn)
    rt.add_partition(Partition(5.0, 9.0, frozenset({"pn:0"})))
    rt.run(until=20.0)
    assert rm.heard == [(7.0, "PeerLost", "pn:0"), (9.0, "PeerBack", "pn:0")]
    assert pn.heard == [(7.0, "PeerLost", "rm"), (9.0, "PeerBack", "rm")]


def test_a_crashed_rm_is_heard_by_every_pn_and_a_restarted_one_gets_their_state():
    """End to end in the kernel: a PN that sent nothing for an hour is learnt by a restarted RM."""
    from rm.state import RmConfig, RmState
    from rm.store import MemoryJobStore

    rt = SimRuntime(seed=2)
    cfg = PnConfig()
    rt.add("rm", RmState(RmConfig(2, cfg.grid.size)), store=MemoryJobStore())
    for s in range(2):
        rt.add(f"pn:{s}", PnState(s, cfg))
    rt.call_at(3600.0, lambda: rt.crash("rm"))
    rt.call_at(3610.0, lambda: rt.restart("rm", RmState(RmConfig(2, cfg.grid.size))))
    rt.run(until=3611.0)
    assert list(rt.slots["rm"].actor.alive) == [1, 1]
    # (the RM's views go to a JM host this cluster has none of: no message) one heartbeat each
    # at the start and one each on PeerBack of the restarted RM, nothing in the hour between
    assert rt.messages == 4
