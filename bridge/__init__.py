"""mqbridge: move messages from IBM MQ and STOMP brokers into Spark tables.

This module is the public API for plugin authors::

    from mqbridge import hookimpl, Message
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from mqbridge.hookspecs import hookimpl

try:
    __version__ = version("mqbridge")
except PackageNotFoundError:  # running from a checkout that was never installed
    __version__ = "0.0.0"

__all__ = ["__version__", "hookimpl"]
