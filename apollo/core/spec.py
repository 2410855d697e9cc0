"""Job and stage specifications: what a user (or a trace reader) submits.

A job is a DAG of stages; a stage is a set of identical-shaped tasks. The
per-task ``durations_s`` are the *modelled compute time* of each task (the
truth the simulator and synthetic live tasks use); schedulers never read them
directly: they see only ``estimate_s`` (the stage's declared mean) and refine
it from finished tasks. Input I/O time comes on top, by the locality a task
gets (see apollo.core.cluster.IoModel).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


def _finite_nonneg(a: np.ndarray) -> bool:
    """Every item finite and >= 0. (A spec is checked wherever it is decoded, on every job's
    path to its first task: a small one in Python, ~0.3 us, not numpy's ~5 us of calls.)"""
    if len(a) <= 64:
        return all(0.0 <= x < math.inf for x in a.tolist())
    return bool(a.min() >= 0.0 and a.max() < math.inf)     # (a NaN fails both)


class SpecError(ValueError):
    """A job or stage specification that cannot be accepted; the message names what and where."""


@dataclass(slots=True)
class StageSpec:
    name: str
    tasks: int
    durations_s: np.ndarray            # float64[tasks]: modelled compute seconds per task
    cpu: float = 1.0
    mem_gb: float = 2.0
    input_bytes: np.ndarray | None = None   # float64[tasks]: bytes each task reads (None: no input)
    dataset: str | None = None         # name of the input dataset; task i reads block i
    depends_on: tuple[str, ...] = ()
    command: tuple[str, ...] | None = None  # live only: a real command instead of a synthetic task
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    timeout_s: float | None = None

    @property
    def estimate_s(self) -> float:
        """The declared per-task runtime estimate a scheduler may use (the stage mean)."""
        # (np.add.reduce: what .mean() sums with, without its Python-level wrapper; same float.
        # One task: its own time, the same float without the call)
        if self.tasks == 1 and len(self.durations_s) == 1:
            return float(self.durations_s.item(0))
        return float(np.add.reduce(self.durations_s, dtype=np.float64)) / self.tasks if self.tasks else 0.0

    def validate(self, where: str = "") -> None:
        # (the messages are made only for an error: a spec is checked on every job's path)
        if not self.name:
            raise SpecError(f"{where}a stage has an empty name")
        if self.tasks < 1:
            raise SpecError(f"{self._at(where)}: tasks must be >= 1, got {self.tasks}")
        if self.durations_s.shape != (self.tasks,):
            raise SpecError(f"{self._at(where)}: durations_s has shape {self.durations_s.shape}, "
                            f"expected ({self.tasks},)")
        if not _finite_nonneg(self.durations_s):
            raise SpecError(f"{self._at(where)}: durations_s must be finite and >= 0")
        if not (self.cpu > 0) or not (self.mem_gb > 0):
            raise SpecError(f"{self._at(where)}: cpu and mem_gb must be > 0 (cpu={self.cpu}, mem_gb={self.mem_gb})")
        if self.input_bytes is not None:
            if self.input_bytes.shape != (self.tasks,):
                raise SpecError(f"{self._at(where)}: input_bytes has shape {self.input_bytes.shape}, "
                                f"expected ({self.tasks},)")
            if not _finite_nonneg(self.input_bytes):
                raise SpecError(f"{self._at(where)}: input_bytes must be finite and >= 0")
        if self.timeout_s is not None and not self.timeout_s > 0:
            raise SpecError(f"{self._at(where)}: timeout_s must be > 0")

    def _at(self, where: str) -> str:
        return f"{where}stage {self.name!r}"


@dataclass(slots=True)
class JobSpec:
    name: str
    stages: list[StageSpec]
    arrival_s: float = 0.0
    priority: int = 0
    max_retries: int = 3
    user: str = "default"
    queue: str = "default"

    @property
    def total_tasks(self) -> int:
        return sum(s.tasks for s in self.stages)

    @property
    def work_cpu_s(self) -> float:
        """Modelled CPU-seconds of compute (no I/O): what --load scales against."""
        return float(sum(s.cpu * s.durations_s.sum() for s in self.stages))

    def validate(self, where: str = "") -> None:
        if not self.stages:
            raise SpecError(f"{where}job {self.name!r} has no stages")
        names = [s.name for s in self.stages]
        if len(set(names)) != len(names):
            raise SpecError(f"{where}job {self.name!r}: duplicate stage names {names}")
        known: set[str] = set()
        for s in self.stages:
            try:
                s.validate()
            except SpecError as e:      # (named in full only for an error)
                raise SpecError(f"{where}job {self.name!r}: {e}") from None
            for d in s.depends_on:
                if d not in names:
                    raise SpecError(f"{where}job {self.name!r}: stage {s.name!r} depends on unknown stage {d!r}")
                if d not in known:
                    raise SpecError(
                        f"{where}job {self.name!r}: stage {s.name!r} depends on {d!r}, "
                        "which must be listed before it (stages are given in topological order)")
            known.add(s.name)
        if self.max_retries < 0:
            raise SpecError(f"{where}job {self.name!r}: max_retries must be >= 0")


@dataclass(slots=True)
class Workload:
    """A named list of jobs ordered by arrival time."""
    name: str
    jobs: list[JobSpec]

    @property
    def total_tasks(self) -> int:
        return sum(j.total_tasks for j in self.jobs)

    def first(self, k: int | None) -> "Workload":
        if k is None:
            return self
        return Workload(self.name, self.jobs[:k])

    def scaled_to_load(self, load: float, total_cores: float) -> "Workload":
        """Rescale arrival times so the offered CPU work is ``load`` of the cluster's cores.

        Offered load = total CPU-seconds / (cores * arrival span). The span is
        stretched (or squeezed) by one factor; relative spacing is kept.
        """
        if not 0 < load:
            raise SpecError(f"--load must be > 0, got {load}")
        if len(self.jobs) < 2:
            return self
        t0 = self.jobs[0].arrival_s
        span = self.jobs[-1].arrival_s - t0
        work = sum(j.work_cpu_s for j in self.jobs)
        if span <= 0 or work <= 0:
            return self
        target_span = work / (load * total_cores)
        factor = target_span / span
        for j in self.jobs:
            j.arrival_s = (j.arrival_s - t0) * factor
        return self


# ---- a command task's identity: the variables it is started with (docs/jobs.md) ---------------
# The JM adds the stage's part to a command stage's env once (it travels in every TaskSpec's env,
# which the wire already carries: no protocol change); the executor adds the attempt's part from
# the TaskSpec's own fields when it starts the process.
FIRST_TASK_VAR = "APOLLO_FIRST_TASK"      # the job-wide number of the stage's first task (not shown to the task)


def _decimal(x: float) -> str:
    """1.0 -> "1", 0.5 -> "0.5" (what a shell script can compare or pass on)."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def stage_identity(stage: StageSpec, job_id: int, job_name: str, first_task: int) -> StageSpec:
    """``stage`` as its JM sends it: a command stage's env also names its job and stage and counts
    its tasks (the user's own variables of the same names give way); a synthetic stage is itself.
    A new StageSpec (a job spec may be shared with the submitter's objects)."""
    if stage.command is None:
        return stage
    env = {**stage.env, "APOLLO_JOB_ID": str(job_id), "APOLLO_JOB_NAME": job_name, "APOLLO_STAGE": stage.name,
           "APOLLO_TASKS": str(stage.tasks), FIRST_TASK_VAR: str(first_task)}
    return StageSpec(stage.name, stage.tasks, stage.durations_s, stage.cpu, stage.mem_gb, stage.input_bytes,
                     stage.dataset, stage.depends_on, stage.command, env, stage.cwd, stage.timeout_s)


def attempt_env(task) -> dict[str, str]:
    """The variables a command task's attempt is started with (on top of the PN process's own):
    its stage's env (with stage_identity's) and, from the TaskSpec, APOLLO_JOB_ID, APOLLO_TASK_INDEX
    (0-based within its stage), APOLLO_ATTEMPT, APOLLO_CPUS and APOLLO_MEM_GB."""
    env = dict(task.env)
    first = env.pop(FIRST_TASK_VAR, None)
    env["APOLLO_JOB_ID"] = str(task.job_id)
    env["APOLLO_TASK_INDEX"] = str(task.task - int(first)) if first is not None else str(task.task)
    env["APOLLO_ATTEMPT"] = str(task.attempt)
    env["APOLLO_CPUS"] = _decimal(task.cpu)
    env["APOLLO_MEM_GB"] = _decimal(task.mem_gb)
    return env
