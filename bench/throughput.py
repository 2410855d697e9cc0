"""Scheduler throughput and latency on a live local cluster, optionally against Dask and Ray.

    apollo bench throughput [--vs dask,ray] [--json PATH]

Measured on this machine, every system with real processes on loopback:

- ``startup_s``: cluster start-up until every process is ready (Apollo: ``apollo cluster up``'s
  RM, JM host and PN host processes listening; Dask: ``LocalCluster`` plus a client with both
  workers connected; Ray: ``ray.init`` until two no-op tasks ran, i.e. workers exist).
- ``noop_tasks_per_s``: no-op tasks completed per wall second, from submission until all are
  done (Apollo: one job of N synthetic tasks of duration 0, submit -> JobDone at the client;
  Dask: N ``client.submit(noop, pure=False)`` then ``wait``; Ray: N ``noop.remote()`` then
  ``ray.get``).
- ``roundtrip_ms``: median latency of one no-op task submitted alone and waited for, repeated
  sequentially (Apollo: a 1-task job, submit -> JobDone at the client). Apollo's
  ``roundtrip_cpu_us``: the CPU each of the cluster's processes (and the client) spent per
  round trip meanwhile (Linux' /proc/PID/schedstat): where the round trip's work is. (On this
  shared 2-core machine it moves between runs about as much as the wall figure.)
- ``short_task_efficiency``: ``--short-tasks`` tasks of ``--short-ms`` each on 2 slots; the
  ideal makespan (tasks x duration / 2) over the measured one (submission to last completion).

Every system gets 2 slots: Apollo 2 PNs x 1 CPU, hosted by one PN process (plus the RM and
JM host processes); Dask ``LocalCluster(n_workers=2, threads_per_worker=1)``; Ray
``ray.init(num_cpus=2)``. On 2 slots a job holds 2 tokens (EvenSplit gives a lone job the
whole cluster) and as many opportunistic tasks, so no-op throughput there is bound by the
JM <-> PN round trips; Apollo's no-op rate is therefore also measured on the default
``apollo cluster up`` shape (16 PNs x 2 CPUs in 4 racks over 2 PN processes, 32 slots:
``noop_tasks_per_s_wide``; no-op tasks need no real CPU), where a lone job schedules in large
batches. ``--wide-noop-tasks 0`` skips it.

A synthetic task normally pays the I/O model's 0.2 s start-up (apollo.core.cluster.IoModel.init_s);
the bench starts its clusters with ``io={"init_s": 0}`` (kept in cluster.json's config, read by
apollo.tools.process for the executors and the JMs' estimates), so a 0 s task is a true no-op and a
10 ms task takes 10 ms. Everything else is the production path: the client's TCP submit, the
RM's SQLite job store, tokens, the JM's candidates, estimates and stable matching, the PN
queues, the event files every process writes.

By default (``--native auto``) the cluster's processes run the compiled event kernel, PN and
JM (apollo.tools.native: the same modules built with mypyc, the same behaviour), built first if this
machine can; ``--native off`` measures the interpreted ones. The JSON says which ran.

Dask and Ray are optional (``pip install "dask[distributed]" ray``, the ``peers`` extra); one
that is not importable is reported as skipped. Each system is warmed up with a few small
submissions first (connections open, workers started).
"""
from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from apollo.tools import native
from apollo.tools.cli.options import Parser, count, positive

PEERS = ("dask", "ray")
KEYS = ("noop_tasks_per_s", "roundtrip_ms", "short_task_efficiency", "startup_s")
TARGETS = {"noop_tasks_per_s": (">=", 20000.0), "roundtrip_ms": ("<=", 1.0),
           "short_task_efficiency": (">=", 0.97), "startup_s": ("<=", 1.0)}
SLOTS = 2
WIDE = {"pns": 16, "racks": 4, "procs": 2, "cpus": 2.0}   # `apollo cluster up`'s defaults
WARMUP = 3


def _noop() -> None:
    return None


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


def _median_ms(lat: list[float]) -> tuple[float, float]:
    return statistics.median(lat) * 1e3, float(np.percentile(lat, 90)) * 1e3


# ---------------------------------------------------------------------------- apollo

def _job(name: str, tasks: int, seconds: float):
    from apollo.core.spec import JobSpec, StageSpec
    return JobSpec(name, [StageSpec("work", tasks, np.full(tasks, float(seconds)), cpu=1.0, mem_gb=1.0)])


async def _apollo_noop(c, tasks: int) -> float:
    t0 = time.perf_counter()
    done = await c.wait(await c.submit(_job("noop", tasks, 0.0)))
    took = time.perf_counter() - t0
    if not done.ok or done.tasks_done != tasks:
        raise RuntimeError(f"no-op job failed: {done.reason or f'{done.tasks_done} of {tasks} tasks done'}")
    return took


def _cpu_ns(folder: Path) -> dict[str, int]:
    """CPU time so far (ns, /proc/PID/schedstat) of each of the cluster's processes, by role,
    and of this one (the client): what a round trip costs each. Empty off Linux."""
    try:
        info = json.loads((folder / "cluster.json").read_text())
        got = {"client": int(Path("/proc/self/schedstat").read_text().split()[0])}
        for p in info["processes"]:
            if p.get("pid"):
                name = p["role"] + str(p.get("index", 0))
                got[name] = int(Path(f"/proc/{p['pid']}/schedstat").read_text().split()[0])
        return got
    except (OSError, ValueError, KeyError):
        return {}


async def _apollo_runs(folder: Path, noop_tasks: int, roundtrips: int, short_tasks: int,
                       short_s: float) -> dict:
    from apollo.tools.client import Client
    out: dict = {}
    async with Client(folder) as c:
        for _ in range(WARMUP):        # connections dialled and handshaken, code paths warm
            await _apollo_noop(c, 4)
        if noop_tasks:
            took = await _apollo_noop(c, noop_tasks)
            out["noop_tasks_per_s"] = noop_tasks / took
            out["noop_wall_s"] = took
        if roundtrips:
            lat = []
            cpu0 = _cpu_ns(folder)
            for _ in range(roundtrips):
                t0 = time.perf_counter()
                done = await c.wait(await c.submit(_job("one", 1, 0.0)))
                lat.append(time.perf_counter() - t0)
                if not done.ok:
                    raise RuntimeError(f"1-task job failed: {done.reason}")
            cpu1 = _cpu_ns(folder)
            out["roundtrip_ms"], out["roundtrip_p90_ms"] = _median_ms(lat)
            if cpu0 and cpu1:
                out["roundtrip_cpu_us"] = {k: (cpu1[k] - cpu0[k]) / roundtrips / 1e3 for k in cpu0 if k in cpu1}
        if short_tasks:
            t0 = time.perf_counter()
            done = await c.wait(await c.submit(_job("short", short_tasks, short_s)))
            took = time.perf_counter() - t0
            if not done.ok:
                raise RuntimeError(f"short-task job failed: {done.reason}")
            out["short_task_efficiency"] = (short_tasks * short_s / SLOTS) / took
            out["short_wall_s"] = took
    return out


def _log_tail(folder: Path, lines: int = 5) -> str:
    """The last lines of the cluster processes' output and logs (for a start-up failure)."""
    out = []
    for f in sorted(folder.glob("*.out")) + sorted(folder.glob("*.log")):
        tail = [x for x in f.read_text(errors="replace").splitlines() if x.strip()][-lines:]
        if tail:
            out.append(f"--- {f.name}\n" + "\n".join(tail))
    return "\n".join(out)


def _apollo_cluster(folder: Path, shape: dict, work) -> dict:
    """Start a cluster of ``shape``, run ``work(folder)`` against it, stop it. A cluster that fails
    to start (a process exits during start-up, e.g. a listen port taken meanwhile by someone
    else) is started once more in a fresh folder; the retry is counted in the results."""
    from apollo.tools import livecluster
    from apollo.runtime.live import run
    for attempt in range(2):
        where = folder if attempt == 0 else folder.with_name(folder.name + "-retry")
        try:
            info = livecluster.up(where, pns=shape["pns"], racks=shape["racks"], procs=shape["procs"],
                                  cpus=shape["cpus"], mem_gb=4.0 * shape["cpus"], io={"init_s": 0.0})
        except livecluster.ClusterError as e:
            if attempt:
                raise livecluster.ClusterError(f"{e}\n{_log_tail(where)}") from None
            print(f"apollo bench throughput: cluster start failed ({e}); retrying once\n{_log_tail(where)}",
                  file=sys.stderr)
            continue
        try:
            res = {"startup_s": info["startup_s"], "startup_retries": attempt}
            res.update(run(work(where)))
            return res
        finally:
            livecluster.down(where)
    raise AssertionError("unreachable")


def bench_apollo(noop_tasks: int, roundtrips: int, short_tasks: int, short_s: float,
                 wide_noop_tasks: int = 0, folder: Path | None = None) -> dict:
    """The four numbers on a 2-slot cluster, plus the no-op rate on the default cluster shape."""
    with tempfile.TemporaryDirectory(prefix="apollo-bench-") as tmp:
        base = Path(folder) if folder is not None else Path(tmp)
        narrow = {"pns": SLOTS, "racks": 1, "procs": 1, "cpus": 1.0}
        res = _apollo_cluster(base / "slots2", narrow,
                              lambda f: _apollo_runs(f, noop_tasks, roundtrips, short_tasks, short_s))
        res["cluster"] = f"{narrow['pns']} PNs x {narrow['cpus']:g} cpu (RM, JM host, 1 PN process)"
        if wide_noop_tasks:
            wide = _apollo_cluster(base / "wide", WIDE, lambda f: _apollo_runs(f, wide_noop_tasks, 0, 0, 0.0))
            res["noop_tasks_per_s_wide"] = wide["noop_tasks_per_s"]
            res["noop_wide_wall_s"] = wide["noop_wall_s"]
            res["wide_startup_s"] = wide["startup_s"]
            res["startup_retries"] += wide["startup_retries"]
            res["wide_cluster"] = (f"{WIDE['pns']} PNs x {WIDE['cpus']:g} cpu in {WIDE['racks']} racks "
                                   f"(RM, JM host, {WIDE['procs']} PN processes)")
    return res


# ---------------------------------------------------------------------------- dask

def bench_dask(noop_tasks: int, roundtrips: int, short_tasks: int, short_s: float) -> dict:
    import logging

    from dask.distributed import Client, LocalCluster, wait
    res: dict = {}
    t0 = time.perf_counter()
    cluster = LocalCluster(n_workers=SLOTS, threads_per_worker=1, dashboard_address=None,
                           silence_logs=logging.CRITICAL)
    client = Client(cluster)
    try:
        client.wait_for_workers(SLOTS)
        res["startup_s"] = time.perf_counter() - t0
        for _ in range(WARMUP):
            client.gather([client.submit(_noop, pure=False) for _ in range(4)])
        if noop_tasks:
            t0 = time.perf_counter()
            fs = [client.submit(_noop, pure=False) for _ in range(noop_tasks)]
            wait(fs)
            took = time.perf_counter() - t0
            del fs
            res["noop_tasks_per_s"] = noop_tasks / took
            res["noop_wall_s"] = took
        if roundtrips:
            lat = []
            for _ in range(roundtrips):
                t0 = time.perf_counter()
                client.submit(_noop, pure=False).result()
                lat.append(time.perf_counter() - t0)
            res["roundtrip_ms"], res["roundtrip_p90_ms"] = _median_ms(lat)
        if short_tasks:
            t0 = time.perf_counter()
            fs = [client.submit(_sleep, short_s, pure=False) for _ in range(short_tasks)]
            wait(fs)
            took = time.perf_counter() - t0
            del fs
            res["short_task_efficiency"] = (short_tasks * short_s / SLOTS) / took
            res["short_wall_s"] = took
    finally:
        client.close()
        cluster.close()
    res["cluster"] = f"LocalCluster(n_workers={SLOTS}, threads_per_worker=1)"
    return res


# ---------------------------------------------------------------------------- ray

def bench_ray(noop_tasks: int, roundtrips: int, short_tasks: int, short_s: float) -> dict:
    import ray
    res: dict = {}
    t0 = time.perf_counter()
    ray.init(num_cpus=SLOTS, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    try:
        noop = ray.remote(_noop)
        sleep = ray.remote(_sleep)
        ray.get([noop.remote() for _ in range(SLOTS)])
        res["startup_s"] = time.perf_counter() - t0
        for _ in range(WARMUP):
            ray.get([noop.remote() for _ in range(4)])
        if noop_tasks:
            t0 = time.perf_counter()
            ray.get([noop.remote() for _ in range(noop_tasks)])
            took = time.perf_counter() - t0
            res["noop_tasks_per_s"] = noop_tasks / took
            res["noop_wall_s"] = took
        if roundtrips:
            lat = []
            for _ in range(roundtrips):
                t0 = time.perf_counter()
                ray.get(noop.remote())
                lat.append(time.perf_counter() - t0)
            res["roundtrip_ms"], res["roundtrip_p90_ms"] = _median_ms(lat)
        if short_tasks:
            t0 = time.perf_counter()
            ray.get([sleep.remote(short_s) for _ in range(short_tasks)])
            took = time.perf_counter() - t0
            res["short_task_efficiency"] = (short_tasks * short_s / SLOTS) / took
            res["short_wall_s"] = took
    finally:
        ray.shutdown()
    res["cluster"] = f"ray.init(num_cpus={SLOTS})"
    return res


def run_peer(name: str, *args) -> dict:
    """A peer's numbers, or {"skipped": why} when it is not installed, {"error": ...} if it fails."""
    fn = {"dask": bench_dask, "ray": bench_ray}[name]
    try:
        return fn(*args)
    except ImportError as e:
        return {"skipped": f"not installed ({e}); pip install \"dask[distributed]\" ray"}
    except Exception as e:     # a peer that breaks is reported, not allowed to hide Apollo's numbers
        return {"error": f"{type(e).__name__}: {e}"}


# ---------------------------------------------------------------------------- driver

FMT = {"noop_tasks_per_s": "{:,.0f}", "noop_tasks_per_s_wide": "{:,.0f}", "roundtrip_ms": "{:.3f}",
       "short_task_efficiency": "{:.1%}", "startup_s": "{:.2f}"}
LABEL = {"noop_tasks_per_s": "no-op tasks/s (2 slots)", "noop_tasks_per_s_wide": "no-op tasks/s (32 slots)",
         "roundtrip_ms": "1-task round trip ms", "short_task_efficiency": "short-task efficiency",
         "startup_s": "start-up s"}


def table(results: dict) -> list[str]:
    systems = list(results)
    lines = [f"{'':<26}" + "".join(f"{s:>12}" for s in systems) + f"{'target':>12}"]
    rows = list(KEYS)
    if any("noop_tasks_per_s_wide" in r for r in results.values()):
        rows.insert(1, "noop_tasks_per_s_wide")
    for k in rows:
        line = f"{LABEL[k]:<26}"
        for s in systems:
            v = results[s].get(k)
            line += f"{FMT[k].format(v) if isinstance(v, (int, float)) else '-':>12}"
        op, t = TARGETS.get(k, TARGETS["noop_tasks_per_s"])
        line += f"{op + ' ' + FMT[k].format(t):>12}"
        lines.append(line)
    for s in systems:
        r = results[s]
        if "skipped" in r or "error" in r:
            lines.append(f"{s}: {'skipped' if 'skipped' in r else 'failed'}: {r.get('skipped') or r.get('error')}")
        elif "cluster" in r:
            lines.append(f"{s}: {r['cluster']}" + (f"; 32 slots: {r['wide_cluster']}" if "wide_cluster" in r else ""))
    return lines


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="apollo bench throughput", description=__doc__.split("\n\n")[0])
    p.add_argument("--vs", default="", help="comma-separated peers to measure too: dask, ray")
    p.add_argument("--noop-tasks", type=count(1), default=20000, help="no-op tasks on 2 slots (default 20000)")
    p.add_argument("--wide-noop-tasks", type=count(0), default=20000,
                   help="no-op tasks on the 32-slot default cluster shape (0: skip it)")
    p.add_argument("--roundtrips", type=count(1), default=200, help="1-task jobs, one after another (default 200)")
    p.add_argument("--short-tasks", type=count(1), default=2000, help="tasks of --short-ms each (default 2000)")
    p.add_argument("--short-ms", type=positive, default=10.0, help="the short tasks' length in ms (default 10.0)")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--native", choices=("auto", "on", "off"), default="auto",
                   help="the cluster's processes run the compiled kernel, PN and JM (apollo.tools.native): "
                        "auto when they can be built")
    a = p.parse_args(argv)
    try:
        why_not = native.for_children(a.native)
    except native.NativeBuildError as e:
        print(f"apollo bench throughput --native on: {e}", file=sys.stderr)
        return 2
    print("cluster processes: " + ("compiled kernel, PN and JM (apollo.tools.native)" if not why_not
                                   else f"interpreted ({why_not})"), flush=True)
    peers = [x.strip() for x in a.vs.split(",") if x.strip()]
    unknown = [x for x in peers if x not in PEERS]
    if unknown:
        print(f"apollo bench throughput: unknown peer(s) {', '.join(unknown)} (known: {', '.join(PEERS)})",
              file=sys.stderr)
        return 2
    if min(a.noop_tasks, a.roundtrips, a.short_tasks, a.wide_noop_tasks) < 0 or not a.short_ms > 0:
        print("apollo bench throughput: task counts must be >= 0 and --short-ms > 0", file=sys.stderr)
        return 2
    args = (a.noop_tasks, a.roundtrips, a.short_tasks, a.short_ms / 1000)
    results: dict = {"apollo": bench_apollo(*args, wide_noop_tasks=a.wide_noop_tasks)}
    results["apollo"]["native"] = not why_not
    for peer in peers:
        results[peer] = run_peer(peer, *args)
    results["config"] = {"slots": SLOTS, "noop_tasks": a.noop_tasks, "wide_noop_tasks": a.wide_noop_tasks,
                         "roundtrips": a.roundtrips, "short_tasks": a.short_tasks, "short_ms": a.short_ms,
                         "targets": {k: list(v) for k, v in TARGETS.items()}}
    print("\n".join(table({k: v for k, v in results.items() if k != "config"})))
    cpu = results["apollo"].get("roundtrip_cpu_us")
    if cpu:
        print("CPU per 1-task round trip, us: " + ", ".join(f"{k} {v:.0f}" for k, v in cpu.items())
              + f"; all {sum(cpu.values()):.0f}")
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=2) + "\n")
        print(f"results: {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
