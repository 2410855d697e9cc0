"""The watchdog: when each of a job's attempts out there is next looked at, and what looking finds.

Three clocks per first attempt (JmConfig): Apollo's duplicate trigger for one its PN said is
queued (waited "significantly" long: above its decision's wait and its stage's average), the
straggler check for one running (asked for its progress once well past its stage's normal
time), and silence (not heard of for 2 x (expected wait + runtime) + probe_slack_s: probed at
its server; one the server does not know is placed again). ``watch_at`` is the earliest of
them all, so that a cluster view before then costs the JM nothing.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from apollo.core.effects import Send
from apollo.core.messages import ProbeTask
from apollo.core.nonzero import count_nonzero

from .config import JmConfig
from .tasks import DISPATCHED, RUNNING, TaskTable, pn_address


class Watchdog:
    __slots__ = ("tasks", "cfg", "watch_at", "dups")

    def __init__(self, tasks: TaskTable, config: JmConfig) -> None:
        self.tasks = tasks
        self.cfg = config
        self.watch_at = np.inf                  # no queued task can be overdue before then
        self.dups: bool = config.profile.corrections and config.attempts.dup_factor > 0   # duplicate triggers run

    def note(self, at: float) -> None:
        """Something is due at ``at``."""
        if at < self.watch_at:
            self.watch_at = at

    def deadlines(self, ids: Any) -> Any:
        """When a task reported queued has waited "significantly" long (Apollo's third duplicate
        trigger: above its decision's wait and its stage's average); ``ids``: a task or an array."""
        cfg, tk = self.cfg, self.tasks
        avg = np.array([st.wait_sum / st.wait_n if st.wait_n else 0.0 for st in tk.stages])[tk.stage_of[ids]]
        ac = cfg.attempts
        return tk.dispatch_t[ids] + ac.dup_factor * np.maximum(tk.exp_wait[ids], avg) + ac.dup_slack_s

    def silence_limits(self, ids: Any) -> Any:
        """When an attempt not heard of since is probed."""
        tk = self.tasks
        return self.silence_limit(tk.last_heard[ids], tk.exp_wait[ids], tk.est_sent[ids])

    def silence_limit(self, heard: Any, exp_wait: Any, est_runtime: Any) -> Any:
        """... from when it was last heard of, its expected wait and its runtime with I/O."""
        return heard + 2.0 * (exp_wait + est_runtime) + self.cfg.watchdog.probe_slack_s

    def next_check(self, now: float, wait: Any, est_rt: Any) -> Any:
        """When a running first attempt is first looked at as a possible straggler (inf: never,
        a task without peers)."""
        cfg = self.cfg
        return now + wait + cfg.attempts.straggler_after * est_rt + cfg.attempts.straggler_slack_s

    def probe_stragglers(self, ids: np.ndarray, out: list) -> None:
        """Ask the PNs how far these attempts are (they answer with a progress report)."""
        tk = self.tasks
        host = self.cfg.host
        for t in ids.tolist():
            out.append(Send(pn_address(tk.server.item(t)), ProbeTask(tk.job_id, t, tk.attempt.item(t), host)))
        tk.check_t[ids] = np.inf       # until the answer comes

    def check(self, now: float, out: list) -> list[int]:
        """Look again at every attempt out: probe those silent too long, ask for the progress of
        running ones past their expected time (straggler copies), and note when the next look
        is due. Returns the queued tasks that have waited significantly long (each gets one
        look for a duplicate per attempt)."""
        cfg, tk = self.cfg, self.tasks
        st = tk.state
        act = np.flatnonzero((st == DISPATCHED) | (st == RUNNING))
        inf = np.full(len(act), np.inf)
        dup_due = np.where(tk.queued_seen[act] & (st[act] == DISPATCHED), self.deadlines(act), inf) \
            if self.dups else inf
        probe_due = self.silence_limits(act) if cfg.watchdog.probe_slack_s > 0 else inf
        check_due = tk.check_t[act]
        late_dup = dup_due <= now
        late_check = (check_due <= now) & ~late_dup
        late_probe = (probe_due <= now) & ~late_dup & ~late_check
        for t in act[late_probe].tolist():
            out.append(Send(pn_address(int(tk.server[t])), ProbeTask(tk.job_id, t, int(tk.attempt[t]), cfg.host)))
        tk.last_heard[act[late_probe]] = now
        if count_nonzero(late_check):
            self.probe_stragglers(act[late_check], out)
        tk.queued_seen[act[late_dup]] = False         # one look per attempt
        rest = ~late_dup
        silent = self.silence_limits(act) if cfg.watchdog.probe_slack_s > 0 else inf   # (last_heard as updated)
        # next: a trigger, a straggler check, or silence, of every active attempt (those whose
        # duplicate trigger fires now may still go silent)
        nxt = np.minimum(np.minimum(dup_due[rest], tk.check_t[act[rest]]), silent[rest])
        self.watch_at = min(float(nxt.min()) if len(nxt) else np.inf,
                            float(silent[late_dup].min()) if count_nonzero(late_dup) else np.inf)
        return act[late_dup].tolist()

