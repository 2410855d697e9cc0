"""apollo.Client: submit jobs to a live cluster and wait for them (the CLI is built on it).

    async with Client("~/.apollo/cluster") as c:
        job_id = await c.submit(spec)
        done = await c.wait(job_id)        # apollo.messages.JobDone
"""
from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

from apollo.effects import Start
from apollo.messages import CancelJob, JobAccepted, JobDone, SubmitJob
from apollo.runtime.live import LiveRuntime
from apollo.spec import JobSpec, SpecError


class _Inbox:
    """The client's actor: resolves futures as answers arrive."""

    def __init__(self) -> None:
        self.accepted: asyncio.Queue = asyncio.Queue()
        self.waiters: dict[int, list[asyncio.Future]] = {}   # one future per wait() call
        self.finished: dict[int, JobDone] = {}
        self.on_done = None

    def handle(self, event, now, rng):
        if type(event) is JobAccepted:
            self.accepted.put_nowait(event)
        elif type(event) is JobDone:
            self.finished[event.job_id] = event
            for f in self.waiters.pop(event.job_id, ()):
                if not f.done():
                    f.set_result(event)
            if self.on_done is not None:
                self.on_done(event)
        return []


class Client:
    def __init__(self, cluster: str | Path) -> None:
        from apollo.livecluster import read_info
        self.folder = Path(cluster).expanduser()
        self.info = read_info(self.folder)
        self.secret = (self.folder / "secret").read_bytes().strip()
        self.address = f"client:{secrets.token_hex(6)}"
        self.inbox = _Inbox()
        self.rt: LiveRuntime | None = None
        self._lock = asyncio.Lock()

    async def __aenter__(self) -> "Client":
        self.rt = LiveRuntime(self.secret, epoch=self.info.get("epoch"))
        self.rt.add(self.address, self.inbox)
        self.rt.add_route("rm", self.info["rm"])
        self.rt.add_route("jm", next(p["address"] for p in self.info["processes"] if p["role"] == "jm"))
        await self.rt.start(listen_port=0)
        return self

    async def __aexit__(self, *exc) -> None:
        if self.rt is not None:
            await self.rt.stop()

    async def submit(self, spec: JobSpec, timeout_s: float = 10.0) -> int:
        """Store the job at the RM; returns its id. Raises SpecError if the RM refuses it."""
        async with self._lock:   # answers come in order per connection; one outstanding submit at a time
            self.rt.inject("rm", SubmitJob(-1, spec, self.address))
            ans: JobAccepted = await asyncio.wait_for(self.inbox.accepted.get(), timeout_s)
        if not ans.accepted:
            raise SpecError(f"job {spec.name!r} refused: {ans.reason}")
        return ans.job_id

    async def wait(self, job_id: int, timeout_s: float | None = None) -> JobDone:
        if job_id in self.inbox.finished:
            return self.inbox.finished[job_id]
        # A future of this call's own: a wait that times out or is cancelled leaves the others be.
        f = asyncio.get_running_loop().create_future()
        waiters = self.inbox.waiters.setdefault(job_id, [])
        waiters.append(f)
        try:
            return await (f if timeout_s is None else asyncio.wait_for(f, timeout_s))
        finally:
            if (not f.done() or f.cancelled()) and f in waiters:
                waiters.remove(f)
                if not waiters and self.inbox.waiters.get(job_id) is waiters:
                    del self.inbox.waiters[job_id]

    def cancel(self, job_id: int) -> None:
        self.rt.inject("rm", CancelJob(job_id))
