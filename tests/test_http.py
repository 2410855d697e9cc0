"""The RM's HTTP face (rm/http/server.py): JSON API, Prometheus metrics and the dashboard.

In-process: the heartbeat tap, records folded into metrics, and the token asked off loopback.
Live (real processes on 127.0.0.1): /metrics parsed by prometheus_client and the JSON API
while jobs run; a headless Chromium (skipped without one) opening the dashboard and finding
the servers and the running jobs in its DOM, with a screenshot.
"""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import aiohttp
import msgpack
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from apollo import Client
from apollo.tools.livecluster import down, up
from apollo.core.messages import Heartbeat
from apollo.runtime.live import run
from apollo.core.spec import JobSpec, StageSpec
from rm.http import start_http
from rm.state import RmConfig, RmState

from chromium import Browser, chromium_binary
from helpers import await_until, wait_until


def job(name: str, tasks: int, seconds: float) -> JobSpec:
    return JobSpec(name, [StageSpec("work", tasks, np.full(tasks, seconds))])


def get(url: str, headers: dict | None = None) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(fams: dict, name: str, **labels) -> float:
    fam = next(f for f in fams.values() if any(s.name == name for s in f.samples))
    return sum(s.value for s in fam.samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


@pytest.fixture
def cluster(tmp_path):
    folder = tmp_path / "cluster"
    info = up(folder, pns=4, racks=2, procs=1, cpus=2.0, mem_gb=8.0)
    try:
        yield folder, info
    finally:
        down(folder)


# ---------------------------------------------------------------------------- in-process

class _Runtime:
    """What start_http asks of a LiveRuntime: the clock and the stores."""
    now = 10.0
    stores: dict = {}


def _folder(tmp_path: Path, http: str) -> Path:
    (tmp_path / "cluster.json").write_text(json.dumps({"http": http, "processes": [], "config": {"racks": 2}}))
    (tmp_path / "secret").write_text("s3cret")
    return tmp_path


@pytest.mark.live
async def test_heartbeats_and_records_reach_the_metrics_and_a_token_is_asked_off_loopback(tmp_path, unused_tcp_port):
    rm = RmState(RmConfig(4, 12, 2.0, 8.0))
    folder = _folder(tmp_path, f"0.0.0.0:{unused_tcp_port}")
    # records as the actors write them: a job submitted and admitted, two attempts (node-local; no input)
    A = lambda *a: ["attempt", 3.0, list(a)]      # noqa: E731  columns: apollo.tools.report A_*
    lines = [["job_submitted", 1.0, [7, 1.0, 2, "root", "ann"]], ["job_admitted", 1.5, [7, 1.5, "root"]],
             A(7, 0, 0, 1, 2, 0, 1.5, 1.6, 2.0, 3.0, "done", False, 1.0, True),
             A(7, 0, 1, 1, 3, 2, 1.5, 1.5, 1.75, 3.0, "done", False, 1.0, False),
             ["job_done", 3.0, [7, True, 1.0, 3.0, 2, ""]]]
    (folder / "events-jm.msgpack").write_bytes(b"".join(msgpack.packb(x) for x in lines))
    runner = await start_http(_Runtime(), rm, folder)
    assert runner is not None
    try:
        rm.handle([Heartbeat(1, 0.0, 9.5, np.zeros(12, np.float32), 2, 3, 0.0)], 9.5, None)   # via the tap
        base = f"http://127.0.0.1:{unused_tcp_port}"
        async with aiohttp.ClientSession() as s:
            async with s.get(f"{base}/metrics") as r:
                assert r.status == 401                                   # not loopback: the token is asked
            async with s.get(f"{base}/api/cluster", headers={"Authorization": "Bearer wrong"}) as r:
                assert r.status == 401
            async with s.get(f"{base}/api/cluster", headers={"Authorization": "Bearer s3cret"}) as r:
                c = await r.json()
            assert c["servers"][1] | {"heard_s_ago": None} == {
                "id": 1, "rack": 0, "alive": True, "heard": True, "cores": 2.0, "busy_cores": 2.0, "cpu_free": 0.0, "running": 2,
                "queued": 3, "wait_1core_s": 0.0, "heard_s_ago": None}
            assert [r["servers"] for r in c["racks"]] == [[0, 1], [2, 3]]
            async def scrape():
                async with s.get(f"{base}/metrics?token=s3cret") as r:
                    fams = families(await r.text())
                return fams if value(fams, "apollo_task_attempts_total", outcome="done") == 2 else None
            # the records are read every 0.5 s
            fams = await await_until(scrape, 5, "the two attempts' records in /metrics", 0.05)
            async with s.get(f"{base}/api/jobs/7?token=s3cret") as r:
                j = await r.json()
    finally:
        await runner.cleanup()
    assert value(fams, "apollo_servers", state="alive") == 1
    assert value(fams, "apollo_tasks", state="queued") == 3
    assert value(fams, "apollo_cores", state="busy") == 2.0
    assert value(fams, "apollo_tasks_started_total", locality="node") == 1
    assert value(fams, "apollo_tasks_started_total", locality="none") == 1
    assert value(fams, "apollo_task_queue_delay_seconds_count") == 2
    assert value(fams, "apollo_task_queue_delay_seconds_sum") == pytest.approx(0.5 + 0.25)     # start - ready
    assert value(fams, "apollo_scheduling_latency_seconds_sum") == pytest.approx(0.1)          # dispatch - ready
    assert value(fams, "apollo_admission_wait_seconds_sum", queue="root") == pytest.approx(0.5)
    assert value(fams, "apollo_jobs_finished_total", result="ok") == 1
    assert j["done"] == 2 and j["locality"] == {"node": 1, "rack": 0, "remote": 0} and len(j["attempts"]) == 2


# ---------------------------------------------------------------------------- live

@pytest.mark.live
def test_metrics_and_api_on_a_live_cluster(cluster):
    folder, info = cluster
    base = f"http://{info['http']}"
    assert info["http"].startswith("127.0.0.1:")

    async def submit():
        async with Client(folder) as c:
            short = [await c.submit(job(f"short{k}", 4, 0.2)) for k in range(2)]
            long = await c.submit(job("long", 2, 30.0))
            for j in short:
                await c.wait(j, 10)
            return short, long
    short, long = run(submit())

    def scrape():
        status, body = get(f"{base}/metrics")
        assert status == 200
        fams = families(body.decode())
        done = value(fams, "apollo_task_attempts_total", outcome="done") >= 8
        return fams if done and value(fams, "apollo_running_jobs", queue="root") == 1 else None
    fams = wait_until(scrape, 5, "the short jobs' attempts in /metrics, and them gone from the RM")
    ours = sorted(n for n in fams if n.startswith("apollo_"))
    assert len(ours) >= 8, ours
    assert {"apollo_tasks", "apollo_pending_jobs", "apollo_running_jobs", "apollo_queue_share_cores",
            "apollo_servers", "apollo_cores", "apollo_task_queue_delay_seconds", "apollo_admission_wait_seconds",
            "apollo_tasks_started", "apollo_preemptions", "apollo_scheduling_latency_seconds"} <= set(ours)
    assert fams["apollo_task_queue_delay_seconds"].type == "histogram"
    assert value(fams, "apollo_servers", state="alive") == 4
    assert value(fams, "apollo_cores", state="busy") + value(fams, "apollo_cores", state="idle") == 8
    assert value(fams, "apollo_running_jobs", queue="root") == 1                   # the long job
    assert value(fams, "apollo_jobs_submitted_total", queue="root") == 3
    assert value(fams, "apollo_task_queue_delay_seconds_count") >= 8
    assert sum(value(fams, "apollo_tasks_started_total", locality=k) for k in ("node", "rack", "remote", "none")) >= 8

    c = json.loads(get(f"{base}/api/cluster")[1])
    assert len(c["servers"]) == 4 and c["servers_alive"] == 4 and c["capacity_cores"] == 8
    assert [r["servers"] for r in c["racks"]] == [[0, 1], [2, 3]] and [h["name"] for h in c["jm_hosts"]] == ["jmhost:0", "jmhost:1"]
    assert wait_until(lambda: json.loads(get(f"{base}/api/cluster")[1])["tasks"]["running"] == 2, 5, "the long tasks running")
    q = json.loads(get(f"{base}/api/queues")[1])
    root = q["queues"][0]
    assert root["path"] == "root" and root["leaf"] and root["running_jobs"] == 1 and root["guarantee_cores"] == 8
    jobs = {j["id"]: j for j in json.loads(get(f"{base}/api/jobs")[1])["jobs"]}
    assert jobs[long]["state"] == "running" and jobs[long]["tokens"] >= 1 and jobs[long]["name"] == "long"
    assert wait_until(lambda: all(j["state"] == "done" for j in json.loads(get(f"{base}/api/jobs")[1])["jobs"]
                                  if j["id"] in short), 5, "the short jobs listed as done")
    one = json.loads(get(f"{base}/api/jobs/{short[0]}")[1])
    assert one["name"] == "short0" and one["state"] == "done" and one["done"] == 4
    assert [s["done"] for s in one["stages"]] == [4] and sum(a["outcome"] == "done" for a in one["attempts"]) == 4
    assert get(f"{base}/api/jobs/999")[0] == 404 and get(f"{base}/api/jobs/x")[0] == 400
    page = get(f"{base}/dashboard")[1].decode()
    assert "<html" in page and "/api/stream" in page


@pytest.mark.live
@pytest.mark.skipif(chromium_binary() is None, reason="no chromium binary (apt-get install chromium)")
def test_dashboard_in_a_browser_shows_servers_and_running_jobs(cluster, tmp_path):
    folder, info = cluster

    async def go():
        async with Client(folder) as c:
            ids = [await c.submit(job(f"busy{k}", 3, 20.0)) for k in range(2)]
            async with Browser(1400, 1000) as b:
                await b.open(f"http://{info['http']}/")
                probe = """JSON.stringify({status: document.getElementById('status').textContent,
                    servers: [...document.querySelectorAll('#servers .server')].map(e => e.dataset.id),
                    racks: document.querySelectorAll('#servers .rack').length,
                    busy: [...document.querySelectorAll('#servers .server[data-state=alive] .v')].filter(e => !e.textContent.startsWith('0.0')).length,
                    tasks: +document.getElementById('f-running').textContent + +document.getElementById('f-queued').textContent,
                    running: [...document.querySelectorAll('#jobs tbody tr[data-state=running]')].map(e => +e.dataset.job),
                    queues: [...document.querySelectorAll('#queues tbody tr')].map(e => e.dataset.queue),
                    lines: document.querySelectorAll('#chart polyline').length})"""
                seen = [{}]

                async def showing():
                    dom = seen[0] = json.loads(await b.evaluate(probe) or "{}")
                    # (the heat map follows the PNs' heartbeats, which may come a moment after the task
                    # counts: wait for both rather than read one snapshot)
                    return dom.get("status") == "live" and sorted(dom["running"]) == ids and dom["tasks"] == 6 \
                        and dom["busy"] >= 3
                await await_until(showing, 8, "the dashboard showing the running jobs", 0.2)
                dom = seen[0]
                shot = await b.screenshot(tmp_path / "dashboard.png")
            for j in ids:
                c.cancel(j)
        return dom, shot
    dom, shot = run(go())
    assert dom["servers"] == ["0", "1", "2", "3"] and dom["racks"] == 2
    assert dom["busy"] >= 3                  # six 1-core tasks on 2-core servers
    assert dom["queues"] == ["root"] and dom["lines"] >= 2
    assert shot.stat().st_size > 10_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_histogram_counted_in_batches_is_exposed_as_prometheus_clients_own():
    """rm.http.metrics.BatchHistogram (a fold's values counted at once) scrapes byte for byte as a
    prometheus_client Histogram fed the same values one observe() at a time."""
    from prometheus_client import CollectorRegistry, Histogram, generate_latest

    from rm.http.metrics import DELAY_BUCKETS, BatchHistogram
    values = [0.0, 0.0005, 0.001, 0.00100001, 0.3, 0.5, 2.5, 299.9, 300.0, 400.0]
    mine, theirs = CollectorRegistry(), CollectorRegistry()
    b = BatchHistogram("apollo_x_seconds", "doc", DELAY_BUCKETS)
    mine.register(b)
    h = Histogram("apollo_x_seconds", "doc", buckets=DELAY_BUCKETS, registry=theirs)
    for k in range(0, len(values), 3):           # over several folds
        b.pending.extend(values[k:k + 3])
        b.count_pending()
    for v in values:
        h.observe(v)
    strip = lambda text: [x for x in text.decode().splitlines() if "_created" not in x]    # noqa: E731
    assert strip(generate_latest(mine)) == strip(generate_latest(theirs))
