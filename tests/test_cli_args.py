"""Bad invocations (issue 29): each ends in one line naming what was wrong and a non-zero exit,
never a traceback, a hang or a run with a silently changed value."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from apollo.tools.cli import main
from apollo.tools.cli.offline import BENCHES


def one_line_error(capsys, argv: list[str], code: int = 2) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    out = capsys.readouterr()
    assert e.value.code == code, (argv, out)
    lines = [x for x in out.err.splitlines() if x.strip()]
    assert len(lines) == 1 and not out.out, (argv, out)
    return lines[0]


@pytest.mark.parametrize("argv, names", [
    (["simulate", "heavytail", "--loss", "1.5"], ("--loss", "1.5", "[0, 0.5]")),
    (["simulate", "heavytail", "--jobs", "-3"], ("--jobs", "-3", ">= 1")),
    (["simulate", "heavytail", "--load", "0"], ("--load", "0", "(0, 10]")),
    (["simulate", "heavytail", "--load", "-1"], ("--load", "-1", "(0, 10]")),
    (["simulate", "heavytail", "--dup", "2"], ("--dup", "2", "[0, 1)")),
    (["simulate", "heavytail", "--cores", "0.5"], ("--cores", "0.5", ">= 1")),
    (["simulate", "heavytail", "--servers", "nan"], ("--servers", "nan", "integer")),
    (["simulate", "heavytail", "--heartbeat", "inf"], ("--heartbeat", "inf", "> 0")),
    (["chaos", "--seeds", "-1"], ("--seeds", "-1", ">= 1")),
    (["cluster", "up", "--cpus", "0"], ("--cpus", "0", "> 0")),
    (["cluster", "up", "--pns", "0"], ("--pns", "0", ">= 1")),
    (["node", "join", "--rm", "x:1", "--secret-file", "s", "--port", "70000"], ("--port", "70000", "65535")),
    (["submit", "job.toml", "--timeout", "0"], ("--timeout", "0", "> 0")),
    (["replay", "fb2009", "--speedup", "-2"], ("--speedup", "-2", "> 0")),
    (["bench", "scale", "--seed", "-1"], ("--seed", "-1", ">= 0")),
    (["bench", "scale", "--servers", "100,x"], ("--servers", "'x'", "integer")),
    (["bench", "compare", "--loads", "0.7,0"], ("--loads", "0", "(0, 10]")),
    (["bench", "compare", "--schedulers", "apollo,nope"], ("--schedulers", "nope", "apollo")),
    (["bench", "throughput", "--short-ms", "0"], ("--short-ms", "0", "> 0")),
])
def test_a_number_out_of_range_is_one_line_naming_option_value_and_range(capsys, argv, names):
    line = one_line_error(capsys, argv)
    for n in names:
        assert n in line, (n, line)
    assert line.startswith("apollo "), line


def test_more_racks_than_servers_is_refused(capsys):
    assert main(["simulate", "heavytail", "--servers", "4", "--racks", "5", "--jobs", "1"]) == 2
    err = capsys.readouterr().err
    assert "--racks 5 is more than --servers 4" in err and len(err.strip().splitlines()) == 1


def test_a_missing_trace_is_one_line(capsys):
    assert main(["simulate", "/nonexistent/trace.tsv"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "/nonexistent/trace.tsv" in err[0]


def test_bench_help_lists_every_bench(capsys):
    with pytest.raises(SystemExit) as e:
        main(["bench", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for name in BENCHES:
        assert f"  {name} " in out, name
    assert main(["bench", "nope"]) == 2
    assert "unknown benchmark 'nope'" in capsys.readouterr().err


def test_every_option_has_help_text():
    from apollo.tools.cli import build_parser
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "cmd")
    missing = [f"{name} {a.option_strings or a.dest}" for name, p in sub.choices.items()
               for a in p._actions if a.dest != "help" and not a.help]
    assert not missing, missing


def test_a_stopped_cluster_is_said_to_be_down(tmp_path, capsys):
    folder = tmp_path / "c"
    folder.mkdir()
    info = {"rm": "127.0.0.1:9", "http": "127.0.0.1:10", "config": {"pns": 1, "cpus": 1, "racks": 1},
            "processes": [{"role": "rm", "index": 0, "address": "127.0.0.1:9", "pid": 999999999}],
            "stopped_at": time.time()}
    (folder / "cluster.json").write_text(json.dumps(info))
    for cmd in (["queues"], ["dashboard"], ["job", "0"], ["cancel", "0"]):
        assert main([*cmd, "--cluster", str(folder)]) == 1, cmd
        err = capsys.readouterr().err
        assert f"the cluster in {folder} is not running (stopped by `apollo cluster down`)" in err, err
    del info["stopped_at"]             # no down, but every process dead
    (folder / "cluster.json").write_text(json.dumps(info))
    assert main(["queues", "--cluster", str(folder)]) == 1
    assert "none of its processes is alive" in capsys.readouterr().err


def test_the_cluster_folder_defaults_to_apollo_cluster(monkeypatch, tmp_path):
    monkeypatch.setenv("APOLLO_CLUSTER", str(tmp_path / "mine"))
    from apollo.tools.cli import build_parser
    assert build_parser().parse_args(["queues"]).cluster == str(tmp_path / "mine")


def test_cluster_up_on_a_foreign_address_is_refused_before_anything_starts(tmp_path, capsys):
    folder = tmp_path / "c"
    assert main(["cluster", "up", "--cluster", str(folder), "--pns", "2", "--racks", "1",
                 "--bind", "10.255.255.254"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot listen on 10.255.255.254" in err[0], err
    assert not folder.exists()


def test_a_closed_pipe_ends_quietly():
    p = subprocess.Popen([sys.executable, "-m", "apollo.tools.cli", "--help"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    p.stdout.close()              # the reader (`| head -1`) has gone before the help is written
    err = p.stderr.read().decode()
    p.wait(timeout=20)
    assert "Traceback" not in err and "BrokenPipe" not in err, err
