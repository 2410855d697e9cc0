"""apollo bench longspan: a tiny run writes the report JSON with its keys and sane figures."""
import json
import math

from apollo.bench.longspan import WORKLOAD, main


def test_longspan_json(tmp_path):
    out = tmp_path / "longspan.json"
    assert main(["--servers", "50", "--jobs", "5", "--max-sim-hours", "0.5", "--native", "off",
                 "--json", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["workload"] == WORKLOAD and d["servers"] == [50]
    for key in ("decisions_per_wall_s", "wall_s_per_sim_hour", "wall_s_per_sim_day", "sim_s", "wall_s", "tasks"):
        assert len(d[key]) == 1 and d[key][0] > 0, key
    r = d["runs"][0]
    assert 0 < r["sim_s"] <= 0.5 * 3600 + 1e-6          # stopped by --max-sim-hours at the latest
    assert math.isclose(r["wall_s_per_sim_day"], 24 * r["wall_s_per_sim_hour"])
    assert math.isclose(r["wall_s_per_sim_hour"], r["wall_s"] / r["sim_s"] * 3600)
    assert r["tasks"] >= 1 and r["jobs"] == 5
