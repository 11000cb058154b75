"""mqbridge core: message model, bulk collector, Spark executor, control thread, counters."""

from __future__ import annotations

from bridge.hookspecs import hookimpl

__version__ = "0.1.0"

__all__ = ["__version__", "hookimpl"]
