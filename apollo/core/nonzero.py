"""``count_nonzero`` as numpy's C function, without its Python-level wrapper.

``np.count_nonzero(x)`` and ``x.any()`` each run a few lines of Python inside numpy (argument
dispatch, a reduction set up for any axis) before the count: ~2,000 instructions a call, on
arrays of a few dozen elements, dozens of times per job on the placement and report paths.
The C function gives the same count of a whole array (``any``: the count is positive), as a
numpy integer, as the wrapper does.
"""
from __future__ import annotations

try:        # numpy >= 2
    from numpy._core.multiarray import count_nonzero
except ImportError:     # pragma: no cover  (numpy 1.26)
    from numpy.core.multiarray import count_nonzero

__all__ = ["count_nonzero"]
