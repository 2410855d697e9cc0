"""apollo bench jobpath: a short run times every step of a 1-task job's path and writes its JSON."""
import json

from apollo.bench.jobpath import OFF_PATH, main


def test_jobpath_json(tmp_path):
    out = tmp_path / "jobpath.json"
    assert main(["--jobs", "40", "--native", "off", "--json", str(out)]) == 0
    d = json.loads(out.read_text())
    steps = d["steps_us"]
    assert d["jobs"] == 40 and d["native"] is False
    for step in ("rm handle SubmitJob", "jm handle StartJob", "pn handle Dispatch", "jm handle StatusBatch",
                 "client unpack JobDone", *OFF_PATH):
        assert steps[step] > 0, step
    assert d["critical_path_us"] == sum(v for k, v in steps.items() if k not in OFF_PATH)
