"""The queue tree of the capacity plane: fair-share pools (HFS) or capacity queues (HADOOP-3445).

One tree serves both ways of sharing; a TOML file describes it (see ``examples/queues/``):

    sharing = "fair"            # or "capacity"
    [queues.prod]               # a top-level queue, "prod"
    weight = 2
    guarantee = "50%"           # min share / guaranteed capacity: cores, or "N%" of the parent's
    [queues.prod.queues.etl]    # a child of prod: "prod.etl"

Jobs run in leaf queues only. The root is "root" and is not part of its children's names.
Amounts given as "N%" are fractions of the parent's value (guarantee: of the parent's guarantee,
the root's being the whole cluster; max: of the parent's max; lending_limit: of the queue's own
guarantee); ``QueueTree.resolve(capacity)`` turns them into cores for a cluster of that size.
Keys that only matter to jobs (order, user and job limits, timeouts) set on an inner queue are
defaults for the queues under it.
"""
from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

# The names a queue file may give: ways of sharing (rm/sharing.py's table) and orders in a queue.
from .queue_order import ORDERS
from .sharing import KINDS

ROOT = "root"
DEFAULT_QUEUE = "default"            # a job's queue when it names none (apollo/core/spec.py)
# What a job may name on a cluster without a queue file: its one queue.
SINGLE_QUEUE_NAMES = frozenset({DEFAULT_QUEUE, ROOT, ""})


class QueueError(ValueError):
    """A queue file or name is wrong; the message names the file and the queue/key."""


class UnknownQueue(QueueError):
    """A job names a queue that is not a leaf of the tree."""


@dataclass(frozen=True, slots=True)
class Amount:
    """Cores, or a percentage of some base (exactly one of the two is set), as written."""
    cores: float | None = None
    percent: float | None = None

    def resolve(self, base: float) -> float:
        return base * self.percent / 100.0 if self.percent is not None else float(self.cores)

    def __str__(self) -> str:
        return f"{self.percent:g}%" if self.percent is not None else f"{self.cores:g}"


NONE = Amount(cores=0.0)


@dataclass(frozen=True, slots=True)
class QueueSpec:
    path: str                                   # "root", "prod", "prod.etl"
    weight: float = 1.0
    guarantee: Amount = NONE                    # min share (fair) / guaranteed capacity
    max: Amount | None = None                   # borrowing limit; None: no limit
    lending_limit: Amount | None = None         # of its own guarantee; None: all of it
    max_running_jobs: int | None = None
    user_limit: float = 0.0                     # per-user floor, fraction of the queue; 0: off
    max_jobs_per_user: int | None = None
    order: str = "fair"                         # among its jobs: a name in ORDERS (rm/queue_order.py)
    min_share_timeout_s: float | None = None    # HFS Tmin
    fair_share_timeout_s: float | None = None   # HFS Tfair
    reclaim_timeout_s: float | None = None      # capacity: time to get a lent guarantee back
    children: tuple[QueueSpec, ...] = ()

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1]

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def resolve(self, capacity: float) -> float:
        """This queue's guarantee in cores, ``capacity`` being what a "%" is a fraction of
        (the parent's guarantee in cores). Shrinking to fit siblings is QueueTree.resolve's."""
        return max(0.0, self.guarantee.resolve(capacity))


@dataclass(frozen=True, slots=True)
class Limits:
    """A queue's amounts in cores for one cluster size."""
    guarantee: float
    max: float
    lend: float          # how much of its guarantee others may use while it is idle


@dataclass(slots=True)
class QueueTree:
    root: QueueSpec
    sharing: str = "fair"                       # a name in KINDS (rm/sharing.py)
    source: str = "<string>"
    _leaves: tuple[QueueSpec, ...] = field(init=False, repr=False)
    _by_path: dict[str, QueueSpec] = field(init=False, repr=False)
    _parent: dict[str, str] = field(init=False, repr=False)
    _resolved: tuple[float, dict[str, Limits]] | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        if self.sharing not in KINDS:
            raise QueueError(f"{self.source}: sharing must be one of {', '.join(KINDS)}, got {self.sharing!r}")
        self._by_path, self._parent = {}, {}
        leaves: list[QueueSpec] = []

        def walk(q: QueueSpec) -> None:
            self._by_path[q.path] = q
            if q.is_leaf:
                leaves.append(q)
            for c in q.children:
                self._parent[c.path] = q.path
                walk(c)
        walk(self.root)
        self._leaves = tuple(leaves)

    # ---- lookup ------------------------------------------------------------------
    @classmethod
    def single(cls, order: str = "fair") -> QueueTree:
        """One queue holding every job (no queue file): max-min fair among them, or FIFO."""
        return cls(QueueSpec(ROOT, order=order))

    @property
    def is_single(self) -> bool:
        return self.root.is_leaf

    def leaves(self) -> tuple[QueueSpec, ...]:
        return self._leaves

    def nodes(self) -> list[QueueSpec]:
        """Every queue, parents before children, in file order."""
        return list(self._by_path.values())

    def get(self, path: str) -> QueueSpec:
        return self._by_path[path]

    def parent(self, path: str) -> str | None:
        return self._parent.get(path)

    def job_leaf(self, name: str) -> QueueSpec:
        """The leaf queue a submitted job names (``leaf``), where a single-queue tree (no queue
        file) takes only the name a job gets by default and its root's: a job sent to a queue
        that does not exist would otherwise run as if it had been sent to the one there is."""
        if self.is_single and name not in SINGLE_QUEUE_NAMES:
            raise UnknownQueue(f"unknown queue {name!r}: this cluster has one queue (no queue file), "
                               f"{DEFAULT_QUEUE!r}; leave the queue out or name that one")
        return self.leaf(name)

    def leaf(self, name: str) -> QueueSpec:
        """The leaf queue of a name. A single-queue tree takes any name (its one queue is every
        job's; what a submitted job may name is ``job_leaf``'s)."""
        if self.is_single:
            return self.root
        if name.startswith(ROOT + "."):
            name = name[len(ROOT) + 1:]
        q = self._by_path.get(name)
        known = ", ".join(l.path for l in self._leaves)
        if q is None:
            raise UnknownQueue(f"{self.source}: unknown queue {name!r}; jobs go to one of: {known}")
        if not q.is_leaf:
            raise UnknownQueue(f"{self.source}: queue {name!r} has child queues and takes no jobs; "
                               f"jobs go to one of: {known}")
        return q

    # ---- amounts in cores ------------------------------------------------------------
    def resolve(self, capacity: float) -> dict[str, Limits]:
        """Every queue's guarantee, max and lending limit in cores on a cluster of ``capacity``.
        Guarantees of siblings that sum above their parent's (the cluster shrank, or cores were
        given under a "%" parent) are scaled down together, as HFS does with min shares; a max
        below the guarantee is raised to it; nothing exceeds its parent's max."""
        if self._resolved is not None and self._resolved[0] == capacity:
            return self._resolved[1]
        cap = max(0.0, float(capacity))
        out = {self.root.path: Limits(cap, cap, cap)}

        def walk(q: QueueSpec) -> None:
            p = out[q.path]
            gs = [c.resolve(p.guarantee) for c in q.children]
            total = sum(gs)
            if total > p.guarantee:
                gs = [g * p.guarantee / total for g in gs]
            for c, g in zip(q.children, gs):
                mx = p.max if c.max is None else min(p.max, max(0.0, c.max.resolve(p.max)))
                mx = max(mx, g)
                lend = g if c.lending_limit is None else min(g, max(0.0, c.lending_limit.resolve(g)))
                out[c.path] = Limits(g, mx, lend)
                walk(c)
        walk(self.root)
        self._resolved = (capacity, out)
        return out

    # ---- the file ------------------------------------------------------------------
    @classmethod
    def parse(cls, data: dict, source: str = "<string>") -> QueueTree:
        return _Parser(source).tree(data)

    @classmethod
    def parse_text(cls, text: str, source: str = "<string>") -> QueueTree:
        """A queue file's text (TOML)."""
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise QueueError(f"{source}: not valid TOML: {e}") from None
        return cls.parse(data, source)


def load_queue_file(path: str | Path) -> QueueTree:
    src = str(path)
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise QueueError(f"{src}: no such queue file") from None
    return QueueTree.parse_text(text, source=src)


# ---- parsing and validation ------------------------------------------------------------
_TOP_KEYS = ("sharing", "queues")
_QUEUE_KEYS = ("weight", "guarantee", "max", "lending_limit", "max_running_jobs", "user_limit",
               "max_jobs_per_user", "order", "min_share_timeout_s", "fair_share_timeout_s",
               "reclaim_timeout_s", "queues")
# Set on an inner queue, these are defaults for the queues under it.
_INHERITED = ("max_running_jobs", "user_limit", "max_jobs_per_user", "order",
              "min_share_timeout_s", "fair_share_timeout_s", "reclaim_timeout_s")
_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_PERCENT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*%\s*$")


def _one_of(names) -> str:
    return " or ".join(f'"{n}"' for n in names)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


class _Parser:
    def __init__(self, source: str) -> None:
        self.src = source

    def fail(self, where: str, msg: str) -> QueueError:
        return QueueError(f"{self.src}: {where}{msg}")

    def tree(self, data: dict) -> QueueTree:
        if not isinstance(data, dict):
            raise self.fail("", "a queue file is a TOML table")
        bad = [k for k in data if k not in _TOP_KEYS]
        if bad:
            raise self.fail("", f"unknown key {bad[0]!r} at the top level; valid keys: {', '.join(_TOP_KEYS)}")
        sharing = data.get("sharing", "fair")
        if sharing not in KINDS:
            raise self.fail("", f"sharing must be {_one_of(KINDS)}, got {sharing!r}")
        defaults = {"order": KINDS[sharing].default_order}      # each kind says its queues' order
        queues = data.get("queues", {})
        if not isinstance(queues, dict):
            raise self.fail("", "queues must be a table of queues ([queues.NAME])")
        children = self.children(ROOT, queues, defaults)
        root = QueueSpec(ROOT, children=children, **({} if children else defaults))
        self.check_level(root, parent_cores=None)
        return QueueTree(root, sharing, self.src)

    def children(self, parent: str, table: dict, inherited: dict) -> tuple[QueueSpec, ...]:
        out = []
        for name, body in table.items():
            path = name if parent == ROOT else f"{parent}.{name}"
            where = f'queue "{path}": '
            if not _NAME.match(name) or name == ROOT:
                raise self.fail(where, "a queue name is letters, digits, '_' or '-' (no dots), and not \"root\"")
            if not isinstance(body, dict):
                raise self.fail(where, f"must be a table ([queues.{name}]), got {body!r}")
            out.append(self.queue(path, body, inherited))
        return tuple(out)

    def queue(self, path: str, body: dict, inherited: dict) -> QueueSpec:
        where = f'queue "{path}": '
        bad = [k for k in body if k not in _QUEUE_KEYS]
        if bad:
            raise self.fail(where, f"unknown key {bad[0]!r}; valid keys: {', '.join(_QUEUE_KEYS)}")
        kw = dict(inherited)
        if "weight" in body:
            kw["weight"] = self.number(where, "weight", body["weight"], lo=0.0, lo_open=True)
        for key in ("guarantee", "max", "lending_limit"):
            if key in body:
                kw[key] = self.amount(where, key, body[key])
        for key in ("max_running_jobs", "max_jobs_per_user"):
            if key in body:
                v = body[key]
                if not isinstance(v, int) or isinstance(v, bool) or v < (0 if key == "max_running_jobs" else 1):
                    lo = 0 if key == "max_running_jobs" else 1
                    raise self.fail(where, f"{key} must be a whole number >= {lo}, got {v!r}")
                kw[key] = v
        if "user_limit" in body:
            v = body["user_limit"]
            if isinstance(v, str) and _PERCENT.match(v):
                v = float(_PERCENT.match(v).group(1)) / 100.0
            kw["user_limit"] = self.number(where, "user_limit", v, lo=0.0, hi=1.0)
        if "order" in body:
            if body["order"] not in ORDERS:
                raise self.fail(where, f"order must be {_one_of(ORDERS)}, got {body['order']!r}")
            kw["order"] = body["order"]
        for key in ("min_share_timeout_s", "fair_share_timeout_s", "reclaim_timeout_s"):
            if key in body:
                kw[key] = self.number(where, key, body[key], lo=0.0)
        if self.max_below_guarantee(path, kw.get("guarantee"), kw.get("max")):
            raise self.fail(where, f"max ({kw['max']}) must be >= guarantee ({kw['guarantee']})")
        sub = body.get("queues", {})
        if not isinstance(sub, dict):
            raise self.fail(where, "queues must be a table of child queues")
        passed = {k: kw[k] for k in _INHERITED if k in kw}
        children = self.children(path, sub, passed)
        spec = QueueSpec(path, children=children, **kw)
        self.check_level(spec, parent_cores=spec.guarantee.cores)
        return spec

    @staticmethod
    def max_below_guarantee(path: str, g: Amount | None, mx: Amount | None) -> bool:
        """Whether a queue's max is below its guarantee whatever the cluster's size: both in
        cores, or both percentages of the same base (a top-level queue's are the cluster's;
        deeper, a guarantee is a fraction of the parent's guarantee and a max of the parent's
        max, which may differ). Other mixes depend on the cluster (resolve raises the max)."""
        if g is None or mx is None:
            return False
        if g.cores is not None and mx.cores is not None:
            return mx.cores < g.cores
        same_base = "." not in path
        return same_base and g.percent is not None and mx.percent is not None and mx.percent < g.percent

    def number(self, where, key, v, lo=None, hi=None, lo_open=False) -> float:
        if not _is_number(v) or not math.isfinite(v):
            raise self.fail(where, f"{key} must be a number, got {v!r}")
        if lo is not None and (v <= lo if lo_open else v < lo):
            raise self.fail(where, f"{key} must be {'>' if lo_open else '>='} {lo:g}, got {v!r}")
        if hi is not None and v > hi:
            raise self.fail(where, f"{key} must be <= {hi:g}, got {v!r}")
        return float(v)

    def amount(self, where: str, key: str, v) -> Amount:
        if isinstance(v, str):
            m = _PERCENT.match(v)
            if not m:
                raise self.fail(where, f"{key} must be cores (a number) or a percentage like \"30%\", got {v!r}")
            p = float(m.group(1))
            if p > 100.0:
                raise self.fail(where, f"{key} must be between 0% and 100%, got {v!r}")
            return Amount(percent=p)
        if not _is_number(v) or not math.isfinite(v):
            raise self.fail(where, f"{key} must be cores (a number) or a percentage like \"30%\", got {v!r}")
        if v < 0:
            raise self.fail(where, f"{key} must be >= 0, got {v!r}")
        return Amount(cores=float(v))

    def check_level(self, q: QueueSpec, parent_cores: float | None) -> None:
        """Children's guarantees must fit in the parent's, where that can be known now."""
        kids = q.children
        if not kids:
            return
        pct = sum(c.guarantee.percent for c in kids if c.guarantee.percent is not None)
        if pct > 100.0 + 1e-9:
            raise self.fail(f'queues under "{q.path}": ', f"guarantees given as a percentage sum to {pct:g}%, above 100%")
        if q.path != ROOT and q.guarantee == NONE:
            for c in kids:
                if c.guarantee.percent:
                    raise self.fail(f'queue "{c.path}": ', f"guarantee \"{c.guarantee}\" is a fraction of "
                                    f"\"{q.path}\"'s guarantee, but \"{q.path}\" has none")
        if parent_cores is not None:
            total = sum(c.resolve(parent_cores) for c in kids)
            if total > parent_cores + 1e-9:
                raise self.fail(f'queue "{q.path}": ', f"its children's guarantees sum to {total:g} cores, "
                                f"above its own guarantee of {parent_cores:g}")
