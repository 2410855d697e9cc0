"""A command task knows which task it is: the APOLLO_* variables, from the job spec through the JM's
dispatch to the environment the executor starts the process with."""
import numpy as np

from apollo.core.effects import Launch, TaskExited
from apollo.core.messages import Dispatch, TaskSpec
from apollo.core.spec import FIRST_TASK_VAR, JobSpec, StageSpec, attempt_env, stage_identity
from apollo.runtime.executor import output_base
from apollo.runtime.live import LiveRuntime
from helpers import await_until
from test_jm import dispatched, jm

IDENTITY = ("APOLLO_JOB_ID", "APOLLO_JOB_NAME", "APOLLO_STAGE", "APOLLO_TASK_INDEX", "APOLLO_TASKS",
            "APOLLO_ATTEMPT", "APOLLO_CPUS", "APOLLO_MEM_GB")


def command_job():
    """A synthetic stage of 2 tasks, then a command stage of 3 (an array): job-wide tasks 2, 3, 4."""
    prep = StageSpec("prep", 2, np.zeros(2))
    part = StageSpec("part", 3, np.zeros(3), cpu=0.5, mem_gb=1.0, command=("sh", "-c", "true"),
                     env={"LANG": "C", "APOLLO_STAGE": "mine"})
    return JobSpec("split", [prep, part])


def test_a_command_stage_names_its_job_and_stage_and_counts_its_tasks():
    job = command_job()
    part = stage_identity(job.stages[1], 42, job.name, 2)
    assert part.env == {"LANG": "C", "APOLLO_JOB_ID": "42", "APOLLO_JOB_NAME": "split", "APOLLO_STAGE": "part",
                        "APOLLO_TASKS": "3", FIRST_TASK_VAR: "2"}
    assert job.stages[1].env == {"LANG": "C", "APOLLO_STAGE": "mine"}        # the submitted spec is untouched
    assert part.command == job.stages[1].command and part.tasks == 3
    assert stage_identity(job.stages[0], 42, job.name, 0) is job.stages[0]   # a synthetic stage carries nothing


def test_the_attempt_env_of_a_dispatched_task():
    env = stage_identity(command_job().stages[1], 42, "split", 2).env
    task = TaskSpec(42, 4, 65537, 1, 0.5, 1.0, 0.0, 0.0, 2, 0.0, False, ("true",), env, None, None, True)
    got = attempt_env(task)
    assert {k: got[k] for k in IDENTITY} == {
        "APOLLO_JOB_ID": "42", "APOLLO_JOB_NAME": "split", "APOLLO_STAGE": "part", "APOLLO_TASK_INDEX": "2",
        "APOLLO_TASKS": "3", "APOLLO_ATTEMPT": "65537", "APOLLO_CPUS": "0.5", "APOLLO_MEM_GB": "1"}
    assert FIRST_TASK_VAR not in got and got["LANG"] == "C"
    assert task.env is env and FIRST_TASK_VAR in env                         # (the TaskSpec is not changed)


def test_the_jm_dispatches_command_tasks_with_their_identity_and_synthetic_ones_without():
    j, out = jm(command_job())
    sent = sorted([t for _, t in dispatched(out)], key=lambda t: t.task)
    assert [t.task for t in sent] == [0, 1, 2, 3, 4]
    prep, part = sent[:2], sent[2:]
    assert all(t.env == {} for t in prep)                                   # synthetic: nothing added
    assert [attempt_env(t)["APOLLO_TASK_INDEX"] for t in part] == ["0", "1", "2"]
    assert {attempt_env(t)["APOLLO_JOB_ID"] for t in part} == {"1"} and part[0].env is part[1].env   # one dict a stage


class _Pn:
    def __init__(self):
        self.exits = []

    def handle(self, ev, now, rng):
        if type(ev) is TaskExited:
            self.exits.append(ev)
        elif type(ev) is Dispatch:          # (a poke: launch what it carries)
            return [Launch(t, 2) for t in ev.tasks]
        return []


async def test_the_executor_starts_each_task_of_an_array_with_its_own_index(tmp_path):
    """Event in (a Launch of each task of the stage), env out (what the process saw)."""
    env = stage_identity(command_job().stages[1], 42, "split", 2).env
    echo = ("sh", "-c", "echo $APOLLO_TASK_INDEX/$APOLLO_TASKS $APOLLO_JOB_ID $APOLLO_JOB_NAME $APOLLO_STAGE "
                        "$APOLLO_ATTEMPT $APOLLO_CPUS $APOLLO_MEM_GB ${APOLLO_FIRST_TASK:-none}")
    tasks = [TaskSpec(42, t, 1, 1, 0.5, 1.0, 0.0, 0.0, 2, 0.0, False, echo, env, None, None, False) for t in (2, 3, 4)]
    rt = LiveRuntime(b"s" * 32, seed=0, workdir=tmp_path)
    pn = _Pn()
    rt.add("pn:0", pn, start=False)
    await rt.start()
    try:
        rt.inject("pn:0", Dispatch(0, tasks))
        await await_until(lambda: len(pn.exits) == 3)
        assert all(e.ok for e in pn.exits)
        lines = [output_base(tmp_path, 42, t, 1).with_suffix(".out").read_text() for t in (2, 3, 4)]
        assert lines == [f"{i}/3 42 split part 1 0.5 1 none\n" for i in range(3)]
        assert [output_base(tmp_path, 42, t, 1).with_suffix(".exit").read_text() for t in (2, 3, 4)] == ["0\n"] * 3
    finally:
        await rt.stop()


async def test_a_failed_command_says_its_exit_code_first(tmp_path):
    rt = LiveRuntime(b"s" * 32, seed=0, workdir=tmp_path)
    pn = _Pn()
    rt.add("pn:0", pn, start=False)
    await rt.start()
    quiet = TaskSpec(7, 0, 1, 0, 1.0, 1.0, 0.0, 0.0, 2, 0.0, False, ("sh", "-c", "exit 4"), {}, None, None, False)
    loud = TaskSpec(7, 1, 1, 0, 1.0, 1.0, 0.0, 0.0, 2, 0.0, False, ("sh", "-c", "echo no >&2; exit 5"), {}, None,
                    None, False)
    try:
        rt.inject("pn:0", Dispatch(0, [quiet, loud]))
        await await_until(lambda: len(pn.exits) == 2)
        by = {e.task_key[1]: e for e in pn.exits}
        assert (by[0].exit_code, by[0].detail) == (4, "exit code 4")
        assert (by[1].exit_code, by[1].detail) == (5, "exit code 5: no")
        assert output_base(tmp_path, 7, 1, 1).with_suffix(".exit").read_text() == "5\n"
    finally:
        await rt.stop()
