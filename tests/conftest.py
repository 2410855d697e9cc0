"""Fixtures and settings every test shares. The tiers (markers ``live`` and ``slow``, declared in
pyproject.toml): ``pytest -m "not live and not slow"`` is the edit-test loop; ``pytest`` runs all."""
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
# The fast tier runs every property on a sixth of its examples (helpers.examples scales the
# tests that name their own count), so properties stay in the edit-test loop.
settings.register_profile("fast", settings.get_profile("ci"), max_examples=10)
settings.load_profile("ci")


def pytest_configure(config):
    if "not slow" in (config.getoption("markexpr") or ""):
        settings.load_profile("fast")
    _compile_the_project_once()


def _compile_the_project_once() -> None:
    """The live tests start a few hundred Python processes (cluster processes, the CLI, the
    supervisor), each importing much of the project. Where PYTHONDONTWRITEBYTECODE is set (this
    machine's environment sets it), none of them writes the bytecode it compiles, so each compiles
    the same sources again: ~0.15 s of CPU a process. They still read bytecode that is there, so
    the project's packages are compiled here once (~0.5 s; Python's own checks of each source's
    mtime and size keep it from ever being stale, and ``__pycache__/`` is ignored by git). Where
    bytecode is written anyway this finds it there and does next to nothing."""
    if not sys.dont_write_bytecode:
        return
    import compileall
    root = Path(__file__).resolve().parents[1]
    for pkg in ("apollo", "jm", "pn", "rm", "bench"):
        if (root / pkg).is_dir():
            compileall.compile_dir(root / pkg, quiet=2)


@pytest.fixture(autouse=True, scope="session")
def _every_simulated_actor_validated():
    """Every seeded simulation a test runs, whoever builds it (SimConfig, build(), a bench, a
    SimRuntime of the test's own), calls every actor's validate() after every event it handles.
    validate() only reads, so reports stay what they are. (Simulations in a subprocess, as the
    compiled modules' test runs, are not covered: they ask for it themselves.)"""
    from apollo.runtime.sim import SimRuntime
    init = SimRuntime.__init__

    def checked(self, *args, **kw):
        init(self, *args, **{**kw, "check": True})
    SimRuntime.__init__ = checked
    try:
        yield
    finally:
        SimRuntime.__init__ = init

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"


@pytest.fixture
def traces() -> Path:
    if not TRACES.is_dir():
        pytest.skip("../shared/traces is not present")
    return TRACES


@pytest.fixture
def cluster(tmp_path):
    """A live local cluster's lifecycle for a test (test_live_cluster.Tracker): whatever the test
    starts is stopped, and the test fails if a process outlives the cluster."""
    from test_live_cluster import Tracker
    t = Tracker(tmp_path)
    try:
        yield t
    finally:
        t.teardown()
