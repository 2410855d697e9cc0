"""apollo bench shortjob: the issue's two sharing scenarios, simulated at the live cluster's cadences."""
import json

import pytest

from apollo.bench import shortjob

pytestmark = pytest.mark.slow            # each a whole scenario simulated at live cadences


def test_capacity_scenario_short_job_within_its_due_time_and_minimum_kills(tmp_path):
    out = tmp_path / "c.json"
    assert shortjob.main(["--scenario", "capacity", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["mode"] == "sim" and r["scheduler"] == "apollo"
    assert r["short_job_s"] <= r["due_s"] + 3.0, r            # timeout + two waves on b's guarantee
    assert r["tasks_killed"] <= max(1.5 * r["tasks_killed_minimum"], r["tasks_killed_minimum"] + 2), r


def test_pools_scenario_short_job_done_before_its_fair_share_timeout_runs_out(tmp_path):
    out = tmp_path / "p.json"
    assert shortjob.main(["--scenario", "pools", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["short_job_s"] <= r["due_s"] + 3.0, r
