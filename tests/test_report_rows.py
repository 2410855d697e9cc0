"""A JM host's HostReport rows (jm.report_rows): whatever jobs start, move and leave, a report's
columns are every live job's row in job order, as per-job dicts in insertion order give them."""
import numpy as np
from hypothesis import given, settings, strategies as st

from jm.report_rows import ReportRows

steps = st.lists(st.tuples(st.sampled_from(["add", "remove", "set", "report"]), st.integers(0, 40),
                           st.integers(0, 9), st.integers(0, 64)), max_size=120)


def _table_step(rows: ReportRows, model: dict, op: str, job: int, seq: int, cpus: int) -> bool:
    """A job started, dropped or moved, in the table and in the model; whether ``op`` was one."""
    if op == "add" and job not in model:
        rows.add(job)
        model[job] = (0, 0, 0)
    elif op == "remove" and job in model:
        rows.remove(job)
        del model[job]
    elif op == "set" and job in model:
        rows.set(job, seq, cpus, cpus // 2)
        model[job] = (seq, cpus, cpus // 2)
    else:
        return False
    return True


@settings(max_examples=150, deadline=None)
@given(steps)
def test_the_columns_are_the_live_jobs_rows_in_job_order(ops):
    rows, model = ReportRows(), {}
    sent = []
    for op, job, seq, cpus in ops:
        if _table_step(rows, model, op, job, seq, cpus):
            pass
        elif op == "report":
            cols = rows.columns()
            assert [c.tolist() for c in cols] == [list(model), *map(list, zip(*model.values()))] if model \
                else all(len(c) == 0 for c in cols)
            sent.append((cols, [c.tolist() for c in cols]))
        rows.validate(list(model))
        assert all(rows.row(j) == r for j, r in model.items())
    for cols, was in sent:                  # a report's columns are its own: later moves leave them
        assert [c.tolist() for c in cols] == was


# ---- reports as deltas: the RM's copy (rm.host_reports.apply_report) under loss and reordering ----

from apollo.core.messages import HostReport, ReportAck  # noqa: E402
from rm.host_reports import DELTA, FULL, STALE, UNKNOWN, apply_report  # noqa: E402

NONE = np.zeros(0, dtype=np.int64)

wire_steps = st.lists(st.tuples(st.sampled_from(["add", "remove", "set", "set", "report", "report", "deliver",
                                                  "deliver", "lose", "ack", "lose_ack"]),
                                st.integers(0, 12), st.integers(0, 5), st.integers(0, 9)), max_size=150)


def _report(rows: ReportRows) -> HostReport:
    seq, base, (jobs, seqs, demand, in_use), ended = rows.report()
    return HostReport("jmhost:0", jobs, seqs, demand, in_use, NONE, [], 0, seq, base, ended, len(rows.slot),
                      rows.digest)


@settings(max_examples=300, deadline=None)
@given(wire_steps)
def test_the_rms_copy_is_the_hosts_table_as_of_every_report_it_applies(ops):
    rows, model = ReportRows(), {}
    copy = None
    reports: list[tuple[HostReport, dict]] = []       # in flight, each with the table it was made from
    acks: list[int] = []
    for op, job, seq, cpus in ops:
        if _table_step(rows, model, op, job, seq, cpus):
            pass
        elif op == "report":
            reports.append((_report(rows), dict(model)))
        elif op in ("deliver", "lose") and reports:
            r, table = reports.pop(job % len(reports))       # (any one in flight: reordered)
            if op == "lose":
                continue
            copy, kind = apply_report(copy, r)
            if kind in (FULL, DELTA):
                assert copy.rows == table and copy.agrees(r)
                acks.append(r.seq)
            elif kind == UNKNOWN:
                acks.append(0)
            else:
                assert kind == STALE and copy.seq >= r.seq
            copy.validate()
        elif op in ("ack", "lose_ack") and acks:
            a = acks.pop(job % len(acks))
            if op == "ack":
                rows.ack(ReportAck(a).seq)
        rows.validate(list(model))
    # Once the reports flow again, nothing lost: a report and its acknowledgement, then another
    # (a delta from a base the RM has, or a full one it asked for)
    for _ in range(3):
        r = _report(rows)
        copy, kind = apply_report(copy, r)
        if kind in (FULL, DELTA):
            rows.ack(r.seq)
        else:
            rows.ack(0)
    assert copy is not None and copy.rows == model and copy.agrees(_report(rows))


def test_a_report_carries_only_the_rows_changed_since_the_acknowledged_one():
    rows = ReportRows()
    for j in range(100):
        rows.add(j)
        rows.set(j, 1, 4, 4)
    first = _report(rows)
    assert first.base == 0 and len(first.jobs) == 100
    rows.ack(first.seq)
    rows.set(7, 1, 3, 3)
    rows.set(3, 2, 4, 4)
    rows.set(50, 1, 4, 4)          # (no change)
    rows.remove(9)
    r = _report(rows)
    assert r.base == first.seq and r.jobs.tolist() == [3, 7] and r.ended.tolist() == [9]
    rows.set(60, 1, 0, 0)
    r2 = _report(rows)             # (r not yet acknowledged: its rows again, with the new one)
    assert r2.base == first.seq and r2.jobs.tolist() == [3, 7, 60] and r2.ended.tolist() == [9]
    rows.ack(r.seq)
    r3 = _report(rows)
    assert r3.jobs.tolist() == [60] and len(r3.ended) == 0
    rows.ack(0)                    # the RM asks for every row
    assert len(_report(rows).jobs) == 99
