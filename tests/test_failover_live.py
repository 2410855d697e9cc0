"""Live failover on loopback: a JM host killed mid-job, the RM killed while jobs are submitted,
a killed JM host restarted. Real processes (`apollo.tools.livecluster.up`), kill -9.

Run with ``-s`` to see the adopted vs re-run counts of the JM host test.
"""
from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import time
from pathlib import Path

import pytest

from apollo.tools.client import Client, EventTail
from apollo.tools.livecluster import read_info, restart_process
from apollo.core.records import A_ATTEMPT, A_JOB, A_OUTCOME, A_TASK
from apollo.runtime.live import run
from helpers import await_until, records, wait_until
from test_live_cluster import _gone, job_state, pids_of, synthetic

pytestmark = pytest.mark.live

GEN_BASE = 1 << 16       # an adopting JM numbers its own attempts above generation << 16


def _rows(folder: Path, sql: str, args: tuple = ()) -> list[tuple]:
    db = folder / "jobs.db"
    if not db.exists():
        return []
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1.0)
    try:
        return con.execute(sql, args).fetchall()
    except sqlite3.OperationalError:          # the RM is mid-write or creating its tables
        return []
    finally:
        con.close()


def job_host(folder: Path, job_id: int) -> str:
    rows = _rows(folder, "SELECT host FROM jobs WHERE job_id=?", (job_id,))
    return rows[0][0] if rows and rows[0][0] else ""


def pid_of(folder: Path, role: str, index: int) -> int:
    return next(p["pid"] for p in read_info(folder)["processes"] if p["role"] == role and p["index"] == index)


def kill9(folder: Path, role: str, index: int) -> int:
    pid = pid_of(folder, role, index)
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: _gone(pid), 5, f"the killed {role}{index} to be gone")
    return pid


# ---------------------------------------------------------------------------- a JM host killed mid-job

@pytest.mark.slow
def test_job_completes_after_its_jm_host_is_killed_mid_job(cluster):
    folder = cluster.up(pns=8, racks=2, procs=2)          # two JM hosts: jmhost:0 and jmhost:1
    n = 64                                                # 16 slots: 4 waves of 0.6 s

    async def main():
        tail = EventTail(folder)
        async with Client(folder) as c:
            job = await c.submit(synthetic("failover", n, 0.6))
            host = await await_until(lambda: job_host(folder, job), 10, "the job's JM host in jobs.db")
            # mid-job: a first wave has finished, and the next ones are queued and running
            await await_until(lambda: any(a[A_JOB] == job and a[A_OUTCOME] == "done" for a in tail.poll()),
                            15, "a first finished attempt")
            assert job not in c.inbox.finished, "the job finished before the kill: make it longer"
            k = int(host.split(":")[1])
            kill9(folder, "jm", k)
            killed = time.monotonic()
            done = await c.wait(job, 40)
            return job, k, done, time.monotonic() - killed

    job, k, done, after_s = run(main())
    assert done.ok, done.reason
    assert done.tasks_done == n, done
    survivor = f"jmhost:{1 - k}"
    wait_until(lambda: job_host(folder, job) == survivor, 5, f"job {job} re-homed to {survivor} in jobs.db")
    wait_until(lambda: job_state(folder, job) == "done", 10, f"job {job} 'done' in jobs.db")
    assert any(r.data[0] == job and r.data[3] == survivor for r in records(folder, "rehomed")), "no 'rehomed' record"
    assert any(r.data[0] == f"jmhost:{k}" for r in records(folder, "host_dead")), "no 'host_dead' record"

    # The survivor's records: attempts it adopted (the PNs held them) and tasks it ran again.
    survivor_file = f"events-jm{1 - k}.msgpack"
    wait_until(lambda: sum(r.data[A_JOB] == job and r.data[A_OUTCOME] == "done"
                           for r in records(folder, "attempt") if r.file == survivor_file) > 0, 5,
               "the survivor's attempt records")
    adopted = {r.data[1] for r in records(folder, "adopted") if r.data[0] == job}
    mine = [r.data for r in records(folder, "attempt") if r.file == survivor_file and r.data[A_JOB] == job]
    rerun = {a[A_TASK] for a in mine if a[A_ATTEMPT] >= GEN_BASE and a[A_TASK] not in adopted}
    adopted_done = {a[A_TASK] for a in mine if a[A_ATTEMPT] < GEN_BASE and a[A_OUTCOME] == "done"}
    dead_done = {r.data[A_TASK] for r in records(folder, "attempt")
                 if r.file == f"events-jm{k}.msgpack" and r.data[A_JOB] == job and r.data[A_OUTCOME] == "done"}
    print(f"\nJM host jmhost:{k} killed mid-job ({n} tasks x 0.6 s on 16 slots): job done "
          f"{after_s:.1f} s after the kill; the dead host had recorded {len(dead_done)} tasks done; "
          f"the survivor adopted {len(adopted)} attempts ({len(adopted_done)} of them finished there, "
          f"{len(adopted & dead_done)} had finished before the kill), re-ran {len(rerun)} tasks "
          f"({len(rerun & dead_done)} of them done before the kill)")
    assert adopted, "the surviving JM host adopted no attempt from the PNs"
    assert adopted_done <= adopted


# ---------------------------------------------------------------------------- the RM killed during submissions

@pytest.mark.slow
def test_rm_killed_while_50_jobs_are_submitted_stores_each_once_and_all_complete(cluster):
    folder = cluster.up(pns=8, racks=2, procs=2)
    jobs = 50
    names = [f"burst-{i:02d}" for i in range(jobs)]

    async def main():
        async with Client(folder) as c:
            retries = []
            c.on_retry = retries.append
            answered = [0]
            loop = asyncio.get_running_loop()
            t0 = loop.time()

            async def one(i: int) -> int:
                await asyncio.sleep(i * 0.04)               # 50 submissions over 2 s, concurrently
                job = await c.submit(synthetic(names[i], 4, 0.2), timeout_s=30)
                answered[0] += 1
                return job

            async def crash_rm() -> float:
                # some submissions answered, the rest not yet
                await await_until(lambda: answered[0] >= 5, 10, "five submissions answered")
                await asyncio.to_thread(kill9, folder, "rm", 0)
                down = loop.time()
                # down until a submission has had no answer and was sent again
                await await_until(lambda: retries, 10, "a submission retried while the RM is down")
                await asyncio.to_thread(restart_process, folder, "rm", 0)
                return loop.time() - down

            results = await asyncio.gather(*(one(i) for i in range(jobs)), crash_rm())
            ids, down_s = results[:-1], results[-1]
            submitted_s = loop.time() - t0
            dones = await asyncio.wait_for(asyncio.gather(*(c.wait(j) for j in ids)), 30)
            return ids, dones, down_s, submitted_s, len(retries)

    ids, dones, down_s, submitted_s, retried = run(main())
    cluster.note(folder)
    print(f"\nRM down {down_s:.1f} s; 50 submissions took {submitted_s:.1f} s with {retried} retries")
    assert len(set(ids)) == jobs, f"two submissions were given one job id: {sorted(ids)}"
    assert retried > 0, "no submission was retried: the RM was not down while they were sent"
    bad = [(j, d.reason) for j, d in zip(ids, dones) if not d.ok or d.tasks_done != 4]
    assert not bad, bad
    rows = _rows(folder, "SELECT job_id, name, state FROM jobs WHERE name LIKE 'burst-%'")
    stored = sorted(r[1] for r in rows)
    assert stored == names, (f"each job must be stored exactly once: {len(rows)} rows, duplicates "
                             f"{sorted({n for n in stored if stored.count(n) > 1})}, missing {sorted(set(names) - set(stored))}")
    assert sorted(r[0] for r in rows) == sorted(ids)
    wait_until(lambda: all(job_state(folder, j) == "done" for j in ids), 10, "every job 'done' in jobs.db")


# ---------------------------------------------------------------------------- a JM host comes back

@pytest.mark.slow
def test_a_restarted_jm_host_rejoins(cluster):
    folder = cluster.up(pns=4, racks=2, procs=1)
    k = 1

    async def some_jobs(tag: str, count: int):
        async with Client(folder) as c:
            ids = [await c.submit(synthetic(f"{tag}-{i}", 2, 0.05)) for i in range(count)]
            return ids, await asyncio.wait_for(asyncio.gather(*(c.wait(j) for j in ids)), 20)

    # (submitted at once: two go to the first host, which may run one more than the other, the
    # third to the second) both hosts are known to the RM
    ids, _ = run(some_jobs("before", 3))
    assert f"jmhost:{k}" in {job_host(folder, j) for j in ids}
    old = kill9(folder, "jm", k)
    wait_until(lambda: any(r.data[0] == f"jmhost:{k}" for r in records(folder, "host_dead")), 10,
             f"the RM to declare jmhost:{k} dead")
    new = restart_process(folder, "jm", k)
    cluster.note(folder)
    assert new != old

    def back() -> bool:
        rm = [r for r in records(folder, "host_dead", "host_up") if r.file == "events-rm.msgpack"]
        last_dead = max((i for i, r in enumerate(rm) if r.kind == "host_dead" and r.data[0] == f"jmhost:{k}"),
                        default=None)
        return last_dead is not None and any(r.kind == "host_up" and r.data[0] == f"jmhost:{k}"
                                             for r in rm[last_dead + 1:])
    wait_until(back, 10, f"a 'host_up' record of jmhost:{k} after its 'host_dead'")

    ids, dones = run(some_jobs("after", 4))
    assert all(d.ok and d.tasks_done == 2 for d in dones), dones
    hosts = {j: job_host(folder, j) for j in ids}
    assert f"jmhost:{k}" in hosts.values(), f"no later job was placed on the restarted host: {hosts}"
    assert pids_of(folder)[f"jm{k}"] == new
