"""An allocation round: the sharing policy (rm/sharing.py) is asked for an allocation over one
snapshot of every job, admitted and waiting, and the RM carries it out: admissions, token
grants, give-backs; then it notes the queues' state (the report's rows, the store's copy for
`apollo queues`).

Rounds run at the RM's tick when the tokens are due a re-division or jobs wait, soon
(ADMIT_SOON_S) after a job found no free token, at once for a job whose queue is below its
guarantee, and when the policy asked to run again (a timeout of its own).
"""
from __future__ import annotations

import math

from apollo.core.effects import Log, Persist, SetTimer

from .admission import Admission
from .cluster_load import ClusterLoad
from .give_back_asks import GiveBackAsks
from .jobs import JobEntry, views_of
from .queue_limits import under_max
from .queues import QueueTree
from .sharing import Allocation, SharingPolicy, Snapshot

# A job that finds no free token waits for an allocation this soon, not for the next tick: on a
# busy cluster every arrival would otherwise wait up to a whole tick (jobs arriving together
# share one round).
ADMIT_SOON_S = 0.05


class AllocationRound:
    def __init__(self, tree: QueueTree, policy: SharingPolicy, jobs: dict[int, JobEntry], cluster: ClusterLoad,
                 admission: Admission, asks: GiveBackAsks) -> None:
        self.tree = tree
        self.policy = policy
        self.jobs = jobs
        self.cluster = cluster
        self.admission = admission
        self.asks = asks
        self.shares: dict[str, float] = {}      # queue -> share at the last round
        self.soon_due = False            # a round is due shortly (a "soon" timer is set)
        self.policy_at = math.inf        # when the sharing policy asked to run again
        self._published: tuple | None = None    # the queue state last persisted
        self.checked: tuple | None = None       # the last round's (snapshot, allocation), not yet validated

    def due(self, now: float) -> bool:
        """Whether the tick runs a round: the tokens are due a re-division, jobs wait, or the
        policy asked to run by now."""
        adm = self.admission
        return adm.dirty or bool(adm.positions) or now >= self.policy_at

    def soon(self) -> list:
        """A round shortly (one for every request until it runs)."""
        if self.soon_due:
            return []
        self.soon_due = True
        return [SetTimer(ADMIT_SOON_S, "soon")]

    def run(self, now: float) -> list:
        """Ask the sharing policy for an allocation over every job (admitted and waiting) and
        carry it out: admissions, token grants, give-backs; note the queues' state."""
        adm, jobs, cluster = self.admission, self.jobs, self.cluster
        self.soon_due = False
        adm.dirty = False
        out: list = []
        total = cluster.whole_cores()
        cap = cluster.cores()
        snap = Snapshot(now, float(total), views_of(jobs.values(), cluster.held_cells))
        alloc = self.policy.allocate(snap)
        self.checked = (snap, alloc)         # for validate(): the policy's invariants, once per round
        grants = under_max(self.tree, jobs, alloc.tokens, total) if adm.has_max else alloc.tokens
        for job_id in alloc.admit:
            out += adm.admit_waiting(jobs[job_id], grants[job_id], now)
        admitted_now = set(alloc.admit)
        # (the jobs whose tokens move, where the policy says which: a round of a long-task run
        # moves a few of its hundreds of jobs)
        moving = alloc.changed if alloc.changed is not None and grants is alloc.tokens else list(grants)
        for job_id in moving:
            e = jobs[job_id]
            tokens = grants[job_id]
            if job_id in admitted_now or tokens == e.tokens:
                continue
            out.append(adm.regrant(e, tokens))
        adm.grant_cap = total
        out += self.asks.ask(alloc.reclaim, now)
        adm.positions = dict(alloc.positions)   # (a copy: admissions edit it; the policy's is checked)
        self.shares = alloc.shares
        if alloc.next_run_s is not None:
            at = now + alloc.next_run_s
            if at < self.policy_at - 1e-9 or self.policy_at <= now:
                self.policy_at = at
                out.append(SetTimer(alloc.next_run_s, "policy"))
        elif self.policy_at <= now:
            self.policy_at = math.inf
        out.append(Log("allocation", self._queue_rows(now, cap, alloc)))
        out += self._publish(now)
        return out

    # ---- the queues' state -------------------------------------------------------------------
    def queue_figures(self) -> dict[str, tuple[float, int, float]]:
        """Per leaf queue: (CPUs held, tokens, CPUs its jobs could use now), as every view of
        the queues shows them (the report's rows, /api/queues, /metrics, the dashboard)."""
        return self.admission.queue_figures()

    def holding(self) -> dict[str, float]:
        """Each leaf queue's held CPUs: its admitted jobs' (never more than the live cores)."""
        return {q: f[0] for q, f in self.queue_figures().items()}

    def _queue_rows(self, now: float, cap: float, alloc: Allocation) -> tuple:
        """(now, capacity, {leaf: (share, holding, demand, guarantee, starving_s, running jobs,
        waiting jobs)}) for the report and `apollo queues`."""
        lim = self.tree.resolve(cap)
        figs = self.queue_figures()
        adm = self.admission
        none = (0.0, 0, 0.0)
        rows = {q.path: (alloc.shares.get(q.path, 0.0), figs.get(q.path, none)[0], figs.get(q.path, none)[2],
                         lim[q.path].guarantee, alloc.starving.get(q.path, 0.0), adm.admitted_in.get(q.path, 0),
                         adm.waiting_in.get(q.path, 0))
                for q in self.tree.leaves()}
        return (now, cap, rows)

    def _publish(self, now: float) -> list:
        """Persist the queues' state and the waiting jobs' places when they changed (a live
        cluster's `apollo queues` and `apollo job` read them from the store)."""
        held = self.holding()
        adm = self.admission
        state = (tuple(sorted((k, round(v, 3)) for k, v in self.shares.items())),
                 tuple(sorted((k, adm.admitted_in.get(k, 0), adm.waiting_in.get(k, 0), round(held.get(k, 0.0), 1))
                              for k in self.shares)),
                 tuple(sorted(adm.positions.items())))
        if state == self._published:
            return []
        self._published = state
        return [Persist("queues", (now, dict(self.shares), dict(adm.admitted_in), dict(adm.waiting_in),
                                   dict(adm.positions), held))]

    def validate(self) -> None:
        if self.checked is not None:
            self.policy.validate(*self.checked)
            self.checked = None
