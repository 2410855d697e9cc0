"""apollo.Client: submit jobs to a live cluster, follow and wait for them (the CLI is built on it).

    async with Client("~/.apollo/cluster") as c:
        job_id = await c.submit(spec)
        print(c.status(job_id))            # JobStatus: state, per-stage progress, placements
        done = await c.wait(job_id)        # apollo.core.messages.JobDone
"""
from __future__ import annotations

import asyncio
import itertools
import secrets
import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from apollo.core.messages import CancelJob, JobAccepted, JobDone, JobQuery, SubmitJob
from apollo.runtime.live import LiveRuntime
from apollo.core.spec import JobSpec, SpecError
from apollo.tools import eventlog


@dataclass
class StageStatus:
    name: str
    tasks: int
    done: int = 0
    failed_attempts: int = 0


@dataclass
class JobStatus:
    job_id: int
    name: str
    state: str                       # running | done | failed | cancelled
    submitted_at: float
    finished_at: float | None
    reason: str
    stages: list[StageStatus]
    placements: Counter = field(default_factory=Counter)     # server -> tasks done there
    locality: Counter = field(default_factory=Counter)       # NODE/RACK/REMOTE -> input reads

    @property
    def tasks(self) -> int:
        return sum(s.tasks for s in self.stages)

    @property
    def done(self) -> int:
        return sum(s.done for s in self.stages)


class EventTail:
    """The cluster's report records (its event files, apollo.tools.eventlog), read incrementally.

    ``kinds``: the record kinds kept, each in ``records[kind]`` as its data tuple (``attempts``
    is ``records["attempt"]``). ``keep=False``: every poll() starts the lists afresh, so they
    hold only what that poll read (a long-lived reader, the RM's HTTP face, folds them into
    its own tallies instead of keeping every record). A file cut short (a replay empties them
    at its start) is read again from its beginning. ``max_bytes``: read at most this much of
    a file per poll (the rest at the next ones), so that no poll takes long.
    """

    def __init__(self, folder: Path, kinds: tuple[str, ...] = ("attempt",), keep: bool = True,
                 max_bytes: int = -1) -> None:
        self.folder = folder
        self.max_bytes = max_bytes
        self.kinds = frozenset(kinds) | {"attempt"}
        self.keep = keep
        self._offsets: dict[Path, int] = {}
        self.records: dict[str, list[tuple]] = {k: [] for k in self.kinds}
        self.attempts: list[tuple] = self.records["attempt"]

    def poll(self) -> list[tuple]:
        if not self.keep:
            self.records = {k: [] for k in self.kinds}
            self.attempts = self.records["attempt"]
        records = self.records
        for f in sorted(self.folder.glob(eventlog.PATTERN)):
            at = self._offsets.get(f, 0)
            with open(f, "rb") as fh:
                if at > fh.seek(0, 2):
                    at = 0                            # emptied since the last poll
                fh.seek(at)
                chunk = fh.read(self.max_bytes)
            rows, used = eventlog.read_from(chunk, str(f))     # (a record still being written waits)
            self._offsets[f] = at + used
            for kind, _, data in rows:
                got = records.get(kind)
                if got is not None:
                    got.append(tuple(data))
        return self.attempts


def waiting_position(folder: Path, job_id: int) -> tuple[str, int] | None:
    """(queue, place in line) of a job waiting for admission, as the RM last stored it."""
    db = Path(folder) / "jobs.db"
    if not db.exists():
        return None
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        row = con.execute("SELECT queue, position FROM waiting WHERE job_id=?", (job_id,)).fetchone()
    except sqlite3.OperationalError:       # an RM that has not published its queues yet
        row = None
    finally:
        con.close()
    return None if row is None else (row[0], int(row[1]))


def job_status(folder: Path, job_id: int, tail: EventTail | None = None) -> JobStatus | None:
    """A job's state from the RM's store and its attempts from the event records (None: no such job)."""
    import msgpack

    from apollo.core.messages import JOB
    from apollo.core.records import A_HAS_INPUT, A_JOB, A_LOC, A_OUTCOME, A_SERVER, A_STAGE
    con = sqlite3.connect(f"file:{folder / 'jobs.db'}?mode=ro", uri=True)
    try:
        row = con.execute("SELECT name, spec, state, submitted_at, finished_at, reason FROM jobs WHERE job_id=?",
                          (job_id,)).fetchone()
    finally:
        con.close()
    if row is None:
        return None
    name, blob, state, t0, t1, reason = row
    spec = JOB["decode"](msgpack.unpackb(blob, raw=False), f"stored job {job_id}")
    st = JobStatus(job_id, name, state, t0, t1, reason or "", [StageStatus(s.name, s.tasks) for s in spec.stages])
    for a in (tail or EventTail(folder)).poll():
        if a[A_JOB] != job_id:
            continue
        if a[A_OUTCOME] == "done":
            st.stages[a[A_STAGE]].done += 1
            st.placements[a[A_SERVER]] += 1
            if a[A_HAS_INPUT]:
                st.locality[a[A_LOC]] += 1
        elif a[A_OUTCOME] == "failed":
            st.stages[a[A_STAGE]].failed_attempts += 1
    return st


RETRY_S = 1.0         # a submission the RM has not answered is sent again this often
POLL_S = 5.0          # a job waited for is asked about again this often


class _Inbox:
    """The client's actor: resolves futures as answers arrive."""

    def __init__(self) -> None:
        self.answers: dict[str, asyncio.Future] = {}      # submission key -> its JobAccepted
        self.waiters: dict[int, list[asyncio.Future]] = {}   # one future per wait() call
        self.finished: dict[int, JobDone] = {}
        self.on_done = None
        self.on_lost = None       # called with the key of a job waited for that the RM says it has not

    def handle(self, event, now, rng):
        if type(event) is JobAccepted:
            f = self.answers.get(event.key)
            if f is not None and not f.done():
                f.set_result(event)        # (a second answer to a retried submission: dropped)
            elif not event.accepted and self.on_lost is not None:
                self.on_lost(event.key)    # (asked after by key, the job is not stored)
        elif type(event) is JobDone:
            if event.job_id in self.finished:
                return []        # the second copy (the JM host's and the RM's both come)
            self.finished[event.job_id] = event
            for f in self.waiters.pop(event.job_id, ()):
                if not f.done():
                    f.set_result(event)
            if self.on_done is not None:
                self.on_done(event)
        return []


def _cluster_error(text: str) -> Exception:
    from apollo.tools.livecluster import ClusterError
    return ClusterError(text)


class Client:
    """A connection to a live cluster. Errors a user can act on are ClusterErrors with one
    clear line: no cluster in the folder (raised here), a cluster that refuses this client's
    secret (raised by submit/wait/reach_rm as soon as the handshake fails), an RM that does
    not answer in time (``on_retry`` hears about each retry meanwhile)."""

    def __init__(self, cluster: str | Path) -> None:
        from apollo.tools.livecluster import read_info
        self.folder = Path(cluster).expanduser()
        self.info = read_info(self.folder)
        try:
            self.secret = (self.folder / "secret").read_bytes().strip()
        except FileNotFoundError:
            raise _cluster_error(f"no secret file {self.folder / 'secret'} (the cluster's folder is incomplete: "
                                 f"`apollo cluster up --cluster {self.folder}` writes one)") from None
        if not self.secret:
            raise _cluster_error(f"the secret file {self.folder / 'secret'} is empty")
        self.error: Exception | None = None   # set when the cluster refused this client's handshake
        self._problem: dict[str, str] = {}    # host:port -> why the last connect to it failed
        self.address = f"client:{secrets.token_hex(6)}"
        self._keys = itertools.count(1)        # idempotency keys: this client's address and a number
        self.inbox = _Inbox()
        self.rt: LiveRuntime | None = None
        self._tail = EventTail(self.folder)
        self.notes: dict[int, str] = {}       # job -> what the RM said on accepting it (where it waits)
        self._asked: dict[int, SubmitJob] = {}    # job -> its submission (asked after by key while waiting)
        self.on_retry = None                  # called with a line to show while a submission is retried

    async def __aenter__(self) -> "Client":
        self.rt = LiveRuntime(self.secret, epoch=self.info.get("epoch"))
        self.rt.endpoint.on_handshake_failed = self._handshake_failed
        self.rt.endpoint.on_dial_failed = self._dial_failed
        self.inbox.on_lost = self._submit_again
        self.rt.add(self.address, self.inbox)
        self.rt.add_route("rm", self.info["rm"])
        hosts = [p for p in self.info["processes"] if p["role"] == "jm"]
        for p in hosts:
            self.rt.add_route(f"jmhost:{p['index']}", p["address"])
        await self.rt.start(listen_port=0)
        # Connected to every JM host from the start, the one running a job can tell this client
        # that it finished itself (the RM's copy of JobDone comes a hop later).
        self.rt.endpoint.connect(self.info["rm"])
        for p in hosts:
            self.rt.endpoint.connect(p["address"])
        return self

    # ---- errors a user can act on -------------------------------------------------------
    def _handshake_failed(self, hostport: str, reason: str, by_peer: bool) -> None:
        """A connection of ours to a cluster process failed its handshake: with a wrong secret,
        every one does, and nothing sent will ever arrive. Everything waiting fails at once."""
        if self.error is not None:
            return
        if not by_peer and reason.startswith("no handshake within"):
            self._problem[hostport] = "it accepted the connection but did not answer the handshake"
            return                              # (a stopped or overloaded process: try again)
        if "proof" in reason or "secret" in reason:
            text = f"the cluster at {self.info['rm']} refused our secret (check {self.folder / 'secret'})"
        else:
            text = (f"the cluster at {hostport} refused our handshake: {reason} "
                    f"(is {self.folder} the folder of the cluster running there?)")
        self.error = _cluster_error(text)
        for f in list(self.inbox.answers.values()) + [f for fs in self.inbox.waiters.values() for f in fs]:
            if not f.done():
                f.set_exception(self.error)

    def _dial_failed(self, hostport: str, reason: str) -> None:
        self._problem[hostport] = reason

    def _check(self) -> None:
        if self.error is not None:
            raise self.error

    def _rm_ready(self) -> bool:
        rm = self.info["rm"]
        return any(listen == rm or name == rm for name, listen, _ in self.rt.endpoint.peers())

    def _not_answering(self, retry_s: float | None = None, gave_up_s: float | None = None) -> str:
        """A line about an RM that does not answer: while retrying, or having given up."""
        rm = self.info["rm"]
        why = self._problem.get(rm) if not self._rm_ready() else None
        if gave_up_s is None:
            return (f"the RM at {rm} " + (f"is not reachable ({why})" if why else "has not answered yet") +
                    f"; retrying for {retry_s:.0f} s more")
        return (f"the RM at {rm} did not answer for {gave_up_s:.0f} s" + (f" ({why})" if why else "") +
                f"; is the cluster in {self.folder} up? `apollo cluster status --cluster {self.folder}`")

    async def reach_rm(self, timeout_s: float = 30.0) -> None:
        """Return once this client holds a connection to the RM (handshake done); raise
        ClusterError if the cluster refuses us or the RM cannot be reached within ``timeout_s``
        (calling ``on_retry`` about once a second meanwhile)."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        deadline = start + timeout_s
        next_note = start + RETRY_S
        while not self._rm_ready():
            self._check()
            now = loop.time()
            if now >= deadline:
                raise _cluster_error(self._not_answering(gave_up_s=timeout_s))
            if now >= next_note:
                next_note = now + RETRY_S
                if self.on_retry is not None:
                    self.on_retry(self._not_answering(retry_s=deadline - now))
            self.rt.endpoint.connect(self.info["rm"])      # (no-op while dialling or backing off)
            await asyncio.sleep(0.02)
        self._check()

    async def __aexit__(self, *exc) -> None:
        if self.rt is not None:
            await self.rt.stop()

    async def submit(self, spec: JobSpec, timeout_s: float = 60.0) -> int:
        """Store the job at the RM; returns its id. Raises SpecError if the RM refuses it. The
        submission carries an idempotency key and is sent again every RETRY_S until the RM
        answers (it may be restarting): it is stored once. Raises ClusterError if the RM does
        not answer within ``timeout_s``."""
        self._check()
        key = f"{self.address}:{next(self._keys)}"     # (the address is drawn at random per client)
        msg = SubmitJob(-1, spec, self.address, key)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        answer = self.inbox.answers[key] = loop.create_future()
        # Resent by a timer, not a task per submission: a submit is on every job's critical path.
        # [the timer, again]: emptied when answered (``again`` reaches itself through the list,
        # not through its own name, so that a submission's objects go with their last reference
        # and not to the cyclic collector, which a busy client otherwise runs every few hundred jobs)
        resend: list = [None, None]

        def again() -> None:
            if answer.done():
                return
            try:
                self._check()
            except Exception as e:                    # the cluster refused our secret meanwhile
                answer.set_exception(e)
                return
            left = deadline - loop.time()
            if left <= 0:
                answer.set_exception(_cluster_error(self._not_answering(gave_up_s=timeout_s)))
                return
            if self.on_retry is not None:
                self.on_retry(self._not_answering(retry_s=left))
            self.rt.inject("rm", msg)
            resend[0] = loop.call_later(min(RETRY_S, left), resend[1])
        resend[1] = again
        try:
            self.rt.inject("rm", msg)
            resend[0] = loop.call_later(min(RETRY_S, timeout_s), again)
            ans: JobAccepted = await answer
        finally:
            if resend[0] is not None:        # (None: the first send raised, which goes on up)
                resend[0].cancel()
            resend.clear()
            self.inbox.answers.pop(key, None)
        if not ans.accepted:
            raise SpecError(f"job {spec.name!r} refused: {ans.reason}")
        self.notes[ans.job_id] = ans.reason      # e.g. "waiting in queue dev at position 3"
        self._asked[ans.job_id] = msg
        return ans.job_id

    async def wait(self, job_id: int, timeout_s: float | None = None) -> JobDone:
        if job_id in self.inbox.finished:
            return self.inbox.finished[job_id]
        self._check()
        # A future of this call's own: a wait that times out or is cancelled leaves the others be.
        f = asyncio.get_running_loop().create_future()
        waiters = self.inbox.waiters.setdefault(job_id, [])
        waiters.append(f)
        poll = self._ask_again(job_id, f) if job_id in self._asked else None
        try:
            return await (f if timeout_s is None else asyncio.wait_for(f, timeout_s))
        finally:
            if poll is not None:
                poll[0].cancel()
                poll.clear()
            if (not f.done() or f.cancelled()) and f in waiters:
                waiters.remove(f)
                if not waiters and self.inbox.waiters.get(job_id) is waiters:
                    del self.inbox.waiters[job_id]

    def _ask_again(self, job_id: int, f: asyncio.Future) -> list:
        """While waiting: ask after the job by its submission key every POLL_S (a JobQuery: the
        spec does not ride along again); the RM answers about a finished job with its JobDone
        (both copies of the first may be lost: the RM restarted, the JM host died), and about a
        key it holds no job for with a refusal, on which the job is submitted again. Returns
        [the timer handle, the function] (cancel the one and empty the list when done)."""
        loop = asyncio.get_running_loop()
        handle: list = []
        query = JobQuery(self._asked[job_id].key, self.address)

        def again() -> None:
            if not f.done():
                self.rt.inject("rm", query)
                handle[0] = loop.call_later(POLL_S, handle[1])
        handle.extend((loop.call_later(POLL_S, again), again))    # (emptied by wait: as submit's)
        return handle

    def _submit_again(self, key: str) -> None:
        """The RM holds no job for ``key`` (it lost its store): the waited-for job's submission
        goes again, with the same key."""
        for msg in self._asked.values():
            if msg.key == key:
                self.rt.inject("rm", msg)
                return

    def position(self, job_id: int) -> tuple[str, int] | None:
        """(queue, place in line) while the job waits for admission; None once admitted."""
        return waiting_position(self.folder, job_id)

    def status(self, job_id: int) -> JobStatus | None:
        """Where a job stands (None: the cluster has no such job). Reads the cluster's folder, so
        it needs a client on the cluster's machine."""
        st = job_status(self.folder, job_id, self._tail)
        done = self.inbox.finished.get(job_id)
        if st is not None and done is not None and st.state == "running":
            # This client heard the job end (from the JM host) before the RM's store says so.
            st.state, st.finished_at, st.reason = done.state, done.finished_at, done.reason
        return st

    def cancel(self, job_id: int) -> None:
        self.rt.inject("rm", CancelJob(job_id))
