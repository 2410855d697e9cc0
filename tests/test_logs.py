"""apollo.tools.logs: the log service (request in, answer out, from a work folder) and how the
attempts shown by `apollo logs` and `apollo job` are put together from records and listings."""
import json
from types import SimpleNamespace

from apollo.core.effects import Send
from apollo.core.messages import ListLogs, LogChunk, LogList, ReadLog
from apollo.tools.logs import CHUNK, AttemptOutput, LogService, PnProcess, job_attempts, last_attempt, pn_processes


def service(tmp_path, running=()):
    (tmp_path / "5-3-1.out").write_text("three\n")
    (tmp_path / "5-3-1.err").write_text("oops\n")
    (tmp_path / "5-3-1.exit").write_text("3\n")
    (tmp_path / "5-3-65537.out").write_text("")
    (tmp_path / "5-4-1.out").write_bytes(b"x" * (CHUNK + 10))      # running: no exit code yet
    (tmp_path / "55-0-1.out").write_text("another job\n")
    executor = SimpleNamespace(workdir=tmp_path, running={("pn:7", (5, 4, 1)): None, **dict(running)})
    return LogService("pn0", executor)


def answer(svc, msg):
    out = svc.handle(msg, 0.0, None)
    assert len(out) == 1 and type(out[0]) is Send and out[0].to == "reader"
    return out[0].msg


def test_a_listing_names_each_attempt_with_output_here(tmp_path):
    got = answer(service(tmp_path), ListLogs(5, "reader"))
    assert got == LogList(5, "pn0", str(tmp_path.resolve()), [3, 3, 4], [1, 65537, 1], [6, 0, CHUNK + 10], [5, 0, 0],
                          [3, None, None], [-1, -1, 7])
    assert answer(service(tmp_path), ListLogs(9, "reader")).tasks == []


def test_reads_are_chunked_and_a_missing_file_says_so(tmp_path):
    svc = service(tmp_path)
    assert answer(svc, ReadLog(5, 3, 1, True, 0, 100, "reader")) == LogChunk(5, 3, 1, True, 0, 5, b"oops\n")
    assert answer(svc, ReadLog(5, 3, 1, False, 2, 100, "reader")).data == b"ree\n"
    big = answer(svc, ReadLog(5, 4, 1, False, 0, 1 << 30, "reader"))
    assert len(big.data) == CHUNK and big.size == CHUNK + 10                   # at most CHUNK a reply
    assert answer(svc, ReadLog(5, 8, 1, False, 0, 100, "reader")) == LogChunk(5, 8, 1, False, 0, -1, b"")


def test_pn_processes_include_the_joined_ones(tmp_path):
    info = {"processes": [{"role": "rm", "address": "a:1"},
                          {"role": "pn", "index": 0, "address": "a:2", "pns": [0, 1]}]}
    (tmp_path / "joined.json").write_text(json.dumps({"b:9": {"role": "pn", "index": 1000, "address": "b:9",
                                                              "pns": [2], "joined": True},
                                                      "c:9": {"role": "jm", "index": 2, "address": "c:9"}}))
    got = pn_processes(tmp_path, info)
    assert [(p.name, p.address, p.servers, p.joined) for p in got] == [("pn0", "a:2", (0, 1), False),
                                                                        ("pn1000", "b:9", (2,), True)]


def record(stage, index, attempt, server, outcome, t_end):
    # apollo.core.records A_*: job, stage, task, attempt, server, loc, ready, dispatch, start, end, outcome, ...
    return (5, stage, index, attempt, server, 2, 0.0, 0.0, t_end - 1, t_end, outcome, False, 1.0, False, 0)


def test_attempts_join_records_and_listings():
    processes = [PnProcess("pn0", "a:2", (0, 1), False), PnProcess("pn1000", "b:9", (2,), True)]
    stages = [("prep", 2), ("part", 3)]            # part:i is the job-wide task 2 + i
    records = [record(0, 0, 1, 0, "done", 1.0),                        # synthetic: no output anywhere
               record(1, 0, 1, 2, "failed", 2.0), record(1, 0, 2, 2, "done", 3.0),
               record(1, 1, 1, 1, "done", 2.5), (6, 1, 1, 1, 0, 2, 0, 0, 0, 1.0, "done", False, 1.0, False, 0)]
    listings = {"pn0": LogList(5, "pn0", "/c/work/pn0", [3, 4], [1, 1], [4, 0], [0, 0], [0, None], [-1, 1]),
                "pn1000": LogList(5, "pn1000", "/j/work/pn-1", [2, 2], [1, 2], [1, 2], [3, 0], [1, 0], [-1, -1])}
    by = job_attempts(5, stages, records, listings, processes)
    assert sorted(by) == [0, 2, 3, 4]
    prep = by[0][0]
    assert (prep.label, prep.outcome, prep.process, prep.folder) == ("prep:0", "done", "pn0", "")
    first, second = by[2]
    assert (first.outcome, first.exit_code, second.outcome, second.exit_code) == ("failed", 1, "done", 0)
    assert last_attempt(by[2]) is second and second.path() == "/j/work/pn-1/5-2-2.out"
    assert second.path(stderr=True) == "/j/work/pn-1/5-2-2.err" and second.process == "pn1000"
    running = by[4][0]                                              # no record yet: it runs on pn:1
    assert (running.label, running.outcome, running.server, running.process) == ("part:2", "running", 1, "pn0")
    # a process that did not answer: the records still say where its attempts ran
    by = job_attempts(5, stages, records, {"pn0": listings["pn0"], "pn1000": None}, processes)
    assert by[2][1].process == "pn1000" and by[2][1].folder == "" and by[2][1].exit_code is None


def test_the_attempt_shown_is_the_one_that_counted_else_the_newest():
    def a(attempt, outcome, t_end=float("inf")):
        return AttemptOutput(5, "part", 0, 2, attempt, outcome, t_end=t_end)
    assert last_attempt([a(1, "failed", 1.0), a(2, "done", 3.0), a(65537, "done", 3.5)]).attempt == 2
    assert last_attempt([a(1, "failed", 1.0), a(2, "running")]).attempt == 2
    assert last_attempt([a(1, "failed", 1.0), a(2, "killed", 2.0), a(3, "lost")]).attempt == 3
    assert last_attempt([a(1, "failed", 5.0), a(2, "killed", 2.0)]).attempt == 1
