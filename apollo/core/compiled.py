"""``mypyc_attr`` for classes the native build compiles (apollo.tools.native), or a no-op where
mypy (and with it mypy_extensions) is not installed: only a build reads it.

A compiled class that the project's extension points invite users to subclass in plain Python
(a sharing kind) says so with ``@mypyc_attr(allow_interpreted_subclasses=True)``; the class
attributes such a subclass overrides must be ``ClassVar``s (docs/native.md).
"""
from __future__ import annotations

from typing import Any

try:
    from mypy_extensions import mypyc_attr
except ImportError:     # pragma: no cover  (mypy not installed: nothing is compiled)
    def mypyc_attr(*_args: Any, **_kwargs: Any) -> Any:
        return lambda cls: cls

__all__ = ["mypyc_attr"]
