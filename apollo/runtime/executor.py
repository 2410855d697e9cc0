"""Task execution for Process Nodes in the live runtime.

A synthetic task (``TaskSpec.command is None``) is a timer for its modelled
time: compute ``duration_s`` plus start-up and input I/O at the locality it
got (apollo.core.cluster.IoModel), divided by ``speedup``. A command task is a
real subprocess: environment ``os.environ`` + ``spec.env`` + the task's identity
(APOLLO_JOB_ID, APOLLO_TASK_INDEX, ...: apollo.core.spec.attempt_env), working
directory ``spec.cwd`` (else the executor's workdir), stdout and stderr to
``<workdir>/<job>-<task>-<attempt>.out/.err`` (``task``: the job-wide task
number) and, once the process is reaped, its exit code to ``.exit`` (what
apollo.tools.logs serves), an address-space limit of ``mem_gb`` when
``spec.mem_limit``, ``timeout_s`` enforced. Each subprocess leads its own
process group, so a kill or a timeout takes its children too. A failed
command's detail begins with its exit code ("exit code 3: <stderr tail>"): it
becomes the job's failure reason.

Every launch ends in exactly one ``on_exit(TaskExited)`` call, from the event
loop and never from inside ``launch`` itself, unless the task is killed first:
no TaskExited follows a Kill.
"""
from __future__ import annotations

import asyncio
import logging
import os
import resource
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from apollo.core.cluster import IoModel
from apollo.core.effects import TaskExited
from apollo.core.spec import attempt_env

log = logging.getLogger("apollo.executor")

STDERR_TAIL = 2000


@dataclass(slots=True)
class _Running:
    owner: str
    task: Any
    on_exit: Callable[[TaskExited], None]
    timer: asyncio.TimerHandle | None = None
    job: asyncio.Task | None = None
    proc: asyncio.subprocess.Process | None = None
    killed: bool = False


def _in_child(mem_limit: int | None) -> Callable[[], None]:
    """What runs in a command's process between fork and exec: the address-space limit, if
    any, and (Linux) SIGKILL when the PN process that started it dies, as a task dies with its
    server: a PN process killed or crashed leaves no task running on unseen (its attempts are
    placed again elsewhere)."""
    def apply() -> None:
        if mem_limit is not None:
            _, hard = resource.getrlimit(resource.RLIMIT_AS)
            soft = mem_limit if hard == resource.RLIM_INFINITY else min(mem_limit, hard)
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        if _PRCTL is not None:
            _PRCTL(1, signal.SIGKILL, 0, 0, 0)        # PR_SET_PDEATHSIG
    return apply


def _libc_prctl():
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes
        return ctypes.CDLL(None).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _libc_prctl()


def output_base(workdir: Path, job_id: int, task: int, attempt: int) -> Path:
    """Where an attempt's files are: this path with .out, .err and .exit."""
    return workdir / f"{job_id}-{task}-{attempt}"


def _write_exit(base: Path, rc: int) -> None:
    try:
        base.with_suffix(".exit").write_text(f"{rc}\n")
    except OSError as e:         # (a full disk: the task's outcome still goes to its PN)
        log.warning("cannot record the exit code of %s: %s", base, e)


def _failure_detail(rc: int, err_path: Path) -> str:
    """A failed command's detail: its exit code, then what it said last on stderr (or the signal)."""
    tail = _tail(err_path).strip()      # (its last newline would break the one-line reason)
    if tail:
        return f"exit code {rc}: {tail}"
    if rc < 0:
        try:
            return f"exit code {rc} (killed by {signal.Signals(-rc).name})"
        except ValueError:
            return f"exit code {rc} (killed by signal {-rc})"
    return f"exit code {rc}"


def _tail(path: Path, n: int = STDERR_TAIL) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - n))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


class Executor:
    def __init__(self, workdir: str | os.PathLike, io: IoModel | None = None, speedup: float = 1.0,
                 kill_grace_s: float = 2.0) -> None:
        if not speedup > 0:
            raise ValueError(f"speedup must be > 0, got {speedup}")
        self.workdir = Path(workdir)
        self.io = io or IoModel()
        self.speedup = speedup
        self.kill_grace_s = kill_grace_s
        self.running: dict[tuple[str, tuple], _Running] = {}
        self.launched = 0
        self.exited = 0
        self.killed = 0

    # ---- the interface the runtime uses --------------------------------------------
    def synthetic_duration(self, task, locality: int, slowdown: float = 1.0) -> float:
        return (task.duration_s * slowdown + self.io.io_time(task.input_bytes, locality)) / self.speedup

    def launch(self, owner: str, task, locality: int, on_exit: Callable[[TaskExited], None],
               slowdown: float = 1.0) -> None:
        """Start ``task`` for the PN at ``owner``; ``on_exit`` gets its TaskExited later."""
        key = (owner, task.key)
        loop = asyncio.get_running_loop()
        if key in self.running:
            # The PN asked twice for the same attempt: a PN bug; refuse the second, keep the first.
            loop.call_soon(on_exit, TaskExited(task.key, False, -1, "attempt already running here"))
            return
        r = _Running(owner, task, on_exit)
        self.running[key] = r
        self.launched += 1
        if task.command is None:
            r.timer = loop.call_later(self.synthetic_duration(task, locality, slowdown), self._finish, key, r,
                                      TaskExited(task.key, True, 0, ""))
        else:
            r.job = loop.create_task(self._run(key, r))

    def kill(self, owner: str, task_key: tuple) -> bool:
        """Stop a running task; its TaskExited never comes. False if it was not running."""
        r = self.running.pop((owner, tuple(task_key)), None)
        if r is None:
            return False
        self._stop(r)
        return True

    def kill_owner(self, owner: str) -> int:
        """Stop every task of one PN (it was removed or crashed)."""
        keys = [k for k in self.running if k[0] == owner]
        for k in keys:
            self._stop(self.running.pop(k))
        return len(keys)

    async def close(self) -> None:
        """Stop everything and wait for the subprocesses to be reaped."""
        rs = list(self.running.values())
        self.running.clear()
        for r in rs:
            self._stop(r)
        jobs = [r.job for r in rs if r.job is not None]
        if jobs:
            await asyncio.wait(jobs, timeout=self.kill_grace_s + 2.0)

    # ---- internals ---------------------------------------------------------------------
    def _finish(self, key: tuple, r: _Running, ev: TaskExited) -> None:
        # (the timer's handle holds r, and r its handle: let go of it, so that r is freed when
        # it leaves ``running`` and not by the cyclic collector, which found ~12 objects a task
        # in a PN process: ~20% of its CPU at 16,000 no-op tasks/s)
        r.timer = None
        if self.running.get(key) is not r or r.killed:
            return
        del self.running[key]
        self.exited += 1
        try:
            r.on_exit(ev)
        except Exception:
            log.exception("exit callback failed for task %s on %s", ev.task_key, r.owner)

    def _stop(self, r: _Running) -> None:
        r.killed = True
        self.killed += 1
        if r.timer is not None:
            r.timer.cancel()
            r.timer = None
        if r.proc is not None and r.proc.returncode is None:
            self._signal(r.proc, signal.SIGTERM)
            # then SIGKILL for whatever of the group is left, even if the leader went on TERM
            asyncio.get_running_loop().call_later(self.kill_grace_s, self._signal, r.proc, signal.SIGKILL)
        # A subprocess still being spawned is killed by _run as soon as it exists.

    @staticmethod
    def _signal(proc: asyncio.subprocess.Process, sig: int) -> None:
        """Signal the task's whole process group (it leads its own session)."""
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    async def _run(self, key: tuple, r: _Running) -> None:
        spec = r.task
        cmd = list(spec.command)
        base = output_base(self.workdir, spec.job_id, spec.task, spec.attempt)
        out_path, err_path = base.with_suffix(".out"), base.with_suffix(".err")
        try:
            self.workdir.mkdir(parents=True, exist_ok=True)
            env = {**os.environ, **attempt_env(spec)}
            cwd = spec.cwd or str(self.workdir)
            kw = {"preexec_fn": _in_child(int(spec.mem_gb * 2 ** 30) if spec.mem_limit else None)}
            with open(out_path, "wb") as fo, open(err_path, "wb") as fe:
                proc = await asyncio.create_subprocess_exec(
                    *cmd, stdin=subprocess.DEVNULL, stdout=fo, stderr=fe, env=env, cwd=cwd,
                    start_new_session=True, **kw)
        except asyncio.CancelledError:
            raise
        except (OSError, subprocess.SubprocessError, ValueError) as e:
            code = 127 if isinstance(e, FileNotFoundError) else 126
            _write_exit(base, code)
            self._finish(key, r, TaskExited(spec.key, False, code,
                                            f"exit code {code}: cannot start {cmd[0]!r}: {e}"[:STDERR_TAIL]))
            return
        r.proc = proc
        if r.killed:                            # killed while it was being spawned
            self._signal(proc, signal.SIGKILL)
            _write_exit(base, await proc.wait())
            return
        timeout = spec.timeout_s
        try:
            if timeout is not None:
                rc = await asyncio.wait_for(proc.wait(), timeout)
            else:
                rc = await proc.wait()
        except asyncio.TimeoutError:
            self._signal(proc, signal.SIGKILL)
            rc = await proc.wait()
            _write_exit(base, rc)
            self._finish(key, r, TaskExited(spec.key, False, rc, f"timeout after {timeout:g}s (exit code {rc})"))
            return
        except asyncio.CancelledError:
            self._signal(proc, signal.SIGKILL)
            raise
        self._signal(proc, signal.SIGKILL)     # leftovers the task started in the background
        _write_exit(base, rc)
        if r.killed:
            return
        ok = rc == 0
        self._finish(key, r, TaskExited(spec.key, ok, rc, "" if ok else _failure_detail(rc, err_path)))
