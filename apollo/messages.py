"""Every message of the protocol: one slotted class each, with wire encoding.

On the wire a message is a msgpack array ``[code, field1, field2, ...]``.
Each class lists its fields with a codec (encode, decode-and-validate);
``decode`` checks the code, the arity and every field, and raises WireError
naming the message and the field. Numeric arrays travel as raw little-endian
bytes (msgpack bin) so a 20,000-server view costs one memcpy, not 20,000
Python floats.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass, fields
from typing import Any, Callable, ClassVar

import msgpack
import numpy as np

from .spec import JobSpec, SpecError, StageSpec

PROTOCOL_VERSION = 5


class WireError(ValueError):
    """A frame or message that does not decode; the message says what and where."""


# ---- field codecs: (encode, decode) pairs; decode validates ----------------

Codec = tuple[Callable[[Any], Any], Callable[[Any, str], Any]]


def _ident(v: Any) -> Any:
    return v


def _int(v: Any, where: str) -> int:
    if type(v) is not int:
        raise WireError(f"{where}: expected an integer, got {type(v).__name__}")
    return v


def _nonneg_int(v: Any, where: str) -> int:
    v = _int(v, where)
    if v < 0:
        raise WireError(f"{where}: expected >= 0, got {v}")
    return v


def _float(v: Any, where: str) -> float:
    if type(v) is float or type(v) is int:
        v = float(v)
        if not math.isfinite(v):
            raise WireError(f"{where}: {v} is not allowed (numbers must be finite)")
        return v
    raise WireError(f"{where}: expected a number, got {type(v).__name__}")


def _str(v: Any, where: str) -> str:
    if type(v) is not str:
        raise WireError(f"{where}: expected a string, got {type(v).__name__}")
    return v


def _bool(v: Any, where: str) -> bool:
    if type(v) is not bool:
        raise WireError(f"{where}: expected a boolean, got {type(v).__name__}")
    return v


def _bytes(v: Any, where: str) -> bytes:
    if type(v) is not bytes:
        raise WireError(f"{where}: expected bytes, got {type(v).__name__}")
    return v


INT: Codec = (_ident, _int)
NAT: Codec = (_ident, _nonneg_int)
FLOAT: Codec = (_ident, _float)
STR: Codec = (_ident, _str)
BOOL: Codec = (_ident, _bool)
BYTES: Codec = (_ident, _bytes)


def opt(c: Codec) -> Codec:
    enc, dec = c
    return (lambda v: None if v is None else enc(v),
            lambda v, w: None if v is None else dec(v, w))


def lst(c: Codec) -> Codec:
    enc, dec = c

    def decode(v: Any, where: str) -> list:
        if type(v) is not list:
            raise WireError(f"{where}: expected a list, got {type(v).__name__}")
        try:
            return [dec(x, "") for x in v]
        except WireError as e:
            raise WireError(f"{where}[{_index_of_error(v, dec)}]{e}") from None
    if enc is _ident:
        return (list, decode)
    return (lambda v: [enc(x) for x in v], decode)


def _index_of_error(v: list, dec) -> int:
    for i, x in enumerate(v):
        try:
            dec(x, "")
        except WireError:
            return i
    return -1


def tup(c: Codec) -> Codec:
    enc, dec = lst(c)
    return (enc, lambda v, w: tuple(dec(v, w)))


def _str_dict(v: Any, where: str) -> dict:
    if type(v) is not dict or not all(type(k) is str and type(x) is str for k, x in v.items()):
        raise WireError(f"{where}: expected a map of strings to strings")
    return v


STR_MAP: Codec = (dict, _str_dict)


def array(dtype: str) -> Codec:
    dt = np.dtype(dtype).newbyteorder("<")
    kind_f = dt.kind == "f"

    def decode(v: Any, where: str) -> np.ndarray:
        b = _bytes(v, where)
        if len(b) % dt.itemsize:
            raise WireError(f"{where}: {len(b)} bytes is not a whole number of {dt} items")
        a = np.frombuffer(b, dtype=dt)
        # One reduction: a sum is finite only if every item is (items are bounded far below
        # the overflow point by the senders; a sum that overflows is refused all the same).
        # A short array's in Python: ~0.3 us where numpy's call costs ~1.5 (a 1-task job's spec
        # is decoded twice on its way to its first task).
        if kind_f and len(a) and not math.isfinite(sum(a.tolist()) if len(a) <= 16 else a.sum()):
            raise WireError(f"{where}: array holds NaN or infinity")
        return a
    return (lambda a: np.ascontiguousarray(a, dtype=dt).tobytes(), decode)


F64 = array("f8")
F32 = array("f4")
I32 = array("i4")
I64 = array("i8")


def nested(cls: type) -> Codec:
    return (lambda v: v.to_wire(), _FROM_WIRE[cls])      # (cls is wired before its container)


# ---- the message base -------------------------------------------------------

REGISTRY: dict[int, type["Message"]] = {}


class Message:
    """Base of all messages and nested structs: dataclasses, treated as values.

    Nobody changes a message once made (in one process a sender may share it with its
    receiver; a PN that turns an attempt regular makes a new TaskSpec). They are not
    ``frozen``: a frozen dataclass sets each field through ``object.__setattr__``, which makes
    a TaskSpec cost 1.5 us instead of 0.2 us, and the hot paths make several per task. The
    messages made once or more per task (TaskSpec, TaskReport, Dispatch, StatusBatch, ...) spell
    out their ``__init__``: compiled (apollo.native), such a class is a C struct made in ~30 ns,
    where a generated ``__init__`` would still run as Python. ``wire`` (below each class) gives a
    class its codecs and its code."""
    __slots__ = ()
    CODE: ClassVar[int] = -1
    CODECS: ClassVar[tuple[Codec, ...]] = ()
    _NAMES: ClassVar[tuple[str, ...]] = ()
    _DECODERS: ClassVar[tuple] = ()
    _ENCODERS: ClassVar[tuple] = ()
    _GETTER: ClassVar[Any] = None

    def to_wire(self) -> list:
        vals = list(self._GETTER(self))
        for i, enc in self._ENCODERS:
            vals[i] = enc(vals[i])
        return vals


_FROM_WIRE: dict[type, Callable[..., Any]] = {}     # class -> its generated decoder (decode, nested)


def _from_wire_checked(cls: type, v: Any, where: str = "") -> Any:
    """The generic decoder: accepts what the field codecs accept and words every error."""
    # Field decoders get just the field's name; the path is prefixed only when an
    # error climbs out, so the fast path formats no strings.
    where = where or cls.__name__
    codecs = cls.CODECS  # type: ignore[attr-defined]
    if type(v) is not list or len(v) != len(codecs):
        got = len(v) if type(v) is list else type(v).__name__
        raise WireError(f"{where}: expected {len(codecs)} fields, got {got}")
    try:
        return cls(*[dec(x, n) for x, n, dec in zip(v, cls._NAMES, cls._DECODERS)])  # type: ignore[attr-defined]
    except WireError as e:
        raise WireError(f"{where}.{e}") from None


# Field checks a generated decoder inlines (a finite float: x - x is 0.0 only when x is finite).
_INLINE = {_int: "type({x}) is int", _nonneg_int: "type({x}) is int and {x} >= 0",
           _str: "type({x}) is str", _bool: "type({x}) is bool", _bytes: "type({x}) is bytes",
           _float: "type({x}) is float and {x} - {x} == 0.0"}


def _fast_decoder(cls: type) -> Callable:
    """A decoder made for ``cls``: the plain field checks inlined, one call per other field, and
    anything unexpected handed to the generic ``_from_wire_checked``, which accepts what it
    accepts (an int for a float) and words every error. Decoding is most of what a busy JM or
    PN does with a message, so this is worth the generated code."""
    n = len(cls.CODECS)
    f = [f"f{i}" for i in range(n)]
    ns: dict[str, Any] = {"cls": cls, "slow": _from_wire_checked, "WireError": WireError}
    body = [f"if type(v) is not list or len(v) != {n}:", "    return slow(cls, v, where)",
            f"{', '.join(f)}, = v"]
    checks = []
    calls = []
    for i, (dec, name) in enumerate(zip(cls._DECODERS, cls._NAMES)):
        if dec in _INLINE:
            checks.append("(" + _INLINE[dec].format(x=f[i]) + ")")
        else:
            ns[f"d{i}"], ns[f"n{i}"] = dec, name
            calls.append(f"    {f[i]} = d{i}({f[i]}, n{i})")
    if checks:
        body += [f"if not ({' and '.join(checks)}):", "    return slow(cls, v, where)"]
    if calls:
        body += ["try:", *calls, "except WireError:", "    return slow(cls, v, where)"]
    body.append(f"return cls({', '.join(f)})")
    src = "def decode(v, where=''):\n" + "\n".join("    " + line for line in body)
    exec(compile(src, f"<decoder of {cls.__name__}>", "exec"), ns)
    return ns["decode"]


def wire(cls: type[Message], code: int = -1, **codecs: Codec) -> None:
    """Give dataclass ``cls`` its codecs (one per field, in field order) and register ``code``
    (-1: a nested struct, never a frame of its own). A function called below each class, not
    a class decorator: mypyc compiles only classes decorated with nothing but ``dataclass``."""
    names = tuple(f.name for f in fields(cls))  # type: ignore[arg-type]
    missing = set(names) ^ set(codecs)
    if missing:
        raise TypeError(f"{cls.__name__}: codecs do not match fields: {sorted(missing)}")
    if tuple(codecs) != names:
        raise TypeError(f"{cls.__name__}: codecs not in field order")
    cls._NAMES = names
    cls.CODECS = tuple(codecs[n] for n in names)
    cls._DECODERS = tuple(c[1] for c in cls.CODECS)
    # One C-level call fetches every field; only non-trivial encoders run per field.
    getter = operator.attrgetter(*names)
    cls._GETTER = staticmethod(getter if len(names) > 1 else (lambda o, g=getter: (g(o),)))
    cls._ENCODERS = tuple((i, c[0]) for i, c in enumerate(cls.CODECS) if c[0] is not _ident)
    _FROM_WIRE[cls] = _fast_decoder(cls)
    cls.CODE = code
    if code >= 0:
        if code in REGISTRY:
            raise TypeError(f"message code {code} used twice")
        REGISTRY[code] = cls


def encode(msg: Message) -> list:
    return [msg.CODE, *msg.to_wire()]


def decode(v: Any) -> Message:
    if type(v) is not list or not v:
        raise WireError(f"a message must be a non-empty array, got {type(v).__name__}")
    cls = REGISTRY.get(v[0]) if type(v[0]) is int else None
    if cls is None:
        raise WireError(f"unknown message type code {v[0]!r}")
    return _FROM_WIRE[cls](v[1:])


def pack(msg: Message) -> bytes:
    return msgpack.packb(encode(msg), use_bin_type=True)


def unpack(b: bytes) -> Message:
    try:
        v = msgpack.unpackb(b, raw=False, strict_map_key=True)
    except Exception as e:  # msgpack raises several unrelated types
        raise WireError(f"undecodable msgpack: {e}") from None
    return decode(v)


# ---- nested structs ---------------------------------------------------------

def _stage_to_wire(s: StageSpec) -> list:
    return [s.name, s.tasks, F64[0](s.durations_s), s.cpu, s.mem_gb,
            None if s.input_bytes is None else F64[0](s.input_bytes), s.dataset,
            list(s.depends_on), None if s.command is None else list(s.command),
            dict(s.env), s.cwd, s.timeout_s]


_OPT_F64, _OPT_STR, _STR_TUPLE, _OPT_STR_TUPLE, _OPT_FLOAT = (
    opt(F64)[1], opt(STR)[1], tup(STR)[1], opt(tup(STR))[1], opt(FLOAT)[1])


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
    return StageSpec(
        name=_str(v[0], n[0]), tasks=_nonneg_int(v[1], n[1]), durations_s=F64[1](v[2], n[2]),
        cpu=_float(v[3], n[3]), mem_gb=_float(v[4], n[4]), input_bytes=_OPT_F64(v[5], n[5]),
        dataset=_OPT_STR(v[6], n[6]), depends_on=_STR_TUPLE(v[7], n[7]), command=_OPT_STR_TUPLE(v[8], n[8]),
        env=STR_MAP[1](v[9], n[9]), cwd=_OPT_STR(v[10], n[10]), timeout_s=_OPT_FLOAT(v[11], n[11]))


STAGE: Codec = (_stage_to_wire, _stage_from_wire)
_STAGES = lst(STAGE)[1]


_JOB_FIELDS = (".name", ".stages", ".arrival_s", ".priority", ".max_retries", ".user", ".queue")


def _job_fields(v: list, n: tuple) -> JobSpec:
    return JobSpec(name=_str(v[0], n[0]), stages=_STAGES(v[1], n[1]), arrival_s=_float(v[2], n[2]),
                   priority=_int(v[3], n[3]), max_retries=_nonneg_int(v[4], n[4]), user=_str(v[5], n[5]),
                   queue=_str(v[6], n[6]))


def _job_decode(v: Any, w: str) -> JobSpec:
    if type(v) is not list or len(v) != 7:
        raise WireError(f"{w}: a job spec is an array of 7 fields")
    try:
        job = _job_fields(v, _JOB_FIELDS)
    except WireError:
        job = _job_fields(v, tuple(w + f for f in _JOB_FIELDS))
    try:
        job.validate()
    except SpecError as e:
        raise WireError(f"{w}: {e}") from None
    return job


JOB: Codec = (lambda j: [j.name, [_stage_to_wire(s) for s in j.stages], j.arrival_s, j.priority,
                         j.max_retries, j.user, j.queue], _job_decode)


@dataclass(init=False)
class TaskSpec(Message):
    """One attempt of one task as a PN receives it. ``duration_s`` is the modelled compute time;
    ``kind``: apollo.lifecycle.AttemptKind (a PN reports the start of any but a task's first
    attempt at once: its JM kills the attempts that lost the race)."""
    job_id: int
    task: int
    attempt: int
    stage: int
    cpu: float
    mem_gb: float
    duration_s: float
    input_bytes: float
    locality: int
    est_runtime_s: float
    opportunistic: bool
    command: tuple | None
    env: dict
    cwd: str | None
    timeout_s: float | None
    mem_limit: bool
    kind: int

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


wire(TaskSpec, job_id=NAT, task=NAT, attempt=NAT, stage=NAT, cpu=FLOAT, mem_gb=FLOAT, duration_s=FLOAT,
     input_bytes=FLOAT, locality=NAT, est_runtime_s=FLOAT, opportunistic=BOOL, command=opt(tup(STR)), env=STR_MAP,
     cwd=opt(STR), timeout_s=opt(FLOAT), mem_limit=BOOL, kind=NAT)


@dataclass(init=False)
class TaskReport(Message):
    """A task attempt's state change at a PN: state is a lifecycle.TaskState value. A report of a
    running attempt may carry its ``progress`` (0-1; < 0: unknown); one of a queued attempt its
    planned start in ``t_end`` (PN clock; 0: unknown)."""
    job_id: int
    task: int
    attempt: int
    state: int
    t_start: float
    t_end: float
    exit_code: int
    detail: str
    progress: float

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


wire(TaskReport, job_id=NAT, task=NAT, attempt=NAT, state=NAT, t_start=FLOAT, t_end=FLOAT, exit_code=INT,
     detail=STR, progress=FLOAT)


# ---- messages ---------------------------------------------------------------

@dataclass
class SubmitJob(Message):
    """Client -> RM. job_id -1 asks the RM to assign one. ``key``: the client's idempotency key
    ("" none): a retry with the same key is answered about the job already stored (accepted,
    or its JobDone once it has finished), never stored twice."""
    job_id: int
    spec: JobSpec
    reply_to: str
    key: str = ""


wire(SubmitJob, 1, job_id=INT, spec=JOB, reply_to=STR, key=STR)


@dataclass
class JobAccepted(Message):
    """RM -> client: the job is stored (accepted) or refused with a reason; ``key``: the
    submission's idempotency key (a client matches answers to its submissions by it)."""
    job_id: int
    name: str
    accepted: bool
    reason: str
    key: str = ""


wire(JobAccepted, 2, job_id=NAT, name=STR, accepted=BOOL, reason=STR, key=STR)


@dataclass
class StartJob(Message):
    """RM -> JM host: the capacity plane admitted the job; create its JM (or, for a JM the host
    already runs, a token grant). ``seq`` orders it with the job's TokenGrants; ``generation``
    counts the job's JM homes (> 0: a JM host died and this one adopts the job's attempts from
    the PNs); ``done``: the tasks known finished (numpy.packbits of a bool per task; b"": none);
    ``clones``: Dolly's attempts per task (1: not cloned), within ``clone_cpu`` CPUs of the
    cluster's clone budget (rm/clones.py); ``clones_low``: the clones run at low priority
    (opportunistic: the cluster was above Dolly's utilization ceiling)."""
    job_id: int
    spec: JobSpec
    tokens: int
    submitted_at: float
    reply_to: str
    seq: int = 0
    generation: int = 0
    done: bytes = b""
    clones: int = 1
    clone_cpu: float = 0.0
    clones_low: bool = False


wire(StartJob, 3, job_id=NAT, spec=JOB, tokens=NAT, submitted_at=FLOAT, reply_to=STR, seq=NAT, generation=NAT,
     done=BYTES, clones=NAT, clone_cpu=FLOAT, clones_low=BOOL)


@dataclass
class TokenGrant(Message):
    """RM -> JM: the job now holds ``tokens``. ``seq`` grows with every token message the RM sends
    the job (StartJob, TokenGrant, ReclaimTokens): a JM ignores an older one (a duplicate, or one
    overtaken), and the RM re-sends the latest to a JM whose host reports an older seq."""
    job_id: int
    tokens: int
    seq: int = 0


wire(TokenGrant, 4, job_id=NAT, tokens=NAT, seq=NAT)


@dataclass(init=False)
class Dispatch(Message):
    """JM -> PN: task attempts to queue (one message per PN per scheduling batch). ``reply_to``:
    the JM host to report them to ("": "jm:JOB", a route)."""
    job_id: int
    tasks: list[TaskSpec]
    reply_to: str

    def __init__(self, job_id: int, tasks: list[TaskSpec], reply_to: str = "") -> None:
        self.job_id = job_id
        self.tasks = tasks
        self.reply_to = reply_to


wire(Dispatch, 5, job_id=NAT, tasks=lst(nested(TaskSpec)), reply_to=STR)


@dataclass(init=False)
class KillTask(Message):
    job_id: int
    task: int
    attempt: int

    def __init__(self, job_id: int, task: int, attempt: int) -> None:
        self.job_id = job_id
        self.task = task
        self.attempt = attempt


wire(KillTask, 6, job_id=NAT, task=NAT, attempt=NAT)


@dataclass(init=False)
class StatusBatch(Message):
    """PN -> JM: task state changes plus the PN's current wait-time matrix. Times are on the
    PN's clock; ``time``: when it was sent (< 0: unknown), from which the JM host estimates
    that clock's offset from its own (apollo.clocks)."""
    job_id: int
    server: int
    reports: list[TaskReport]
    matrix: "np.ndarray | list[float]"  # float32 on the wire; a sender may hand a list
    matrix_time: float
    time: float

    def __init__(self, job_id: int, server: int, reports: list[TaskReport], matrix: "np.ndarray | list[float]",
                 matrix_time: float, time: float = -1.0) -> None:
        self.job_id = job_id
        self.server = server
        self.reports = reports
        self.matrix = matrix
        self.matrix_time = matrix_time
        self.time = time


wire(StatusBatch, 7, job_id=NAT, server=NAT, reports=lst(nested(TaskReport)), matrix=F32, matrix_time=FLOAT,
     time=FLOAT)


@dataclass(init=False)
class Heartbeat(Message):
    """PN -> RM. ``jobs`` / ``job_cpus``: the CPUs each job's regular attempts run on here
    (queued and opportunistic attempts hold nothing): what the RM counts as held."""
    server: int
    boot_time: float
    time: float
    matrix: "np.ndarray | list[float]"  # float32 on the wire; a sender may hand a list
    running: int
    queued: int
    cpu_free: float
    jobs: list[int]
    job_cpus: list[float]

    def __init__(self, server: int, boot_time: float, time: float, matrix: "np.ndarray | list[float]",
                 running: int, queued: int, cpu_free: float, jobs: list[int] | None = None,
                 job_cpus: list[float] | None = None) -> None:
        self.server = server
        self.boot_time = boot_time
        self.time = time
        self.matrix = matrix
        self.running = running
        self.queued = queued
        self.cpu_free = cpu_free
        self.jobs = [] if jobs is None else jobs
        self.job_cpus = [] if job_cpus is None else job_cpus


wire(Heartbeat, 8, server=NAT, boot_time=FLOAT, time=FLOAT, matrix=F32, running=NAT, queued=NAT, cpu_free=FLOAT,
     jobs=lst(NAT), job_cpus=lst(FLOAT))


@dataclass
class ClusterView(Message):
    """RM -> JM hosts: every server's last matrix (flattened, servers x shapes) and liveness."""
    time: float
    matrices: np.ndarray
    stamps: np.ndarray
    boot_times: np.ndarray
    alive: np.ndarray
    lightly_loaded: np.ndarray


wire(ClusterView, 9, time=FLOAT, matrices=F32, stamps=F64, boot_times=F64, alive=array("u1"), lightly_loaded=I32)


@dataclass(init=False)
class JobDemand(Message):
    """JM -> RM: the CPUs the job could use now (for token policies), and the CPUs its regular
    attempts have out, queued or running (``in_use``: the most it can be running; what it does
    run, the RM hears from the PNs); a cloned job's ``clone_cpu``: what of its clone grant it may
    still use (its unfinished tasks' clones; < 0: not cloned): the RM gives the rest back to the
    clone budget. ``seq``: the last token message it had when it said so."""
    job_id: int
    remaining: int
    in_use: int
    clone_cpu: float
    seq: int

    def __init__(self, job_id: int, remaining: int, in_use: int = 0, clone_cpu: float = -1.0, seq: int = 0) -> None:
        self.job_id = job_id
        self.remaining = remaining
        self.in_use = in_use
        self.clone_cpu = clone_cpu
        self.seq = seq


wire(JobDemand, 10, job_id=NAT, remaining=NAT, in_use=NAT, clone_cpu=FLOAT, seq=NAT)


@dataclass
class JobDone(Message):
    """JM -> RM (-> client): the job finished, or failed with a reason."""
    job_id: int
    ok: bool
    reason: str
    finished_at: float
    tasks_done: int

    @property
    def state(self) -> str:
        """The job's final state as the RM stores it: done | failed | cancelled."""
        return "done" if self.ok else ("cancelled" if self.reason == "cancelled" else "failed")


wire(JobDone, 11, job_id=NAT, ok=BOOL, reason=STR, finished_at=FLOAT, tasks_done=NAT)


@dataclass
class CancelJob(Message):
    job_id: int


wire(CancelJob, 12, job_id=NAT)


@dataclass
class UpgradeTask(Message):
    """JM -> PN: an opportunistic attempt now holds a token: run it as a regular task."""
    job_id: int
    task: int
    attempt: int


wire(UpgradeTask, 13, job_id=NAT, task=NAT, attempt=NAT)


@dataclass
class DemoteTask(Message):
    """JM -> PN: the job holds fewer tokens than its regular attempts: if this attempt is still
    queued it waits as an opportunistic one, behind every regular task (answered with a report
    "demoted"; its JM upgrades it again when a token frees); if it runs already, nothing."""
    job_id: int
    task: int
    attempt: int


wire(DemoteTask, 22, job_id=NAT, task=NAT, attempt=NAT)


@dataclass
class YieldJob(Message):
    """JM -> PN: the job is asked to give back what it holds beyond its tokens. Its queued
    regular attempts here wait as opportunistic ones (reported "demoted"), and from ``after_s``
    seconds on its running regular attempts here yield: a regular task of another job waiting
    for their room preempts them, the youngest first. ``after_s`` < 0: no longer (the job holds
    no more than it may keep)."""
    job_id: int
    after_s: float


wire(YieldJob, 23, job_id=NAT, after_s=FLOAT)


@dataclass
class ProbeTask(Message):
    """JM -> PN: where is this attempt? (answered with a StatusBatch: queued, running, its end if
    it ended lately, or READY with detail "unknown attempt" when the PN never got it)."""
    job_id: int
    task: int
    attempt: int
    reply_to: str = ""


wire(ProbeTask, 14, job_id=NAT, task=NAT, attempt=NAT, reply_to=STR)


@dataclass
class ReclaimTokens(Message):
    """RM -> JM: the sharing plane takes tokens back (preemption, or a lender reclaiming its
    guarantee). The job now holds ``tokens``; while its regular attempts hold more than
    ``keep`` CPUs (keep >= tokens), they yield to waiting regular work at their servers from
    ``within_s`` seconds from now (0: at once; see YieldJob). keep = 2**31-1: called off."""
    job_id: int
    tokens: int
    keep: int
    within_s: float
    seq: int = 0


wire(ReclaimTokens, 15, job_id=NAT, tokens=NAT, keep=NAT, within_s=FLOAT, seq=NAT)


@dataclass
class HostReport(Message):
    """JM host -> RM, every few seconds: the jobs it runs, with the token seq each last heard and
    its demand and CPUs in use (JobDemand, re-derived: a lost one costs nothing), and, for jobs whose finished
    tasks changed since its last report, their done bitmaps (numpy.packbits), which the RM
    stores so that another host can adopt the job. Its silence is how the RM tells a dead
    host."""
    host: str
    jobs: np.ndarray
    seqs: np.ndarray
    demand: np.ndarray
    in_use: np.ndarray
    progress_jobs: np.ndarray
    progress: list


wire(HostReport, 16, host=STR, jobs=I64, seqs=I64, demand=I64, in_use=I64, progress_jobs=I64, progress=lst(BYTES))


@dataclass
class ReleaseJob(Message):
    """RM -> JM host: drop this job's JM, which the RM no longer places here: it finished (or was
    cancelled) elsewhere (``kill``: its attempts go too), or another host adopted it (its
    attempts stay; they are the other host's now)."""
    job_id: int
    kill: bool


wire(ReleaseJob, 17, job_id=NAT, kill=BOOL)


@dataclass
class ProbeJob(Message):
    """JM -> PN, from a JM adopting a job: which of its attempts do you hold or lately finish?
    Answered with Holding; from now on its reports go to ``reply_to``."""
    job_id: int
    generation: int
    reply_to: str


wire(ProbeJob, 18, job_id=NAT, generation=NAT, reply_to=STR)


@dataclass
class Holding(Message):
    """PN -> JM: the attempts of the job the PN holds (``tasks``, each with its state in
    ``reports``: queued or running) and those that ended there lately (``ended``)."""
    job_id: int
    server: int
    tasks: list[TaskSpec]
    reports: list[TaskReport]
    ended: list[TaskReport]


wire(Holding, 19, job_id=NAT, server=NAT, tasks=lst(nested(TaskSpec)), reports=lst(nested(TaskReport)),
     ended=lst(nested(TaskReport)))


@dataclass
class JoinRequest(Message):
    """A process on another machine -> the RM's registrar: join the cluster as ``count`` PNs in
    ``rack`` (-1: any) with ``cpus``/``mem_gb`` each (kind "pn"), or as a JM host (kind "jm");
    it listens at ``address``."""
    kind: str
    count: int
    rack: int
    cpus: float
    mem_gb: float
    address: str
    reply_to: str


wire(JoinRequest, 20, kind=STR, count=NAT, rack=INT, cpus=FLOAT, mem_gb=FLOAT, address=STR, reply_to=STR)


@dataclass
class JoinReply(Message):
    """Registrar -> joining process: the server ids (or JM host index) it is given, and the
    cluster's description (cluster.json's JSON, with every process's address); or why not."""
    ok: bool
    reason: str
    servers: list
    index: int
    cluster: str



wire(JoinReply, 21, ok=BOOL, reason=STR, servers=lst(NAT), index=INT, cluster=STR)