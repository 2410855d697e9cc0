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
