"""Workloads: trace readers and synthetic generators behind one entry point.

``load_workload(spec)`` accepts

- a path to an existing ``.tsv`` file: a SWIM Facebook trace (``swim.read_swim``);
- a path to an existing ``.tr`` file: a Hawk/Eagle trace (``hawk.read_hawk``);
- a generator ``NAME`` or ``NAME:key=value,key=value`` (``synthetic``), e.g.
  ``fb2009:jobs=300`` or ``scale:servers=1000,seconds=60``.

The returned jobs are sorted by arrival (stable) and shifted so the first
arrives at 0, and every job has passed ``JobSpec.validate``.
"""
from __future__ import annotations

import inspect
import math
import re
from pathlib import Path
from typing import Callable

from apollo.core.spec import SpecError, Workload
from apollo.workloads import synthetic
from apollo.workloads.hawk import read_hawk
from apollo.workloads.swim import read_swim, sort_and_shift

GENERATORS: dict[str, Callable[..., Workload]] = {
    "fb2009": synthetic.fb2009,
    "heavytail": synthetic.heavytail,
    "smalljobs": synthetic.smalljobs,
    "scale": synthetic.scale,
    "dag": synthetic.dag,
}
WORKLOAD_NAMES: list[str] = list(GENERATORS)

__all__ = ["load_workload", "generator_params", "read_swim", "read_hawk", "WORKLOAD_NAMES", "GENERATORS"]

_INT = re.compile(r"[+-]?\d+")


def generator_params(name: str) -> dict[str, int | float]:
    """The keys a generator accepts in ``NAME:key=value`` and their defaults."""
    sig = inspect.signature(GENERATORS[name])
    return {p.name: p.default for p in sig.parameters.values() if p.name != "seed"}


def load_workload(spec: str, seed: int = 0, *, cluster_servers: int | None = None) -> Workload:
    """Load a trace file or build a synthetic workload (see the module docstring).

    ``seed`` drives the SWIM duration jitter and the generators (Hawk traces
    ignore it). ``cluster_servers`` scales SWIM byte counts by the target/source
    cluster size, and is the default ``servers`` of the ``scale`` generator.
    """
    spec = str(spec).strip()
    if not spec:
        raise SpecError(f"empty workload spec (give a .tsv/.tr file or one of: {', '.join(WORKLOAD_NAMES)})")
    path = Path(spec)
    suffix = path.suffix.lower()
    if suffix in (".tsv", ".tr") and path.is_file():
        if suffix == ".tsv":
            wl = read_swim(path, seed=seed, cluster_servers=cluster_servers)
        else:
            wl = read_hawk(path)
    else:
        name, _, arg_text = spec.partition(":")
        name = name.strip()
        if name in GENERATORS:
            params = _parse_params(name, arg_text)
            if name == "scale" and cluster_servers is not None and "servers" not in params:
                params["servers"] = cluster_servers
            wl = GENERATORS[name](seed=seed, **params)
            wl = Workload(spec if arg_text.strip() else name, wl.jobs)
        elif path.exists():
            raise SpecError(f"workload file {spec!r}: unsupported type {suffix or '(no extension)'!r}; "
                            "expected .tsv (SWIM) or .tr (Hawk/Eagle)")
        else:
            raise SpecError(f"workload {spec!r}: file not found, and not a generator name "
                            f"(generators: {', '.join(WORKLOAD_NAMES)}; files: *.tsv SWIM, *.tr Hawk/Eagle)")
    jobs = sort_and_shift(wl.jobs)
    for j in jobs:
        j.validate(f"workload {wl.name!r}: ")
    return Workload(wl.name, jobs)


def _parse_params(name: str, text: str) -> dict[str, int | float]:
    valid = generator_params(name)
    keys = ", ".join(f"{k} (default {v})" for k, v in valid.items())
    out: dict[str, int | float] = {}
    if not text.strip():
        return out
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key:
            raise SpecError(f"workload {name!r}: expected key=value, got {item!r}; keys: {keys}")
        if key not in valid:
            raise SpecError(f"workload {name!r}: unknown key {key!r}; keys: {keys}")
        if key in out:
            raise SpecError(f"workload {name!r}: key {key!r} given twice")
        default = valid[key]
        if isinstance(default, int) and not isinstance(default, bool):
            if not _INT.fullmatch(value):
                raise SpecError(f"workload {name!r}: {key} expects an integer, got {value!r}")
            out[key] = int(value)
        else:
            try:
                x = float(value)
            except ValueError:
                x = math.nan
            if not math.isfinite(x):
                raise SpecError(f"workload {name!r}: {key} expects a number, got {value!r}")
            out[key] = x
    return out
