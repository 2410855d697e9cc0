"""Apollo-style decentralized cluster scheduler.

``apollo.Client`` is the Python client of a live cluster (see apollo.client); it is imported
on first use so that ``import apollo`` and the CLI stay cheap.
"""
__version__ = "0.1.0"
__all__ = ["Client"]


def __getattr__(name: str):
    if name == "Client":
        from apollo.client import Client
        return Client
    raise AttributeError(f"module 'apollo' has no attribute {name!r}")
