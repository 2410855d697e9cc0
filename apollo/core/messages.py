"""Every message of the protocol: one dataclass each (a C struct once compiled, apollo.tools.native).

A field is declared once, with its codec (apollo.core.wire) as its metadata:
``tokens: int = field(metadata=NAT)``, ``seq: int = field(default=0, metadata=NAT)``; a class
that spells out its ``__init__`` keeps its defaults there. ``wire(cls, code)`` below the class
reads the codecs in field order, which is the order on the wire (tests/messages_wire.hex holds
every message's bytes: a change of the protocol is made on purpose, with PROTOCOL_VERSION)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .spec import JobSpec, SpecError, StageSpec
from .wire import (BOOL, BYTES, F32, F64, FLOAT, I32, I64, INT, NAT, STR, STR_MAP, Message, array, as_float, as_int,
                   as_nat, as_str, codec, lst, nested, opt, tup, wire)
# (the protocol's users take these from here, with the messages)
from .wire import REGISTRY, WireError, decode, encode, pack, unpack  # noqa: F401

PROTOCOL_VERSION = 9     # 6: the transport's keepalive frame ["", "ping"] (apollo.runtime.transport)
# 7: a reading's ``grow`` (StatusBatch, Heartbeat; ClusterView's ``grows``): how its waits move
# after its time, so that a server whose tasks overrun reports once, not every few seconds;
# 8: ClusterView as deltas since the view the host acknowledged (HostReport.view_seq);
# 9: HostReport as deltas since the report the RM acknowledged (ReportAck)


# ---- nested structs: a job's spec (its codec spelled out), a task attempt, its report ------------

_F64_BYTES, _F64, _STR_MAP = F64["encode"], F64["decode"], STR_MAP["decode"]
_OPT_F64, _OPT_STR, _STR_TUPLE, _OPT_STR_TUPLE, _OPT_FLOAT = (
    opt(F64)["decode"], opt(STR)["decode"], tup(STR)["decode"], opt(tup(STR))["decode"], opt(FLOAT)["decode"])


def _stage_to_wire(s: StageSpec) -> list:
    return [s.name, s.tasks, _F64_BYTES(s.durations_s), s.cpu, s.mem_gb,
            None if s.input_bytes is None else _F64_BYTES(s.input_bytes), s.dataset,
            list(s.depends_on), None if s.command is None else list(s.command),
            dict(s.env), s.cwd, s.timeout_s]


_STAGE_FIELDS = (".name", ".tasks", ".durations_s", ".cpu", ".mem_gb", ".input_bytes", ".dataset", ".depends_on",
                 ".command", ".env", ".cwd", ".timeout_s")


def _stage_from_wire(v: Any, w: str) -> StageSpec:
    if type(v) is not list or len(v) != 12:
        raise WireError(f"{w}: a stage is an array of 12 fields")
    try:      # (the fields' paths spelled out only for an error: a path is 12 strings made)
        return _stage_fields(v, _STAGE_FIELDS)
    except WireError:
        return _stage_fields(v, tuple(w + f for f in _STAGE_FIELDS))


def _stage_fields(v: list, n: tuple) -> StageSpec:
    name, tasks, durations, cpu, mem_gb, input_bytes, dataset, depends_on, command, env, cwd, timeout_s = v
    if (input_bytes is None and dataset is None and command is None and cwd is None and timeout_s is None and
            type(name) is str and type(tasks) is int and tasks >= 0 and type(cpu) is float and cpu - cpu == 0.0
            and type(mem_gb) is float and mem_gb - mem_gb == 0.0 and type(depends_on) is list and not depends_on
            and type(env) is dict and not env):
        # A synthetic stage of its own (the common case, decoded twice on a job's way to its
        # first task): the same StageSpec as the field by field checks below make, on fewer calls.
        return StageSpec(name, tasks, _F64(durations, n[2]), cpu, mem_gb, None, None, (), None, env, None, None)
    return StageSpec(
        name=as_str(v[0], n[0]), tasks=as_nat(v[1], n[1]), durations_s=_F64(v[2], n[2]),
        cpu=as_float(v[3], n[3]), mem_gb=as_float(v[4], n[4]), input_bytes=_OPT_F64(v[5], n[5]),
        dataset=_OPT_STR(v[6], n[6]), depends_on=_STR_TUPLE(v[7], n[7]), command=_OPT_STR_TUPLE(v[8], n[8]),
        env=_STR_MAP(v[9], n[9]), cwd=_OPT_STR(v[10], n[10]), timeout_s=_OPT_FLOAT(v[11], n[11]))


STAGE = codec(_stage_to_wire, _stage_from_wire)
_STAGES = lst(STAGE)["decode"]


_JOB_FIELDS = (".name", ".stages", ".arrival_s", ".priority", ".max_retries", ".user", ".queue")


def _job_fields(v: list, n: tuple) -> JobSpec:
    return JobSpec(name=as_str(v[0], n[0]), stages=_STAGES(v[1], n[1]), arrival_s=as_float(v[2], n[2]),
                   priority=as_int(v[3], n[3]), max_retries=as_nat(v[4], n[4]), user=as_str(v[5], n[5]),
                   queue=as_str(v[6], n[6]))


def _job_decode(v: Any, w: str) -> JobSpec:
    if type(v) is not list or len(v) != 7:
        raise WireError(f"{w}: a job spec is an array of 7 fields")
    name, stages, arrival, priority, retries, user, queue = v
    job = None
    if (type(name) is str and type(arrival) is float and arrival - arrival == 0.0 and type(priority) is int and
            type(retries) is int and retries >= 0 and type(user) is str and type(queue) is str):
        # (the plain fields checked inline, as a generated decoder does; anything else, or a bad
        # stage, goes the field by field way below, which words the error)
        try:
            job = JobSpec(name, _STAGES(stages, _JOB_FIELDS[1]), arrival, priority, retries, user, queue)
        except WireError:
            job = None
    if job is None:
        try:
            job = _job_fields(v, _JOB_FIELDS)
        except WireError:
            job = _job_fields(v, tuple(w + f for f in _JOB_FIELDS))
    try:
        job.validate()
    except SpecError as e:
        raise WireError(f"{w}: {e}") from None
    return job


JOB = codec(lambda j: [j.name, [_stage_to_wire(s) for s in j.stages], j.arrival_s, j.priority,
                       j.max_retries, j.user, j.queue], _job_decode)


@dataclass(init=False)
class TaskSpec(Message):
    """One attempt of one task as a PN receives it. ``duration_s`` is the modelled compute time;
    ``kind``: apollo.core.lifecycle.AttemptKind (a PN reports the start of any but a task's first
    attempt at once: its JM kills the attempts that lost the race)."""
    job_id: int = field(metadata=NAT)
    task: int = field(metadata=NAT)
    attempt: int = field(metadata=NAT)
    stage: int = field(metadata=NAT)
    cpu: float = field(metadata=FLOAT)
    mem_gb: float = field(metadata=FLOAT)
    duration_s: float = field(metadata=FLOAT)
    input_bytes: float = field(metadata=FLOAT)
    locality: int = field(metadata=NAT)
    est_runtime_s: float = field(metadata=FLOAT)
    opportunistic: bool = field(metadata=BOOL)
    command: tuple | None = field(metadata=opt(tup(STR)))
    env: dict = field(metadata=STR_MAP)
    cwd: str | None = field(metadata=opt(STR))
    timeout_s: float | None = field(metadata=opt(FLOAT))
    mem_limit: bool = field(metadata=BOOL)
    kind: int = field(metadata=NAT)

    def __init__(self, job_id: int, task: int, attempt: int, stage: int, cpu: float, mem_gb: float,
                 duration_s: float, input_bytes: float, locality: int, est_runtime_s: float, opportunistic: bool,
                 command: tuple | None, env: dict, cwd: str | None, timeout_s: float | None, mem_limit: bool,
                 kind: int = 0) -> None:
        self.job_id = job_id
        self.task = task
        self.attempt = attempt
        self.stage = stage
        self.cpu = cpu
        self.mem_gb = mem_gb
        self.duration_s = duration_s
        self.input_bytes = input_bytes
        self.locality = locality
        self.est_runtime_s = est_runtime_s
        self.opportunistic = opportunistic
        self.command = command
        self.env = env
        self.cwd = cwd
        self.timeout_s = timeout_s
        self.mem_limit = mem_limit
        self.kind = kind

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.job_id, self.task, self.attempt)


wire(TaskSpec)


@dataclass(init=False)
class TaskReport(Message):
    """A task attempt's state change at a PN: state is a lifecycle.TaskState value. A report of a
    running attempt may carry its ``progress`` (0-1; < 0: unknown); one of a queued attempt its
    planned start in ``t_end`` (PN clock; 0: unknown)."""
    job_id: int = field(metadata=NAT)
    task: int = field(metadata=NAT)
    attempt: int = field(metadata=NAT)
    state: int = field(metadata=NAT)
    t_start: float = field(metadata=FLOAT)
    t_end: float = field(metadata=FLOAT)
    exit_code: int = field(metadata=INT)
    detail: str = field(metadata=STR)
    progress: float = field(metadata=FLOAT)

    def __init__(self, job_id: int, task: int, attempt: int, state: int, t_start: float, t_end: float,
                 exit_code: int, detail: str, progress: float = -1.0) -> None:
        self.job_id = job_id
        self.task = task
        self.attempt = attempt
        self.state = state
        self.t_start = t_start
        self.t_end = t_end
        self.exit_code = exit_code
        self.detail = detail
        self.progress = progress


wire(TaskReport)


# ---- messages ---------------------------------------------------------------

@dataclass
class SubmitJob(Message):
    """Client -> RM. job_id -1 asks the RM to assign one. ``key``: the client's idempotency key
    ("" none): a retry with the same key is answered about the job already stored (accepted,
    or its JobDone once it has finished), never stored twice."""
    job_id: int = field(metadata=INT)
    spec: JobSpec = field(metadata=JOB)
    reply_to: str = field(metadata=STR)
    key: str = field(default="", metadata=STR)


wire(SubmitJob, 1)


@dataclass
class JobAccepted(Message):
    """RM -> client: the job is stored (accepted) or refused with a reason; ``key``: the
    submission's idempotency key (a client matches answers to its submissions by it)."""
    job_id: int = field(metadata=NAT)
    name: str = field(metadata=STR)
    accepted: bool = field(metadata=BOOL)
    reason: str = field(metadata=STR)
    key: str = field(default="", metadata=STR)


wire(JobAccepted, 2)


@dataclass
class JobQuery(Message):
    """Client -> RM: what became of the job stored for submission ``key``? Answered as a
    repeated submission is (JobAccepted, and the JobDone once the job has finished) without the
    job's spec riding along again: what a waiting client asks with once its job was accepted.
    A key the RM holds no job for is answered with a refusal that names it."""
    key: str = field(metadata=STR)
    reply_to: str = field(metadata=STR)


wire(JobQuery, 29)


@dataclass
class StartJob(Message):
    """RM -> JM host: the capacity plane admitted the job; create its JM (or, for a JM the host
    already runs, a token grant). ``seq`` orders it with the job's TokenGrants; ``generation``
    counts the job's JM homes (> 0: a JM host died and this one adopts the job's attempts from
    the PNs); ``done``: the tasks known finished (numpy.packbits of a bool per task; b"": none);
    ``clones``: Dolly's attempts per task (1: not cloned), within ``clone_cpu`` CPUs of the
    cluster's clone budget (rm/clones.py); ``clones_low``: the clones run at low priority
    (opportunistic: the cluster was above Dolly's utilization ceiling)."""
    job_id: int = field(metadata=NAT)
    spec: JobSpec = field(metadata=JOB)
    tokens: int = field(metadata=NAT)
    submitted_at: float = field(metadata=FLOAT)
    reply_to: str = field(metadata=STR)
    seq: int = field(default=0, metadata=NAT)
    generation: int = field(default=0, metadata=NAT)
    done: bytes = field(default=b"", metadata=BYTES)
    clones: int = field(default=1, metadata=NAT)
    clone_cpu: float = field(default=0.0, metadata=FLOAT)
    clones_low: bool = field(default=False, metadata=BOOL)


wire(StartJob, 3)


@dataclass
class TokenGrant(Message):
    """RM -> JM: the job now holds ``tokens``. ``seq`` grows with every token message the RM sends
    the job (StartJob, TokenGrant, ReclaimTokens): a JM ignores an older one (a duplicate, or one
    overtaken), and the RM re-sends the latest to a JM whose host reports an older seq."""
    job_id: int = field(metadata=NAT)
    tokens: int = field(metadata=NAT)
    seq: int = field(default=0, metadata=NAT)


wire(TokenGrant, 4)


@dataclass(init=False)
class Dispatch(Message):
    """JM -> PN: task attempts to queue (one message per PN per scheduling batch). ``reply_to``:
    the JM host to report them to ("": "jm:JOB", a route)."""
    job_id: int = field(metadata=NAT)
    tasks: list[TaskSpec] = field(metadata=lst(nested(TaskSpec)))
    reply_to: str = field(metadata=STR)

    def __init__(self, job_id: int, tasks: list[TaskSpec], reply_to: str = "") -> None:
        self.job_id = job_id
        self.tasks = tasks
        self.reply_to = reply_to


wire(Dispatch, 5)


@dataclass(init=False)
class KillTask(Message):
    job_id: int = field(metadata=NAT)
    task: int = field(metadata=NAT)
    attempt: int = field(metadata=NAT)

    def __init__(self, job_id: int, task: int, attempt: int) -> None:
        self.job_id = job_id
        self.task = task
        self.attempt = attempt


wire(KillTask, 6)


@dataclass(init=False)
class StatusBatch(Message):
    """PN -> JM: task state changes plus the PN's current wait-time matrix. Times are on the
    PN's clock; ``time``: when it was sent (< 0: unknown), from which the JM host estimates
    that clock's offset from its own (apollo.core.clocks). ``grow``: how the reading's waits
    move after ``matrix_time`` (see ``Heartbeat``)."""
    job_id: int = field(metadata=NAT)
    server: int = field(metadata=NAT)
    reports: list[TaskReport] = field(metadata=lst(nested(TaskReport)))
    matrix: "np.ndarray | list[float]" = field(metadata=F32)  # float32 on the wire; a sender may hand a list
    matrix_time: float = field(metadata=FLOAT)
    time: float = field(metadata=FLOAT)
    grow: float = field(metadata=FLOAT)

    def __init__(self, job_id: int, server: int, reports: list[TaskReport], matrix: "np.ndarray | list[float]",
                 matrix_time: float, time: float = -1.0, grow: float = -1.0) -> None:
        self.job_id = job_id
        self.server = server
        self.reports = reports
        self.matrix = matrix
        self.matrix_time = matrix_time
        self.time = time
        self.grow = grow


wire(StatusBatch, 7)


@dataclass(init=False)
class Heartbeat(Message):
    """PN -> RM. ``jobs`` / ``job_cpus``: the CPUs each job's regular attempts run on here
    (queued and opportunistic attempts hold nothing): what the RM counts as held.

    ``grow``: how the reading's waits move after ``time`` (what a receiver extrapolates it by, so
    that the PN need not report again while nothing changes): < 0, they count down (every
    running task it waits on is expected to end at a fixed time); >= 0, every wait above zero
    grows by ``grow`` per second (a running task past its planned end is expected to run on a
    fraction of its age, PnConfig.overrun_factor: the longer it runs, the later its end)."""
    server: int = field(metadata=NAT)
    boot_time: float = field(metadata=FLOAT)
    time: float = field(metadata=FLOAT)
    matrix: "np.ndarray | list[float]" = field(metadata=F32)  # float32 on the wire; a sender may hand a list
    running: int = field(metadata=NAT)
    queued: int = field(metadata=NAT)
    cpu_free: float = field(metadata=FLOAT)
    jobs: list[int] = field(metadata=lst(NAT))
    job_cpus: list[float] = field(metadata=lst(FLOAT))
    grow: float = field(metadata=FLOAT)

    def __init__(self, server: int, boot_time: float, time: float, matrix: "np.ndarray | list[float]",
                 running: int, queued: int, cpu_free: float, jobs: list[int] | None = None,
                 job_cpus: list[float] | None = None, grow: float = -1.0) -> None:
        self.server = server
        self.boot_time = boot_time
        self.time = time
        self.matrix = matrix
        self.running = running
        self.queued = queued
        self.cpu_free = cpu_free
        self.jobs = [] if jobs is None else jobs
        self.job_cpus = [] if job_cpus is None else job_cpus
        self.grow = grow


wire(Heartbeat, 8)


@dataclass
class ClusterView(Message):
    """RM -> JM host, every view interval: the rows of the servers whose state changed since
    the view ``base`` this host acknowledged (HostReport.view_seq), or of every server (``base``
    0: a full view, to a host the RM has no acknowledgement from). ``seq``: this view's number,
    above every earlier RM incarnation's. Per row (``servers``): the server's last matrix
    (flattened, rows x shapes), its time, boot time, liveness and the reading's ``grow``
    (Heartbeat). ``lightly_loaded``: the RM's list, if it moved since ``base`` (else empty). A
    delta is cumulative and its rows absolute, so a lost view is covered by the next, and one
    applied twice is harmless; a view with no rows still says the RM vouched for the rows as of
    ``time`` (the JMs' staleness term, jm/estimate.py) and is the host's tick for its JMs."""
    time: float = field(metadata=FLOAT)
    seq: int = field(metadata=NAT)
    base: int = field(metadata=NAT)
    servers: np.ndarray = field(metadata=I32)
    matrices: np.ndarray = field(metadata=F32)
    stamps: np.ndarray = field(metadata=F64)
    boot_times: np.ndarray = field(metadata=F64)
    alive: np.ndarray = field(metadata=array("u1"))
    grows: np.ndarray = field(metadata=F32)
    lightly_loaded: np.ndarray = field(metadata=I32)


wire(ClusterView, 9)


@dataclass(init=False)
class JobDemand(Message):
    """JM -> RM: the CPUs the job could use now (for token policies), and the CPUs its regular
    attempts have out, queued or running (``in_use``: the most it can be running; what it does
    run, the RM hears from the PNs); a cloned job's ``clone_cpu``: what of its clone grant it may
    still use (its unfinished tasks' clones; < 0: not cloned): the RM gives the rest back to the
    clone budget. ``seq``: the last token message it had when it said so."""
    job_id: int = field(metadata=NAT)
    remaining: int = field(metadata=NAT)
    in_use: int = field(metadata=NAT)
    clone_cpu: float = field(metadata=FLOAT)
    seq: int = field(metadata=NAT)

    def __init__(self, job_id: int, remaining: int, in_use: int = 0, clone_cpu: float = -1.0, seq: int = 0) -> None:
        self.job_id = job_id
        self.remaining = remaining
        self.in_use = in_use
        self.clone_cpu = clone_cpu
        self.seq = seq


wire(JobDemand, 10)


@dataclass
class JobDone(Message):
    """JM -> RM (-> client): the job finished, or failed with a reason."""
    job_id: int = field(metadata=NAT)
    ok: bool = field(metadata=BOOL)
    reason: str = field(metadata=STR)
    finished_at: float = field(metadata=FLOAT)
    tasks_done: int = field(metadata=NAT)

    @property
    def state(self) -> str:
        """The job's final state as the RM stores it: done | failed | cancelled."""
        return "done" if self.ok else ("cancelled" if self.reason == "cancelled" else "failed")


wire(JobDone, 11)


@dataclass
class CancelJob(Message):
    job_id: int = field(metadata=NAT)


wire(CancelJob, 12)


@dataclass
class UpgradeTask(Message):
    """JM -> PN: an opportunistic attempt now holds a token: run it as a regular task."""
    job_id: int = field(metadata=NAT)
    task: int = field(metadata=NAT)
    attempt: int = field(metadata=NAT)


wire(UpgradeTask, 13)


@dataclass
class DemoteTask(Message):
    """JM -> PN: the job holds fewer tokens than its regular attempts: if this attempt is still
    queued it waits as an opportunistic one, behind every regular task (answered with a report
    "demoted"; its JM upgrades it again when a token frees); if it runs already, nothing."""
    job_id: int = field(metadata=NAT)
    task: int = field(metadata=NAT)
    attempt: int = field(metadata=NAT)


wire(DemoteTask, 22)


@dataclass
class YieldJob(Message):
    """JM -> PN: the job is asked to give back what it holds beyond its tokens. Its queued
    regular attempts here wait as opportunistic ones (reported "demoted"), and from ``after_s``
    seconds on its running regular attempts here yield: a regular task of another job waiting
    for their room preempts them, the youngest first. ``after_s`` < 0: no longer (the job holds
    no more than it may keep)."""
    job_id: int = field(metadata=NAT)
    after_s: float = field(metadata=FLOAT)


wire(YieldJob, 23)


@dataclass
class ProbeTask(Message):
    """JM -> PN: where is this attempt? (answered with a StatusBatch: queued, running, its end if
    it ended lately, or READY with detail "unknown attempt" when the PN never got it)."""
    job_id: int = field(metadata=NAT)
    task: int = field(metadata=NAT)
    attempt: int = field(metadata=NAT)
    reply_to: str = field(default="", metadata=STR)


wire(ProbeTask, 14)


@dataclass
class ReclaimTokens(Message):
    """RM -> JM: the sharing plane takes tokens back (preemption, or a lender reclaiming its
    guarantee). The job now holds ``tokens``; while its regular attempts hold more than
    ``keep`` CPUs (keep >= tokens), they yield to waiting regular work at their servers from
    ``within_s`` seconds from now (0: at once; see YieldJob). keep = 2**31-1: called off."""
    job_id: int = field(metadata=NAT)
    tokens: int = field(metadata=NAT)
    keep: int = field(metadata=NAT)
    within_s: float = field(metadata=FLOAT)
    seq: int = field(default=0, metadata=NAT)


wire(ReclaimTokens, 15)


@dataclass(init=False)
class HostReport(Message):
    """JM host -> RM, every host_report_s: the jobs it runs, each with the token seq its JM last
    heard, its demand and CPUs in use (JobDemand, re-derived: a lost one costs nothing), and, for
    jobs whose finished tasks changed since its last report, their done bitmaps
    (numpy.packbits), which the RM stores so that another host can adopt the job. Its silence
    is how the RM tells a dead host.

    As a delta: ``seq`` numbers the host's reports (from 1, per host incarnation); ``base`` is
    the last one the RM acknowledged (ReportAck), and the rows are those of the jobs whose row
    changed since then, with the jobs dropped since in ``ended``. ``base`` 0: a full report
    (every job; the first of a host, and whenever the RM asks with an acknowledgement of 0).
    Rows are absolute, so a lost report is covered by the next (its base is still the last
    acknowledged one). ``count`` and ``digest`` (report_digest over every row) are of the
    host's whole table, for the RM to check its copy against."""
    host: str = field(metadata=STR)
    jobs: np.ndarray = field(metadata=I64)
    seqs: np.ndarray = field(metadata=I64)
    demand: np.ndarray = field(metadata=I64)
    in_use: np.ndarray = field(metadata=I64)
    progress_jobs: np.ndarray = field(metadata=I64)
    progress: list = field(metadata=lst(BYTES))
    view_seq: int = field(metadata=NAT)      # the last ClusterView it applied (0: none)
    seq: int = field(metadata=NAT)
    base: int = field(metadata=NAT)
    ended: np.ndarray = field(metadata=I64)
    count: int = field(metadata=NAT)
    digest: int = field(metadata=NAT)

    def __init__(self, host: str, jobs: np.ndarray, seqs: np.ndarray, demand: np.ndarray, in_use: np.ndarray,
                 progress_jobs: np.ndarray, progress: list, view_seq: int = 0, seq: int = 0, base: int = 0,
                 ended: np.ndarray | None = None, count: int = -1, digest: int = -1) -> None:
        self.host = host
        self.jobs = jobs
        self.seqs = seqs
        self.demand = demand
        self.in_use = in_use
        self.progress_jobs = progress_jobs
        self.progress = progress
        self.view_seq = view_seq
        self.seq = seq
        self.base = base
        self.ended = ended if ended is not None else np.zeros(0, dtype=np.int64)
        if count < 0:       # (a full report made by hand: its rows are the table)
            count, digest = len(jobs), table_digest(jobs, seqs, demand, in_use)
        self.count = count
        self.digest = digest


def report_digest(job_id: int, seq: int, demand: int, in_use: int) -> int:
    """One HostReport row's hash (31 bits); a table's digest is the xor of its rows' (kept as
    rows change, by the host and by the RM's copy of it). Worked modulo 2**31 - 1, so that every
    product stays a machine integer (compiled, no arbitrary-precision arithmetic on the host's
    report path)."""
    m = 2147483647
    h = (job_id % m) * 1000003 % m
    h = ((h ^ (seq % m)) * 1000003) % m
    h = ((h ^ (demand % m)) * 1000003) % m
    return ((h ^ (in_use % m)) * 1000003) % m


def table_digest(jobs, seqs, demand, in_use) -> int:
    d = 0
    for row in zip(np.asarray(jobs).tolist(), np.asarray(seqs).tolist(), np.asarray(demand).tolist(),
                   np.asarray(in_use).tolist()):
        d ^= report_digest(*row)
    return d


wire(HostReport, 16)


@dataclass
class ReportAck(Message):
    """RM -> JM host: its HostReport ``seq`` is applied (the host's next delta starts from it);
    0: the RM has no copy of the host's table it can apply a delta to (it restarted, or a
    report could not be applied, or the copy disagreed with the digest): send a full report."""
    seq: int = field(metadata=NAT)


wire(ReportAck, 30)


@dataclass
class ReleaseJob(Message):
    """RM -> JM host: drop this job's JM, which the RM no longer places here: it finished (or was
    cancelled) elsewhere (``kill``: its attempts go too), or another host adopted it (its
    attempts stay; they are the other host's now)."""
    job_id: int = field(metadata=NAT)
    kill: bool = field(metadata=BOOL)


wire(ReleaseJob, 17)


@dataclass
class ProbeJob(Message):
    """JM -> PN, from a JM adopting a job: which of its attempts do you hold or lately finish?
    Answered with Holding; from now on its reports go to ``reply_to``."""
    job_id: int = field(metadata=NAT)
    generation: int = field(metadata=NAT)
    reply_to: str = field(metadata=STR)


wire(ProbeJob, 18)


@dataclass
class Holding(Message):
    """PN -> JM: the attempts of the job the PN holds (``tasks``, each with its state in
    ``reports``: queued or running) and those that ended there lately (``ended``)."""
    job_id: int = field(metadata=NAT)
    server: int = field(metadata=NAT)
    tasks: list[TaskSpec] = field(metadata=lst(nested(TaskSpec)))
    reports: list[TaskReport] = field(metadata=lst(nested(TaskReport)))
    ended: list[TaskReport] = field(metadata=lst(nested(TaskReport)))


wire(Holding, 19)


@dataclass
class JoinRequest(Message):
    """A process on another machine -> the RM's registrar: join the cluster as ``count`` PNs in
    ``rack`` (-1: any) with ``cpus``/``mem_gb`` each (kind "pn"), or as a JM host (kind "jm");
    it listens at ``address``."""
    kind: str = field(metadata=STR)
    count: int = field(metadata=NAT)
    rack: int = field(metadata=INT)
    cpus: float = field(metadata=FLOAT)
    mem_gb: float = field(metadata=FLOAT)
    address: str = field(metadata=STR)
    reply_to: str = field(metadata=STR)


wire(JoinRequest, 20)


@dataclass
class JoinReply(Message):
    """Registrar -> joining process: the server ids (or JM host index) it is given, and the
    cluster's description (cluster.json's JSON, with every process's address); or why not."""
    ok: bool = field(metadata=BOOL)
    reason: str = field(metadata=STR)
    servers: list = field(metadata=lst(NAT))
    index: int = field(metadata=INT)
    cluster: str = field(metadata=STR)



wire(JoinReply, 21)


@dataclass
class Leave(Message):
    """`apollo cluster down` -> a joined process (`apollo node join`): stop and do not come back
    (its supervisor does not restart it); ``reason`` goes to its log."""
    reason: str = field(metadata=STR)


wire(Leave, 24)


# ---- a PN process's log service (apollo.tools.logs): command tasks' output, read where they ran ----

@dataclass
class ListLogs(Message):
    """Client -> the log service of a process hosting PNs ("logs:NAME"): which attempts of job
    ``job_id`` have output there? Answered with LogList."""
    job_id: int = field(metadata=NAT)
    reply_to: str = field(metadata=STR)


wire(ListLogs, 25)


@dataclass
class LogList(Message):
    """Log service -> client: its process (``process``, and ``folder``, its work folder on its own
    machine) and, per attempt of the job with output there (in parallel lists): its task (the
    job-wide number) and attempt, the bytes of its stdout and stderr, its exit code (None: none
    yet: it runs, or died with its process) and, while it runs, its server (-1: not running)."""
    job_id: int = field(metadata=NAT)
    process: str = field(metadata=STR)
    folder: str = field(metadata=STR)
    tasks: list = field(metadata=lst(NAT))
    attempts: list = field(metadata=lst(NAT))
    out_bytes: list = field(metadata=lst(NAT))
    err_bytes: list = field(metadata=lst(NAT))
    exit_codes: list = field(metadata=lst(opt(INT)))
    running_on: list = field(metadata=lst(INT))


wire(LogList, 26)


@dataclass
class ReadLog(Message):
    """Client -> log service: up to ``limit`` bytes of an attempt's stdout (its stderr if
    ``stderr``) from byte ``offset``. Answered with LogChunk."""
    job_id: int = field(metadata=NAT)
    task: int = field(metadata=NAT)
    attempt: int = field(metadata=NAT)
    stderr: bool = field(metadata=BOOL)
    offset: int = field(metadata=NAT)
    limit: int = field(metadata=NAT)
    reply_to: str = field(metadata=STR)


wire(ReadLog, 27)


@dataclass
class LogChunk(Message):
    """Log service -> client: the bytes asked for (fewer at the end of the file) and the file's
    size when read (-1: there is no such file there)."""
    job_id: int = field(metadata=NAT)
    task: int = field(metadata=NAT)
    attempt: int = field(metadata=NAT)
    stderr: bool = field(metadata=BOOL)
    offset: int = field(metadata=NAT)
    size: int = field(metadata=INT)
    data: bytes = field(metadata=BYTES)


wire(LogChunk, 28)
