"""The results page (docs/results.md), written from the JSON the benches wrote.

    apollo bench results --from DIR [--out docs/results.md]

DIR holds the benches' JSON under fixed names: ``capacity-sim.json`` and ``capacity-live.json``
(``apollo bench capacity --size live --json ...``, without and with ``--live``), the same for
``fairshare-*``, ``shortjob-capacity-*`` and ``shortjob-pools-*`` (``apollo bench shortjob
--scenario NAME``), and ``scale.json``, ``pools.json``, ``throughput.json``, ``compare.json``,
``dolly.json``, ``corrections.json``, ``delay.json``, ``matching.json``, ``longspan.json``. Each bench present gets a
table, dated by when its JSON was written; the sharing benches' simulated and live runs of the
same scenario share one table, side by side. A bench with no JSON is listed as not measured.

The page has two parts, split by ``END_MARKER``: what this command writes, above it, and
hand-written figures below it (runs no JSON is kept for, with their dates). Regenerating
rewrites the part above and keeps everything from the marker on, so it never loses them.
"""
from __future__ import annotations

import json
import math
import os
import platform
import sys
from apollo.tools.cli.options import Parser
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

BEGIN = ("<!-- Written by `apollo bench results --from DIR --out docs/results.md` (bench/results.py) from the "
         "benches' JSON. Do not edit above the end marker: it is rewritten. -->")
END_MARKER = "<!-- end of generated figures: everything from this line on is hand-written and kept -->"
DEFAULT_TAIL = ("\n## Earlier measurements (hand-written)\n\n"
                "Figures for which no JSON was kept go here, each with its date.\n")

Loaded = dict[str, tuple[dict, str]]          # file stem -> (its JSON, the date it was written)


# ---------------------------------------------------------------------------- formatting

def table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return out + ["| " + " | ".join(r) + " |" for r in rows]


def num(v, fmt: str = "{:.1f}") -> str:
    """A figure as text: '-' when absent, 'never' for an infinite time."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float) and math.isinf(v):
        return "never"
    return fmt.format(v)


def pct(v) -> str:
    return num(v, "{:.1%}")


def written(files: Loaded, *names: str) -> str:
    dates = sorted({files[n][1] for n in names if n in files})
    return "JSON written " + ", ".join(dates) if dates else ""


# ---------------------------------------------------------------------------- one renderer per bench

@dataclass(frozen=True)
class Scenario:
    """One sharing scenario: its JSON is ``{stem}-sim.json`` and ``{stem}-live.json``."""
    stem: str
    title: Callable[[dict], str]                      # from either run's JSON
    figures: tuple[tuple[str, Callable[[dict], str]], ...]


SHARING = (
    Scenario("capacity", lambda d: f"capacity 70/30 (reclaim timeout {num(d.get('reclaim_timeout_s'), '{:g}')} s)", (
        ("queue b's guarantee back after (s)", lambda d: num(d.get("guarantee_back_after_s"))),
        ("queue a's tasks killed (minimum)", lambda d: f"{d['tasks_killed']} ({d['tasks_killed_minimum']})"),
        ("opportunistic attempts preempted", lambda d: num(d.get("opportunistic_preempted"), "{}")),
        ("user limit held (longest short, s)",
         lambda d: f"{num(d['user_limit_held'])} ({num(d['user_short_longest_s'])})"))),
    Scenario("fairshare", lambda d: f"fair share, two pools (Tfair {num(d.get('tfair_s'), '{:g}')} s, "
                                    f"tasks ~{num(d.get('task_s'), '{:g}')} s)", (
        ("to fair share with preemption (s)", lambda d: num(d["to_fair_share_s"]["preemption"])),
        ("to fair share without preemption (s)", lambda d: num(d["to_fair_share_s"]["no_preemption"])),
        ("pool 1's tasks killed (minimum)",
         lambda d: f"{d['tasks_killed']['preemption']} ({d['tasks_killed_minimum']})"))),
    *(Scenario(f"shortjob-{name}", lambda d, name=name: f"short job behind a long one, {name} "
                                                         f"(timeout {num(d.get('timeout_s'), '{:g}')} s)", (
        ("short job's completion s (due about)", lambda d: f"{num(d['short_job_s'])} ({num(d['due_s'], '{:g}')})"),
        ("long job's tasks killed (minimum)", lambda d: f"{d['tasks_killed']} ({d['tasks_killed_minimum']})")))
      for name in ("capacity", "pools")),
)
SHARING_FILES = tuple(f"{sc.stem}-{mode}" for sc in SHARING for mode in ("sim", "live"))


def sharing(files: Loaded) -> list[str]:
    """The sharing benches: the simulated and the live run of each scenario side by side."""
    rows, runs = [], []
    for sc in SHARING:
        sim, live = (files.get(f"{sc.stem}-{mode}", ({}, ""))[0] for mode in ("sim", "live"))
        if not (sim or live):
            continue
        runs += [d for d in (sim, live) if d]
        name = sc.title(sim or live)
        for label, get in sc.figures:
            rows.append([name, label, get(sim) if sim else "-", get(live) if live else "-"])
            name = ""
    sizes = sorted({d["size"] for d in runs if "size" in d})
    schedulers = sorted({d.get("scheduler", "?") for d in runs})
    out = [f"`apollo bench capacity|fairshare --size live`, `apollo bench shortjob` (simulated, at the live "
           f"cluster's cadences) and the same with `--live` (a local cluster); scheduler {', '.join(schedulers)}. "
           f"{written(files, *SHARING_FILES)}. What each figure means: [sharing.md](sharing.md) and the benches' "
           "docstrings.", ""]
    out += table(["scenario", "figure", "simulated", "live"], rows)
    absent = [sc.stem for sc in SHARING if not any(f"{sc.stem}-{m}" in files for m in ("sim", "live"))]
    if absent:
        out += ["", "Not measured in this run: " + ", ".join(f"`{a}-sim.json`, `{a}-live.json`" for a in absent) + "."]
    if len(sizes) > 1:
        out += ["", f"Note: these runs are of different sizes ({', '.join(sizes)}); compare simulated and live "
                "only at `--size live`."]
    return out


def scale(files: Loaded) -> list[str]:
    d = files["scale"][0]
    rows = [[f"{r['servers']:,}", f"{r['tasks']:,}", num(r["decisions_per_wall_s"], "{:,.0f}"),
             num(r["wall_s_per_task"] * 1e6), pct(r["locality_node"]), num(r["task_queue_delay_p95_s"], "{:.2f}"),
             f"{r['jobs_completed']}/{r['jobs']}"] for r in d["runs"]]
    return [f"`apollo bench scale`: {num(d.get('seconds'), '{:g}')} simulated seconds of arrivals; "
            f"{'compiled' if d.get('native') else 'interpreted'} modules; queues: {d.get('queues') or 'none'}. "
            f"{written(files, 'scale')}.", ""] + \
        table(["servers", "tasks", "decisions / wall s", "wall us / task", "node locality", "p95 queue delay s",
               "jobs done"], rows)


def longspan(files: Loaded) -> list[str]:
    d = files["longspan"][0]
    rows = [[f"{r['servers']:,}", f"{r['tasks']:,}", num(r["sim_s"], "{:,.0f}"), num(r["wall_s"]),
             num(r["decisions_per_wall_s"], "{:,.0f}"), num(r["wall_s_per_sim_hour"]),
             num(r["wall_s_per_sim_day"], "{:,.0f}"), f"{r['jobs_completed']}/{r['jobs']}"] for r in d["runs"]]
    scope = (f"first {d['jobs']} jobs" if d.get("jobs") else "all jobs") + \
        (f", at most {d['max_sim_hours']:g} simulated h" if d.get("max_sim_hours") else "")
    return [f"`apollo bench longspan`: `{d['workload']}`, load {d.get('load')}, seed {d.get('seed')}, {scope}; "
            f"{'compiled' if d.get('native') else 'interpreted'} modules, messages "
            f"{'through msgpack' if d.get('wire') else 'not encoded'}. Per simulated day: this run's ratio, "
            f"extrapolated. {written(files, 'longspan')}.", ""] + \
        table(["servers", "tasks", "sim s", "wall s", "decisions / wall s", "wall s / sim h", "wall s / sim day",
               "jobs done"], rows)


def throughput(files: Loaded) -> list[str]:
    from .throughput import FMT, LABEL, TARGETS
    d = files["throughput"][0]
    systems = [s for s in d if s != "config"]
    keys = [k for k in LABEL if any(isinstance(d[s].get(k), (int, float)) for s in systems)]
    rows = []
    for k in keys:
        op, target = TARGETS.get(k, TARGETS["noop_tasks_per_s"])
        rows.append([LABEL[k]] + [FMT[k].format(d[s][k]) if isinstance(d[s].get(k), (int, float)) else "-"
                                  for s in systems] + [f"{op} {FMT[k].format(target)}"])
    notes = [f"{s}: {d[s].get('skipped') or d[s].get('error')}" for s in systems
             if "skipped" in d[s] or "error" in d[s]]
    compiled = d.get("apollo", {}).get("native")
    return [f"`apollo bench throughput` (live, loopback): cluster processes "
            f"{'compiled' if compiled else 'interpreted' if compiled is not None else '(not said)'}. "
            f"{written(files, 'throughput')}.", ""] + table([""] + systems + ["target"], rows) + \
        ([""] + [f"- {n}" for n in notes] if notes else [])


def compare(files: Loaded) -> list[str]:
    d = files["compare"][0]
    schedulers = list(dict.fromkeys(r["scheduler"] for r in d["rows"]))
    cells: dict[tuple, dict] = {}
    for r in d["rows"]:
        cells.setdefault((r["workload"], r["load"]), {})[r["scheduler"]] = \
            f"{r['mean']:.2f} / {r['p50']:.2f}, {r['node_locality']:.1%}"
    rows = [[w, f"{load:g}"] + [c.get(s, "-") for s in schedulers] for (w, load), c in cells.items()]
    wins = d.get("apollo_at_least_greedy_cells", {})
    return [f"`apollo bench compare` (seed {d.get('setup', {}).get('seed', '?')}): job completion mean / p50 s, "
            f"node locality. apollo at most greedy: mean in {wins.get('mean', '?')} cells, p50 in "
            f"{wins.get('p50', '?')}; a repeated seeded run gives the same report: "
            f"{num(d.get('deterministic'))}. {written(files, 'compare')}.", ""] + \
        table(["workload", "load"] + schedulers, rows)


def dolly(files: Loaded) -> list[str]:
    d = files["dolly"][0]
    s = d.get("setup", {})
    rows = [[m, num(d["small_job_mean_s"][m], "{:.2f}"), num(d["slowest_over_median"][m], "{:.2f}"),
             pct(d.get("extra_resources_by_mode", {}).get(m))] for m in d["small_job_mean_s"]]
    return [f"`apollo bench dolly`: {s.get('jobs', '?')} jobs of {Path(str(s.get('trace', '?'))).name}, "
            f"{s.get('servers', '?')} servers, load {s.get('load', '?')} with stragglers, seeds {s.get('seeds', '?')}; "
            f"Dolly {pct(d.get('speedup_over_copies'))} faster than copies on small jobs' mean (paper: 34-46% over "
            f"LATE/Mantri), clone budget {pct(d.get('beta'))}. {written(files, 'dolly')}.", ""] + \
        table(["mode", "small jobs' mean s", "slowest / median", "extra resources (of the cluster)"], rows)


def corrections(files: Loaded) -> list[str]:
    d = files["corrections"][0]
    dup, opp, s = d["duplicates"], d["opportunistic"], d.get("setup", {})
    rows = [["duplicates (share of tasks)", pct(dup["triggered_frac"]), "under 0.5%"],
            ["duplicates that started before their first", pct(dup["success_frac"]), "82%"],
            ["utilization while work waits, opportunistic off -> on",
             f"{pct(opp['utilization']['off'])} -> {pct(opp['utilization']['on'])}", ""],
            ["regular tasks' p95 queue delay s, off -> on",
             f"{num(opp['regular_queue_delay_p95_s']['off'], '{:.2f}')} -> "
             f"{num(opp['regular_queue_delay_p95_s']['on'], '{:.2f}')}", ""]]
    return [f"`apollo bench corrections` (Apollo Table 2; opportunistic tasks): "
            f"{Path(str(s.get('trace', '?'))).name}, load {s.get('load', '?')}, seeds {s.get('seeds', '?')}. "
            f"{written(files, 'corrections')}.", ""] + table(["figure", "measured", "paper"], rows)


def delay(files: Loaded) -> list[str]:
    d = files["delay"][0]
    out = [f"`apollo bench delay` (HFS Fig. 15 and Table 4): node locality of small jobs' maps. "
           f"{written(files, 'delay')}.", ""]
    paper = d.get("paper", {})
    runs = d.get("by_scheduler", {d.get("scheduler", "?"): d})
    rows = []
    for name, r in runs.items():
        for maps, v in r["node_locality_by_maps"].items():
            rows.append([name, f"{maps} maps"] + [pct(x) for x in v])
    for maps, v in paper.get("fig15", {}).items():
        rows.append(["paper", f"{maps} maps"] + [pct(v.get(f"{w:g}")) if f"{w:g}" in v else "-" for w in d["wait_s"]])
    out += table(["scheduler", "jobs"] + [f"W1 = {w:g} s" for w in d["wait_s"]], rows)
    t4 = [[name, f"{m} maps", pct(a), pct(b)] for name, r in runs.items()
          for m, a, b in zip(r["table4"]["maps"], r["table4"]["without_delay"], r["table4"]["with_delay"])]
    p4 = paper.get("table4")
    if p4:
        t4 += [["paper", f"{m} maps", pct(a), pct(b)]
               for m, a, b in zip(d["table4"]["maps"], p4["without_delay"], p4["with_delay"])]
    return out + ["", "Table 4 (W1 = W2 = 15 s):", ""] + table(["scheduler", "jobs", "without delay", "with delay"], t4)


def pools(files: Loaded) -> list[str]:
    d = files["pools"][0]
    s = d.get("setup", {})
    rows = [[n, num(a), num(b), pct(c)] for n, a, b, c in
            zip(d["schedulers"], d["small_job_mean_s"], d["job_mean_s"], d["node_locality"])]
    return [f"`apollo bench pools`: {s.get('jobs', '?')} jobs of {Path(str(s.get('trace', '?'))).name}, "
            f"{s.get('servers', '?')} servers, load {s.get('load', '?')}, "
            f"queues {Path(str(s.get('queues', '?'))).name} "
            f"(fifo runs without them). {written(files, 'pools')}.", ""] + \
        table(["scheduler", "small jobs' mean s", "all jobs' mean s", "node locality"], rows)


def matching(files: Loaded) -> list[str]:
    d = files["matching"][0]
    rows = [[f"{n:,}", num(g, "{:.3f}"), num(s, "{:.3f}"), num(o, "{:.3f}"), num(so, "{:.3f}"), num(go, "{:.3f}")]
            for n, g, s, o, so, go in zip(d["tasks"], d["greedy"], d["stable"], d["optimal"],
                                          d["stable_over_optimal"], d["greedy_over_optimal"])]
    return [f"`apollo bench matching` (Apollo Fig. 12): {d.get('measure', 'mean completion')}; {d.get('servers', '?')} "
            f"servers, {d.get('reps', '?')} instances per size. {written(files, 'matching')}.", ""] + \
        table(["tasks", "greedy", "stable", "optimal", "stable / optimal", "greedy / optimal"], rows)


@dataclass(frozen=True)
class Section:
    title: str
    files: tuple[str, ...]            # the JSON names (stems) it reads; any one present renders it
    render: Callable[[Loaded], list[str]]


SECTIONS = (
    Section("Sharing: simulated and live side by side", SHARING_FILES, sharing),
    Section("Placement against the baselines", ("compare",), compare),
    Section("Matching quality", ("matching",), matching),
    Section("Scale", ("scale",), scale),
    Section("Long simulated spans", ("longspan",), longspan),
    Section("Live throughput", ("throughput",), throughput),
    Section("Pools", ("pools",), pools),
    Section("Delay scheduling", ("delay",), delay),
    Section("Stragglers: copies and Dolly's clones", ("dolly",), dolly),
    Section("Corrections and opportunistic tasks", ("corrections",), corrections),
)


# ---------------------------------------------------------------------------- the page

def machine() -> str:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{os.cpu_count()} cores (nproc), {model or platform.processor() or 'CPU model unknown'}, "
            f"Python {platform.python_version()}, {platform.system()} {platform.release()}")


def load(folder: Path) -> Loaded:
    out: Loaded = {}
    for f in sorted(folder.glob("*.json")):
        when = datetime.fromtimestamp(f.stat().st_mtime, timezone.utc).strftime("%Y-%m-%d")
        try:
            out[f.stem] = (json.loads(f.read_text()), when)
        except ValueError as e:
            raise ValueError(f"{f}: not JSON ({e})") from None
    return out


def generated(files: Loaded, source: str, today: str, host: str) -> str:
    lines = ["# Measured results", "", BEGIN, "",
             f"Written {today} from the JSON in `{source}`, on {host} (the machine the benches are assumed to have "
             "run on; each table says when its JSON was written). To regenerate: run the benches with "
             "`--json DIR/NAME.json`, then `apollo bench results --from DIR --out docs/results.md`."]
    missing = []
    for sec in SECTIONS:
        if not any(n in files for n in sec.files):
            missing.append(sec)
            continue
        try:
            body = sec.render(files)
        except (KeyError, TypeError, ValueError, IndexError) as e:     # a JSON of another bench version
            body = [f"Could not read the figures from {', '.join(n + '.json' for n in sec.files if n in files)}: "
                    f"{type(e).__name__} {e}."]
        lines += ["", f"## {sec.title}", ""] + body
    if missing:
        lines += ["", "## Not measured in this run", ""]
        lines += [f"- {s.title}: no {', '.join(n + '.json' for n in s.files)}" for s in missing]
    known = {n for s in SECTIONS for n in s.files}
    other = sorted(set(files) - known)
    if other:
        lines += ["", "Other JSON in the folder, not on this page: " + ", ".join(f"`{n}.json`" for n in other) + "."]
    return "\n".join(lines) + "\n\n"


def page(files: Loaded, source: str, previous: str | None, today: str, host: str) -> str:
    """The whole page: the generated part, then the marker and what followed it in ``previous``
    (the page as it was; None: there was none, and the hand-written part starts empty)."""
    if previous is None:
        tail = END_MARKER + "\n" + DEFAULT_TAIL
    elif END_MARKER in previous:
        tail = previous[previous.index(END_MARKER):]
    else:
        raise ValueError("the page to write has no end marker, so its hand-written part cannot be told apart; "
                         f"add this line above it first: {END_MARKER}")
    return generated(files, source, today, host) + tail


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="apollo bench results", description=__doc__.split("\n\n")[0])
    p.add_argument("--from", dest="source", required=True, metavar="DIR", help="the folder of the benches' JSON")
    p.add_argument("--out", metavar="PATH", help="the page to write (default: print it)")
    a = p.parse_args(argv)
    folder = Path(a.source)
    if not folder.is_dir():
        print(f"apollo bench results: {folder} is not a folder", file=sys.stderr)
        return 2
    out = Path(a.out) if a.out else None
    previous = out.read_text() if out is not None and out.exists() else None
    today = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    try:
        files = load(folder)
        text = page(files, a.source, previous, today, machine())
    except ValueError as e:
        print(f"apollo bench results: {e}", file=sys.stderr)
        return 2
    if out is None:
        sys.stdout.write(text)
    else:
        out.write_text(text)
        shown = sum(1 for sec in SECTIONS if any(n in files for n in sec.files))
        print(f"results page: {out} ({shown} of {len(SECTIONS)} sections from JSON)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
