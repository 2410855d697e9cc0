"""apollo.core.rows: a reading written into its row as numpy's assignment would write it."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from apollo.core.rows import RowWriter

SHAPES = 12
FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                   st.floats(min_value=-4e38, max_value=4e38),          # around float32's range
                   st.integers(0, 2 ** 30).map(lambda k: k * 2.0 ** -20 + 2.0 ** -45))   # near float32 ties


def _written(values, i=1):
    """What RowWriter leaves in a 3-row matrix, and what numpy's assignment leaves (or the
    exception class each raised)."""
    out = []
    for write in (lambda m: RowWriter(m).write(i, values), lambda m: m.__setitem__(i, values)):
        m = np.zeros((3, SHAPES), dtype=np.float32)
        try:
            with np.errstate(over="ignore", invalid="ignore"):
                write(m)
        except Exception as e:               # (the same class of error either way)
            out.append(type(e))
        else:
            out.append(m.tobytes())
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(FLOATS, min_size=SHAPES, max_size=SHAPES))
def test_a_list_reading_is_written_as_numpy_writes_it(values):
    mine, numpy_s = _written(values)
    assert mine == numpy_s


@pytest.mark.parametrize("values", [[1.0] * (SHAPES - 1), [1.0] * (SHAPES + 1), np.arange(SHAPES, dtype=np.float32),
                                    [3.5e38] * SHAPES, ["x"] * SHAPES])
def test_other_readings_take_numpys_assignment(values):
    mine, numpy_s = _written(values)
    assert mine == numpy_s


def test_rows_out_of_range_and_from_the_end_as_numpy():
    assert _written([2.0] * SHAPES, i=-1)[0] == _written([2.0] * SHAPES, i=-1)[1]
    assert _written([2.0] * SHAPES, i=3) == [IndexError, IndexError]


def test_only_a_contiguous_float32_matrix():
    with pytest.raises(ValueError):
        RowWriter(np.zeros((3, SHAPES)))
    with pytest.raises(ValueError):
        RowWriter(np.zeros((3, 2 * SHAPES), dtype=np.float32)[:, ::2])
