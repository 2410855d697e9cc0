"""Apollo-style decentralized cluster scheduler.

``apollo.Client`` is the Python client of a live cluster (see apollo.tools.client); it is imported
on first use so that ``import apollo`` and the CLI stay cheap.
"""
import os as _os

__version__ = "0.1.0"
__all__ = ["Client"]


def __getattr__(name: str):
    if name == "Client":
        from apollo.tools.client import Client
        return Client
    raise AttributeError(f"module 'apollo' has no attribute {name!r}")


# APOLLO_NATIVE=1: the compiled kernel and PN (apollo.tools.native), if built for these sources. Here,
# as importing anything of the project imports this package before those modules.
if _os.environ.get("APOLLO_NATIVE", "") not in ("", "0"):
    from apollo.tools.native import enable_from_env as _enable_native
    _enable_native()
