"""The results page (bench/results.py) from small hand-made bench JSON: every bench gets its table,
the sharing benches' simulated and live runs sit side by side, and regenerating keeps the
hand-written part below the marker."""
from __future__ import annotations

import json
import os

import pytest

from apollo.bench import results

CAPACITY = {"scheduler": "apollo", "size": "live", "reclaim_timeout_s": 10.0, "guarantee_back_after_s": 10.05,
            "tasks_killed": 8, "tasks_killed_minimum": 8, "opportunistic_preempted": 11, "user_limit_held": True,
            "user_short_longest_s": 0.0, "guarantee_cores": 9.6, "user_limit": 0.5, "series": {}}
FAIRSHARE = {"scheduler": "apollo", "size": "live", "task_s": 20.0, "tfair_s": 5.0,
             "to_fair_share_s": {"preemption": 5.1, "no_preemption": 14.7},
             "tasks_killed": {"preemption": 13, "no_preemption": 0}, "tasks_killed_minimum": 13, "series": {}}
BENCHES = {
    "capacity-sim": {**CAPACITY, "mode": "sim"},
    "capacity-live": {**CAPACITY, "mode": "live", "guarantee_back_after_s": 11.25, "tasks_killed": 9},
    "fairshare-sim": {**FAIRSHARE, "mode": "sim"},
    "fairshare-live": {**FAIRSHARE, "mode": "live", "to_fair_share_s": {"preemption": 6.3,
                                                                        "no_preemption": float("inf")}},
    "shortjob-pools-sim": {"scenario": "pools", "scheduler": "apollo", "mode": "sim", "short_job_s": 10.2,
                           "due_s": 20.0, "timeout_s": 5.0, "owed_cores": 6.4, "tasks_killed": 16,
                           "tasks_killed_minimum": 7},
    "scale": {"servers": [100], "queues": None, "native": True, "seconds": 60.0, "runs": [
        {"servers": 100, "tasks": 6000, "jobs_completed": 50, "jobs": 50, "decisions_per_wall_s": 22462.0,
         "wall_s_per_task": 4.4e-5, "locality_node": 0.988, "task_queue_delay_p95_s": 0.11}]},
    "longspan": {"workload": "heavytail:jobs=3000", "load": 0.95, "seed": 3, "jobs": 300, "max_sim_hours": None,
                 "wire": True, "native": True, "runs": [
        {"servers": 1000, "tasks": 2800, "jobs_completed": 300, "jobs": 300, "sim_s": 3600.0, "wall_s": 36.0,
         "decisions_per_wall_s": 790.0, "wall_s_per_sim_hour": 36.0, "wall_s_per_sim_day": 864.0}]},
    "pools": {"schedulers": ["fifo", "hfs-delay", "apollo"], "small_job_mean_s": [241.5, 4.9, 4.5],
              "job_mean_s": [300.0, 50.0, 48.0], "node_locality": [0.318, 0.995, 0.785],
              "setup": {"trace": "/x/FB-2009_samples_24_times_1hr_0.tsv", "queues": "three-pools.toml",
                        "jobs": 3000, "servers": 1000, "load": 0.9}},
    "throughput": {"apollo": {"noop_tasks_per_s": 25000.0, "noop_tasks_per_s_wide": 44000.0, "roundtrip_ms": 0.77,
                              "short_task_efficiency": 0.975, "startup_s": 0.6, "native": True},
                   "dask": {"skipped": "not installed"}, "config": {"slots": 2}},
    "compare": {"rows": [{"workload": "yh1", "load": 0.95, "scheduler": s, "mean": m, "p50": p, "p95": 1.0,
                          "node_locality": 0.0} for s, m, p in (("apollo", 344.2, 120.1), ("greedy", 358.8, 164.2))],
                "apollo_at_least_greedy_cells": {"mean": "1/1", "p50": "1/1"}, "deterministic": True,
                "setup": {"seed": 3}},
    "dolly": {"beta": 0.05, "small_job_mean_s": {"none": 8.98, "copies": 8.23, "dolly": 4.90},
              "slowest_over_median": {"none": 3.68, "copies": 2.5, "dolly": 1.70},
              "extra_resources_by_mode": {"none": 0.0, "copies": 0.01, "dolly": 0.032},
              "speedup_over_copies": 0.40, "setup": {"trace": "t.tsv", "servers": 400, "load": 0.3, "jobs": 1500,
                                                     "seeds": 6}},
    "corrections": {"duplicates": {"triggered_frac": 0.02, "success_frac": 0.89},
                    "opportunistic": {"utilization": {"off": 0.84, "on": 0.86},
                                      "regular_queue_delay_p95_s": {"off": 2.89, "on": 2.88}},
                    "setup": {"trace": "t.tsv", "load": 0.95, "seeds": 2}},
    "delay": {"scheduler": "hfs-delay", "wait_s": [0.0, 1.0],
              "node_locality_by_maps": {"4": [0.05, 0.88], "12": [0.12, 0.68]},
              "table4": {"maps": [3, 10], "without_delay": [0.04, 0.12], "with_delay": [1.0, 1.0]},
              "paper": {"fig15": {"4": {"0": 0.05, "1": 0.68}, "12": {"0": 0.11, "1": 0.80}},
                        "table4": {"without_delay": [0.02, 0.37], "with_delay": [0.75, 0.99]}}},
    "matching": {"measure": "mean completion", "servers": 100, "reps": 2, "tasks": [10, 100],
                 "greedy": [2.0, 3.0], "stable": [1.5, 2.5], "optimal": [1.4, 2.4],
                 "stable_over_optimal": [1.07, 1.04], "greedy_over_optimal": [1.43, 1.25]},
}


def write(folder, names, when: float = 1796083200.0):     # 2026-12-01 00:00 UTC
    for n in names:
        f = folder / f"{n}.json"
        f.write_text(json.dumps(BENCHES[n]))
        os.utime(f, (when, when))


def test_every_bench_gets_a_table_and_sharing_is_side_by_side(tmp_path):
    write(tmp_path, BENCHES)
    text = results.page(results.load(tmp_path), "runs", None, "2026-12-02", "2 cores, a CPU, Python 3")
    assert "## Not measured" not in text
    for sec in results.SECTIONS:
        assert f"## {sec.title}" in text
    assert "JSON written 2026-12-01" in text and "Written 2026-12-02" in text and "2 cores, a CPU" in text
    assert "| scenario | figure | simulated | live |" in text
    assert "| queue b's guarantee back after (s) | 10.1 | 11.2 |" in text
    assert "| to fair share without preemption (s) | 14.7 | never |" in text
    assert "| user limit held (longest short, s) | yes (0.0) | yes (0.0) |" in text
    assert ("| short job behind a long one, pools (timeout 5 s) | short job's completion s (due about) "
            "| 10.2 (20) | - |") in text
    assert "Not measured in this run: `shortjob-capacity-sim.json`, `shortjob-capacity-live.json`." in text
    assert "| yh1 | 0.95 | 344.20 / 120.10, 0.0% | 358.80 / 164.20, 0.0% |" in text
    assert "| apollo | 40.0% |" not in text and "Dolly 40.0% faster than copies" in text
    assert "dask: not installed" in text
    assert "| 1,000 | 2,800 | 3,600 | 36.0 | 790 | 36.0 | 864 | 300/300 |" in text
    assert text.index("## Sharing") < text.index(results.END_MARKER)


def test_missing_benches_are_listed_and_a_live_side_alone_renders(tmp_path):
    write(tmp_path, ["capacity-live"])
    text = results.page(results.load(tmp_path), "runs", None, "2026-12-02", "host")
    assert "| queue b's guarantee back after (s) | - | 11.2 |" in text
    assert "- Scale: no scale.json" in text and "fair share, two pools" not in text
    assert "`fairshare-sim.json`, `fairshare-live.json`" in text


def test_regenerating_keeps_the_hand_written_part(tmp_path):
    write(tmp_path, ["scale"])
    out = tmp_path / "results.md"
    assert results.main(["--from", str(tmp_path), "--out", str(out)]) == 0
    hand = "\n## Earlier measurements\n\n| what | result |\n|---|---|\n| chaos, 2026-11-25 | 1000/1000 |\n"
    first = out.read_text()
    out.write_text(first.split(results.END_MARKER)[0] + results.END_MARKER + "\n" + hand)
    write(tmp_path, ["pools"])
    assert results.main(["--from", str(tmp_path), "--out", str(out)]) == 0
    again = out.read_text()
    assert again.endswith(results.END_MARKER + "\n" + hand)
    assert "## Pools" in again and "## Scale" in again and again.count(results.END_MARKER) == 1


def test_a_page_without_the_marker_is_not_overwritten(tmp_path):
    out = tmp_path / "results.md"
    out.write_text("# hand-written only\n")
    assert results.main(["--from", str(tmp_path), "--out", str(out)]) == 2
    assert out.read_text() == "# hand-written only\n"


@pytest.mark.parametrize("v, text", [(None, "-"), (float("inf"), "never"), (True, "yes"), (2.345, "2.3")])
def test_figures_as_text(v, text):
    assert results.num(v) == text


def test_a_json_of_another_shape_is_reported_not_fatal(tmp_path):
    (tmp_path / "scale.json").write_text(json.dumps({"servers": [100]}))      # no "runs"
    write(tmp_path, ["pools"])
    text = results.page(results.load(tmp_path), "runs", None, "2026-12-02", "host")
    assert "Could not read the figures from scale.json: KeyError" in text and "| apollo | 4.5 |" in text


def test_a_file_that_is_not_json_is_named(tmp_path, capsys):
    (tmp_path / "dolly.json").write_text("{not json")
    assert results.main(["--from", str(tmp_path)]) == 2
    assert "dolly.json: not JSON" in capsys.readouterr().err
