"""The report's per-queue figures: a figure sampled at allocation rounds is weighted by the time
each round's value held, so it does not move with how often rounds run."""
from apollo.core.records import Recorder
from apollo.tools.report import queue_figures


def _rec(rounds):
    """One job in queue "q" from 0 to 100 s, and allocation rounds at ``rounds`` ((t, share))."""
    rec = Recorder()
    rec.submitted.append((1, 0.0, 1, "q"))
    rec.done.append((1, True, 0.0, 100.0, 1, ""))
    for t, share in rounds:
        rec.allocations.append((t, 10.0, {"q": (share, 0.0, 1.0, 0.0, 0.0, 1, 0)}))
    return rec


def test_fair_share_mean_is_a_time_average_of_the_rounds():
    # the share is 10 cores (all) for 10 s, then 0 for 90 s: a tenth on average
    few = queue_figures(_rec([(0.0, 10.0), (10.0, 0.0)]), 10.0, 0.0, 100.0)["q"]
    assert abs(few["fair_share_mean"] - 0.1) < 1e-12
    # the same shares, with nine more rounds in the busy 10 s: the same average (a mean over
    # rounds would give 10/11)
    busy = [(float(t), 10.0) for t in range(10)] + [(10.0, 0.0)]
    many = queue_figures(_rec(busy), 10.0, 0.0, 100.0)["q"]
    assert abs(many["fair_share_mean"] - 0.1) < 1e-12


def test_rounds_only_at_the_end_give_their_plain_mean():
    r = queue_figures(_rec([(100.0, 5.0), (100.0, 10.0)]), 10.0, 0.0, 100.0)["q"]
    assert abs(r["fair_share_mean"] - 0.75) < 1e-12
    assert queue_figures(_rec([]), 10.0, 0.0, 100.0)["q"]["fair_share_mean"] == 0.0
