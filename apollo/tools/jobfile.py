"""TOML job files: what `apollo submit` reads.

    name = "example"            # required
    priority = 0                # optional; max_retries = 3, user, queue
    [[stage]]
    name = "map"                # required, unique
    tasks = 8                   # required, >= 1
    duration_s = 0.1            # a synthetic task: held for this long (plus I/O by locality)
    cpu = 1                     # default 1
    mem_gb = 1                  # default 2
    input_mb = 64               # optional: MB each task reads ...
    dataset = "logs/2026-11"    # ... from this dataset (task i reads block i); jobs share blocks
    [[stage]]
    name = "reduce"
    tasks = 1
    depends_on = ["map"]
    command = ["sh", "-c", "echo reduced"]   # a real command run on the PN
    env = {LANG = "C"}          # optional, with cwd and timeout_s

Every error names the file, the stage and the key, and what was expected; nothing
is submitted from a file with an error.
"""
from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import numpy as np

from apollo.core.spec import JobSpec, SpecError, StageSpec

JOB_KEYS = {"name", "priority", "max_retries", "user", "queue", "stage"}
STAGE_KEYS = {"name", "tasks", "duration_s", "cpu", "mem_gb", "input_mb", "dataset", "depends_on", "command",
              "env", "cwd", "timeout_s"}


def _expect(cond: bool, where: str, what: str, got: Any) -> None:
    if not cond:
        raise SpecError(f"{where}: expected {what}, got {got!r}")


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def parse_job(data: dict, source: str = "<job>") -> JobSpec:
    unknown = set(data) - JOB_KEYS
    if unknown:
        raise SpecError(f"{source}: unknown key(s) {sorted(unknown)}; known: {sorted(JOB_KEYS)}")
    name = data.get("name")
    _expect(isinstance(name, str) and name != "", f"{source}: key 'name'", "a non-empty string", name)
    priority = data.get("priority", 0)
    _expect(isinstance(priority, int) and not isinstance(priority, bool), f"{source}: key 'priority'",
            "an integer", priority)
    retries = data.get("max_retries", 3)
    _expect(isinstance(retries, int) and not isinstance(retries, bool) and retries >= 0,
            f"{source}: key 'max_retries'", "an integer >= 0", retries)
    stages_raw = data.get("stage")
    _expect(isinstance(stages_raw, list) and len(stages_raw) > 0, f"{source}: key 'stage'",
            "at least one [[stage]] table", stages_raw)
    stages = [_parse_stage(s, f"{source}: stage[{i}]") for i, s in enumerate(stages_raw)]
    job = JobSpec(name=name, stages=stages, priority=priority, max_retries=retries,
                  user=str(data.get("user", "default")), queue=str(data.get("queue", "default")))
    job.validate(f"{source}: ")
    return job


def _parse_stage(s: Any, where: str) -> StageSpec:
    _expect(isinstance(s, dict), where, "a table", s)
    label = f"{where} ({s.get('name')!r})" if isinstance(s.get("name"), str) else where
    unknown = set(s) - STAGE_KEYS
    if unknown:
        raise SpecError(f"{label}: unknown key(s) {sorted(unknown)}; known: {sorted(STAGE_KEYS)}")
    name = s.get("name")
    _expect(isinstance(name, str) and name != "", f"{label}: key 'name'", "a non-empty string", name)
    tasks = s.get("tasks")
    _expect(isinstance(tasks, int) and not isinstance(tasks, bool) and tasks >= 1, f"{label}: key 'tasks'",
            "an integer >= 1", tasks)
    command = s.get("command")
    if command is not None:
        _expect(isinstance(command, list) and command and all(isinstance(c, str) for c in command),
                f"{label}: key 'command'", "a non-empty list of strings", command)
    dur = s.get("duration_s", 0.0 if command is not None else None)
    _expect(_num(dur) and dur >= 0, f"{label}: key 'duration_s'",
            "a number >= 0 (required for a synthetic task without 'command')", dur)
    cpu = s.get("cpu", 1)
    _expect(_num(cpu) and cpu > 0, f"{label}: key 'cpu'", "a number > 0", cpu)
    mem = s.get("mem_gb", 2)
    _expect(_num(mem) and mem > 0, f"{label}: key 'mem_gb'", "a number > 0", mem)
    input_mb = s.get("input_mb")
    if input_mb is not None:
        _expect(_num(input_mb) and input_mb >= 0, f"{label}: key 'input_mb'", "a number >= 0", input_mb)
    dataset = s.get("dataset")
    if dataset is not None:
        _expect(isinstance(dataset, str) and dataset != "", f"{label}: key 'dataset'", "a non-empty string",
                dataset)
    deps = s.get("depends_on", [])
    _expect(isinstance(deps, list) and all(isinstance(d, str) for d in deps), f"{label}: key 'depends_on'",
            "a list of stage names", deps)
    env = s.get("env", {})
    _expect(isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()),
            f"{label}: key 'env'", "a table of strings", env)
    cwd = s.get("cwd")
    if cwd is not None:
        _expect(isinstance(cwd, str), f"{label}: key 'cwd'", "a string", cwd)
    timeout = s.get("timeout_s")
    if timeout is not None:
        _expect(_num(timeout) and timeout > 0, f"{label}: key 'timeout_s'", "a number > 0", timeout)
    in_bytes = None if input_mb is None else np.full(tasks, float(input_mb) * 1e6)
    if dataset is not None and in_bytes is None:
        in_bytes = np.full(tasks, 64e6)
    return StageSpec(name=name, tasks=tasks, durations_s=np.full(tasks, float(dur)), cpu=float(cpu),
                     mem_gb=float(mem), input_bytes=in_bytes, dataset=dataset, depends_on=tuple(deps),
                     command=None if command is None else tuple(command), env=dict(env), cwd=cwd,
                     timeout_s=None if timeout is None else float(timeout))


def load_job_file(path: str | Path) -> JobSpec:
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise SpecError(f"{p}: no such job file") from None
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{p}: not valid TOML: {e}") from None
    return parse_job(data, str(p))
