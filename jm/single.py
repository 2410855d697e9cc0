"""One task's options in plain Python: its candidates and their estimated costs.

A batch of one task is the common case at a job's start (every 1-task job, every
job whose tokens free one at a time) and it is on the job's critical path. The
vectorised path (jm.candidates, jm.estimate) spends ~100 us on numpy's per-call
costs for a single row; this is the same computation on floats: the same random
draws in the same order, the same arithmetic in the same order, hence the same
numbers (tests/test_single_placement.py holds the two to it). Keep the two in
step: a change to one is a change to both. Filters and the choice itself are not
here: jm.policies.pipeline runs the same ones for both paths.
"""
from __future__ import annotations

from apollo.core.cluster import NODE, RACK, REMOTE

from .view import IN_FLIGHT_S

INF = float("inf")


def options_one(reps: list[int], in_bytes: float, runtime: float, shape: int, cpu: float, now: float,
                view, fail_rate, io, ecfg, topo, rng, per_rack: int, n_light: int, light_list=None):
    """(cand, loc, C, E, W) lists for one task: its candidate servers (sorted), their
    localities, costs (inf: not a choice), expected completions and waits; the lightly loaded
    candidates are drawn from ``light_list`` (None: the view's lightly loaded list)."""
    # ---- candidate_rows
    R = len(reps) * per_rack
    n_cand = len(reps) + R + n_light
    # (one draw for the candidates and the tie noise: the same numbers, in the same order, as
    # two; numpy's per-call cost is a good part of this function's)
    u = rng.random(2 * R + n_light + (n_cand if ecfg.tie_noise_s > 0 else 0)).tolist()
    rack_of, rack_start, rack_size = topo.rack_of, topo.rack_start, topo.rack_size
    servers = topo.servers
    has = [r >= 0 for r in reps]
    anywhere = [int(u[R + j] * servers) for j in range(R)]
    in_rack = []
    for j in range(R):
        i = j // per_rack
        if has[i]:
            rk = int(rack_of[reps[i]])
            in_rack.append(int(rack_start[rk]) + int(u[j] * int(rack_size[rk])))
        else:
            in_rack.append(anywhere[j])
    if light_list is None:
        light_list = view.lightly_loaded
    pool = len(light_list) or servers
    light = [int(u[2 * R + k] * pool) for k in range(n_light)]
    if len(light_list):
        light = [int(light_list[x]) for x in light]
    cand = sorted([reps[i] if has[i] else anywhere[i] for i in range(len(reps))] + in_rack + light)
    # ---- localities (only the first replica says whether the task reads an input)
    rep_racks = [int(rack_of[r]) if r >= 0 else -1 for r in reps]
    if has[0]:
        loc = [NODE if c in reps else (RACK if int(rack_of[c]) in rep_racks else REMOTE) for c in cand]
    else:
        loc = [REMOTE] * len(cand)
    # ---- costs
    bw = (io.node_bytes_per_s, io.rack_bytes_per_s, io.remote_bytes_per_s)
    matrices, stamps, alive = view.matrices, view.stamps, view.alive
    sent_wait, sent_cpu, sent_at = view.sent_wait, view.sent_cpu, view.sent_at
    nm = len(view.mem_grid)
    free_of = view.free_of_fits
    vtime = view.time
    noise = u[2 * R + n_light:] if ecfg.tie_noise_s > 0 else None
    C, E, W = [], [], []
    prev = None
    ncpu = len(view.cpu_grid)
    for k, c in enumerate(cand):
        if c == prev:        # a repeat: not a choice (its figures are the server's, as before)
            C.append(INF)
            E.append(E[-1])
            W.append(W[-1])
            continue
        prev = c
        # (plain floats read once: a numpy scalar per field read cost more than the arithmetic)
        row = matrices[c].tolist()
        wait = row[shape]
        stamp = stamps.item(c)
        elapsed = now - stamp
        drained = max(wait - max(elapsed, 0.0), 0.0)
        age = min(max(now - max(stamp, vtime), 0.0), ecfg.max_stale_s)
        w = drained + ecfg.stale_penalty * age
        # view.pending_wait: this host's sends after the reading, unless the server still has room
        mine = stamp <= sent_at.item(c) + IN_FLIGHT_S
        sent = sent_wait.item(c) if mine else 0.0
        fits = 0
        for ci in range(ncpu):
            if row[ci * nm] - elapsed <= 0.0:
                fits += 1
        free = free_of.item(fits) - (sent_cpu.item(c) if mine else 0.0)
        w = w + (0.0 if free >= cpu - 1e-9 else sent)
        e = (io.init_s + in_bytes / bw[loc[k]]) + w + runtime
        p = ecfg.failure_prior if fail_rate is None else max(fail_rate.item(c), ecfg.failure_prior)
        cost = (1.0 - p) * e + ecfg.kfail * p * e
        if noise is not None:
            cost = cost + noise[k] * ecfg.tie_noise_s
        if not alive.item(c) or wait >= 1e8:      # dead, or never fits
            cost = INF
        C.append(cost)
        E.append(e)
        W.append(w)
    return cand, loc, C, E, W
