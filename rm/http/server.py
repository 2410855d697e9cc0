"""The RM's HTTP face (aiohttp, on the RM process's own event loop): JSON API, metrics, dashboard.

    GET /api/cluster   servers (rack, alive, busy cores, queue length, wait for a 1-core task),
                       racks, JM hosts, utilization
    GET /api/queues    the queue tree with guarantees, shares, jobs running and waiting; share history
    GET /api/jobs      live jobs (tokens, demand, progress, locality, place in line), then recent ended ones
    GET /api/jobs/{id} one job, with its stages and ended attempts
    GET /api/stream    server-sent events: all of the above once a second (the dashboard's feed)
    GET /metrics       Prometheus text format (rm/http/metrics.py)
    GET / , /dashboard the dashboard page (rm/http/dashboard.html)

Bound to loopback, anyone on the host may read it (as they may read `apollo jobs`); bound to any
other address, every request needs the cluster's secret (DIR/secret) as ``Authorization: Bearer
<secret>`` or ``?token=<secret>`` (the page passes its own ``token`` on to its feed).

Handlers read in-memory state only and never block the loop the actors share: the record files
are read in a worker thread, a few MB at most per poll, and folded in on the loop.
"""
from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import logging
from pathlib import Path

from aiohttp import web

from .api import Views
from .metrics import exposition, make_registry
from .watch import Watch

log = logging.getLogger("apollo.http")
POLL_S = 0.5          # how often the record files are read
STREAM_S = 1.0        # how often the dashboard's feed sends
PAGE = Path(__file__).with_name("dashboard.html")

CLOSING = web.AppKey("closing", asyncio.Event)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _json(obj) -> web.Response:
    return web.Response(text=json.dumps(obj, default=_plain), content_type="application/json")


def _plain(x):
    if hasattr(x, "item"):         # numpy scalars
        return x.item()
    raise TypeError(f"not JSON: {type(x).__name__}")


def _token_check(secret: str):
    @web.middleware
    async def check(request: web.Request, handler):
        given = request.query.get("token", "")
        auth = request.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            given = auth[7:].strip()
        if not hmac.compare_digest(given.encode(), secret.encode()):
            raise web.HTTPUnauthorized(text="this address needs the cluster's token: "
                                            "Authorization: Bearer <DIR/secret> or ?token=<DIR/secret>\n")
        return await handler(request)
    return check


def make_app(views: Views, watch: Watch, registry, folder: Path, secret: str | None) -> web.Application:
    app = web.Application(middlewares=[_token_check(secret)] if secret else [])
    app[CLOSING] = asyncio.Event()
    page = PAGE.read_bytes()

    async def dashboard(request):
        return web.Response(body=page, content_type="text/html", charset="utf-8")

    async def metrics(request):
        return web.Response(body=exposition(registry), headers={"Content-Type": "text/plain; version=0.0.4; "
                                                                               "charset=utf-8"})

    async def job(request):
        try:
            job_id = int(request.match_info["id"])
        except ValueError:
            raise web.HTTPBadRequest(text="a job id is a number\n") from None
        row = views.job(job_id, folder)
        if row is None:
            raise web.HTTPNotFound(text=f"no job {job_id}\n")
        return _json(row)

    def snapshot() -> dict:
        return {"cluster": views.cluster(), "queues": views.queues(), "jobs": views.jobs()["jobs"],
                "events": sorted(watch.events, key=lambda e: e["t"])[-40:]}     # folded by kind, shown by time

    async def stream(request):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        closing = request.app[CLOSING]
        try:
            while not closing.is_set():
                await resp.write(b"data: " + json.dumps(snapshot(), default=_plain).encode() + b"\n\n")
                try:
                    await asyncio.wait_for(closing.wait(), STREAM_S)
                except asyncio.TimeoutError:
                    pass
        except ConnectionResetError:
            pass                       # the page went away
        return resp

    async def on_shutdown(app):
        app[CLOSING].set()            # ends the open feeds, so that shutting down does not wait on them

    app.on_shutdown.append(on_shutdown)
    app.add_routes([web.get("/", dashboard), web.get("/dashboard", dashboard),
                    web.get("/api/cluster", _view(views.cluster)), web.get("/api/queues", _view(views.queues)),
                    web.get("/api/jobs", _view(views.jobs)),
                    web.get("/api/jobs/{id}", job), web.get("/api/stream", stream), web.get("/metrics", metrics)])
    return app


def _view(fn):
    async def handler(request):
        return _json(fn())
    return handler


async def _follow(watch: Watch, now) -> None:
    """Read the record files off the loop, fold them in on it; sample the shares each second."""
    last = -1.0
    while True:
        try:
            await asyncio.to_thread(watch.poll)
            watch.fold()
            t = now()
            if t - last >= 1.0:
                watch.sample(t)
                last = t
        except asyncio.CancelledError:
            raise
        except Exception:               # a bad record must not end the feed
            log.exception("reading the cluster's records failed")
        await asyncio.sleep(POLL_S)


async def start_http(runtime, rm, folder: Path, address: str | None = None) -> web.AppRunner | None:
    """Serve the RM's HTTP face at ``address`` ("host:port"; default: cluster.json's "http") on
    the running loop; returns the runner (``await runner.cleanup()`` stops it), or None if there
    is no address or it cannot be bound (logged: the RM runs on without its HTTP face)."""
    folder = Path(folder)
    info = json.loads((folder / "cluster.json").read_text())
    address = address or info.get("http")
    if not address:
        return None
    host, port = address.rsplit(":", 1)
    host = host.strip("[]")
    now = lambda: runtime.now   # noqa: E731  the cluster's clock
    watch = Watch(folder, rm)
    registry, watch.metrics = make_registry(rm, watch.tap, now)
    views = Views(rm, watch, info, now, store=runtime.stores.get("rm"))
    secret = None if is_loopback(host) else (folder / "secret").read_text().strip()
    app = make_app(views, watch, registry, folder, secret)
    follower = asyncio.get_running_loop().create_task(_follow(watch, now))

    async def on_cleanup(app):
        follower.cancel()
        try:
            await follower
        except asyncio.CancelledError:
            pass
    app.on_cleanup.append(on_cleanup)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, int(port)).start()
    except OSError as e:
        log.error("cannot serve HTTP at %s (%s); the RM runs on without it", address, e)
        await runner.cleanup()
        return None
    log.info("HTTP API, metrics and dashboard at http://%s/", address)
    return runner


def dashboard_url(folder: Path) -> str:
    info = json.loads((Path(folder) / "cluster.json").read_text())
    if not info.get("http"):
        raise RuntimeError(f"the cluster in {folder} has no HTTP address (started before it had one?)")
    return f"http://{info['http']}/"


def dashboard_lines(folder: Path) -> list[str]:
    """What `apollo dashboard` prints."""
    url = dashboard_url(folder)
    lines = [f"dashboard: {url}", f"API:       {url}api/cluster  {url}api/queues  {url}api/jobs  {url}api/jobs/ID",
             f"metrics:   {url}metrics"]
    if not is_loopback(url.split("//", 1)[1].rsplit(":", 1)[0]):
        lines.append(f"this address asks for the cluster's token: add ?token=$(cat {folder}/secret) to the URL, "
                     "or send Authorization: Bearer <token>")
    return lines
