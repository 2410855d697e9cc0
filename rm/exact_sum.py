"""Float sums kept exactly while terms come and go (a queue's demand, as its jobs' demand moves).

A float total kept by adding and subtracting drifts: a queue whose jobs have all left would show
a demand of 1e-17, and the total would stop matching a fresh sum. Every finite double is an
integer multiple of 2**-1074 and below 2**1024, so an integer in units of 2**-FRACTION_BITS holds
any sum of them exactly; ``to_float`` rounds it once, correctly (Python's int division).
"""
from __future__ import annotations

FRACTION_BITS = 1074
_ONE = 1 << FRACTION_BITS


def fixed(x: float) -> int:
    """``x`` as an exact integer in units of 2**-FRACTION_BITS."""
    num, den = x.as_integer_ratio()          # den is a power of two, at most 2**1074
    return num << (FRACTION_BITS + 1 - den.bit_length())


def to_float(n: int) -> float:
    """An exact fixed-point sum, rounded to the nearest double."""
    return n / _ONE if n else 0.0
