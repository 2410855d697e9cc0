"""Placement: where a job's ready tasks go, and sending them there.

A scheduling pass pops batches of ready tasks in priority order, places each batch through
the profile's pipeline (candidates, costs, filters, the matcher: jm.policies.pipeline), and
dispatches the placed tasks in order of quality while the job's tokens last (times the
pipelining depth), then as opportunistic tasks while its allowance lasts (Apollo, section
3.5). Tasks not sent go back to the ready list in their order. Also here: each filter's
memory of the job, and the job's trust in each server (its failures there).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from apollo.core.cluster import locality_of
from apollo.core.effects import Log, Send, SetTimer
from apollo.core.messages import Dispatch, TaskSpec
from apollo.core.nonzero import count_nonzero

from .config import JmConfig
from .stable_matching import UNMATCHED
from .policies.batch import Batch
from .policies.opportunistic import random_idle
from .policies.pipeline import place
from .tasks import READY, Stage, TaskTable, filled, pn_address
from .watchdog import Watchdog

if TYPE_CHECKING:
    from .attempts import Attempts


def _no_replicas(n: int) -> np.ndarray:
    """int64[n, 3] of -1: the replica servers of tasks that read no input (shared, read-only,
    for small batches)."""
    got = _NO_REPLICAS.get(n)
    if got is None:
        got = np.full((n, 3), -1, dtype=np.int64)
        if n > 16:
            return got
        got.flags.writeable = False
        _NO_REPLICAS[n] = got
    return got


_NO_REPLICAS: dict[int, np.ndarray] = {}


def _at(column: np.ndarray, at: Any) -> Any:
    """``column``'s entries at ``at``: a Python number for one index (an int), an array for an
    array of them."""
    return column.item(at) if type(at) is int else column[at]


def _each(x: Any) -> list:
    """The per-task values ``x`` as a list of Python numbers: an array's, or a single task's one."""
    if type(x) is np.ndarray:
        return x.tolist()
    return [x.item() if isinstance(x, np.generic) else x]


def _least(x: Any) -> float:
    """float(x.min()) of an array, or the number ``x`` (one task's); one element is read, not
    reduced (the same number). (The ufunc's reduce: ndarray.min runs a Python wrapper first)"""
    if type(x) is float:
        return x
    return x.item(0) if len(x) == 1 else float(np.minimum.reduce(x))


def _total(x: Any) -> float:
    """float(x.sum()) of an array, or the number ``x`` (one task's); one element is read, not
    reduced (the same number). (The ufunc's reduce, as ndarray.sum's wrapper calls it)"""
    if type(x) is float:
        return x
    return x.item(0) if len(x) == 1 else float(np.add.reduce(x))


class Placement:
    __slots__ = ("tasks", "watchdog", "cfg", "prof", "view", "clones", "attempts", "fstates", "fail_rate",
                 "fail_seen", "retry_pending")

    def __init__(self, tasks: TaskTable, watchdog: Watchdog, config: JmConfig, view: Any, clones: int) -> None:
        self.tasks = tasks
        self.watchdog = watchdog
        self.cfg = config
        self.prof = prof = config.profile
        self.view = view
        self.clones = clones                    # Dolly's attempts per task (1: not cloned)
        self.attempts: Attempts | None = None   # (set by the JM: a cloned job's clones go with its tasks)
        self.fstates: tuple = prof.new_states()  # each filter's memory of this job
        self.fail_rate: np.ndarray | None = None
        self.fail_seen: dict[int, int] = {}
        self.retry_pending = False             # a "retry" timer is pending

    def note_failure(self, server: int) -> None:
        """A task failed on ``server``: each failure there halves the job's trust in it."""
        if server < 0:
            return
        if self.fail_rate is None:
            self.fail_rate = np.zeros(self.cfg.topology.servers)
        k = self.fail_seen.get(server, 0) + 1
        self.fail_seen[server] = k
        self.fail_rate[server] = 1.0 - 0.5 ** k   # each failure there halves our trust in it

    def schedule(self, now: float, rng, out: list) -> None:
        """A scheduling pass: batches of ready tasks placed and sent while there is room; a job
        left with tasks it could not place polls (a "retry" timer) where its profile says so."""
        tk = self.tasks
        cfg = self.cfg
        prof = self.prof
        gate = prof.gate
        allow_opp = cfg.dispatch.opportunistic and gate.opportunistic
        placed_total = 0
        blocked = False
        depth = 1
        for stage in tk.stages:       # (the deepest ready stage's; a loop, not a generator object)
            if stage.ready:
                depth = max(depth, tk.depth(stage))
        if depth > 1 and tk.used_tokens > tk.tokens * depth / 2 and not tk.outstanding_opp:
            # Pipelined short tasks: refill once half the pipeline has drained, not after every
            # report. The servers still hold half of it queued meanwhile, so none goes idle,
            # and a pass places many tasks instead of one or two.
            return
        # Stable matching places at most one task per server slot per batch (one slot, or
        # ``depth`` for pipelined tasks): a larger batch would only cost rows pushed back unmatched.
        pc = cfg.placement
        cap = min(pc.max_batch, max(1, self.view.alive_count) * depth) if prof.matcher.places_one_per_slot() \
            else pc.max_batch
        for _ in range(cfg.placement.max_batches_per_pass):
            if placed_total and not tk.has_ready():
                # all placed (the common end of a pass): no room to work out (its idle check,
                # made at ``now`` by the first batch, would be that one's cached answer)
                break
            reg_room = tk.tokens * depth - tk.used_tokens
            # (opportunistic tasks only go to idle servers: with none, no batch is matched for them)
            opp_room = (cfg.dispatch.opportunistic_factor * max(tk.tokens, 1) - tk.outstanding_opp) \
                if allow_opp and self.view.has_idle(now) else 0.0
            room = int(max(reg_room, 0) + max(opp_room, 0))
            if room <= 0:
                break
            want = room * cfg.placement.lookahead if gate.lookahead else room
            bound = prof.matcher.batch_bound(self.view, tk.least_ready_cpu()) if prof.matcher.has_batch_bound() \
                else None
            if bound is not None:
                if bound <= 0:
                    blocked = True      # a slot scheduler on a full cluster: no batch to build
                    break
                want = min(want, bound * cfg.placement.lookahead if gate.lookahead else bound)
            batch = tk.pop_ready(min(want, cap))
            if not batch:
                break
            ids = np.array(batch, dtype=np.int64)
            servers, wait, where = self.place(ids, now, rng)
            ok = servers != UNMATCHED
            n_ok = count_nonzero(ok)
            if not n_ok:
                tk.push_back(batch)
                blocked = True
                break
            placed = ids
            if n_ok < len(ids):
                placed, servers, wait, where = ids[ok], servers[ok], wait[ok], where[ok]
            # Dispatch in order of quality while tokens last: least time lost for Apollo's
            # lookahead, else lowest expected wait first (one task: no order to find).
            if n_ok > 1:
                if cfg.placement.lookahead > 1 and gate.lookahead:
                    order = self.quality_order(placed, wait, where, now)
                else:
                    order = wait.argsort(kind="stable")
                placed, servers, wait, where = placed[order], servers[order], wait[order], where[order]
            n_placed = self.dispatch(placed, servers, wait, where, now, opp_room, out, rng)
            if n_placed < len(batch):    # the rest go back in their priority order
                sent = set(placed[:n_placed].tolist())
                rest = [t for t in batch if t not in sent]
                tk.passed_at[rest] = np.minimum(tk.passed_at[rest], now)
                tk.push_back(rest)
            placed_total += n_placed
            if n_placed == 0:
                break
            if n_ok < len(ids):
                blocked = True
        if placed_total:
            out.append(Log("decisions", (placed_total,)))
        # Tasks a filter held back to be matched again on the next view or status report (which
        # is when the picture can change) need no poll; otherwise a blocked job polls, and
        # profiles that poll always do.
        if (prof.polls or (blocked and not any(f.rematches_on_news(cfg) for f in prof.filters))) \
                and tk.has_ready() and not self.retry_pending:
            self.retry_pending = True
            poll = prof.poll_s or cfg.dispatch.retry_s
            # ...or sooner, when a filter holding tasks back will let them go
            for f, st in zip(prof.filters, self.fstates):
                if st is not None:
                    w = f.wake_at(st, now, cfg)
                    if w is not None:
                        poll = min(poll, max(w - now, 0.0))
            out.append(SetTimer(poll, "retry"))

    def quality_order(self, ids: np.ndarray, wait: np.ndarray, where: np.ndarray, now: float) -> np.ndarray:
        """Dispatch order of matched tasks: least time lost first (expected queue wait plus
        the extra input reading time over a node-local read); tasks passed over for
        ``patience_s`` before everything, in priority order."""
        tk = self.tasks
        bw = tk.bw
        lost = wait + tk.in_bytes[ids] * (1.0 / bw[where] - 1.0 / bw[0])
        lost[now - tk.passed_at[ids] >= self.cfg.placement.patience_s] = -1.0
        return lost.argsort(kind="stable")

    def place(self, ids: np.ndarray, now: float, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Server per task (UNMATCHED: not this pass), the expected wait and the locality there:
        the profile's candidates, filters and matcher (jm.policies.pipeline)."""
        tk = self.tasks
        cfg = self.cfg
        prof = self.prof
        m = prof.matcher
        sidx = tk.stage_of[ids]
        reps, in_bytes, runtime, shape, cpu = self.task_columns(ids, sidx)
        b = Batch(now, self.view, cfg, ids, sidx, reps, in_bytes, runtime, shape, cpu,
                  self.batch_depth(sidx) if m.places_one_per_slot() else 1,
                  no_replicas=all(st.reps is None for st in tk.stages))
        return place(b, prof, self.fstates, self.fail_rate, rng)

    def batch_depth(self, sidx: np.ndarray) -> int:
        """Tasks one server may take in a batch: the smallest pipelining depth among its stages
        (what pipelined short tasks add to each other's wait there is at most pipeline_s)."""
        tk = self.tasks
        if len(tk.stages) == 1:
            return tk.depth(tk.stages[0])
        return int(np.array([tk.depth(st) for st in tk.stages])[sidx].min())

    def task_columns(self, ids: np.ndarray, sidx: np.ndarray):
        """Per task of ``ids``: replica servers (-1: none), input bytes, runtime estimate, grid
        shape index and CPUs, gathered from the tasks' stages."""
        tk = self.tasks
        B = len(ids)
        if len(tk.stages) == 1:               # the common case: no per-stage masks
            st = tk.stages[0]
            local = ids - st.offset if st.offset else ids
            reps = st.reps[local] if st.reps is not None else _no_replicas(B)
            return (reps, st.in_bytes[local], filled(B, st.est_runtime), filled(B, st.shape),
                    filled(B, st.spec.cpu))
        reps = np.full((B, 3), -1, dtype=np.int64)
        in_bytes = np.empty(B)
        runtime = np.empty(B)
        shape = np.empty(B, dtype=np.int64)
        cpu = np.empty(B)
        for i, st in enumerate(tk.stages):
            m = sidx == i
            if not count_nonzero(m):
                continue
            local = ids[m] - st.offset
            if st.reps is not None:
                reps[m] = st.reps[local]
            in_bytes[m] = st.in_bytes[local]
            runtime[m] = st.est_runtime
            shape[m] = st.shape
            cpu[m] = st.spec.cpu
        return reps, in_bytes, runtime, shape, cpu

    def dispatch(self, ids: np.ndarray, srv: np.ndarray, wait: np.ndarray, where: np.ndarray, now: float,
                  opp_room: float, out: list, rng=None) -> int:
        """Send placed tasks (in quality order) while tokens last, then as opportunistic tasks
        to servers expected to be idle now; returns how many of ``ids`` went out (a prefix)."""
        tk = self.tasks
        cfg = self.cfg
        cores = cfg.topology.cores
        stages = tk.stages
        single = len(stages) == 1
        m = len(ids)
        cpu = filled(m, stages[0].spec.cpu) if single else tk.cpu_of[tk.stage_of[ids]]
        # Regular while the tokens last (times the task's pipelining depth), then opportunistic
        # while the allowance lasts and the server is idle; the batch stops at the first task
        # that is neither.
        free = tk.tokens - tk.used_tokens
        extra: Any      # (a number of tokens, or one per task)
        if single:
            extra = tk.tokens * (tk.depth(stages[0]) - 1)
        else:
            depth = np.array([tk.depth(st) for st in stages])
            extra = tk.tokens * (depth[tk.stage_of[ids]] - 1)
        reg_room: Any = free + extra        # a scalar, or per task
        if m <= 64:   # the same prefixes as the numpy form below, without its per-call cost
            cpu_l = cpu.tolist()
            lims = [reg_room + 1e-9] * m if single else (reg_room + 1e-9).tolist()
            acc, n_reg = 0.0, 0
            for x, lim in zip(cpu_l, lims):
                acc += x
                if acc > lim:
                    break
                n_reg += 1
            acc, n_opp, lim = 0.0, 0, opp_room + 1e-9
            for x in cpu_l[n_reg:]:
                acc += x
                if acc > lim:
                    break
                n_opp += 1
        else:
            reg = cpu.cumsum() <= reg_room + 1e-9
            n_reg = int(reg.argmin()) if not reg.all() else m
            rest_cpu = cpu[n_reg:].cumsum()
            opp_ok = rest_cpu <= opp_room + 1e-9
            n_opp = int(opp_ok.argmin()) if not opp_ok.all() else len(opp_ok)
        if n_opp:
            # Opportunistic tasks go to idle servers drawn at random (jm/policies/opportunistic.py),
            # not where the matching put them
            picks = random_idle(self.view, cpu[n_reg:n_reg + n_opp], now, rng)
            n_opp = len(picks)
            if n_opp:
                srv, wait, where = srv.copy(), wait.copy(), where.copy()
                rack_of = cfg.topology.rack_of
                for k, s in enumerate(picks.tolist()):
                    t = int(ids[n_reg + k])
                    st = stages[tk.stage_of.item(t)]
                    srv[n_reg + k] = s
                    wait[n_reg + k] = 0.0
                    where[n_reg + k] = locality_of(s, st.reps[t - st.offset] if st.reps is not None else None,
                                                   rack_of)
        n = n_reg + n_opp
        if n == 0:
            return 0
        if n < m:
            ids, srv, cpu, wait, where = ids[:n], srv[:n], cpu[:n], wait[:n], where[:n]
        # One task (a small job's start, or a token freed: the common case, on the job's critical
        # path) goes with its index and figures as Python numbers. Each step below reads the same
        # for one task's numbers as for many tasks' arrays, and on numbers it skips numpy's
        # per-call cost, which is most of what one task's steps would pay.
        at: Any = ids
        to: Any = srv
        w: Any = wait
        loc: Any = where
        c: Any = cpu
        if n == 1:
            at, to, w, loc, c = ids.item(0), srv.item(0), wait.item(0), where.item(0), cpu.item(0)
            tk.move(at, "dispatch")
        else:
            tk.move_many(ids, READY, "dispatch")
        if self.prof.stateful:
            for f, fs in zip(self.prof.filters, self.fstates):
                if fs is not None:
                    f.dispatched(fs, where, now)
        if n_reg:
            tk.used_tokens += _total(cpu[:n_reg] if n_reg < n else cpu)
        if n > n_reg:
            tk.outstanding_opp += _total(cpu[n_reg:])
        # (above the attempts of earlier homes, adopted ones included)
        attempt = _at(tk.attempt, at)
        attempt = (np.maximum(attempt, tk.generation << 16) if tk.generation else attempt) + 1
        tk.attempt[at] = attempt
        tk.server[at] = to
        if n > n_reg:
            tk.opp[ids[:n_reg]] = False
            tk.opp[ids[n_reg:]] = True
            tk.opp_active.update(ids[n_reg:].tolist())
        else:
            tk.opp[at] = False
        tk.dispatch_t[at] = now
        tk.exp_wait[at] = w
        tk.queued_seen[at] = False
        tk.waiting[at] = False
        tk.last_heard[at] = now
        tk.passed_at[at] = np.inf
        tk.start_t[at] = -1.0
        tk.locality[at] = loc
        # The tasks' stage: one for a one-stage job or a single task (its numbers below), else
        # one per task (sidx)
        stage: Stage | None = stages[0] if single else (stages[tk.stage_of.item(at)] if n == 1 else None)
        sidx: Any = None
        if stage is not None:
            local = at - stage.offset if stage.offset else at
            in_bytes = _at(stage.in_bytes, local)
            est_rt = stage.est_runtime + cfg.io.init_s + in_bytes / _at(tk.bw, loc)
        else:
            sidx = tk.stage_of[ids]
            est_rt = np.empty(n)
            for i, sti in enumerate(stages):
                mk = sidx == i
                if count_nonzero(mk):
                    est_rt[mk] = sti.est_runtime + cfg.io.init_s + sti.in_bytes[ids[mk] - sti.offset] / tk.bw[where[mk]]
        self.view.record_dispatches(to, est_rt * c / cores, c, now)
        tk.est_sent[at] = est_rt
        if cfg.watchdog.probe_slack_s > 0:       # (heard of now, the columns just set)
            self.watchdog.note(_least(self.watchdog.silence_limit(now, w, est_rt)))
        if stage is not None:
            stage.wait_sum += _total(w)
            stage.wait_n += n
        else:
            k = len(stages)
            ws, wn = np.bincount(sidx, weights=wait, minlength=k).tolist(), np.bincount(sidx, minlength=k).tolist()
            for i, sti in enumerate(stages):
                sti.wait_sum += ws[i]
                sti.wait_n += wn[i]
        if cfg.attempts.copies and self.prof.corrections:
            # looked at as a possible straggler once well past the time its stage normally takes
            if stage is not None:
                gap = stage.straggler_baseline() - stage.est_runtime
            else:
                gap = np.array([sti.straggler_baseline() - sti.est_runtime for sti in stages])[sidx]
            chk = self.watchdog.next_check(now, w, est_rt + gap)
            tk.check_t[at] = chk
            self.watchdog.note(_least(chk))
        by_server: dict[int, list] = {}
        job_id = tk.job_id
        sent = tk.sent
        opp = [False] * n_reg + [True] * (n - n_reg)
        if stage is not None:
            spec = stage.spec
            si, cpu1, mem, cmd, env, cwd, tmo = stage.index, spec.cpu, spec.mem_gb, spec.command, spec.env, spec.cwd, \
                spec.timeout_s
            limit = cmd is not None
            for t, s, lc, rt, o, a, d, b in zip(_each(at), _each(to), _each(loc), _each(est_rt), opp, _each(attempt),
                                                _each(_at(spec.durations_s, local)), _each(in_bytes)):
                sent[t] = task = TaskSpec(job_id, t, a, si, cpu1, mem, float(d), float(b), lc, rt, o, cmd, env, cwd,
                                          tmo, limit)
                q = by_server.get(s)
                if q is None:
                    by_server[s] = [task]
                else:
                    q.append(task)
        else:
            for t, s, lc, rt, o, a, si in zip(ids.tolist(), srv.tolist(), where.tolist(), est_rt.tolist(),
                                              opp, attempt.tolist(), sidx.tolist()):
                sti = stages[si]
                spec = sti.spec
                i = t - sti.offset
                sent[t] = task = TaskSpec(
                    job_id, t, a, si, spec.cpu, spec.mem_gb, float(spec.durations_s[i]),
                    float(sti.in_bytes[i]), lc, rt, o, spec.command, spec.env, spec.cwd, spec.timeout_s,
                    spec.command is not None)
                by_server.setdefault(s, []).append(task)
        for s, tasks in by_server.items():
            out.append(Send(pn_address(s), Dispatch(tk.job_id, tasks, cfg.host)))
        if self.clones > 1 and self.attempts is not None:
            self.attempts.send_clones(_each(at), now, rng, out)
        return n
