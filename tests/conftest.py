import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci")

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
