"""Landing: bulks into Spark tables, exactly once.

`landing` (the landing protocol of one process: stage, prepare, publish) and `ledger/` (the landing
ledger: `sqlite`, `postgres`).

The surface below is imported lazily, on first use, so that importing the ledger does not load
what landing a bulk needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mqbridge.landing.landing import Landing

_SURFACE = {
    "Landing": "mqbridge.landing.landing",
}

__all__ = ["Landing"]


def __getattr__(name: str) -> Any:
    module = _SURFACE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
