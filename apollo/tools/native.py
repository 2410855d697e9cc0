"""Compiled hot modules: the simulator's kernel, the messages, the PN, the JM and its host and
the RM, built with mypyc, on request.

A 20,000-server simulation spends about half its time in the event kernel and
the PNs' state machines and most of the rest in the JMs: plain Python over small
objects, where the interpreter's own dispatch is much of the cost. mypyc
compiles those modules, unchanged, to C extensions: the messages become C structs
made in ~30 ns, and code that knows an object's type reads its fields as struct
members (the JMs' numpy calls stay what they are). They stay ordinary Python, and
the interpreted modules remain what every test, the live cluster and
``apollo simulate`` run unless asked otherwise.

- ``build()`` compiles the modules of ``MODULES`` (needs mypy, which brings
  mypyc, and a C compiler with Python's headers) into a cache directory named
  after a hash (``build_key``) of their sources, of the project modules they use
  (``DEPENDS``) and of the tools (``toolchain``: mypy's version, the compiler and
  its flags, this Python's version and ABI), so an edited source or a changed
  tool never loads a stale build. It prunes the cache to ``KEEP`` builds: the
  current one and the most recently used others.
- With ``APOLLO_NATIVE=1`` in the environment, ``import apollo`` loads the build
  of the current sources instead of the modules' Python, if there is one (it
  must come before those modules are imported); ``loaded()`` tells which ran.
  ``apollo bench scale`` builds and loads them itself (``--native``).

The compiled modules compute the same results: a test compares a seeded
simulation's report under both, byte for byte.
"""
from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

# Compiled together (one mypyc group: calls between them are C calls).
MODULES = ("apollo.core.clocks", "apollo.core.rows", "apollo.core.effects", "apollo.core.messages", "apollo.core.wire",
           "apollo.core.records", "apollo.core.lifecycle", "apollo.core.cluster", "apollo.runtime.events",
           "apollo.runtime.sim", "apollo.runtime.truth", "pn.queue", "pn.state", "jm.attempts",
           "jm.host", "jm.state", "jm.interest", "jm.report_rows", "jm.view", "rm.state", "jm.tasks", "jm.placement",
           "jm.watchdog", "jm.adoption", "jm.estimate", "jm.candidates", "jm.policies.pipeline", "jm.policies.batch",
           "jm.giveback", "pn.attempt", "pn.config",
           "rm.jobs", "rm.cluster_load", "rm.token_messages", "rm.jm_homes", "rm.queue_limits", "rm.admission",
           "rm.give_back_asks", "rm.allocation_round", "rm.host_reports",
           "apollo.runtime.transport", "apollo.runtime.live",
           # the sharing plane's round (a queue order stays interpreted: a compiled class's class
           # attributes are not a plain subclass's to override)
           "rm.share_kind", "rm.share_fair", "rm.share_capacity", "rm.share_math", "rm.exact_sum",
           "rm.snapshot_columns", "rm.give_back", "rm.sharing_types",
           # the seams' base classes and the apollo profile's matcher and filter (every placement
           # pass calls them); the other policies stay interpreted and subclass the compiled bases
           "jm.policies.base", "jm.policies.matchers", "jm.policies.deferral", "jm.stable_matching",
           # job specs: decoded and checked at the RM and again at the JM host on every job's path
           "apollo.core.spec")
# The project modules those import: their sources are part of a build's identity too.
DEPENDS = ("apollo.core.compiled", "apollo.core.nonzero", "apollo.core.shapes",
           "apollo.core.stragglers", "apollo.runtime.hugepages", "jm.policies",
           "jm.policies.opportunistic", "rm.clones", "rm.queues",
           "rm.sharing", "rm.store", "jm.config",
           "jm.policies.delay", "jm.policies.gate",
           "jm.policies.offers", "jm.policies.sparrow",
           "rm.queue_order",
           "apollo.runtime.executor")
# Error codes the checker is told to ignore: none. Types are checked throughout: a compiled
# function called with the wrong type from compiled code is not checked at run time (a tuple
# passed for a list[...] crashed the process).
LENIENT: tuple[str, ...] = ()
PACKAGES = ("apollo", "jm", "pn", "rm")      # copied for the build (mypy follows their imports)
ROOT = Path(__file__).resolve().parents[2]      # the project: apollo/tools/native.py
ENV = "APOLLO_NATIVE"
RELAUNCHED = "APOLLO_NATIVE_RELAUNCHED"    # set in the process ``relaunch`` execs (no second relaunch)
CACHE_ENV = "APOLLO_NATIVE_CACHE"
SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]
DONE_FILE = "BUILT"
KEEP = 2                      # builds left in the cache after a build: this one and the last one used before it
# What setuptools takes from the environment over Python's own build settings (sysconfig).
COMPILER_ENV = ("CC", "CXX", "CPP", "CFLAGS", "CPPFLAGS", "LDFLAGS", "LDSHARED", "AR", "ARFLAGS")
COMPILER_VARS = ("CC", "CXX", "CFLAGS", "CCSHARED", "LDSHARED", "OPT")
# (type errors elsewhere in the project are not this build's business)
MYPY_FLAGS = ("--follow-imports=silent", "--ignore-missing-imports", *LENIENT)


class NativeBuildError(RuntimeError):
    """The compiled modules could not be built (the message says what was missing or failed)."""


def _source(module: str, root: Path = ROOT) -> Path:
    path = root.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def build_key(root: Path = ROOT) -> str:
    """The identity of a build: the tools that make it (``toolchain()``), and the sources it is
    compiled from or against."""
    h = hashlib.sha256(toolchain().encode())
    for m in MODULES + DEPENDS:
        h.update(m.encode() + b"\0" + _source(m, root).read_bytes() + b"\0")
    return h.hexdigest()[:24]


def toolchain() -> str:
    """What besides the sources shapes the compiled code: this Python's version and ABI, mypy's
    version (mypyc comes with it), how it is asked to build, and the C compiler with its flags.
    Read on every ``import apollo`` that asks for the build: no subprocess (the compiler binary's
    path, size and time stand for its version)."""
    cfg = sysconfig.get_config_vars()
    cc = os.environ.get("CC") or cfg.get("CC") or "cc"
    return "\n".join([
        sys.version, sys.platform, SUFFIX, str(cfg.get("SOABI")), f"mypy {_mypy_version()}", _SETUP,
        " ".join(MYPY_FLAGS), _binary(cc.split()[0]),
        *(f"{k}={cfg.get(k)}" for k in COMPILER_VARS), *(f"${k}={os.environ.get(k)}" for k in COMPILER_ENV)])


def _mypy_version() -> str:
    # (its version.py, read: importlib.metadata costs ~100 ms and importing mypy more)
    spec = importlib.util.find_spec("mypy")
    if spec is None or not spec.submodule_search_locations:
        return "absent"
    for d in spec.submodule_search_locations:
        v = Path(d, "version.py")
        if v.exists():
            return v.read_text()
    return "unknown"


def _binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        return f"{name}: absent"
    real = os.path.realpath(found)
    st = os.stat(real)
    return f"{real} {st.st_size} {st.st_mtime_ns}"


def cache_root() -> Path:
    d = os.environ.get(CACHE_ENV)
    if d:
        return Path(d)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "apollo" / "native"


def build_dir(root: Path = ROOT) -> Path:
    return cache_root() / build_key(root)


def built(root: Path = ROOT) -> bool:
    return (build_dir(root) / DONE_FILE).exists()


def missing_tools() -> str:
    """What a build would lack here ('' when nothing)."""
    if importlib.util.find_spec("mypyc") is None:
        return "mypyc is not installed (pip install mypy)"
    cc = sysconfig.get_config_var("CC") or "cc"
    if shutil.which(cc.split()[0]) is None:
        return f"no C compiler ({cc.split()[0]}) on PATH"
    include = sysconfig.get_paths()["include"]
    if not Path(include, "Python.h").exists():
        return f"no Python.h in {include} (Python's development headers)"
    return ""


# One C file per module, compiled on every core: the C compiler is most of a build's time, and
# one file for all the modules kept it on one core (2 cores: ~115 s -> ~85 s, the compiled code
# running the same instructions: callgrind, `apollo bench scale --servers 2000`).
_SETUP = """
import os, sys
from setuptools import setup
from mypyc.build import mypycify
setup(name="apollo_native", script_args=["build_ext", "--inplace", "--parallel", str(os.cpu_count() or 1)],
      ext_modules=mypycify(sys.argv[1:], opt_level="3", multi_file=True))
"""


def build(root: Path = ROOT) -> Path:
    """Compile MODULES for the sources under ``root`` (once: an existing build is reused), then
    prune the cache; returns the build's directory. Raises NativeBuildError saying why it could
    not."""
    out = build_dir(root)
    if (out / DONE_FILE).exists():
        (out / DONE_FILE).touch()                # (used last: what a prune keeps)
    else:
        _compile(root, out)
    prune(out)
    return out


def _compile(root: Path, out: Path) -> None:
    lack = missing_tools()
    if lack:
        raise NativeBuildError(lack)
    with tempfile.TemporaryDirectory(prefix="apollo-native-") as tmp:
        work = Path(tmp)
        for pkg in PACKAGES:
            shutil.copytree(root / pkg, work / pkg, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        paths = [*MYPY_FLAGS, *(str(_source(m, work).relative_to(work)) for m in MODULES)]
        proc = subprocess.run([sys.executable, "-c", _SETUP, *paths], cwd=work, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            raise NativeBuildError(f"mypyc failed:\n{tail}")
        staged = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=_ensure(out.parent)))
        (staged / "modules").mkdir()
        (staged / "lib").mkdir()
        for m in MODULES:
            so = _source(m, work).with_suffix(SUFFIX)
            if not so.exists():
                raise NativeBuildError(f"mypyc made no {so.name} for {m}")
            shutil.copy2(so, staged / "modules" / f"{m}{SUFFIX}")
        for lib in work.glob(f"*{SUFFIX}"):      # the group's shared runtime, imported by name
            shutil.copy2(lib, staged / "lib" / lib.name)
        (staged / DONE_FILE).write_text("\n".join(MODULES) + "\n")
        try:
            staged.rename(out)                   # (another build may have finished first: fine)
        except OSError:
            shutil.rmtree(staged, ignore_errors=True)


STALE_STAGING_S = 24 * 3600      # a half-made build this old is a build that died


def prune(current: Path, keep: int = KEEP) -> list[Path]:
    """Delete the builds in ``current``'s cache directory but ``current`` and the ``keep - 1``
    others used last (a build's BUILT file is touched when it is made or reused), and the
    leftovers of builds that died half-way; returns what it deleted. Names that are not builds
    are left alone. (A process already running an older build keeps its loaded modules.)"""
    builds = sorted((d for d in current.parent.iterdir() if d != current and _is_build(d)),
                    key=_used_at, reverse=True)
    stale = [d for d in current.parent.iterdir() if _is_staging(d)
             and time.time() - d.stat().st_mtime > STALE_STAGING_S]
    gone = builds[max(keep - 1, 0):] + stale
    for d in gone:
        shutil.rmtree(d, ignore_errors=True)
    return gone


def _used_at(build: Path) -> int:
    try:
        return (build / DONE_FILE).stat().st_mtime_ns
    except OSError:                     # (pruned meanwhile by another process)
        return 0


def _is_key(name: str) -> bool:
    return len(name) == 24 and all(c in "0123456789abcdef" for c in name)


def _is_build(d: Path) -> bool:
    return d.is_dir() and _is_key(d.name) and (d / DONE_FILE).exists()


def _is_staging(d: Path) -> bool:       # (build() stages in KEY.random before its rename)
    return d.is_dir() and _is_key(d.name.split(".")[0]) and "." in d.name


def _ensure(d: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    return d


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, where: Path) -> None:
        self.where = where

    def find_spec(self, name, path=None, target=None):
        if name not in MODULES:
            return None
        return importlib.util.spec_from_file_location(name, self.where / "modules" / f"{name}{SUFFIX}")


def enable(root: Path = ROOT) -> str:
    """Have the compiled MODULES load in place of their Python from now on; returns why not
    ('' when they will)."""
    early = [m for m in MODULES if m in sys.modules]
    if early:
        return f"{', '.join(early)} already imported (interpreted)"
    where = build_dir(root)
    if not (where / DONE_FILE).exists():
        return "no build of these sources (apollo bench scale --native on builds one)"
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.path.append(str(where / "lib"))
        sys.meta_path.insert(0, _Finder(where))
    return ""


def loaded() -> bool:
    """Whether the kernel running in this process is the compiled one."""
    sim = sys.modules.get("apollo.runtime.sim")
    return sim is not None and str(getattr(sim, "__file__", "")).endswith(SUFFIX)


def will_load() -> bool:
    """Whether this process runs the compiled kernel: loaded, or set to load when first imported
    (``enable`` succeeded and no module of it was imported interpreted since)."""
    if loaded():
        return True
    return (any(isinstance(f, _Finder) for f in sys.meta_path)
            and not any(m in sys.modules and not str(getattr(sys.modules[m], "__file__", "")).endswith(SUFFIX)
                        for m in MODULES))


def enable_from_env() -> None:
    """``import apollo`` calls this: APOLLO_NATIVE=1 asks for the compiled modules."""
    if os.environ.get(ENV, "") not in ("", "0"):
        why = enable()
        if why:
            print(f"apollo: {ENV} is set but the compiled modules are not used: {why}", file=sys.stderr)


def relaunch(command: list[str], mode: str, build_missing: bool = True) -> None:
    """``--native auto|on|off`` of a command that simulates: with auto or on, run ``apollo
    COMMAND`` again in this process's place (exec), loading the compiled modules (they must load
    before the modules are first imported, and the command line has imported some), building
    them first if need be (with auto, only if ``build_missing``). Returns when the command is to
    run interpreted here: off, already compiled, or auto and they cannot be had; with on, and
    they cannot: SystemExit saying why."""
    what = "apollo " + " ".join(command[:2] if command[:1] == ["bench"] else command[:1])
    if mode == "off" or will_load():
        return
    if os.environ.get(RELAUNCHED):
        if mode == "on":
            raise SystemExit(f"{what} --native on: the compiled modules did not load")
        return
    if mode == "auto" and not build_missing and not built():
        return
    try:
        if not built():
            print("building the compiled modules (apollo.tools.native; once per source version)...",
                  file=sys.stderr, flush=True)
        build()
    except NativeBuildError as e:
        if mode == "on":
            raise SystemExit(f"{what} --native on: {e}")
        print(f"(running interpreted: {e})", file=sys.stderr)
        return
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, "-m", "apollo.tools.cli", *command],
              dict(os.environ, **{ENV: "1", RELAUNCHED: "1"}))


def for_children(mode: str = "auto") -> str:
    """Have the processes this one starts from now on load the compiled modules (``mode``:
    "auto" builds them if this machine can, "on" insists, "off" leaves them interpreted);
    returns '' when they will, else why not. Raises NativeBuildError for "on" when they cannot."""
    if mode == "off":
        os.environ.pop(ENV, None)
        return "--native off"
    try:
        build()
    except NativeBuildError as e:
        if mode == "on":
            raise
        os.environ.pop(ENV, None)
        return str(e)
    os.environ[ENV] = "1"
    return ""
