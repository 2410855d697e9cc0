"""Adoption after a move: a JM taking over a job whose JM host died (StartJob.generation > 0).

Before it places anything, the new JM asks every PN for the job's attempts (ProbeJob) and
waits JmConfig.adopt_wait_s for the answers (Holding). Each attempt a PN holds becomes this
JM's own (its slot counted, its reports heard) unless the task is done or has another attempt
already, in which case it is killed; attempts that ended there count as their reports. Tasks
an earlier home finished (the RM's done bitmap) stay done.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from apollo.core.effects import Log, Send, SetTimer
from apollo.core.messages import KillTask, ProbeJob, TaskReport, TaskSpec

from .attempts import Attempts
from .config import JmConfig
from .tasks import DISPATCHED, DONE, READY, RUNNING, TaskTable
from .watchdog import Watchdog


class Adoption:
    __slots__ = ("tasks", "attempts", "watchdog", "cfg", "generation", "adopting", "done_init")

    def __init__(self, tasks: TaskTable, attempts: Attempts, watchdog: Watchdog, config: JmConfig,
                 generation: int, done: bytes) -> None:
        self.tasks = tasks
        self.attempts = attempts
        self.watchdog = watchdog
        self.cfg = config
        self.generation = generation            # > 0: adopting the job from a dead JM host
        self.adopting = False                   # waiting for the PNs' Holding answers
        self.done_init = done                   # tasks finished under an earlier home (packbits)

    def begin(self, view: Any, out: list) -> bool:
        """At the job's start here: adopting, the PNs are asked which attempts of the job they
        hold (True: wait for their answers before placing anything)."""
        if not self.generation:
            return False
        self.adopting = True
        probe = ProbeJob(self.tasks.job_id, self.generation, self.cfg.host)
        out += [Send(f"pn:{s}", probe) for s in np.flatnonzero(view.alive).tolist()]
        out.append(SetTimer(self.cfg.adopt_wait_s, "adopted"))
        return True

    def adopt(self, spec: TaskSpec, rep: TaskReport, server: int, now: float, out: list) -> bool:
        """Attempt ``spec`` of the job, as ``server`` holds it (``rep``: its state there);
        True if ``rep`` is now a report of this JM's own attempt (the JM hears it as such)."""
        tk = self.tasks
        t = spec.task
        if not 0 <= t < tk.n or spec.job_id != tk.job_id:
            return False
        cur = tk.state.item(t)
        ended = rep.state == DONE
        if cur in (DISPATCHED, RUNNING) and spec.attempt == tk.attempt.item(t):
            return True                           # ours already (a repeated answer)
        if cur == DONE or (cur in (DISPATCHED, RUNNING) and not ended):
            if not ended:
                out.append(Send(f"pn:{server}", KillTask(tk.job_id, t, spec.attempt)))
            return False
        if cur in (DISPATCHED, RUNNING):          # our own attempt runs too, but this one is done
            out.append(Send(f"pn:{int(tk.server[t])}", KillTask(tk.job_id, t, int(tk.attempt[t]))))
            self.attempts.attempt_over(t, now, out, "requeue", "superseded", blame=False, outcome="superseded")
        if tk.state.item(t) != READY:
            return False                          # (pending: its stage is not released; cannot be)
        st = tk.stages[tk.stage_of.item(t)]
        st.ready.remove(t)
        tk.move(t, "dispatch")
        tk.attempt[t] = spec.attempt              # (its next attempt is numbered above the base again)
        tk.server[t] = server
        tk.opp[t] = False
        tk.used_tokens += spec.cpu
        tk.dispatch_t[t] = now
        tk.last_heard[t] = now
        tk.exp_wait[t] = 0.0
        tk.est_sent[t] = spec.est_runtime_s
        tk.locality[t] = spec.locality
        tk.queued_seen[t] = False
        tk.waiting[t] = False
        tk.sent[t] = spec
        if self.cfg.watchdog.probe_slack_s > 0:
            self.watchdog.note(float(self.watchdog.silence_limits(t)))
        out.append(Log("adopted", (tk.job_id, t, spec.attempt, server)))
        return True
