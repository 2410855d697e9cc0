"""Queue trees (rm/queues.py) and sharing policies (rm/sharing.py): the TOML file, the pure
helpers, and allocate's invariants as Hypothesis properties checked independently of
SharingPolicy.validate (which is called as well)."""
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, strategies as st

from rm.queues import Amount, QueueError, QueueSpec, QueueTree, UnknownQueue, load_queue_file
from rm.queue_order import runs_without_token
from rm.sharing import (Allocation, CapacitySharing, FairSharing, JobView, Reclaim, Snapshot,
                        capacity_shares, fair_shares, make_sharing_policy, round_tokens,
                        split_in_queue, water_fill)

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "queues"
TOL = 1e-6


def tree(queues: dict, sharing: str = "fair") -> QueueTree:
    return QueueTree.parse({"sharing": sharing, "queues": queues}, source="t.toml")


def job(i, queue="a", user="u", demand=4.0, running=0.0, admitted=True, priority=0, submitted=None,
        weight=1.0, tokens=None):
    return JobView(i, queue, user, weight, priority, float(i if submitted is None else submitted), float(demand),
                   int(running if tokens is None else tokens), float(running), admitted)


def test_a_job_view_is_read_only_and_compares_by_value():
    """A policy's snapshot cannot be edited under it (JobView spells out its __init__, for speed
    compiled: it stays a frozen dataclass)."""
    import dataclasses
    v = job(1, demand=4.0, running=2.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        v.demand = 8.0
    assert v == job(1, demand=4.0, running=2.0) and hash(v) == hash(job(1, demand=4.0, running=2.0))
    assert v != job(1, demand=4.0, running=3.0)
    moved = dataclasses.replace(v, running=3.0)
    assert moved == job(1, demand=4.0, running=3.0, tokens=2) and v.running == 2.0
    assert [f.name for f in dataclasses.fields(JobView)] == ["job_id", "queue", "user", "weight", "priority",
                                                               "submitted_at", "demand", "tokens", "running",
                                                               "admitted"]


# ---- the TOML file ----------------------------------------------------------------------------
def test_examples_load():
    three = load_queue_file(EXAMPLES / "three-pools.toml")
    assert three.sharing == "fair"
    assert [q.path for q in three.leaves()] == ["small", "medium", "large"]
    small, medium, large = three.leaves()
    assert small.guarantee == Amount(percent=20.0) and small.min_share_timeout_s == 5
    assert small.min_share_timeout_s < medium.min_share_timeout_s
    assert large.weight < medium.weight < small.weight
    cap = load_queue_file(EXAMPLES / "capacity-70-30.toml")
    assert cap.sharing == "capacity"
    lim = cap.resolve(100)
    assert (lim["a"].guarantee, lim["b"].guarantee) == (70, 30)
    assert lim["a"].max == lim["b"].max == 100
    b = cap.leaf("b")
    assert b.reclaim_timeout_s == 10 and b.user_limit == 0.5


def test_nested_queues_paths_forms_and_inherited_defaults():
    t = tree({"prod": {"weight": 2, "guarantee": 40, "max": "50%", "order": "fifo", "min_share_timeout_s": 10,
                       "queues": {"etl": {"guarantee": 20, "user_limit": 0.25, "max_jobs_per_user": 4},
                                  "adhoc": {"guarantee": "25%", "order": "fair", "lending_limit": "50%"}}},
              "dev": {}})
    assert [q.path for q in t.leaves()] == ["prod.etl", "prod.adhoc", "dev"]
    etl = t.leaf("prod.etl")
    assert etl.guarantee == Amount(cores=20.0) and etl.order == "fifo" and etl.min_share_timeout_s == 10
    assert t.leaf("root.prod.etl") is etl
    adhoc = t.leaf("prod.adhoc")
    assert str(adhoc.guarantee) == "25%" and adhoc.order == "fair"
    lim = t.resolve(200)
    assert lim["prod"].guarantee == 40 and lim["prod.adhoc"].guarantee == 10
    assert lim["prod"].max == 100 and lim["prod.etl"].max == 100      # max: "%" of the parent's max
    assert lim["prod.adhoc"].lend == 5
    assert t.leaf("dev").order == "fair"                                 # fair sharing's default


def test_resolve_scales_guarantees_that_do_not_fit_the_cluster():
    t = tree({"a": {"guarantee": 60}, "b": {"guarantee": 40}})
    lim = t.resolve(50)                                                   # half the cluster is dead
    assert (lim["a"].guarantee, lim["b"].guarantee) == (30, 20)


BAD = [
    ({"queues": {"prod": {"queues": {"etl": {"guarantee": -1}}}}},
     'queue "prod.etl": guarantee must be >= 0, got -1'),
    ({"queues": {"a": {"wieght": 2}}}, "unknown key 'wieght'; valid keys: weight, guarantee"),
    ({"queues": {"a": {"weight": 0}}}, 'queue "a": weight must be > 0, got 0'),
    ({"queues": {"a": {"weight": "2"}}}, 'queue "a": weight must be a number'),
    ({"queues": {"a": {"guarantee": "150%"}}}, 'queue "a": guarantee must be between 0% and 100%'),
    ({"queues": {"a": {"guarantee": "lots"}}}, 'queue "a": guarantee must be cores'),
    ({"queues": {"a": {"max": "101%"}}}, 'queue "a": max must be between 0% and 100%'),
    ({"queues": {"a": {"guarantee": "60%"}, "b": {"guarantee": "50%"}}},
     'queues under "root": guarantees given as a percentage sum to 110%'),
    ({"queues": {"p": {"guarantee": 10, "queues": {"x": {"guarantee": 8}, "y": {"guarantee": 5}}}}},
     'queue "p": its children\'s guarantees sum to 13 cores, above its own guarantee of 10'),
    ({"queues": {"p": {"queues": {"x": {"guarantee": "50%"}}}}},
     'queue "p.x": guarantee "50%" is a fraction of "p"\'s guarantee, but "p" has none'),
    ({"queues": {"a": {"order": "lifo"}}}, 'queue "a": order must be "fifo" or "fair", got \'lifo\''),
    ({"sharing": "drf"}, 'sharing must be "fair" or "capacity", got \'drf\''),
    ({"queues": {"a": {"user_limit": 1.5}}}, 'queue "a": user_limit must be <= 1'),
    ({"queues": {"a": {"max_running_jobs": 2.5}}}, 'queue "a": max_running_jobs must be a whole number'),
    ({"queues": {"a": {"max_jobs_per_user": 0}}}, 'queue "a": max_jobs_per_user must be a whole number >= 1'),
    ({"queues": {"a": {"guarantee": 10, "max": 5}}}, 'queue "a": max (5) must be >= guarantee (10)'),
    ({"queues": {"a": {"guarantee": "50%", "max": "30%"}}}, 'queue "a": max (30%) must be >= guarantee (50%)'),
    ({"queues": {"p": {"guarantee": 10, "queues": {"x": {"guarantee": 6, "max": 4}}}}},
     'queue "p.x": max (4) must be >= guarantee (6)'),
    ({"queues": {"a": {"min_share_timeout_s": -1}}}, 'queue "a": min_share_timeout_s must be >= 0'),
    ({"pools": {}}, "unknown key 'pools' at the top level; valid keys: sharing, queues"),
    ({"queues": {"a": 3}}, 'queue "a": must be a table'),
]


def test_max_below_guarantee_only_where_the_file_alone_tells():
    """Percentages of different bases (a child's guarantee is of its parent's guarantee, its
    max of its parent's max) and cores against percentages depend on the cluster: accepted."""
    ok = {"queues": {"p": {"guarantee": "10%", "max": "100%",
                           "queues": {"x": {"guarantee": "50%", "max": "30%"}}},
                     "q": {"guarantee": "20%", "max": 2}}}
    t = QueueTree.parse(ok)
    lim = t.resolve(100.0)
    assert lim["p.x"].guarantee == 5.0 and lim["p.x"].max == 30.0


@pytest.mark.parametrize("data,message", BAD)
def test_bad_files_name_the_file_and_the_key(tmp_path, data, message):
    path = tmp_path / "bad.toml"
    path.write_text(_to_toml(data))
    with pytest.raises(QueueError) as e:
        load_queue_file(path)
    assert str(e.value).startswith(f"{path}: ")
    assert message in str(e.value)


def _to_toml(data: dict, prefix: str = "") -> str:
    """Just enough TOML writing for the cases above."""
    def val(v):
        if isinstance(v, str):
            return '"' + v + '"'
        return repr(v).lower() if isinstance(v, bool) else repr(v)
    lines, tables = [], []
    for k, v in data.items():
        (tables if isinstance(v, dict) else lines).append((k, v))
    out = "".join(f"{k} = {val(v)}\n" for k, v in lines)
    for k, v in tables:
        name = f"{prefix}.{k}" if prefix else k
        out += f"[{name}]\n" + _to_toml(v, name)
    return out


def test_dotted_queue_name_and_bad_toml_and_missing_file(tmp_path):
    p = tmp_path / "q.toml"
    p.write_text('[queues."a.b"]\nweight = 1\n')
    with pytest.raises(QueueError, match=r'q\.toml: queue "a\.b": a queue name is letters'):
        load_queue_file(p)
    p.write_text("sharing = \n")
    with pytest.raises(QueueError, match=r"q\.toml: not valid TOML"):
        load_queue_file(p)
    with pytest.raises(QueueError, match=r"nope\.toml: no such queue file"):
        load_queue_file(tmp_path / "nope.toml")


def test_unknown_queue_lists_the_leaves():
    t = load_queue_file(EXAMPLES / "three-pools.toml")
    with pytest.raises(UnknownQueue) as e:
        t.leaf("tiny")
    assert "'tiny'" in str(e.value) and "small, medium, large" in str(e.value)
    assert "three-pools.toml" in str(e.value)
    nested = tree({"prod": {"queues": {"etl": {}}}})
    with pytest.raises(UnknownQueue, match=r"'prod' has child queues and takes no jobs; jobs go to one of: prod\.etl"):
        nested.leaf("prod")


def test_single_tree_takes_every_job():
    t = QueueTree.single()
    assert t.leaf("default") is t.root and t.leaf("anything") is t.root
    assert t.job_leaf("default") is t.root and t.job_leaf("root") is t.root and t.job_leaf("") is t.root
    assert t.leaves() == (t.root,) and t.sharing == "fair"
    pol = make_sharing_policy(t)
    jobs = tuple(job(i, queue="whatever", demand=d) for i, d in enumerate([2, 10, 10]))
    a = pol.allocate(Snapshot(0.0, 16, jobs))
    assert a.tokens == {0: 2, 1: 7, 2: 7}                     # the even (max-min) split
    assert a.shares == {"root": 16.0}


def test_single_tree_refuses_other_queue_names():
    """No queue file: a job naming a queue that does not exist is refused, not run elsewhere."""
    with pytest.raises(UnknownQueue, match=r"unknown queue 'prod'.*one queue \(no queue file\), 'default'"):
        QueueTree.single().job_leaf("prod")


# ---- water filling ---------------------------------------------------------------------------
def test_water_fill_examples():
    assert np.allclose(water_fill(10, [1, 5, 20]), [1, 4.5, 4.5])
    assert np.allclose(water_fill(10, [10, 10, 10], [1, 2, 1]), [2.5, 5, 2.5])
    assert np.allclose(water_fill(10, [1, 5, 20], floors=[0, 0, 8]), [1, 1, 8])
    assert np.allclose(water_fill(10, [10, 10, 10], floors=[8, 8, 0]), [5, 5, 0])   # scaled floors
    assert np.allclose(water_fill(100, [3, 4]), [3, 4])


@st.composite
def fill_cases(draw):
    n = draw(st.integers(1, 12))
    demands = draw(st.lists(st.floats(0, 100), min_size=n, max_size=n))
    weights = draw(st.lists(st.floats(0.1, 10), min_size=n, max_size=n))
    floors = draw(st.one_of(st.none(), st.lists(st.floats(0, 60), min_size=n, max_size=n)))
    cap = draw(st.floats(0, 400))
    return cap, np.array(demands), np.array(weights), None if floors is None else np.array(floors)


@given(fill_cases())
def test_water_fill_properties(case):
    cap, d, w, f = case
    a = water_fill(cap, d, w, f)
    tol = 1e-7 * max(1.0, cap, d.sum())
    assert abs(a.sum() - min(cap, d.sum())) <= tol                       # total
    assert np.all(a <= d + tol) and np.all(a >= -tol)                    # never above demand
    fl = np.zeros_like(d) if f is None else np.minimum(f, d)
    if fl.sum() <= cap:
        assert np.all(a >= fl - tol)                                     # floors met when feasible
    else:
        assert np.allclose(a, fl * cap / fl.sum(), atol=tol)             # else scaled together
        return
    unsat = a < d - tol
    free = a > fl + tol                                                  # not held up by a floor
    r = a / w
    for i in np.flatnonzero(unsat):                                      # max-min by weight
        assert np.all(r[i] >= r[free] - tol)
    both = unsat & free                                                  # proportional to weight
    if both.sum() >= 2:
        assert np.ptp(r[both]) <= tol


# ---- queue trees: random ones for the hierarchy properties ---------------------------------------
@st.composite
def trees(draw, sharing):
    def level(depth, parent_has_guarantee, room_pct):
        n = draw(st.integers(1, 3))
        out = {}
        pct_left = room_pct
        for k in range(n):
            q = {"weight": draw(st.sampled_from([0.5, 1, 2, 3]))}
            form = draw(st.sampled_from(["none", "pct", "cores"] if depth == 0 else
                                        (["none", "pct"] if parent_has_guarantee else ["none"])))
            if form == "pct":
                p = draw(st.integers(0, int(pct_left)))
                pct_left -= p
                q["guarantee"] = f"{p}%"
            elif form == "cores":
                q["guarantee"] = draw(st.integers(0, 60))
            if draw(st.booleans()):
                q["max"] = draw(st.sampled_from(["100%", "80%", "50%", 70, 200]))
                if isinstance(q["max"], int) and isinstance(q.get("guarantee"), int):
                    q["max"] = max(q["max"], q["guarantee"])
                if depth == 0 and isinstance(q["max"], str) and isinstance(q.get("guarantee"), str):
                    q["max"] = f"{max(int(q['max'][:-1]), int(q['guarantee'][:-1]))}%"   # a file's check
            if draw(st.booleans()):
                q["lending_limit"] = draw(st.sampled_from(["0%", "50%", 5, "100%"]))
            if depth == 0 and draw(st.integers(0, 2)) == 0:
                has = form != "none" and q["guarantee"] != 0
                q["queues"] = level(1, has, 100)
            out[f"q{k}"] = q
        return out
    t = tree(level(0, True, 100), sharing)
    leaves = [q.path for q in t.leaves()]
    demand = {p: draw(st.sampled_from([0.0, 3.0, 10.0, 25.0, 50.0, 200.0])) for p in leaves}
    cap = draw(st.sampled_from([0.0, 16.0, 50.0, 100.0, 333.0]))
    return t, demand, cap


def eff_demand(t, lim, demand):
    eff = {}
    for q in reversed(t.nodes()):
        d = demand[q.path] if q.is_leaf else sum(eff[c.path] for c in q.children)
        eff[q.path] = min(d, lim[q.path].max)
    return eff


@given(trees("fair"))
def test_fair_shares_hierarchy(case):
    t, demand, cap = case
    s = fair_shares(t, cap, demand)
    lim = t.resolve(cap)
    eff = eff_demand(t, lim, demand)
    tol = 1e-6 * max(1.0, cap)
    assert set(s) == {q.path for q in t.nodes()}
    assert abs(s["root"] - min(cap, eff["root"])) <= tol
    for q in t.nodes():
        assert -tol <= s[q.path] <= eff[q.path] + tol                   # never above its demand or max
        if not q.children:
            continue
        kids = q.children
        assert abs(s[q.path] - sum(s[c.path] for c in kids)) <= tol     # parent = sum of children
        fl = {c.path: min(lim[c.path].guarantee, eff[c.path]) for c in kids}
        for c in kids:
            assert s[c.path] >= fl[c.path] - tol                         # min shares first
        for a in kids:                                                   # max-min by weight
            if s[a.path] < eff[a.path] - tol:
                for b in kids:
                    if s[b.path] > fl[b.path] + tol:
                        assert s[a.path] / a.weight >= s[b.path] / b.weight - tol


def needs_and_locks(t, lim, demand):
    """What each queue needs from its parent (demand plus idle guarantee its children may not
    lend, capped by its max) and the idle guarantee it may not lend itself."""
    need, locked = {}, {}
    for q in reversed(t.nodes()):
        n = demand[q.path] if q.is_leaf else sum(need[c.path] + locked[c.path] for c in q.children)
        need[q.path] = min(n, lim[q.path].max)
        idle = lim[q.path].guarantee - min(lim[q.path].guarantee, need[q.path])
        locked[q.path] = max(0.0, idle - lim[q.path].lend)
    return need, locked


@given(trees("capacity"))
def test_capacity_shares(case):
    t, demand, cap = case
    s = capacity_shares(t, cap, demand)
    lim = t.resolve(cap)
    need, locked = needs_and_locks(t, lim, demand)
    tol = 1e-6 * max(1.0, cap)
    for q in t.nodes():
        assert s[q.path] <= lim[q.path].max + tol                        # never past its max
        if q.children:
            assert abs(s[q.path] - sum(s[c.path] for c in q.children)) <= tol
    for q in t.leaves():
        assert s[q.path] <= demand[q.path] + tol
        assert s[q.path] >= min(lim[q.path].guarantee, demand[q.path]) - tol     # its guarantee
    # At the top level: what each queue was given = its share + what its children hold back.
    top = t.root.children
    inside = {c.path: sum(locked[d.path] for d in t.nodes() if d.path.startswith(c.path + ".")) for c in top}
    given_ = {c.path: s[c.path] + inside[c.path] for c in top}
    g = {c.path: lim[c.path].guarantee for c in top}
    idle = {p: g[p] - min(g[p], need[p]) for p in g}
    lendable = sum(min(idle[p], lim[p].lend) for p in g)
    borrowed = sum(max(0.0, given_[p] - g[p]) for p in g)
    assert borrowed <= max(0.0, cap - sum(g.values())) + lendable + tol     # lending limits
    all_locked = sum(locked[q.path] for q in t.nodes() if q.path != "root")
    if s["root"] < cap - all_locked - tol:                               # nothing else left idle
        assert all(given_[p] >= need[p] - tol for p in g)
    hungry = [p for p in g if g[p] > 0 and given_[p] > g[p] + tol and given_[p] < need[p] - tol]
    for p in hungry:                                                     # borrowing by guarantee
        for o in g:
            if g[o] > 0 and given_[o] > g[o] + tol:
                assert (given_[p] - g[p]) / g[p] >= (given_[o] - g[o]) / g[o] - tol


def test_capacity_idle_guarantee_held_back_inside_a_parent():
    # x may lend none of its 10: they stay idle inside p, so p asks its parent for them on top of
    # y's demand, and borrows like o does (equal guarantees: 40 each of the 80 nobody holds).
    t = tree({"p": {"guarantee": 10, "queues": {"x": {"guarantee": 10, "lending_limit": 0}, "y": {}}},
              "o": {"guarantee": 10}}, "capacity")
    s = capacity_shares(t, 100, {"p.x": 0, "p.y": 50, "o": 100})
    assert s["p.x"] == 0 and s["p.y"] == pytest.approx(40) and s["o"] == pytest.approx(50)
    assert s["root"] == pytest.approx(90)                                  # x's 10 held back
    s = capacity_shares(t, 100, {"p.x": 0, "p.y": 50, "o": 0})
    assert s["p.y"] == pytest.approx(50) and s["root"] == pytest.approx(50)


def test_capacity_lending_limit_and_zero_guarantee_queues():
    t = tree({"a": {"guarantee": "50%", "lending_limit": "20%"}, "b": {"guarantee": "30%"},
              "c": {"weight": 1}, "d": {"weight": 3}}, "capacity")
    s = capacity_shares(t, 100, {"a": 0, "b": 200, "c": 200, "d": 200})
    # a lends 10 of its 50; the 20 nobody guarantees plus those 10 go to b (the only borrower
    # with a guarantee); c and d get nothing while b wants more.
    assert s["a"] == 0 and s["b"] == pytest.approx(60) and s["c"] == s["d"] == 0
    s = capacity_shares(t, 100, {"a": 0, "b": 35, "c": 200, "d": 200})
    # b takes 5 of the 30 on offer; c and d split the other 25 by weight (1 : 3).
    assert s["b"] == pytest.approx(35) and s["c"] == pytest.approx(6.25) and s["d"] == pytest.approx(18.75)


def test_capacity_nested_children_share_their_parents_allocation():
    t = tree({"org": {"guarantee": "60%", "max": "100%",
                      "queues": {"x": {"guarantee": "50%"}, "y": {"guarantee": "50%", "max": "50%"}}},
              "other": {"guarantee": "40%"}}, "capacity")
    s = capacity_shares(t, 100, {"org.x": 100, "org.y": 100, "other": 10})
    assert s["other"] == pytest.approx(10)
    # org borrows the 30 other leaves idle; inside it x and y (equal guarantees of 30) split the
    # 30 above their guarantees evenly; y's max (50% of org's 100) does not bind.
    assert s["org"] == pytest.approx(90) and s["org.x"] == pytest.approx(45) and s["org.y"] == pytest.approx(45)


# ---- inside a queue --------------------------------------------------------------------------------
def test_fifo_and_fair_order_inside_a_queue():
    fifo = QueueSpec("q", order="fifo")
    jobs = [job(1, demand=6, submitted=5), job(2, demand=6, submitted=1), job(3, demand=6, submitted=9, priority=1)]
    # Priority first, then the earlier submission: 3, then 2, then 1.
    assert split_in_queue(fifo, 10, jobs) == {1: 0.0, 2: 4.0, 3: 6.0}
    fair = QueueSpec("q", order="fair")
    got = split_in_queue(fair, 10, [job(1, demand=6), job(2, demand=10, weight=4), job(3, demand=1)])
    assert got == pytest.approx({1: 1.8, 2: 7.2, 3: 1.0})


def test_user_limit_floor_per_user():
    q = QueueSpec("q", order="fifo", user_limit=0.25)
    jobs = [job(1, user="ann", demand=100), job(2, user="ann", demand=100), job(3, user="bob", demand=100),
            job(4, user="cy", demand=5)]
    got = split_in_queue(q, 60, jobs)
    # three users: each first gets up to max(25%, 1/3) of 60 = 20; cy uses 5; the 15 left go
    # by fifo to ann's first job.
    assert got == pytest.approx({1: 35.0, 2: 0.0, 3: 20.0, 4: 5.0})


@st.composite
def queue_jobs(draw):
    n = draw(st.integers(1, 15))
    users = draw(st.lists(st.sampled_from("abcd"), min_size=n, max_size=n))
    jobs = [JobView(i, "q", users[i], draw(st.sampled_from([0.5, 1.0, 3.0])), draw(st.integers(0, 2)),
                    float(draw(st.integers(0, 5))), float(draw(st.sampled_from([0, 1, 2.5, 8, 30]))), 0, 0.0, True)
            for i in range(n)]
    q = QueueSpec("q", order=draw(st.sampled_from(["fifo", "fair"])),
                  user_limit=draw(st.sampled_from([0.0, 0.0, 0.2, 0.5, 1.0])))
    return q, draw(st.floats(0, 150)), jobs


def order_key(j):
    return (-j.priority, j.submitted_at, j.job_id)


def user_floors(q, share, jobs):
    """HADOOP-3445 user floors, derived afresh: active users by their first job in queue order,
    each up to max(limit, 1/users) of the queue's allocation and its demand, while it lasts."""
    active = sorted({j.user for j in jobs if j.demand > 0},
                    key=lambda u: min(order_key(j) for j in jobs if j.user == u and j.demand > 0))
    alloc = min(share, sum(j.demand for j in jobs))
    out, left = {}, alloc
    for u in active:
        out[u] = min(max(q.user_limit, 1 / len(active)) * alloc, sum(j.demand for j in jobs if j.user == u), left)
        left -= out[u]
    return out


@given(queue_jobs())
def test_split_in_queue_properties(case):
    q, share, jobs = case
    got = split_in_queue(q, share, jobs)
    d = {j.job_id: j.demand for j in jobs}
    tol = 1e-7 * max(1.0, share)
    assert abs(sum(got.values()) - min(share, sum(d.values()))) <= tol
    assert all(-tol <= got[i] <= d[i] + tol for i in got)
    if q.user_limit > 0:
        for u, floor in user_floors(q, share, jobs).items():            # floors, in user order
            assert sum(got[j.job_id] for j in jobs if j.user == u) >= floor - tol
        return
    if q.order == "fifo":                                                # earlier jobs take all first
        short = False
        for j in sorted(jobs, key=order_key):
            if short:
                assert got[j.job_id] <= tol
            short = short or got[j.job_id] < d[j.job_id] - tol
    else:                                                                # max-min by weight
        for a in jobs:
            if got[a.job_id] < d[a.job_id] - tol:
                assert all(got[a.job_id] / a.weight >= got[b.job_id] / b.weight - tol for b in jobs)


# ---- integer tokens ------------------------------------------------------------------------------
@given(st.lists(st.floats(0, 40), max_size=20), st.integers(0, 200), st.data())
def test_round_tokens(xs, total, data):
    alloc = dict(enumerate(xs))
    one = data.draw(st.sets(st.sampled_from(sorted(alloc)))) if alloc else set()
    got = round_tokens(alloc, total, at_least_one=one)
    assert set(got) == set(alloc)
    assert sum(got.values()) <= total
    for i, t in got.items():
        assert t >= 0
        assert t <= math.ceil(alloc[i] - 1e-9) or (i in one and t == 1)
    if not one:
        assert sum(got.values()) == min(total, math.floor(sum(xs) + 1e-6))
        assert all(t >= math.floor(alloc[i] + 1e-9) for i, t in got.items()) or sum(xs) > total
    elif len(one) <= total:
        assert all(got[i] >= 1 for i in one)


# ---- allocate ----------------------------------------------------------------------------------------
def three_leaves(sharing):
    return tree({"a": {"guarantee": "50%", "weight": 2, "max_running_jobs": 4, "max_jobs_per_user": 2,
                       "min_share_timeout_s": 5, "fair_share_timeout_s": 20, "reclaim_timeout_s": 5,
                       "order": "fifo"},
                 "b": {"guarantee": "20%", "user_limit": 0.5, "fair_share_timeout_s": 10,
                       "reclaim_timeout_s": 0, "max": "90%"},
                 "c": {"weight": 0.5, "order": "fair", "lending_limit": 0}}, sharing)


@st.composite
def snapshots(draw):
    n = draw(st.integers(0, 30))
    jobs = []
    for i in range(n):
        admitted = draw(st.booleans())
        demand = float(draw(st.sampled_from([0, 1, 2, 5, 12, 40])))
        running = float(draw(st.integers(0, int(demand)))) if admitted else 0.0
        jobs.append(JobView(i, draw(st.sampled_from("abc")), draw(st.sampled_from(["x", "y", "z"])),
                            draw(st.sampled_from([1.0, 2.0])), draw(st.integers(0, 2)),
                            float(draw(st.integers(0, 20))), demand, int(running), running, admitted))
    return Snapshot(0.0, float(draw(st.sampled_from([0, 3, 8, 16, 16.5, 64, 200]))), tuple(jobs))


def check_allocation(t, snap, a: Allocation, deficit_bound):
    byid = {j.job_id: j for j in snap.jobs}
    total = math.floor(snap.capacity + 1e-9)
    adm = {j.job_id for j in snap.jobs if j.admitted} | set(a.admit)
    assert set(a.tokens) == adm
    assert sum(a.tokens.values()) <= total                               # tokens fit the cores
    holders = [i for i in adm if byid[i].demand > 0]
    old_holders = [j.job_id for j in snap.jobs if j.admitted and j.demand > 0 and not runs_without_token(t.leaf(j.queue))]
    # (a queue that runs jobs without a token admits them past the tokens: runs_without_token)
    slotted = [i for i in holders if not runs_without_token(t.leaf(byid[i].queue))]
    if a.admit and any(byid[i].demand > 0 and not runs_without_token(t.leaf(byid[i].queue)) for i in a.admit):
        assert len(slotted) <= total                                    # one token each fits
    if len(holders) <= total:       # every job with demand holds a token, but in a FIFO queue,
        # where a job the ones ahead leave nothing holds none (and a new one is not admitted)
        assert all(a.tokens[i] >= 1 for i in holders if t.leaf(byid[i].queue).order != "fifo")
    assert len(old_holders) <= total or not any(byid[i].demand > 0 and not runs_without_token(t.leaf(byid[i].queue))
                                                for i in a.admit)
    for q in t.leaves():
        new = [i for i in a.admit if byid[i].queue == q.path]
        mine = [i for i in adm if byid[i].queue == q.path]
        if new and q.max_running_jobs is not None:
            assert len(mine) <= q.max_running_jobs
        if new and q.max_jobs_per_user is not None:
            for u in {byid[i].user for i in new}:
                assert sum(byid[i].user == u for i in mine) <= q.max_jobs_per_user
    lim = t.resolve(snap.capacity)
    killed = {}
    for r in a.reclaim:
        j = byid[r.job_id]
        assert r.job_id in adm and r.tokens < j.running and r.tokens >= a.tokens[r.job_id]
        killed[j.queue] = killed.get(j.queue, 0.0) + j.running - r.tokens
    assert len({r.job_id for r in a.reclaim}) == len(a.reclaim)
    assert sum(killed.values()) <= deficit_bound + 1e-6                 # no more than the deficit
    for leaf, k in killed.items():                                       # never below its share
        held = sum(byid[i].running for i in adm if byid[i].queue == leaf)
        floor = a.shares[leaf] if t.sharing == "fair" else max(a.shares[leaf], lim[leaf].guarantee)
        users = user_accounts(t, t.leaf(leaf), snap, a)
        if users is None:
            assert held - k >= floor - 1e-6
            continue
        # ...less what its own users are short of, and no user below its allocation
        assert k <= max(0.0, held - floor) + sum(u["short"] for u in users.values()) + 1e-6
        for name, u in users.items():
            k_u = sum(byid[r.job_id].running - r.tokens for r in a.reclaim
                      if byid[r.job_id].queue == leaf and byid[r.job_id].user == name)
            assert u["held"] - k_u >= min(u["held"], u["alloc"]) - 1e-6
    waiting = [j for j in snap.jobs if j.job_id not in adm]
    assert set(a.positions) == {j.job_id for j in waiting}
    for q in t.leaves():
        mine = sorted((j for j in waiting if j.queue == q.path), key=order_key)
        assert [a.positions[j.job_id] for j in mine] == [(q.path, k + 1) for k in range(len(mine))]


def user_accounts(t, q, snap, a):
    """For a capacity leaf whose users reclaim (else None): each user's holding, allocation
    (split_in_queue of the leaf's share), and shortfall below its floor, which it may ask back
    while another user holds more than its allocation."""
    if t.sharing != "capacity" or q.user_limit <= 0 or q.reclaim_timeout_s is None:
        return None
    adm = {j.job_id for j in snap.jobs if j.admitted} | set(a.admit)
    mine = [j for j in snap.jobs if j.job_id in adm and j.queue == q.path]
    got = split_in_queue(q, a.shares[q.path], mine)
    floors = user_floors(q, a.shares[q.path], mine)
    out = {u: {"held": sum(j.running for j in mine if j.user == u),
               "alloc": sum(got[j.job_id] for j in mine if j.user == u),
               "room": sum(max(0.0, j.running - a.tokens[j.job_id]) for j in mine if j.user == u),
               "jobs": sum(j.user == u for j in mine)} for u in {j.user for j in mine}}
    lent = any(u["held"] > u["alloc"] + 1e-9 for u in out.values())
    for name, u in out.items():
        u["short"] = max(0.0, floors.get(name, 0.0) - u["held"]) if lent else 0.0
    return out


def deficit_bound(t, snap, a):
    """The most the starving may ask back: each leaf's target less what it holds, and each
    user's floor less what it holds where users reclaim."""
    lim = t.resolve(snap.capacity)
    adm = {j.job_id for j in snap.jobs if j.admitted} | set(a.admit)
    out = 0.0
    for q in t.leaves():
        mine = [j for j in snap.jobs if j.job_id in adm and j.queue == q.path]
        d, h = sum(j.demand for j in mine), sum(j.running for j in mine)
        target = min(lim[q.path].guarantee, d)
        if t.sharing == "fair":
            target = max(target, min(a.shares[q.path], d))
        out += max(0.0, target - h)
        out += sum(u["short"] for u in (user_accounts(t, q, snap, a) or {}).values())
    return out


def test_a_fifo_queue_gives_the_head_of_the_line_all_it_can_use_and_the_next_waits():
    tree = QueueTree(QueueSpec("root", order="fifo"))
    pol = make_sharing_policy(tree)
    first = JobView(0, "root", "u", 1.0, 0, 0.0, 16.0, 16, 16.0, True)
    later = JobView(1, "root", "v", 1.0, 0, 1.0, 4.0, 0, 0.0, False)
    a = pol.allocate(Snapshot(2.0, 16.0, (first, later)))
    assert a.tokens == {0: 16} and a.admit == [] and a.positions == {1: ("root", 1)}
    first = JobView(0, "root", "u", 1.0, 0, 0.0, 13.0, 16, 13.0, True)     # it needs less now
    a = pol.allocate(Snapshot(3.0, 16.0, (first, later)))
    assert a.tokens == {0: 13, 1: 3} and a.admit == [1]
    pol.validate(Snapshot(3.0, 16.0, (first, later)), a)


@pytest.mark.parametrize("sharing", ["fair", "capacity"])
@given(snap=snapshots())
def test_allocate_invariants(sharing, snap):
    t = three_leaves(sharing)
    pol = make_sharing_policy(t)
    for now in (0.0, 1000.0):                                            # before and after the timeouts
        s = Snapshot(now, snap.capacity, snap.jobs)
        a = pol.allocate(s)
        pol.validate(s, a)
        check_allocation(t, s, a, deficit_bound(t, s, a))


def test_admission_caps_jobs_at_the_cores():
    pol = make_sharing_policy(QueueTree.single())
    jobs = tuple(job(i, demand=3, admitted=False) for i in range(20))
    a = pol.allocate(Snapshot(0.0, 16, jobs))
    assert a.admit == list(range(16)) and all(t == 1 for t in a.tokens.values())
    assert [a.positions[i] for i in range(16, 20)] == [("root", k) for k in range(1, 5)]


def test_scarce_slots_go_to_the_leaf_with_fewest_jobs_per_share():
    t = tree({"a": {}, "b": {}})
    pol = make_sharing_policy(t)
    jobs = [job(i, "a", demand=50, running=1) for i in range(7)]        # a holds 7 of 8 slots
    jobs += [job(10 + i, "a", demand=5, admitted=False) for i in range(3)]
    jobs += [job(20, "b", demand=5, admitted=False, submitted=99)]
    a = pol.allocate(Snapshot(0.0, 8, tuple(jobs)))
    assert a.admit == [20]                                               # b's first job, though later


def test_user_job_limit_lets_the_next_user_in():
    t = tree({"q": {"max_jobs_per_user": 1, "max_running_jobs": 3}})
    pol = make_sharing_policy(t)
    jobs = (job(1, "q", "ann", admitted=False), job(2, "q", "ann", admitted=False), job(3, "q", "bob", admitted=False),
            job(4, "q", "cy", admitted=False), job(5, "q", "dee", admitted=False))
    a = pol.allocate(Snapshot(0.0, 100, jobs))
    assert a.admit == [1, 3, 4]
    assert a.positions == {2: ("q", 1), 5: ("q", 2)}


# ---- preemption and reclaim ------------------------------------------------------------------------
def test_fair_preemption_after_min_share_timeout_takes_only_the_deficit():
    t = tree({"prod": {"guarantee": 6, "min_share_timeout_s": 10}, "batch": {}})
    pol = FairSharing(t)
    batch = [job(i, "batch", demand=8, running=8, priority=p, submitted=s)
             for i, (p, s) in enumerate([(1, 0), (0, 1), (0, 2)])]
    prod = [job(10, "prod", demand=10, admitted=False, submitted=5)]
    s0 = Snapshot(0.0, 24, tuple(batch + prod))
    a0 = pol.allocate(s0)
    pol.validate(s0, a0)
    assert a0.admit == [10] and a0.reclaim == [] and a0.next_run_s == pytest.approx(10)
    assert a0.shares["prod"] == pytest.approx(10)       # fair share: min share 6, then even (10, 14)
    assert a0.starving["prod"] == 0.0
    prod = [job(10, "prod", demand=10, running=0)]
    s1 = Snapshot(4.0, 24, tuple(batch + prod))
    a1 = pol.allocate(s1)
    assert a1.reclaim == [] and a1.next_run_s == pytest.approx(6) and a1.starving["prod"] == pytest.approx(4)
    s2 = Snapshot(10.0, 24, tuple(batch + prod))
    a2 = pol.allocate(s2)
    pol.validate(s2, a2)
    # Tmin expired: prod is brought to its min share (6); the fair-share timeout is off. Victims:
    # lowest priority, then most recently submitted (job 2, then 1), each down to no less than
    # its new grant (batch's 14 split 5, 5, 4).
    assert [a2.tokens[i] for i in range(3)] == [5, 5, 4]
    assert a2.reclaim == [Reclaim(2, 4, 0.0), Reclaim(1, 6, 0.0)]
    assert sum(8 - r.tokens for r in a2.reclaim) == 6
    # past its timeout it is asked for every round until it has it (the RM does not ask a job
    # again before its kills are heard of): no timer of its own
    assert a2.next_run_s is None
    a3 = pol.allocate(Snapshot(10.5, 24, tuple(batch + prod)))
    assert a3.reclaim == a2.reclaim


def test_fair_preemption_never_takes_from_a_pool_at_its_share():
    t = tree({"p": {"guarantee": 10, "min_share_timeout_s": 0}, "q": {}, "r": {}})
    pol = FairSharing(t)
    jobs = (job(1, "q", demand=10, running=10), job(2, "r", demand=30, running=14),
            job(3, "p", demand=10, running=0))
    s = Snapshot(0.0, 24, jobs)
    a = pol.allocate(s)
    pol.validate(s, a)
    # shares: p 10, q 7, r 7: q is over its share by 3, r by 7; p asks back 10.
    assert a.shares == pytest.approx({"root": 24, "p": 10, "q": 7, "r": 7})
    assert {r.job_id: r.tokens for r in a.reclaim} == {2: 7, 1: 7}


def test_capacity_reclaim_kills_at_the_deadline():
    t = load_queue_file(EXAMPLES / "capacity-70-30.toml")
    pol = CapacitySharing(t)
    a_jobs = [job(i, "a", demand=40, running=40 if i < 2 else 20, submitted=i) for i in range(3)]   # a: 100 of 100
    b_jobs = [job(9, "b", demand=50, admitted=False, submitted=50)]
    s = Snapshot(100.0, 100, tuple(a_jobs + b_jobs))
    r0 = pol.allocate(s)
    pol.validate(s, r0)
    assert r0.admit == [9] and r0.shares["b"] == pytest.approx(30) and r0.shares["a"] == pytest.approx(70)
    assert sum(r0.tokens[i] for i in range(3)) == 70               # tokens cut at once
    # 30 back within 10 s, most recently submitted first, each down to no less than its grant
    # (fifo in a: 40, 30 and nothing left for job 2): 20 from job 2, 10 from job 1.
    assert [r0.tokens[i] for i in range(3)] == [40, 30, 0]
    assert r0.reclaim == [Reclaim(2, 0, 10.0), Reclaim(1, 30, 10.0)]
    assert r0.next_run_s == pytest.approx(10)
    b_jobs = [job(9, "b", demand=50, running=0, submitted=50)]
    s = Snapshot(104.0, 100, tuple(a_jobs + b_jobs))
    r1 = pol.allocate(s)
    assert {r.within_s for r in r1.reclaim} == {6.0} and r1.starving["b"] == pytest.approx(4)
    s = Snapshot(111.0, 100, tuple(a_jobs + b_jobs))
    r2 = pol.allocate(s)
    assert {r.within_s for r in r2.reclaim} == {0.0} and r2.next_run_s is None
    # Once b holds its guarantee nothing is owed.
    a_jobs = [job(0, "a", demand=40, running=40), job(1, "a", demand=40, running=30), job(2, "a", demand=40, running=0)]
    s = Snapshot(112.0, 100, tuple(a_jobs + [job(9, "b", demand=50, running=30, submitted=50)]))
    r3 = pol.allocate(s)
    assert r3.reclaim == [] and r3.starving["b"] == 0.0


def test_capacity_without_reclaim_timeout_only_cuts_tokens():
    t = load_queue_file(EXAMPLES / "capacity-70-30.toml")
    pol = CapacitySharing(t)
    jobs = (job(1, "b", demand=100, running=100), job(2, "a", demand=100, running=0))
    a = pol.allocate(Snapshot(0.0, 100, jobs))
    assert a.tokens == {1: 30, 2: 70} and a.reclaim == [] and a.next_run_s is None
    assert a.starving["a"] == 0.0
    a = pol.allocate(Snapshot(50.0, 100, jobs))
    assert a.reclaim == [] and a.starving["a"] == pytest.approx(50)


def user_leaf(**kw):
    """A 60-core leaf with a user limit of half and a reclaim timeout of 10 s on 100 cores."""
    return tree({"q": {"guarantee": 60, "max": 60, "user_limit": 0.5, "reclaim_timeout_s": 10, **kw}}, "capacity")


def test_capacity_user_limit_is_reclaimed_like_lent_capacity():
    pol = CapacitySharing(user_leaf())
    ann = job(1, "q", "ann", demand=100, running=52, tokens=60)        # alone, ann took the whole leaf
    bob = job(2, "q", "bob", demand=100, admitted=False, submitted=5)
    s = Snapshot(0.0, 100, (ann, bob))
    a = pol.allocate(s)
    pol.validate(s, a)
    # bob's floor is half the leaf: both are granted 30 at once; ann's 22 above its grant are
    # asked back ahead, to be killed at the deadline only (nothing is killed before).
    assert a.admit == [2] and a.tokens == {1: 30, 2: 30}
    assert a.reclaim == [Reclaim(1, 30, 10.0)] and a.next_run_s == pytest.approx(10)
    bob = job(2, "q", "bob", demand=100, running=0, submitted=5)
    a = pol.allocate(Snapshot(6.0, 100, (ann, bob)))
    assert a.tokens == {1: 30, 2: 30} and a.reclaim == [Reclaim(1, 30, 4.0)] and a.next_run_s == pytest.approx(4)
    # At the deadline bob holds 15 of its 30: ann's job is owed no more than that (kill line 37).
    s = Snapshot(10.0, 100, (ann, job(2, "q", "bob", demand=100, running=15, submitted=5)))
    a = pol.allocate(s)
    pol.validate(s, a)
    assert a.reclaim == [Reclaim(1, 37, 0.0)] and a.next_run_s is None and pol.last_deficit == pytest.approx(15)
    # ann's tasks ended by themselves in time: nothing owed by anyone (the leaf is short of its
    # guarantee now, but nobody holds more than their allocation: its timer runs, nothing is asked).
    s = Snapshot(10.0, 100, (job(1, "q", "ann", demand=100, running=30), bob))
    a = pol.allocate(s)
    pol.validate(s, a)
    assert a.reclaim == [] and a.starving["q"] == 0.0


def test_capacity_user_give_back_from_the_user_most_over_first():
    pol = CapacitySharing(user_leaf(user_limit=0.25))
    jobs = (job(1, "q", "ann", demand=50, running=30), job(2, "q", "cy", demand=50, running=26),
            job(3, "q", "bob", demand=50, running=8))
    s = Snapshot(0.0, 100, jobs)
    a = pol.allocate(s)
    pol.validate(s, a)
    # Three users: 20 each. bob is 12 short; ann is 10 over, cy 6: all of ann's 10, then 2 of cy's.
    assert a.tokens == {1: 20, 2: 20, 3: 20}
    assert a.reclaim == [Reclaim(1, 20, 10.0), Reclaim(2, 24, 10.0)]


def test_queue_and_user_give_backs_on_one_job_merge():
    t = tree({"a": {"guarantee": 50, "user_limit": 0.5, "reclaim_timeout_s": 10},
              "b": {"guarantee": 50, "reclaim_timeout_s": 4}}, "capacity")
    pol = CapacitySharing(t)
    jobs = (job(1, "a", "ann", demand=100, running=90), job(2, "a", "bob", demand=100, running=0),
            job(3, "b", "cy", demand=50, running=0))
    s = Snapshot(0.0, 100, jobs)
    a = pol.allocate(s)
    pol.validate(s, a)
    # b wants its 50 back within 4 s: a is 40 over its guarantee. bob wants his floor of 25
    # within 10 s: ann is 65 over hers. ann's job owes both (40 + 25) by the earlier deadline.
    assert a.tokens == {1: 25, 2: 25, 3: 50}
    assert a.reclaim == [Reclaim(1, 25, 4.0)] and pol.last_deficit == pytest.approx(75)


@st.composite
def user_snapshots(draw):
    """A leaf whose users reclaim, alone or beside a leaf that reclaims its lent guarantee."""
    q = {"guarantee": "60%", "user_limit": draw(st.sampled_from([0.2, 0.5, 1.0])),
         "reclaim_timeout_s": draw(st.sampled_from([0, 5])), "order": draw(st.sampled_from(["fifo", "fair"]))}
    queues = {"a": q, "b": {"guarantee": "40%", "reclaim_timeout_s": 3}} if draw(st.booleans()) else {"a": q}
    jobs = []
    for i in range(draw(st.integers(1, 12))):
        admitted = draw(st.integers(0, 4)) > 0
        demand = float(draw(st.sampled_from([0, 2, 5, 12, 40])))
        running = float(draw(st.integers(0, int(demand)))) if admitted else 0.0
        jobs.append(JobView(i, draw(st.sampled_from(sorted(queues))), draw(st.sampled_from("xyz")), 1.0,
                            draw(st.integers(0, 1)), float(draw(st.integers(0, 9))), demand, int(running), running,
                            admitted))
    return tree(queues, "capacity"), Snapshot(0.0, float(draw(st.sampled_from([8, 16, 40, 100]))), tuple(jobs))


@given(user_snapshots())
def test_user_give_backs_within_deficits_and_allocations(case):
    t, snap = case
    pol = CapacitySharing(t)
    alone = len(t.leaves()) == 1
    for now in (0.0, 10.0):                                              # timers start; then all due
        s = Snapshot(now, snap.capacity, snap.jobs)
        a = pol.allocate(s)
        pol.validate(s, a)
        check_allocation(t, s, a, deficit_bound(t, s, a))                # one Reclaim a job; users' floors
        byid = {j.job_id: j for j in s.jobs}
        users = user_accounts(t, t.leaf("a"), s, a)
        killed = sum(byid[r.job_id].running - r.tokens for r in a.reclaim if byid[r.job_id].queue == "a")
        short = sum(u["short"] for u in users.values())
        if alone:                                                        # only users give back here
            assert killed <= short + 1e-6
            # ...all they can: what the users over their allocation run above their grants
            over = [u for u in users.values() if u["held"] > u["alloc"]]
            can = sum(min(u["held"] - u["alloc"], u["room"]) for u in over)
            assert killed >= min(short, can) - sum(u["jobs"] for u in over) - 1e-6   # kill lines round down


def test_three_pools_small_jobs_get_in_fast():
    t = load_queue_file(EXAMPLES / "three-pools.toml")
    pol = make_sharing_policy(t)
    large = [job(i, "large", demand=60, running=50, submitted=i) for i in range(2)]
    assert isinstance(pol, FairSharing)
    s = Snapshot(0.0, 100, tuple(large + [job(10, "small", demand=4, admitted=False, submitted=30)] +
                                 [job(11 + k, "medium", demand=30, admitted=False, submitted=31) for k in range(1)]))
    a = pol.allocate(s)
    pol.validate(s, a)
    assert a.admit == [10, 11]
    # min shares first (small 4 of its 20, medium 10), the rest max-min by weight 1 : 0.5.
    assert a.shares["small"] == pytest.approx(4)
    assert a.shares["medium"] == pytest.approx(30) and a.shares["large"] == pytest.approx(66)
    assert a.tokens[10] == 4 and a.next_run_s == pytest.approx(5)
    held = tuple(large + [job(10, "small", demand=4, submitted=30), job(11, "medium", demand=30, submitted=31)])
    a = pol.allocate(Snapshot(5.0, 100, held))
    # small's Tmin (5 s) expired: 4 back at once from large; medium waits for its own 30 s.
    # (its next timer: its fair-share timeout, 15 s from its arrival)
    assert sum(50 - r.tokens for r in a.reclaim) == 4 and a.next_run_s == pytest.approx(10)
    assert all(r.within_s == 0 for r in a.reclaim)


def test_make_sharing_policy_picks_by_tree():
    assert type(make_sharing_policy(tree({"a": {}}, "capacity"))) is CapacitySharing
    assert type(make_sharing_policy(tree({"a": {}}))) is FairSharing


def test_unknown_queue_in_a_snapshot_is_an_error():
    pol = make_sharing_policy(tree({"a": {}}))
    with pytest.raises(UnknownQueue):
        pol.allocate(Snapshot(0.0, 8, (job(1, "zz"),)))


def test_two_thousand_jobs_validate():
    rng = np.random.default_rng(7)
    t = load_queue_file(EXAMPLES / "three-pools.toml")
    pol = make_sharing_policy(t)
    jobs = []
    for i in range(2000):
        adm = bool(rng.random() < 0.8)
        dem = float(rng.integers(1, 200))
        run = float(rng.integers(0, dem + 1)) if adm else 0.0
        jobs.append(JobView(i, str(rng.choice(["small", "medium", "large"])), f"u{rng.integers(50)}", 1.0,
                            int(rng.integers(0, 3)), float(rng.random() * 100), dem, int(run), run, adm))
    for cap in (80000.0, 1600.0):
        s = Snapshot(500.0, cap, tuple(jobs))
        a = pol.allocate(s)
        pol.validate(s, a)                          # raises on a broken invariant
        assert a.tokens and sum(a.tokens.values()) <= cap, (len(a.tokens), sum(a.tokens.values()), cap)
