"""A JM host's HostReport rows (jm.report_rows): whatever jobs start, move and leave, a report's
columns are every live job's row in job order, as per-job dicts in insertion order give them."""
from hypothesis import given, settings, strategies as st

from jm.report_rows import ReportRows

steps = st.lists(st.tuples(st.sampled_from(["add", "remove", "set", "report"]), st.integers(0, 40),
                           st.integers(0, 9), st.integers(0, 64)), max_size=120)


@settings(max_examples=150, deadline=None)
@given(steps)
def test_the_columns_are_the_live_jobs_rows_in_job_order(ops):
    rows, model = ReportRows(), {}
    sent = []
    for op, job, seq, cpus in ops:
        if op == "add" and job not in model:
            rows.add(job)
            model[job] = (0, 0, 0)
        elif op == "remove" and job in model:
            rows.remove(job)
            del model[job]
        elif op == "set" and job in model:
            rows.set(job, seq, cpus, cpus // 2)
            model[job] = (seq, cpus, cpus // 2)
        elif op == "report":
            cols = rows.columns()
            assert [c.tolist() for c in cols] == [list(model), *map(list, zip(*model.values()))] if model \
                else all(len(c) == 0 for c in cols)
            sent.append((cols, [c.tolist() for c in cols]))
        rows.validate(list(model))
        assert all(rows.row(j) == r for j, r in model.items())
    for cols, was in sent:                  # a report's columns are its own: later moves leave them
        assert [c.tolist() for c in cols] == was
