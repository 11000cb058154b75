"""mqbridge core: message model, bulk collector, Spark executor, control thread, counters."""

from __future__ import annotations

__version__ = "0.1.0"
