"""Option types for the command line: every number is range-checked by the parser.

A bad value ends in one line that names the option, the value and the range (argparse adds the
option's name: "apollo simulate: argument --loss: 1.5 is not in [0, 1)") and exit code 2.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

DEFAULT_CLUSTER = Path.home() / ".apollo" / "cluster"


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (argparse's own repeat the whole usage, which
    for `apollo simulate` is a dozen lines above the one that matters)."""

    def error(self, message: str):  # type: ignore[override]
        print(f"{self.prog}: {message} (see `{self.prog} --help`)", file=sys.stderr)
        sys.exit(2)


def _interval(lo: float | None, hi: float | None, lo_open: bool, hi_open: bool) -> str:
    if hi is None and lo is not None:
        return f"{'>' if lo_open else '>='} {lo:g}"
    left = "(" if lo_open else "["
    right = ")" if hi_open else "]"
    return f"{left}{'-inf' if lo is None else f'{lo:g}'}, {'inf' if hi is None else f'{hi:g}'}{right}"


def number(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False, hi_open: bool = False,
           integer: bool = False):
    """An argparse type: a finite number (an integer if ``integer``) within the interval."""
    def parse(text: str):
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {'an integer' if integer else 'a number'}") from None
        bad = (not math.isfinite(value)
               or (lo is not None and (value <= lo if lo_open else value < lo))
               or (hi is not None and (value >= hi if hi_open else value > hi)))
        if bad:
            raise argparse.ArgumentTypeError(
                f"{text} is not {'an integer ' if integer else ''}"
                + ("" if hi is None and lo is not None else "in ") + _interval(lo, hi, lo_open, hi_open))
        return value
    parse.__name__ = "integer" if integer else "number"
    return parse


def count(lo: int = 1, hi: int | None = None):
    """An integer >= lo (and <= hi)."""
    return number(lo, hi, integer=True)


positive = number(0, lo_open=True)             # > 0
non_negative = number(0)                       # >= 0
probability = number(0, 1, hi_open=True)       # [0, 1): 1 would lose or fail everything, forever
fraction = number(0, 1)                        # [0, 1]
port = number(0, 65535, integer=True)


def add_cluster_option(p: argparse.ArgumentParser) -> None:
    """--cluster DIR, defaulting to $APOLLO_CLUSTER, then ~/.apollo/cluster."""
    p.add_argument("--cluster", metavar="DIR", default=os.environ.get("APOLLO_CLUSTER") or str(DEFAULT_CLUSTER),
                   help="the cluster's folder (default: $APOLLO_CLUSTER, else ~/.apollo/cluster)")


def listing(item):
    """A comma-separated list, each item parsed by ``item`` (a type above, or a tuple of names)."""
    def parse(text: str) -> list:
        parts = [x.strip() for x in text.split(",") if x.strip()]
        if not parts:
            raise argparse.ArgumentTypeError(f"{text!r} is an empty list")
        if isinstance(item, tuple):
            bad = [x for x in parts if x not in item]
            if bad:
                raise argparse.ArgumentTypeError(f"unknown {', '.join(bad)} (known: {', '.join(item)})")
            return parts
        return [item(x) for x in parts]
    parse.__name__ = "list"
    return parse
