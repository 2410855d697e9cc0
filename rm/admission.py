"""Admission and the token ledger: which jobs are admitted and which wait (per leaf queue and
per user), the tokens granted (never more than the cluster's whole cores), the jobs granted
more than they can use (their slack is the first taken for a newcomer), and Dolly's clone
budget.

A new job is admitted at once when its queue and user are below their limits, nobody waits
ahead of it there and a token is free (or its queue runs jobs without one:
rm/queue_order.py runs_without_token); else it waits for an allocation round
(rm/allocation_round.py), which ``admit_now`` says when to run. Either way an admitted job
is offered to a JM host (rm/jm_homes.py).
"""
from __future__ import annotations

from typing import Final

import math

from apollo.core.effects import Log, Send
from apollo.core.messages import JobDemand

from .clones import CloneBudget, CloneConfig
from .exact_sum import fixed, to_float
from .cluster_load import ClusterLoad
from .jm_homes import JmHomes
from .jobs import JobEntry
from .queue_limits import below_guarantee, max_room
from .queue_order import runs_without_token
from .queues import QueueTree
from .token_messages import TokenMessages

# What admit_now leaves to do: nothing more (admitted, or waiting for a limit to free), an
# allocation round now (its queue is below its guarantee: the borrowers are cut), or soon.
ADMITTED: Final = 0
WAIT: Final = 1
ROUND_NOW: Final = 2
ROUND_SOON: Final = 3


class Admission:
    def __init__(self, tree: QueueTree, jobs: dict[int, JobEntry], cluster: ClusterLoad, homes: JmHomes,
                 messages: TokenMessages, clones: CloneConfig) -> None:
        self.tree = tree
        self.jobs = jobs
        self.cluster = cluster
        self.homes = homes
        self.messages = messages
        self.clone_budget = CloneBudget(clones)
        self.dirty = False               # the tokens are due a re-division (at the next round)
        self.granted = 0                 # tokens held by admitted jobs, summed
        self.grant_cap = 0               # whole cores when tokens were last handed out
        self.slack: set[int] = set()     # admitted jobs granted more than their demand
        self.admitted_in: dict[str, int] = {}             # leaf -> admitted jobs
        self.waiting_in: dict[str, int] = {}              # leaf -> waiting jobs
        self.user_in: dict[tuple[str, str], int] = {}     # (leaf, user) -> admitted jobs
        self.positions: dict[int, tuple[str, int]] = {}   # waiting job -> (leaf, place in line)
        # Per leaf, kept as they move (not summed over every job per round): its jobs' demand
        # (admitted and waiting; exact fixed point, rm/exact_sum.py) and its admitted jobs' tokens
        self.demand_in: dict[str, int] = {}
        self.tokens_in: dict[str, int] = {}
        # whether some queue has a max below the cluster (admission at once then checks it)
        self.has_max = any(q.max is not None for q in tree.nodes())

    # ---- admitting -------------------------------------------------------------------------
    def admit_now(self, e: JobEntry, now: float, out: list) -> int:
        """Admit a new job at once if its queue and user are below their limits, nobody waits
        ahead of it there, and a token is free (the tokens of jobs granted more than they can
        use are trimmed first); else it waits for the next allocation round, which comes soon.
        Exact shares follow at that round. Appends to ``out``; returns what is left to do
        (ADMITTED | WAIT | ROUND_NOW | ROUND_SOON)."""
        q = self.tree.get(e.queue)
        leaf, user = e.queue, e.spec.user
        self.demand_in[leaf] = self.demand_in.get(leaf, 0) + fixed(e.demand)     # (every job enters here)
        total = self.cluster.whole_cores()
        free = total - self.granted
        ok = (not self.waiting_in.get(leaf) and
              (q.max_running_jobs is None or self.admitted_in.get(leaf, 0) < q.max_running_jobs) and
              (q.max_jobs_per_user is None or self.user_in.get((leaf, user), 0) < q.max_jobs_per_user))
        if ok and free < e.demand:
            # what others were granted beyond their demand they cannot use: theirs goes first
            free += self.trim_slack(e.demand - free, out)
        if ok and free >= 1 and self.has_max:
            room = max_room(self.tree, self.jobs, leaf, total)          # never past a max
            if room < free:
                free = int(math.floor(room + 1e-9))
        # Its queue holds less than its guarantee and what is free is not all it could use: it is
        # admitted now in a round of its own, which cuts the borrowers' tokens too (what they
        # still hold is given back within the queue's timeout).
        now_round = ok and e.demand > free and below_guarantee(self.tree, self.jobs, leaf, total)
        if ok and not now_round and (e.demand <= 0 or free >= 1 or runs_without_token(q)):
            tokens = int(min(e.demand, max(free, 0))) if e.demand > 0 else 0
            if tokens:
                # (tokens handed out now fit today's cores; a job admitted without one hands out
                # nothing, and the others' grants from a larger cluster stand until the round)
                self.grant_cap = total
            out += self.admit(e, tokens, now)
            return ADMITTED
        self.waiting_in[leaf] = self.waiting_in.get(leaf, 0) + 1
        self.positions[e.job_id] = (leaf, self.waiting_in[leaf])
        if now_round:
            return ROUND_NOW
        if ok:          # only tokens are short: a round soon re-divides them (limits wait for a job to end)
            return ROUND_SOON
        return WAIT

    def admit_waiting(self, e: JobEntry, tokens: int, now: float, offer: bool = True) -> list:
        """A waiting job admitted (by a round, or found running at a JM host: ``offer`` False)."""
        self.waiting_in[e.queue] -= 1
        self.positions.pop(e.job_id, None)
        return self.admit(e, tokens, now, offer)

    def admit(self, e: JobEntry, tokens: int, now: float, offer: bool = True) -> list:
        e.admitted = True
        e.tokens = tokens
        e.may_run = max(e.may_run, float(tokens))
        self.granted += tokens
        self.tokens_in[e.queue] = self.tokens_in.get(e.queue, 0) + tokens
        e.held_cell = self.cluster.count_in(e.job_id, e.queue)
        if e.tokens > e.demand:
            self.slack.add(e.job_id)
        leaf, user = e.queue, e.spec.user
        self.admitted_in[leaf] = self.admitted_in.get(leaf, 0) + 1
        self.user_in[(leaf, user)] = self.user_in.get((leaf, user), 0) + 1
        self.dirty = True  # the others' shares moved; sent at the next round
        cluster = self.cluster
        cap = cluster.capacity
        e.clones, e.clone_cpu, e.clones_low = self.clone_budget.grant(e.spec, cap, lambda: cluster.busy_cores(cap))
        out: list = [Log("job_admitted", (e.job_id, now, e.queue))]
        if not offer:
            return out
        return self.homes.offer(e, now, out)

    # ---- tokens ----------------------------------------------------------------------------
    def regrant(self, e: JobEntry, tokens: int) -> Send:
        """An admitted job's tokens, changed by a round: the TokenGrant telling its JM."""
        self.granted += tokens - e.tokens
        self.tokens_in[e.queue] += tokens - e.tokens
        e.tokens = tokens
        e.may_run = max(e.may_run, float(tokens))
        if e.tokens > e.demand:
            self.slack.add(e.job_id)
        else:
            self.slack.discard(e.job_id)
        return self.messages.grant(e, tokens)

    def trim_slack(self, want: float, out: list) -> int:
        """Take back tokens jobs hold beyond their demand (they cannot use them), up to ``want``."""
        freed = 0
        slack = self.slack
        while slack and freed < want:
            job_id = slack.pop()
            e = self.jobs[job_id]
            keep = max(int(math.ceil(e.demand - 1e-9)), 1 if e.demand > 0 else 0)
            if keep < e.tokens:
                freed += e.tokens - keep
                self.granted -= e.tokens - keep
                self.tokens_in[e.queue] -= e.tokens - keep
                e.tokens = keep
                out.append(self.messages.grant(e, keep))
        return freed

    def queue_figures(self) -> dict[str, tuple[float, int, float]]:
        """Per leaf queue with jobs: (CPUs its admitted jobs hold, their tokens, CPUs its jobs
        could use now), from the sums kept as they move."""
        held = self.cluster.leaf_held
        out = {}
        for q in self.tree.leaves():
            leaf = q.path
            if self.admitted_in.get(leaf, 0) or self.waiting_in.get(leaf, 0):
                out[leaf] = (held(leaf), self.tokens_in.get(leaf, 0), to_float(self.demand_in.get(leaf, 0)))
        return out

    def on_demand(self, e: JobEntry, msg: JobDemand, now: float) -> None:
        """Its JM's word on what the job could use, has out, and its clones still need."""
        e.demand_at = now
        self.note_demand(e, msg.remaining, msg.in_use, msg.seq)
        if 0.0 <= msg.clone_cpu < e.clone_cpu:      # its finished tasks' clones are over
            self.clone_budget.release(e.clone_cpu - msg.clone_cpu)
            e.clone_cpu = msg.clone_cpu

    def note_demand(self, e: JobEntry, demand: float, in_use: float, seq: int) -> None:
        demand = float(demand)
        if demand != e.demand:
            self.demand_in[e.queue] += fixed(demand) - fixed(e.demand)
        e.demand = demand
        e.in_use = float(in_use)
        if seq >= e.seq:            # it had heard the last grant or cut: it runs no more than this
            e.may_run = max(e.tokens, e.in_use)
        if e.admitted:
            if e.tokens > e.demand:
                self.slack.add(e.job_id)
            else:
                self.slack.discard(e.job_id)
        self.dirty = True

    def forget(self, e: JobEntry) -> None:
        """The job ended: its tokens, its place and its clone budget are free."""
        self.clone_budget.release(e.clone_cpu)
        self.demand_in[e.queue] -= fixed(e.demand)
        if e.admitted:
            self.granted -= e.tokens
            self.tokens_in[e.queue] -= e.tokens
            self.cluster.count_out(e.job_id)
            e.held_cell = None
            self.slack.discard(e.job_id)
            self.admitted_in[e.queue] -= 1
            self.user_in[(e.queue, e.spec.user)] -= 1
        else:
            self.waiting_in[e.queue] -= 1
            self.positions.pop(e.job_id, None)
        self.dirty = True

    def validate(self) -> None:
        jobs = self.jobs.values()
        adm = [e for e in jobs if e.admitted]
        assert self.granted == sum(e.tokens for e in adm), "granted tokens out of sync"
        assert self.granted <= self.grant_cap or not adm, "more tokens granted than cores"
        assert all(e.tokens == 0 for e in jobs if not e.admitted)
        for leaf in set(self.admitted_in) | set(self.waiting_in):
            assert self.admitted_in.get(leaf, 0) == sum(e.queue == leaf for e in adm)
            assert self.waiting_in.get(leaf, 0) == sum(e.queue == leaf and not e.admitted for e in jobs)
        assert set(self.positions) == {e.job_id for e in jobs if not e.admitted}
        demand: dict[str, int] = {}
        tokens: dict[str, int] = {}
        for e in jobs:
            demand[e.queue] = demand.get(e.queue, 0) + fixed(e.demand)
            if e.admitted:
                tokens[e.queue] = tokens.get(e.queue, 0) + e.tokens
        assert {q: v for q, v in self.demand_in.items() if v} == {q: v for q, v in demand.items() if v}, \
            "demand per queue out of sync"
        assert {q: v for q, v in self.tokens_in.items() if v} == {q: v for q, v in tokens.items() if v}, \
            "tokens per queue out of sync"
        self.cluster.validate_counted({e.job_id: e.queue for e in adm})
        granted = sum(e.clone_cpu for e in jobs)
        assert abs(self.clone_budget.used - granted) < 1e-6, "clone budget out of sync"
