"""`apollo jobs` and `apollo queues --json`: what the RM's store says of each job (waiting,
running, done...), read back from a jobs.db written by rm/store.py's SqliteJobStore as a live RM
writes it (its RmState's Persist effects), and the command's filters and formats; the times an
ended job is recorded with."""
from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import threading
from datetime import date, datetime

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from apollo.core.effects import Persist, Send, Start, Timer
from apollo.core.messages import CancelJob, HostReport, JobAccepted, JobDone, SubmitJob
from apollo.core.spec import JobSpec, StageSpec
from apollo.tools.cli.jobs import ClusterClock, format_duration, job_dicts, jobs_table, queue_rows, select_jobs
from rm.queues import QueueTree
from rm.state import RmConfig, RmState, single_queue
from apollo.tools.process import _checkpoints
from rm.store import WAL_PAGES_MAX, ListedJob, SqliteJobStore, list_jobs

from helpers import Rng, await_until
from test_rm import hb

POOLS = {"sharing": "fair", "queues": {"small": {"guarantee": "20%"}, "large": {"max_running_jobs": 8}}}


def spec(name="batch", tasks=2, queue="large", user="carol") -> JobSpec:
    return JobSpec(name, [StageSpec("s", tasks, np.full(tasks, 30.0))], user=user, queue=queue)


class StoredRm:
    """An RmState whose Persist effects go to a SqliteJobStore, as a live RM's runtime does."""

    def __init__(self, path, queues=None, hosts=("jmhost:0",)) -> None:
        self.store = SqliteJobStore(str(path))
        self.rm = RmState(RmConfig(4, 12, queues=queues or single_queue(), jm_hosts=hosts))
        self.do(Start(self.store.recovered()), 0.0)
        for s in range(4):
            self.do(hb(s, 0.1), 0.1)

    def do(self, event, now: float) -> list:
        out = self.rm.handle(event, now, Rng())
        for e in out:
            if isinstance(e, Persist):
                self.store.apply(e)
        return out

    def listed(self) -> dict[int, ListedJob]:
        return {r.job_id: r for r in list_jobs(self.store.db)}


def test_waiting_jobs_are_told_from_running_ones(tmp_path):
    """10 jobs in a pool that runs 8 at a time: 8 running, 2 waiting (as the store says at once,
    before any allocation round, and after rounds), with their queue and user."""
    s = StoredRm(tmp_path / "jobs.db", QueueTree.parse(POOLS, "q.toml"))
    for i in range(10):
        s.do(SubmitJob(-1, spec(), "client"), 1.0 + i * 0.01)
    states = [r.state for r in s.listed().values()]
    assert states == ["running"] * 8 + ["waiting"] * 2
    s.do(Timer("tick"), 1.5)
    rows = s.listed()
    assert [r.state for r in rows.values()] == ["running"] * 8 + ["waiting"] * 2
    assert {(r.queue, r.user, r.tasks, r.tasks_done) for r in rows.values()} == {("large", "carol", 2, 0)}
    # one ends: a waiting job takes its place, and the store says so (one JM host: its host written)
    s.do(JobDone(0, True, "", 20.0, 2), 20.0)
    s.do(Timer("soon"), 20.2)
    rows = s.listed()
    assert rows[0].state == "done" and rows[0].tasks_done == 2 and rows[0].finished_at == 20.0
    assert [rows[j].state for j in range(1, 10)] == ["running"] * 8 + ["waiting"]


def test_progress_cancelled_and_failed(tmp_path):
    s = StoredRm(tmp_path / "jobs.db")
    s.do(SubmitJob(-1, spec(tasks=10, queue="default"), "c"), 1.0)
    s.do(SubmitJob(-1, spec(queue="default"), "c"), 1.0)
    done = np.packbits(np.array([1, 1, 1, 0, 0, 0, 0, 0, 0, 1], bool)).tobytes()
    s.do(HostReport("jmhost:0", np.array([0, 1]), np.zeros(2, np.int64), np.ones(2, np.int64),
                    np.zeros(2, np.int64), np.array([0]), [done]), 2.0)
    assert s.listed()[0].tasks_done == 4 and s.listed()[0].state == "running"
    s.do(CancelJob(1), 3.0)
    s.do(JobDone(1, False, "cancelled", 3.1, 1), 3.2)
    s.do(JobDone(0, False, "task 3 failed 4 times", 4.0, 7), 4.0)
    rows = s.listed()
    assert (rows[0].state, rows[0].tasks_done, rows[1].state) == ("failed", 7, "cancelled")


def test_a_job_that_ended_while_the_rm_was_down_is_recorded_when_it_ended(tmp_path):
    """The RM hears of a job's end late (it was down: the JM host repeats its JobDone to the
    restarted RM): the job's time is its JM's finish time, not the RM's hearing of it."""
    s = StoredRm(tmp_path / "jobs.db")
    s.do(SubmitJob(-1, spec(queue="default"), "c"), 1.0)
    s.do(SubmitJob(-1, spec(queue="default"), "c"), 1.0)
    again = StoredRm(tmp_path / "jobs.db")           # a restart, on the same store
    again.do(JobDone(0, True, "", 3.0, 2), 129.0)
    # a finish time this RM cannot place (before the job's submission: another clock) is not used
    again.do(JobDone(1, True, "", 0.5, 2), 130.0)
    rows = again.listed()
    assert rows[0].finished_at == 3.0 and rows[1].finished_at == 130.0
    clock = ClusterClock(0.0, monotonic=200.0, wall=1e9)
    assert job_dicts([rows[0]], clock)[0]["duration_s"] == 2.0


def test_a_cluster_without_a_queue_file_refuses_other_queue_names(tmp_path):
    s = StoredRm(tmp_path / "jobs.db")
    out = s.do(SubmitJob(-1, spec(queue="gpu"), "c"), 1.0)
    acc = [e.msg for e in out if isinstance(e, Send) and isinstance(e.msg, JobAccepted)][0]
    assert not acc.accepted and "unknown queue 'gpu'" in acc.reason and "'default'" in acc.reason
    assert s.listed() == {}
    for name in ("default", "root"):
        out = s.do(SubmitJob(-1, spec(queue=name), "c"), 1.0)
        assert [e.msg for e in out if isinstance(e, Send) and isinstance(e.msg, JobAccepted)][0].accepted


def test_old_store_gains_the_listing_columns(tmp_path):
    """A store written before queue, user and task counts were columns: opened read-only it is
    read from the specs; opened by an RM, the columns are added and filled in."""
    path = tmp_path / "jobs.db"
    s = SqliteJobStore(str(path))
    s.put(0, spec(queue="large", user="dora"), 1.0, "c")
    s.finish(0, "done", "", 2.0)
    s.put(1, spec(), 1.5, "c", host="jmhost:0")
    for col in ("queue", "user", "tasks", "tasks_done"):
        s.db.execute(f"ALTER TABLE jobs DROP COLUMN {col}")
    s.db.close()
    ro = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    old = list_jobs(ro)
    ro.close()
    assert [(r.queue, r.user, r.tasks, r.tasks_done, r.state) for r in old] == [
        ("large", "dora", 2, 2, "done"), ("large", "carol", 2, 0, "running")]
    assert list_jobs(SqliteJobStore(str(path)).db) == old


def rows_for_filters() -> list[ListedJob]:
    mk = lambda i, state, queue, user: ListedJob(i, f"j{i}", queue, user, state, 4, 2, 10.0 * i,   # noqa: E731
                                                 None if state in ("waiting", "running") else 10.0 * i + 3, "")
    return [mk(0, "done", "small", "ann"), mk(1, "failed", "large", "bob"), mk(2, "running", "large", "ann"),
            mk(3, "waiting", "large", "ann"), mk(4, "cancelled", "small", "bob")]


def test_filters():
    rows = rows_for_filters()
    ids = lambda rs: [r.job_id for r in rs]          # noqa: E731
    assert ids(select_jobs(rows, ["waiting", "running"])) == [2, 3]
    assert ids(select_jobs(rows, queue="large")) == [1, 2, 3] == ids(select_jobs(rows, queue="root.large"))
    assert ids(select_jobs(rows, user="ann", limit=2)) == [2, 3]
    assert ids(select_jobs(rows, limit=1)) == [4] and ids(select_jobs(rows, user="zoe")) == []
    one = [ListedJob(0, "j", "default", "u", "done", 1, 1, 0.0, 1.0, "")]
    assert ids(select_jobs(one, queue="root")) == [0] == ids(select_jobs(one, queue="default"))


def test_table_and_json():
    clock = ClusterClock(100.0, monotonic=150.0, wall=datetime(2026, 1, 2, 12, 0, 50).timestamp())
    rows = rows_for_filters()
    lines = jobs_table(rows, clock, today=date(2026, 1, 2))
    assert lines[0].split() == ["ID", "NAME", "QUEUE", "USER", "STATE", "PROGRESS", "SUBMITTED", "DURATION", "REASON"]
    assert lines[3].split() == ["2", "j2", "large", "ann", "running", "2/4", "12:00:20", "30.0s"]
    assert lines[1].split()[-1] == "3.0s"
    assert len({len(line.split("  ")[0]) for line in lines}) == 1         # aligned
    d = job_dicts(rows, clock)
    assert d[3] == {"id": 3, "name": "j3", "queue": "large", "user": "ann", "state": "waiting", "progress": "2/4",
                    "tasks_done": 2, "tasks": 4, "submitted": "2026-01-02T12:00:30", "duration_s": 20.0,
                    "submitted_at": 30.0, "finished_at": None, "reason": ""}
    json.dumps(d)
    assert job_dicts(rows[:1], ClusterClock(None))[0]["submitted"] is None
    assert [format_duration(x) for x in (None, 2.04, 65, 7322)] == ["-", "2.0s", "1m05s", "2h02m"]
    failed = ListedJob(9, "f", "q", "u", "failed", 1, 0, 0.0, 1.0, "task s:0 exited with 3: " + "x" * 100 + "\nmore")
    line = jobs_table([failed], clock)[1]
    assert line.endswith("...") and "more" not in line and len(line.split("  ")[-1]) <= 72


def test_queue_rows_sum_children_into_parents():
    tree = QueueTree.parse({"queues": {"prod": {"guarantee": "50%", "queues": {"a": {}, "b": {}}}, "dev": {}}})
    rows = queue_rows(tree, 16.0, {"prod.a": (4.0, 1, 2, 3.0), "prod.b": (2.0, 1, 0, 2.0)}, {"prod.a": [7, 8]})
    by = {r["queue"]: r for r in rows}
    assert [r["queue"] for r in rows] == ["root", "prod", "prod.a", "prod.b", "dev"]
    assert by["prod"]["running"] == 2 and by["prod"]["held"] == 5.0 and by["prod"]["guarantee"] == 8.0
    assert by["prod.a"]["in_line"] == [7, 8] and by["prod.a"]["waiting"] == 2 and by["dev"]["running"] == 0


def test_submit_options_reach_the_spec():
    from apollo.tools.cli import build_parser
    a = build_parser().parse_args(["submit", "job.toml", "--queue", "large", "--user", "carol"])
    assert (a.queue, a.user) == ("large", "carol")
    a = build_parser().parse_args(["jobs", "--state", "waiting", "--state", "running", "--limit", "3", "--json"])
    assert a.state == ["waiting", "running"] and a.limit == 3 and a.json
    with pytest.raises(SystemExit):
        build_parser().parse_args(["jobs", "--state", "queued"])
    with pytest.raises(SystemExit):
        build_parser().parse_args(["jobs", "--limit", "0"])
    assert isinstance(a, argparse.Namespace)


@pytest.mark.live
def test_live_jobs_queues_and_submit_overrides(tmp_path):
    """A 2-core cluster without a queue file: two 2-task jobs run (a core each), the third
    waits (listed so), --user shows, another queue's name is refused in one line, and `apollo
    queues --json` has the same figures as its table."""
    import subprocess
    import sys

    from helpers import wait_until

    def apollo(*args):
        return subprocess.run([sys.executable, "-m", "apollo.tools.cli", *args, "--cluster", folder],
                              capture_output=True, text=True, timeout=60)
    folder = str(tmp_path / "c")
    job = tmp_path / "job.toml"
    job.write_text('name = "w"\n[[stage]]\nname = "s"\ntasks = 2\ncpu = 1\nduration_s = 60\n')
    r = apollo("cluster", "up", "--pns", "2", "--racks", "1", "--procs", "1", "--cpus", "1")
    assert r.returncode == 0, r.stderr
    try:
        r = apollo("submit", str(job), "--queue", "gpu")
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and "unknown queue 'gpu'" in r.stderr, r.stderr
        for user in ("ann", "ann", "dora"):
            r = apollo("submit", str(job), "--user", user)
            assert r.returncode == 0 and f"as user '{user}'" in r.stdout, r.stdout + r.stderr

        def listed():
            jobs = json.loads(apollo("jobs", "--json").stdout)
            return jobs if [j["state"] for j in jobs["jobs"]] == ["running", "running", "waiting"] else None
        jobs = wait_until(listed, timeout=20, what="jobs 0 and 1 running, job 2 waiting")
        assert jobs["cluster_running"] and [j["user"] for j in jobs["jobs"]] == ["ann", "ann", "dora"]
        assert {j["queue"] for j in jobs["jobs"]} == {"default"} and jobs["jobs"][0]["submitted"]
        r = apollo("jobs", "--state", "waiting", "--user", "dora")
        assert r.stdout.split("\n")[0].split()[:5] == ["ID", "NAME", "QUEUE", "USER", "STATE"]
        assert r.stdout.split("\n")[1].split()[:5] == ["2", "w", "default", "dora", "waiting"]
        q = json.loads(apollo("queues", "--json").stdout)
        assert [(x["queue"], x["running"], x["waiting"], x["in_line"]) for x in q["queues"]] == [("root", 2, 1, [2])]
        assert apollo("cancel", "2").returncode == 0
        r = apollo("jobs", "--json", "--limit", "1")
        assert [(j["id"], j["state"]) for j in json.loads(r.stdout)["jobs"]] == [(2, "cancelled")]
    finally:
        r = apollo("cluster", "down")
    assert r.returncode == 0
    r = apollo("jobs", "--json")
    assert r.returncode == 1 and not json.loads(r.stdout)["cluster_running"] and "not running" in r.stderr


def test_jobs_admitted_in_a_newcomers_round_are_stored_as_running(tmp_path):
    """A job below its guarantee is admitted in a round of its own, which may admit others
    waiting meanwhile: their hosts are stored too (only the newcomer's goes with its put)."""
    tree = QueueTree.parse({"queues": {"a": {"guarantee": "50%"}, "b": {}, "c": {}}}, "q.toml")
    s = StoredRm(tmp_path / "jobs.db", tree)
    s.do(SubmitJob(-1, spec("x", tasks=16, queue="b"), "c"), 1.0)        # takes every core
    s.do(SubmitJob(-1, spec("y", tasks=4, queue="c"), "c"), 1.1)         # no token free: waits
    assert s.listed()[1].state == "waiting"
    s.do(SubmitJob(-1, spec("z", tasks=4, queue="a"), "c"), 1.2)         # below its guarantee: a round now
    assert s.rm.jobs[1].admitted and s.rm.jobs[2].admitted
    assert [r.state for r in s.listed().values()] == ["running"] * 3


def test_a_fifo_pool_with_a_running_job_limit_runs_that_many_token_or_not(tmp_path):
    """The issue's scenario on 8 cores: 10 two-task jobs in a FIFO pool that runs 8 at a time.
    8 run (the head jobs hold the tokens, the others none yet, as runnable jobs of a Hadoop FIFO
    pool) and 2 wait; without the limit a FIFO pool admits only the jobs the tokens reach."""
    for limit, running in ((8, 8), (None, 4)):
        large = {"order": "fifo", **({"max_running_jobs": limit} if limit else {})}
        tree = QueueTree.parse({"sharing": "fair", "queues": {"small": {"guarantee": "20%"}, "large": large}},
                               "q.toml")
        s = StoredRm.__new__(StoredRm)
        s.store = SqliteJobStore(str(tmp_path / f"jobs-{limit}.db"))
        s.rm = RmState(RmConfig(4, 12, server_cores=2.0, queues=tree, jm_hosts=("jmhost:0",)))
        s.do(Start(s.store.recovered()), 0.0)
        for srv in range(4):
            s.do(hb(srv, 0.1), 0.1)
        for i in range(10):
            s.do(SubmitJob(-1, spec(), "client"), 1.0 + i * 0.01)
        s.do(Timer("tick"), 1.5)
        s.rm.validate()
        rows = s.listed()
        assert [r.state for r in rows.values()] == ["running"] * running + ["waiting"] * (10 - running), limit
        tokens = [s.rm.jobs[j].tokens for j in sorted(s.rm.jobs)][:running]
        assert sum(tokens) <= 8 and tokens[:4] == [2, 2, 2, 2], tokens


def test_the_store_log_is_copied_in_a_checkpoint_of_its_own_connection(tmp_path):
    """A write does not checkpoint the log on its own until WAL_PAGES_MAX pages; ``checkpoint``
    copies it all (from any thread), and the jobs read back the same."""
    s = SqliteJobStore(str(tmp_path / "jobs.db"))
    assert s.db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == WAL_PAGES_MAX
    for j in range(50):
        s.put(j, spec(), 1.0, "c")
        s.finish(j, "done", "", 2.0, 1)
    got: list = []
    t = threading.Thread(target=lambda: got.append(s.checkpoint()))
    t.start()
    t.join()
    busy, logged, copied = got[0]
    assert busy == 0 and logged > 0 and copied == logged
    assert [(r.job_id, r.state) for r in list_jobs(s.db)] == [(j, "done") for j in range(50)]


async def test_the_rm_process_checkpoints_its_store_in_a_thread(tmp_path):
    s = SqliteJobStore(str(tmp_path / "jobs.db"))
    s.put(0, spec(), 1.0, "c")
    threads: list[int] = []
    copy = s.checkpoint
    s.checkpoint = lambda: threads.append(threading.get_ident()) or copy()   # type: ignore[method-assign]
    task = asyncio.ensure_future(_checkpoints(s, every_s=0.01))
    try:
        await await_until(lambda: len(threads) >= 3, 5.0, "three checkpoints")
    finally:
        task.cancel()
    assert threading.get_ident() not in threads        # never on the event loop's thread


QUEUE_STATES = st.fixed_dictionaries({
    "shares": st.dictionaries(st.sampled_from(["root", "a", "b", "root.c"]), st.sampled_from([0.0, 1.5, 4.0]),
                              max_size=4),
    "running": st.dictionaries(st.sampled_from(["a", "b", "root.c"]), st.integers(0, 3), max_size=3),
    "waiting": st.dictionaries(st.sampled_from(["a", "b"]), st.integers(0, 2), max_size=2),
    "positions": st.dictionaries(st.integers(0, 6), st.tuples(st.sampled_from(["a", "b"]), st.integers(1, 4)),
                                 max_size=4),
    "held": st.dictionaries(st.sampled_from(["a", "b"]), st.sampled_from([0.0, 0.5, 2.0]), max_size=2)})


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(QUEUE_STATES, st.booleans()), min_size=1, max_size=8))
def test_the_queues_tables_hold_the_last_round_written_row_by_row(tmp_path_factory, rounds):
    """The store writes only the queue rows and places that moved since its last write (a new
    store object, as a restarted RM's, writes everything): the tables always read as the last
    round's state."""
    path = str(tmp_path_factory.mktemp("q") / "jobs.db")
    store = SqliteJobStore(path)
    for at, (q, restart) in enumerate(rounds):
        if restart:
            store = SqliteJobStore(path)
        store.queues(float(at), q["shares"], q["running"], q["waiting"], q["positions"], q["held"])
        got = {r[0]: r[1:] for r in store.db.execute("SELECT path, share, running, waiting, held FROM queue_state")}
        assert got == {p: (s, q["running"].get(p, 0), q["waiting"].get(p, 0), q["held"].get(p, 0.0))
                       for p, s in q["shares"].items()}
        assert {r[0]: (r[1], r[2]) for r in store.db.execute("SELECT job_id, queue, position FROM waiting")} == \
            q["positions"]
