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

from .config import JmConfig
from .stable_matching import UNMATCHED
from .policies.batch import Batch
from .policies.opportunistic import random_idle
from .policies.pipeline import place
from .tasks import READY, TaskTable, pn_address
from .watchdog import Watchdog

if TYPE_CHECKING:
    from .attempts import Attempts


def _filled(n: int, value: Any, shape: Any = None) -> np.ndarray:
    """np.full(shape or n, value) (its dtype: the value's), without np.full's Python-level
    cost, which a batch of one task pays several times."""
    a = np.empty(n if shape is None else shape, dtype=np.int64 if isinstance(value, (int, np.integer)) else np.float64)
    a.fill(value)
    return a


def _least(x: Any) -> float:
    """float(x.min()) of an array, or the number ``x`` (one task's); one element is read, not
    reduced (the same number)."""
    if type(x) is float:
        return x
    return x.item(0) if len(x) == 1 else float(x.min())


def _total(x: np.ndarray) -> float:
    """float(x.sum()); one element is read, not reduced (the same number)."""
    return x.item(0) if len(x) == 1 else float(x.sum())


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
        depth = max((tk.depth(st) for st in tk.stages if st.ready), default=1)
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
            n_ok = np.count_nonzero(ok)
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
                  self.batch_depth(sidx) if m.places_one_per_slot() else 1)
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
            reps = st.reps[local] if st.reps is not None else _filled(B, -1, (B, 3))
            return (reps, st.in_bytes[local], _filled(B, st.est_runtime), _filled(B, st.shape),
                    _filled(B, st.spec.cpu))
        reps = np.full((B, 3), -1, dtype=np.int64)
        in_bytes = np.empty(B)
        runtime = np.empty(B)
        shape = np.empty(B, dtype=np.int64)
        cpu = np.empty(B)
        for i, st in enumerate(tk.stages):
            m = sidx == i
            if not m.any():
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
        cpu = _filled(m, stages[0].spec.cpu) if single else tk.cpu_of[tk.stage_of[ids]]
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
        if n == 1:      # (the same step, on a number: a small job's start is on its critical path)
            tk.move(ids.item(0), "dispatch")
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
        attempt = np.maximum(tk.attempt[ids], tk.generation << 16) + 1 if tk.generation else tk.attempt[ids] + 1
        tk.attempt[ids] = attempt
        tk.server[ids] = srv
        if n > n_reg:
            tk.opp[ids[:n_reg]] = False
            tk.opp[ids[n_reg:]] = True
            tk.opp_active.update(ids[n_reg:].tolist())
        else:
            tk.opp[ids] = False
        tk.dispatch_t[ids] = now
        tk.exp_wait[ids] = wait
        tk.queued_seen[ids] = False
        tk.waiting[ids] = False
        tk.last_heard[ids] = now
        tk.passed_at[ids] = np.inf
        tk.start_t[ids] = -1.0
        tk.locality[ids] = where
        bw = tk.bw
        if single:
            st = stages[0]
            sidx: Any = None
            local = ids - st.offset if st.offset else ids
            in_bytes = st.in_bytes[local]
            est_rt = st.est_runtime + cfg.io.init_s + in_bytes / bw[where]
        else:
            sidx = tk.stage_of[ids]
            est_rt = np.empty(n)
            for i, st in enumerate(stages):
                mk = sidx == i
                if mk.any():
                    local = ids[mk] - st.offset
                    est_rt[mk] = st.est_runtime + cfg.io.init_s + st.in_bytes[local] / bw[where[mk]]
        self.view.record_dispatches(srv, est_rt * cpu / cores, cpu, now)
        tk.est_sent[ids] = est_rt
        # (for one task the watchdog's arithmetic below is on numbers: the same floats, without
        # numpy's per-call cost, most of what a small job's start pays here)
        w, e = (wait.item(0), est_rt.item(0)) if n == 1 else (wait, est_rt)
        if cfg.watchdog.probe_slack_s > 0:       # (heard of now, the columns just set)
            self.watchdog.note(_least(self.watchdog.silence_limit(now, w, e)))
        if single:
            st = stages[0]
            st.wait_sum += _total(wait)
            st.wait_n += n
        else:
            k = len(stages)
            ws, wn = np.bincount(sidx, weights=wait, minlength=k).tolist(), np.bincount(sidx, minlength=k).tolist()
            for i, st in enumerate(stages):
                st.wait_sum += ws[i]
                st.wait_n += wn[i]
        if cfg.attempts.copies and self.prof.corrections:
            # looked at as a possible straggler once well past the time its stage normally takes
            if single:
                gap = stages[0].straggler_baseline() - stages[0].est_runtime
            else:
                gap = np.array([st.straggler_baseline() - st.est_runtime for st in stages])[sidx]
            chk = self.watchdog.next_check(now, w, e + gap)
            tk.check_t[ids] = chk
            self.watchdog.note(_least(chk))
        by_server: dict[int, list] = {}
        job_id = tk.job_id
        sent = tk.sent
        opp = [False] * n_reg + [True] * (n - n_reg)
        if single:
            st = stages[0]
            spec = st.spec
            c, mem, cmd, env, cwd, tmo = spec.cpu, spec.mem_gb, spec.command, spec.env, spec.cwd, spec.timeout_s
            limit = cmd is not None
            for t, s, loc, rt, o, a, d, b in zip(ids.tolist(), srv.tolist(), where.tolist(), est_rt.tolist(),
                                                 opp, attempt.tolist(),
                                                 spec.durations_s[local].astype(float, copy=False).tolist(),
                                                 in_bytes.astype(float, copy=False).tolist()):
                sent[t] = task = TaskSpec(job_id, t, a, 0, c, mem, d, b, loc, rt, o, cmd, env, cwd, tmo, limit)
                q = by_server.get(s)
                if q is None:
                    by_server[s] = [task]
                else:
                    q.append(task)
        else:
            for t, s, loc, rt, o, a, si in zip(ids.tolist(), srv.tolist(), where.tolist(), est_rt.tolist(),
                                               opp, attempt.tolist(), sidx.tolist()):
                st = stages[si]
                spec = st.spec
                i = t - st.offset
                sent[t] = task = TaskSpec(
                    job_id, t, a, si, spec.cpu, spec.mem_gb, float(spec.durations_s[i]),
                    float(st.in_bytes[i]), loc, rt, o, spec.command, spec.env, spec.cwd, spec.timeout_s,
                    spec.command is not None)
                by_server.setdefault(s, []).append(task)
        for s, tasks in by_server.items():
            out.append(Send(pn_address(s), Dispatch(tk.job_id, tasks, cfg.host)))
        if self.clones > 1 and self.attempts is not None:
            self.attempts.send_clones(ids.tolist(), now, rng, out)
        return n
