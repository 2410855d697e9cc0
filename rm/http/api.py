"""The JSON views of the RM's HTTP face: cluster, queues, jobs (rm/http/server.py serves them).

Each view reads in-memory state only (RmState, the heartbeat tap, rm/http/watch.py's tallies),
except ``job``, which reads one job's row from the RM's store like `apollo job` does.
Times are the cluster's clock (seconds since its epoch); ``null`` where unknown.
"""
from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import numpy as np

from apollo.tools.client import job_status
from apollo.core.records import A_ATTEMPT, A_END, A_HAS_INPUT, A_LOC, A_OUTCOME, A_READY, A_SERVER, A_STAGE, A_START, \
    A_TASK, A_DISPATCH
from apollo.core.shapes import GRID

from .watch import LOCALITY, Watch

RECENT_FINISHED = 20          # finished jobs listed after the live ones


def _num(x: float, nd: int = 3) -> float | None:
    x = float(x)
    return round(x, nd) if math.isfinite(x) else None


class Views:
    def __init__(self, rm, watch: Watch, info: dict, now, store=None) -> None:
        self.rm, self.watch, self.info, self.now = rm, watch, info, now
        self.db = getattr(store, "db", None)       # the RM's SQLite store (names of ended jobs)
        cfg = info["config"]
        n, racks = rm.cfg.servers, int(cfg.get("racks", 1))
        self.rack_of = (np.arange(n) * racks // n).astype(int)     # as apollo.core.cluster.Topology deals them
        # the wait for a 1-core task: the smallest shape holding 1 cpu (the RM's grid is PnConfig's)
        self.one_core = GRID.index(1.0, 0.0) if rm.cfg.shapes == GRID.size else 0

    # ---- /api/cluster -------------------------------------------------------------------
    def cluster(self) -> dict:
        rm, now = self.rm, self.now()
        tap = _Counts(rm.running_tasks, rm.queued_tasks, rm.cpu_free)     # (each made once per request)
        cores = rm.cfg.server_cores
        servers = []
        for s in range(rm.cfg.servers):
            alive = bool(rm.alive[s])
            heard = rm.stamps[s] >= 0
            servers.append({
                "id": s, "rack": int(self.rack_of[s]), "alive": alive, "heard": bool(heard), "cores": cores,
                "busy_cores": _num(cores - tap.cpu_free[s]) if heard else None,
                "cpu_free": _num(tap.cpu_free[s]) if heard else None,
                "running": int(tap.running[s]), "queued": int(tap.queued[s]),
                "wait_1core_s": _num(rm.matrices[s, self.one_core]) if heard else None,
                "heard_s_ago": _num(now - rm.stamps[s]) if heard else None})
        alive = rm.alive == 1
        busy = float(np.sum(np.where(alive, cores - tap.cpu_free, 0.0)))
        cap = rm.capacity
        by_host: dict[str, int] = {}
        for e in list(rm.jobs.values()):
            if e.admitted:
                by_host[e.host] = by_host.get(e.host, 0) + 1
        jm_procs = [p["address"] for p in self.info["processes"] if p["role"] == "jm"]
        up = set(rm.hosts_alive)
        hosts = [{"name": h, "address": jm_procs[k] if k < len(jm_procs) else None, "alive": h in up,
                  "jobs": by_host.get(h, 0)} for k, h in enumerate(rm.cfg.jm_hosts)]
        racks = [{"rack": r, "servers": [int(s) for s in np.flatnonzero(self.rack_of == r)]}
                 for r in range(int(self.rack_of.max()) + 1 if len(self.rack_of) else 0)]
        return {"time": _num(now), "servers": servers, "racks": racks, "jm_hosts": hosts,
                "scheduler": self.info["config"].get("scheduler", "apollo"),
                "servers_alive": int(alive.sum()), "servers_total": rm.cfg.servers,
                "capacity_cores": cap, "busy_cores": _num(busy),
                "utilization": _num(busy / cap) if cap else 0.0,
                "tasks": {"running": int(tap.running[alive].sum()), "queued": int(tap.queued[alive].sum())}}

    # ---- /api/queues --------------------------------------------------------------------
    def queues(self) -> dict:
        rm = self.rm
        cap = rm.capacity or rm.cfg.servers * rm.cfg.server_cores
        lim = rm.tree.resolve(cap)
        figs = rm.queue_figures()
        held, tokens, want = ({q: f[i] for q, f in figs.items()} for i in range(3))
        for q in reversed(rm.tree.nodes()):      # a parent holds what its children hold
            if q.children:
                for d in (held, tokens, want):
                    d[q.path] = sum(d.get(c.path, 0) for c in q.children)
        rows = []
        for q in rm.tree.nodes():
            p = q.path
            rows.append({"path": p, "leaf": q.is_leaf, "parent": rm.tree.parent(p), "weight": q.weight,
                         "order": q.order, "guarantee_cores": _num(lim[p].guarantee), "max_cores": _num(lim[p].max),
                         "share_cores": _num(rm.shares.get(p, 0.0)), "running_jobs": rm.admitted_in.get(p, 0),
                         "waiting_jobs": rm.waiting_in.get(p, 0), "tokens": tokens.get(p, 0),
                         "holding_cores": _num(held.get(p, 0.0)), "demand_cores": _num(want.get(p, 0.0))})
        history = [{"t": t, "shares": sh, "busy_cores": b} for t, sh, b in self.watch.history]
        return {"sharing": rm.tree.sharing, "capacity_cores": cap, "queues": rows, "history": history}

    # ---- /api/jobs ----------------------------------------------------------------------
    def _job_row(self, job_id: int, e=None) -> dict:
        t = self.watch.jobs.get(job_id)
        row = {"id": job_id}
        if e is not None:
            pos = self.rm.positions.get(job_id)
            row.update(name=e.spec.name, queue=e.queue, user=e.spec.user,
                       state="running" if e.admitted else "waiting", tokens=e.tokens, demand=_num(e.demand),
                       running=_num(self.rm.held(job_id)), admitted=e.admitted, host=e.host or None,
                       waiting_position=pos[1] if pos else None, submitted_at=_num(e.submitted_at),
                       tasks=e.spec.total_tasks)
        elif t is not None:
            row.update(name=None, queue=t.queue, user=t.user,
                       state=_ended_state(t),
                       tokens=0, demand=0.0, running=0.0, admitted=t.admitted_at is not None,
                       waiting_position=None, submitted_at=_num(t.submitted_at) if t.submitted_at else None,
                       tasks=t.tasks, finished_at=_num(t.finished_at) if t.finished_at else None, reason=t.reason)
        if t is not None:
            row.update(done=t.done, failed_attempts=t.failed, preempted=t.preempted,
                       locality=dict(zip(LOCALITY, t.locality)),
                       admitted_at=_num(t.admitted_at) if t.admitted_at is not None else None)
        else:
            row.update(done=0, failed_attempts=0, preempted=0, locality=dict.fromkeys(LOCALITY, 0), admitted_at=None)
        return row

    def jobs(self) -> dict:
        live = [self._job_row(j, e) for j, e in list(self.rm.jobs.items())]
        ended = [j for j, t in reversed(self.watch.jobs.items()) if t.finished_at is not None
                 and j not in self.rm.jobs][:RECENT_FINISHED]
        rows = [self._job_row(j) for j in ended]
        if rows and self.db is not None:
            # a job ended is gone from RmState; its name is in the store (primary-key reads, this thread's
            # connection: the RM's own)
            marks = ",".join("?" * len(rows))
            names = dict(self.db.execute(f"SELECT job_id, name FROM jobs WHERE job_id IN ({marks})",
                                         [r["id"] for r in rows]).fetchall())
            for r in rows:
                r["name"] = names.get(r["id"])
        return {"time": _num(self.now()), "jobs": live + rows}

    def job(self, job_id: int, folder: Path) -> dict | None:
        e = self.rm.jobs.get(job_id)
        t = self.watch.jobs.get(job_id)
        row = self._job_row(job_id, e) if (e is not None or t is not None) else {"id": job_id}
        attempts = list(t.attempts) if t is not None else []

        class _Kept:          # job_status reads attempts through a tail: hand it the ones kept
            @staticmethod
            def poll():
                return attempts
        try:
            st = job_status(folder, job_id, _Kept()) if (folder / "jobs.db").exists() else None
        except sqlite3.Error:
            st = None         # the store is busy or gone: what the records tell is still worth showing
        if st is None and e is None and t is None:
            return None
        if st is not None:
            row.update(name=st.name, state=st.state if e is None else row["state"],
                       stages=[{"name": s.name, "tasks": s.tasks, "done": s.done, "failed_attempts": s.failed_attempts}
                               for s in st.stages],
                       placements={str(k): v for k, v in sorted(st.placements.items())},
                       finished_at=_num(st.finished_at) if st.finished_at is not None else None,
                       reason=st.reason)
        row["attempts"] = [{"stage": a[A_STAGE], "task": a[A_TASK], "attempt": a[A_ATTEMPT], "server": a[A_SERVER],
                            "locality": LOCALITY[a[A_LOC]] if a[A_HAS_INPUT] and 0 <= a[A_LOC] < 3 else None,
                            "ready": _num(a[A_READY]), "dispatch": _num(a[A_DISPATCH]),
                            "start": _num(a[A_START]) if a[A_START] >= 0 else None, "end": _num(a[A_END]),
                            "outcome": a[A_OUTCOME]} for a in attempts]
        return row


def _ended_state(t) -> str:
    """An ended job's state, as the store and `apollo jobs` name it (JobDone.state)."""
    if t.ok is None:
        return "unknown"
    return "done" if t.ok else ("cancelled" if t.reason == "cancelled" else "failed")


class _Counts:
    """The RM's per-server heartbeat counts, as arrays made once."""

    def __init__(self, running, queued, cpu_free) -> None:
        self.running, self.queued, self.cpu_free = running, queued, cpu_free
