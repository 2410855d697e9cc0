"""Writing one server's reading (its wait matrix) into its row of a servers x shapes float32
matrix, as the RM's cluster load and a JM host's view keep them.

A reading handed over as a list of floats (a simulated PN's, when messages do not go through
the wire) is packed straight into the row's bytes: numpy's conversion of a 12-float list costs
about ten times as much, and a reading is written per heartbeat and per status batch. struct's
"f" rounds a float to float32 as numpy's cast does (to nearest, ties to even). An array, or a
list struct refuses (a wrong length, a value beyond float32), takes numpy's assignment, with its
conversion and its errors.
"""
from __future__ import annotations

import struct
from typing import Any

import numpy as np


class RowWriter:
    __slots__ = ("matrix", "_n", "_pack", "_size", "_bytes")

    def __init__(self, matrix: np.ndarray) -> None:
        if matrix.dtype != np.float32 or matrix.ndim != 2 or not matrix.flags.c_contiguous:
            raise ValueError("RowWriter writes rows of a C-contiguous 2-D float32 matrix")
        self.matrix = matrix                 # (never replaced: the bytes below are its buffer)
        self._n = matrix.shape[0]
        row = struct.Struct(f"={matrix.shape[1]}f")
        self._pack = row.pack_into           # (bound once: looked up per write, it cost a fifth of one)
        self._size = row.size
        self._bytes = memoryview(matrix.data).cast("B")

    def write(self, i: int, values: Any) -> None:
        """matrix[i] = values."""
        if type(values) is list and 0 <= i < self._n:
            try:
                if len(values) == 12:
                    # (the shape grid's width, every reading's: the arguments spelled out, as a
                    # compiled star-call builds a list and a tuple first, two thirds of its cost)
                    v = values
                    self._pack(self._bytes, i * self._size, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8],
                               v[9], v[10], v[11])
                else:
                    self._pack(self._bytes, i * self._size, *values)
                return
            except (struct.error, OverflowError):
                pass
        self.matrix[i] = values
