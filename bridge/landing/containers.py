"""Containers: the tables of a message type and the `put_date` partitions inside them.

The seed design stores a message as a key/value pair, the key its timestamp, and keeps one data
container per destination. Here a type's `table` may be a template (`"{destination}"`, see
`mqbridge.config.tables`), so a type lands one table per queue, created by the first bulk that
reaches it; inside a table each `put_date=YYYY-MM-DD` directory is one container (the unit that
`mqbridge purge` deletes from, copies or drops), and rows in each written file are ordered by
`put_timestamp`, the key.

Listing reads only Parquet footers (row counts and `put_timestamp` statistics), never the rows.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from mqbridge.config.tables import render
from mqbridge.errors import PurgeError
from mqbridge.message import Bulk

#: The order of rows inside a written file: by partition first (Spark's writer needs it), then the key.
SORT_COLUMNS = ("put_date", "put_timestamp")
#: The file whose lock serialises publications into a table with a purge's swap (hidden from readers).
LOCK_FILE = "_mqbridge.lock"
PURGE_LOCK_FILE = "_mqbridge.purge.lock"
PARTITION = re.compile(r"put_date=(\d{4}-\d{2}-\d{2})")


def tables_of(table: str, bulk: Bulk, rows: Iterable[int]) -> dict[str, list[int]]:
    """The bulk positions `rows` grouped by the table each message lands in (`table` rendered
    per message), in order of first appearance."""
    groups: dict[str, list[int]] = {}
    for i in rows:
        m = bulk.messages[i]
        name = render(table, source=m.source, destination=m.destination,
                      message_type=m.message_type or bulk.message_type, subscription=m.subscription)
        groups.setdefault(name, []).append(i)
    return groups


@dataclass(frozen=True)
class Container:
    """One `put_date` partition of a table, as its Parquet footers describe it."""

    table: Path
    put_date: str  # YYYY-MM-DD
    files: tuple[Path, ...]
    rows: int
    bytes: int
    oldest: datetime | None  # smallest put_timestamp (None: no statistics)
    newest: datetime | None

    @property
    def path(self) -> Path:
        """The container's directory."""
        return self.table / f"put_date={self.put_date}"


def data_files(directory: Path) -> list[Path]:
    """The Parquet files a reader of `directory` sees (not `_`/`.` names, as Spark skips them)."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir()
                  if p.is_file() and p.name.endswith(".parquet") and not p.name.startswith(("_", ".")))


def read_container(table: Path, put_date: str) -> Container:
    """The footers of one container's files, summed up."""
    import pyarrow.parquet as pq

    files = data_files(table / f"put_date={put_date}")
    rows = size = 0
    oldest: datetime | None = None
    newest: datetime | None = None
    for path in files:
        meta = pq.read_metadata(path)
        rows += meta.num_rows
        size += path.stat().st_size
        for low, high in _key_ranges(path, meta):
            oldest = low if oldest is None else min(oldest, low)
            newest = high if newest is None else max(newest, high)
    return Container(table, put_date, tuple(files), rows, size, oldest, newest)


def containers(table: Path) -> list[Container]:
    """Every container of a table, oldest put_date first."""
    if not table.is_dir():
        return []
    dates = sorted(m[1] for p in table.iterdir() if p.is_dir() and (m := PARTITION.fullmatch(p.name)))
    return [read_container(table, d) for d in dates]


def _key_ranges(path: Path, meta: Any) -> list[tuple[datetime, datetime]]:
    """(min, max) put_timestamp of each row group: from the statistics, or (files written with
    Spark's INT96 timestamps, which have none) from the column itself."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    column = meta.schema.to_arrow_schema().get_field_index("put_timestamp")
    if column < 0 or meta.num_rows == 0:
        return []
    ranges = []
    for g in range(meta.num_row_groups):
        stats = meta.row_group(g).column(column).statistics
        if stats is None or not stats.has_min_max:
            break
        ranges.append((_utc(stats.min), _utc(stats.max)))
    else:
        return ranges
    found = pc.min_max(pq.read_table(path, columns=["put_timestamp"]).column(0)).as_py()
    return [(_utc(found["min"]), _utc(found["max"]))] if found["min"] is not None else []


def _utc(value: object) -> datetime:
    if isinstance(value, datetime):
        return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)
    raise TypeError(f"put_timestamp statistics are not timestamps: {value!r}")


@contextlib.contextmanager
def table_lock(table: Path) -> Iterator[None]:
    """Hold the table's lock (every thread and process of this host that publishes into or
    purges `table` takes it): an exclusive lock on `<table>/_mqbridge.lock`, blocking."""
    os.makedirs(table, exist_ok=True)
    fd = os.open(table / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _lock(fd)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


@contextlib.contextmanager
def purge_lock(table: Path) -> Iterator[None]:
    """Hold the right to purge `table` (one purge per table at a time); PurgeError at once if another
    thread or process of this host holds it."""
    fd = os.open(table / PURGE_LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            _lock(fd, blocking=False)
        except OSError as exc:
            raise PurgeError(f"table {table}: another purge is running on it") from exc
        yield
    finally:
        os.close(fd)


def _lock(fd: int, blocking: bool = True) -> None:
    try:
        import fcntl
    except ImportError:  # Windows: a byte-range lock, retried (msvcrt gives up after 10 s)
        import msvcrt

        while True:
            try:
                msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)  # type: ignore[attr-defined]
                return
            except OSError:
                if not blocking:
                    raise
                time.sleep(0.1)
    fcntl.flock(fd, fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB)
