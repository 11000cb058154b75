"""The turns the writers of this process take in one table, whatever its format."""

from __future__ import annotations

import threading
from pathlib import Path


class TableTurns:
    """The writes of this process into one table, shared by every executor because two types may
    land in the same table (`[collector] writes_per_type` writes of one type overlap too).

    `lock` makes them take turns where they must: a publication into a Parquet table, and the whole
    of an append straight into it (appends share its `_temporary`); the commits of a Delta table, in
    the order given. Staging, each bulk in a private directory of its own, overlaps."""

    def __init__(self) -> None:
        self.lock = threading.RLock()


_tables: dict[Path | str, TableTurns] = {}
_guard = threading.Lock()


def table_turns(location: Path | str) -> TableTurns:
    """The `TableTurns` of the table at `location` (a local path or an object store's URI)."""
    with _guard:
        return _tables.setdefault(location.absolute() if isinstance(location, Path) else str(location), TableTurns())
