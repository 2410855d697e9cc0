"""apollo.tools.native: the compiled kernel and PN load only for the sources they were built from, and
compute what the interpreted modules compute."""
from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from apollo.tools import native

ROOT = native.ROOT


def _copy_sources(dest: Path) -> None:
    for m in native.MODULES + native.DEPENDS + ("apollo.tools.cli.offline",):
        src = native._source(m)
        out = dest / src.relative_to(ROOT)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, out)


def test_a_build_is_named_after_the_sources_it_is_compiled_from_and_against(tmp_path):
    _copy_sources(tmp_path)
    key = native.build_key(tmp_path)
    assert key == native.build_key(tmp_path)
    native._source("apollo.tools.cli.offline", tmp_path).write_text("# not compiled, not imported by what is\n")
    assert native.build_key(tmp_path) == key
    for m in ("pn.state", "apollo.core.messages"):        # compiled; imported by what is
        p = native._source(m, tmp_path)
        text = p.read_text()
        p.write_text(text + "\n# edited\n")
        assert native.build_key(tmp_path) != key, m
        p.write_text(text)
    assert native.build_key(tmp_path) == key


def test_a_build_is_named_after_the_tools_that_make_it_too(tmp_path, monkeypatch):
    _copy_sources(tmp_path)
    for k in native.COMPILER_ENV:
        monkeypatch.delenv(k, raising=False)
    key = native.build_key(tmp_path)
    config = sysconfig.get_config_vars()
    changes = {
        "CFLAGS": lambda: monkeypatch.setenv("CFLAGS", "-O0"),
        "CC": lambda: monkeypatch.setenv("CC", "clang"),
        "LDFLAGS": lambda: monkeypatch.setenv("LDFLAGS", "-fuse-ld=lld"),
        "mypy": lambda: monkeypatch.setattr(native, "_mypy_version", lambda: '__version__ = "0.1"\n'),
        "Python's flags": lambda: monkeypatch.setattr(
            native.sysconfig, "get_config_vars", lambda: dict(config, CFLAGS=f"{config.get('CFLAGS')} -g0")),
        "ABI": lambda: monkeypatch.setattr(native, "SUFFIX", ".cpython-399-x86_64-linux-gnu.so"),
        "mypy's flags": lambda: monkeypatch.setattr(native, "MYPY_FLAGS", (*native.MYPY_FLAGS, "--strict")),
        "compiler binary": lambda: monkeypatch.setattr(native, "_binary", lambda name: f"/usr/bin/{name}-99 1 2"),
    }
    for what, change in changes.items():
        change()
        assert native.build_key(tmp_path) != key, what
        monkeypatch.undo()
        for k in native.COMPILER_ENV:
            monkeypatch.delenv(k, raising=False)
        assert native.build_key(tmp_path) == key, what


def _fake_build(cache: Path, key: str, used_at: int) -> Path:
    d = cache / key
    (d / "modules").mkdir(parents=True)
    (d / native.DONE_FILE).write_text("\n")
    os.utime(d / native.DONE_FILE, ns=(used_at, used_at))
    return d


def test_a_prune_keeps_the_current_build_and_the_last_used_other(tmp_path):
    old = [_fake_build(tmp_path, f"{i:024x}", used_at=i * 10**9) for i in range(1, 5)]
    current = _fake_build(tmp_path, "c" * 24, used_at=10**9)          # (used longest ago: kept all the same)
    (tmp_path / "notes.txt").write_text("not a build")
    (tmp_path / "other").mkdir()
    (tmp_path / ("d" * 24)).mkdir()                                   # no BUILT file: not a build
    died = tmp_path / ("e" * 24 + ".x1y2"); died.mkdir()
    os.utime(died, (0, 0))                                            # a build that died half-way, long ago
    making = tmp_path / ("f" * 24 + ".z3w4"); making.mkdir()          # one being made now
    gone = native.prune(current)
    assert sorted(gone) == sorted(old[:3] + [died])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [current.name, old[3].name, "notes.txt", "other", "d" * 24, making.name])


def test_a_reused_build_is_marked_used_and_prunes_the_rest(tmp_path, monkeypatch):
    monkeypatch.setenv("APOLLO_NATIVE_CACHE", str(tmp_path))
    others = [_fake_build(tmp_path, f"{i:024x}", used_at=i * 10**9) for i in range(1, 4)]
    current = _fake_build(tmp_path, native.build_key(), used_at=0)
    assert native.build() == current                                   # (no compiler run: it exists)
    assert (current / native.DONE_FILE).stat().st_mtime > 10
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([current.name, others[-1].name])


def _project_imports(m: str) -> set[str]:
    """The project modules ``m`` imports (anywhere in it: a function's import too)."""
    path = native._source(m)
    package = m if path.name == "__init__.py" else m.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:               # relative: from the module's own package
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            # (from PACKAGE import module: the names may be modules)
            found = [base] + [f"{base}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            found = [a.name for a in node.names]
        else:
            continue
        out |= {n for n in found if n.split(".")[0] in native.PACKAGES and n not in native.PACKAGES
                and (native._source(n).exists())}
    return out


def test_every_project_module_the_compiled_ones_import_is_part_of_the_key():
    """Followed through the actors' packages (jm, pn, rm): a policy module the JM's state imports
    through jm.policies is compiled against as much as the state itself."""
    named = set(native.MODULES + native.DEPENDS)
    seen, todo = set(native.MODULES), list(native.MODULES)
    while todo:
        m = todo.pop()
        for name in _project_imports(m):
            if m in native.MODULES or name.split(".")[0] in ("jm", "pn", "rm"):
                assert name in named, f"{m} imports {name}, which the build key does not cover"
            if name.split(".")[0] in ("jm", "pn", "rm") and name not in seen:
                seen.add(name)
                todo.append(name)


def _run(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=240)


@pytest.mark.live
def test_asking_for_a_build_that_does_not_exist_runs_the_python_and_says_why(tmp_path):
    env = dict(os.environ, APOLLO_NATIVE="1", APOLLO_NATIVE_CACHE=str(tmp_path))
    r = _run("import apollo.runtime.sim as s; from apollo.tools import native; print(native.loaded(), s.__file__)", env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == "False" and r.stdout.split()[1].endswith(".py")
    assert "no build of these sources" in r.stderr


SIMULATE = """
import json
from apollo.tools import native
from apollo.tools.simulate import SimConfig, run_simulation
from apollo.core.stragglers import DOLLY
from apollo.workloads import load_workload
w = load_workload("heavytail", seed=4)
w.jobs = w.jobs[:120]
# (task failures too: the estimates then read each server's failure rate, a path of its own)
r = run_simulation(w, SimConfig(servers=120, racks=6, seed=4, opportunistic=True, stragglers=DOLLY, fail_prob=0.05))
# (and a stateful filter, delay scheduling, inside the compiled sharing plane: a compiled-only
# type error once hid on that path)
from apollo.workloads.assign import assign
from rm.queues import load_queue_file
tree = load_queue_file("examples/queues/three-pools.toml")
w2 = load_workload("heavytail", seed=5)
w2.jobs = w2.jobs[:80]
assign(w2, [q.path for q in tree.leaves()], "size", seed=5)
r2 = run_simulation(w2, SimConfig(servers=12, racks=2, seed=5, scheduler="hfs-delay", queues=tree))
for k in ("throughput",):
    r.pop(k, None)
    r2.pop(k, None)
print(json.dumps({"native": native.loaded(), "report": r, "pools": r2}, sort_keys=True, default=str))
"""


@pytest.mark.live
@pytest.mark.slow
@pytest.mark.skipif(bool(native.missing_tools()), reason=f"cannot compile here: {native.missing_tools()}")
def test_the_compiled_modules_give_the_same_report(tmp_path):
    # The build cache every command uses: a build is named after its sources and toolchain, so a
    # machine that built these sources once (apollo bench scale, an earlier run) does not again.
    env = dict(os.environ)
    env.pop("APOLLO_NATIVE", None)
    b = _run("from apollo.tools import native; print(native.build())", env)
    assert b.returncode == 0, b.stderr
    plain = _run(SIMULATE, env)
    compiled = _run(SIMULATE, dict(env, APOLLO_NATIVE="1"))
    assert plain.returncode == 0, plain.stderr
    assert compiled.returncode == 0, compiled.stderr
    p, c = json.loads(plain.stdout), json.loads(compiled.stdout)
    assert (p["native"], c["native"]) == (False, True)
    assert p["report"] == c["report"] and p["pools"] == c["pools"]
    # `apollo chaos` runs the seeds compiled once built (auto, on), the same seeds' outcomes
    got = {}
    for mode in ("off", "auto", "on"):
        out = subprocess.run([sys.executable, "-m", "apollo.tools.cli", "chaos", "--seeds", "2", "--start", "7",
                              "--workers", "1", "--native", mode, "--json", "/dev/stdout"],
                             capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
        assert out.returncode == 0, out.stderr
        said, _, data = out.stdout.partition("\n")
        assert said == ("interpreted modules" if mode == "off" else "compiled modules (apollo.tools.native)")
        got[mode] = {k: v for k, v in json.loads(data[data.index("{"):]).items() if k != "wall_s"}
    assert got["off"] == got["auto"] == got["on"] and got["off"]["passed"] == 2
    # so does `apollo simulate`, with the same report; a program calling main(argv) is never replaced
    reports = {}
    for mode in ("off", "auto"):
        out = subprocess.run([sys.executable, "-m", "apollo.tools.cli", "simulate", "heavytail", "--jobs", "12",
                              "--servers", "30", "--seed", "4", "--native", mode, "--json", str(tmp_path / f"{mode}.json")],
                             capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.partition("\n")[0] == ("interpreted modules" if mode == "off"
                                                 else "compiled modules (apollo.tools.native)")
        reports[mode] = {k: v for k, v in json.loads((tmp_path / f"{mode}.json").read_text()).items()
                         if k != "throughput"}
    assert reports["off"] == reports["auto"]
    embedded = _run("from apollo.tools.cli import main; main(['simulate', 'heavytail', '--jobs', '3', "
                    "'--servers', '10'])", env)
    assert embedded.returncode == 0 and embedded.stdout.startswith("interpreted modules"), embedded.stderr


COMPILED_CLUSTER = """
import asyncio, tempfile
from pathlib import Path
import numpy as np
import apollo.runtime.live as live, apollo.runtime.transport as transport
from apollo.core.spec import JobSpec, StageSpec
from apollo.runtime.live import run
from apollo.tools import livecluster, native
from apollo.tools.client import Client
assert live.__file__.endswith(native.SUFFIX) and transport.__file__.endswith(native.SUFFIX), live.__file__

async def jobs(folder):
    async with Client(folder) as c:
        ids = [await c.submit(JobSpec(f"j{i}", [StageSpec("s", 4, np.full(4, 0.01), cpu=1.0, mem_gb=1.0)]))
               for i in range(6)]
        return [await c.wait(j, 60.0) for j in ids]

with tempfile.TemporaryDirectory() as tmp:
    folder = Path(tmp) / "c"
    livecluster.up(folder, pns=2, racks=1, procs=1, cpus=1.0, mem_gb=4.0, native=True)
    try:
        done = run(jobs(folder))
    finally:
        livecluster.down(folder)
print(sum(d.ok for d in done), sum(d.tasks_done for d in done))
"""


@pytest.mark.live
@pytest.mark.slow
@pytest.mark.skipif(bool(native.missing_tools()), reason=f"cannot compile here: {native.missing_tools()}")
def test_a_cluster_of_compiled_processes_runs_jobs_through_the_compiled_runtime():
    # The live runtime's loop and transport are compiled too (every message of a live process
    # passes through them): this client and the cluster's processes run them compiled.
    env = dict(os.environ)
    b = _run("from apollo.tools import native; print(native.build())", env)
    assert b.returncode == 0, b.stderr
    got = _run(COMPILED_CLUSTER, dict(env, APOLLO_NATIVE="1"))
    assert got.returncode == 0, got.stderr
    assert got.stdout.split() == ["6", "24"]


def test_child_processes_are_told_to_load_a_build_only_when_there_is_one(monkeypatch, tmp_path):
    monkeypatch.setenv("APOLLO_NATIVE_CACHE", str(tmp_path))
    monkeypatch.setenv("APOLLO_NATIVE", "1")
    assert native.for_children("off") == "--native off" and "APOLLO_NATIVE" not in os.environ
    monkeypatch.setattr(native, "missing_tools", lambda: "no C compiler (cc) on PATH")
    assert native.for_children("auto") == "no C compiler (cc) on PATH" and "APOLLO_NATIVE" not in os.environ
    with pytest.raises(native.NativeBuildError, match="no C compiler"):
        native.for_children("on")


def test_a_cluster_process_runs_the_code_its_cluster_was_started_with(tmp_path, monkeypatch):
    # cluster.json's config "native" (apollo cluster up --native) decides for every process
    # started, the supervisor's and `apollo cluster restart`'s too; absent, the caller's environment
    from apollo.tools.livecluster import child_env, write_info
    monkeypatch.setenv("APOLLO_NATIVE", "1")
    for native_cfg, want in ((True, "1"), (False, None), ("absent", "1")):
        cfg = {} if native_cfg == "absent" else {"native": native_cfg}
        write_info(tmp_path, {"processes": [], "config": cfg})
        assert child_env(tmp_path).get("APOLLO_NATIVE") == want, native_cfg
    monkeypatch.delenv("APOLLO_NATIVE")
    write_info(tmp_path, {"processes": [], "config": {"native": True}})
    assert child_env(tmp_path)["APOLLO_NATIVE"] == "1"
