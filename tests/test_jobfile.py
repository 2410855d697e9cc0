import pytest

from apollo.tools.jobfile import load_job_file
from apollo.core.spec import SpecError

GOOD = '''
name = "example"
[[stage]]
name = "map"
tasks = 8
duration_s = 0.1
cpu = 1
mem_gb = 1
input_mb = 32
dataset = "logs"
[[stage]]
name = "reduce"
tasks = 1
depends_on = ["map"]
command = ["sh", "-c", "echo reduced"]
cpu = 1
mem_gb = 1
'''


def write(tmp_path, text):
    p = tmp_path / "job.toml"
    p.write_text(text)
    return p


def test_the_issue_example_parses(tmp_path):
    job = load_job_file(write(tmp_path, GOOD))
    assert [s.name for s in job.stages] == ["map", "reduce"]
    assert job.stages[0].tasks == 8 and job.stages[0].durations_s[0] == 0.1
    assert job.stages[0].input_bytes[0] == 32e6 and job.stages[0].dataset == "logs"
    assert job.stages[1].command == ("sh", "-c", "echo reduced") and job.stages[1].depends_on == ("map",)


@pytest.mark.parametrize("edit, needle", [
    (("tasks = 8", "tasks = 0"), "stage[0] ('map'): key 'tasks': expected an integer >= 1, got 0"),
    (("tasks = 8", 'tasks = "eight"'), "key 'tasks': expected an integer >= 1, got 'eight'"),
    (("cpu = 1\nmem_gb = 1\ninput", "cpu = -2\nmem_gb = 1\ninput"), "key 'cpu': expected a number > 0"),
    (('depends_on = ["map"]', 'depends_on = ["mapp"]'), "depends on unknown stage 'mapp'"),
    (('command = ["sh", "-c", "echo reduced"]', 'command = "echo"'), "key 'command': expected a non-empty list"),
    (("duration_s = 0.1\n", ""), "key 'duration_s': expected a number >= 0 (required for a synthetic"),
    (('name = "example"', 'nam = "example"'), "unknown key(s) ['nam']"),
    (("mem_gb = 1\ninput", "memory = 1\ninput"), "stage[0] ('map'): unknown key(s) ['memory']"),
])
def test_errors_name_file_stage_key_and_expectation(tmp_path, edit, needle):
    p = write(tmp_path, GOOD.replace(*edit, 1))
    with pytest.raises(SpecError) as e:
        load_job_file(p)
    assert str(p) in str(e.value) and needle in str(e.value)


def test_not_toml_and_missing_file(tmp_path):
    with pytest.raises(SpecError, match="not valid TOML"):
        load_job_file(write(tmp_path, "name = "))
    with pytest.raises(SpecError, match="no such job file"):
        load_job_file(tmp_path / "nope.toml")
