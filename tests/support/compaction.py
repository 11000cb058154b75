"""Compactions to test: a container of many small files landed as the bridge lands them (the real
landing: ledger, staging, publication), rows interleaved in time across the files, and the
configuration `mqbridge compact` and `mqbridge ledger` run with."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from mqbridge.config import TypeConfig
from mqbridge.counters import Counters
from mqbridge.landing.containers import data_files
from mqbridge.landing.executor import SparkExecutor
from mqbridge.landing.landing import Landing
from mqbridge.landing.ledger import SqliteLedger, owner_id
from mqbridge.message import Bulk, Message
from tests.support.configs import BridgeToml
from tests.support.purge import purge_bridge

T0 = datetime(2024, 6, 1, tzinfo=timezone.utc)


@contextmanager
def lander(spark: Any, warehouse: Path, state: Path, *, arrow: str | None = "snappy") -> Iterator[SparkExecutor]:
    """The executor of type `orders` (table `orders`) with the real landing and ledger in `state`;
    `arrow`: pyarrow writes the bulks (fast: many small files), None: Spark does."""
    ledger = SqliteLedger.open(state / "ledger.sqlite3", owner=owner_id())
    landing = Landing(ledger=ledger, owner=ledger.owner, counters=Counters(), dedupe_window=3600.0, warehouse=warehouse)
    try:
        yield SparkExecutor(spark, warehouse, "orders", TypeConfig(table="orders"), landing=landing, arrow=arrow)
    finally:
        landing.close()


def bulk_of(numbers: range | list[int], prefix: str = "m", body: bytes = b"", step: float = 1.0) -> Bulk:
    """A bulk of messages `<prefix><n>`, message n put n × `step` seconds after T0 (2024-06-01)."""
    bulk = Bulk("orders")
    for n in numbers:
        put = T0 + timedelta(seconds=n * step)
        bulk.add(Message(msg_id=f"{prefix}{n}", body=f"{n}:".encode() + (body or bytes(range(64))), source="amq",
                         destination="/queue/orders", message_type="orders", headers={"n": str(n)},
                         put_timestamp=put, received_timestamp=put))
    return bulk


def land_small_files(executor: SparkExecutor, files: int, per_file: int) -> int:
    """`files` bulks (one small file each) of `per_file` rows into put_date 2024-06-01, interleaved
    in time: file b holds the messages n with n % files == b, so every file spans the whole day.
    The number of rows."""
    rows = files * per_file
    for b in range(files):
        executor.execute(bulk_of(list(range(b, rows, files))))
    return rows


def sorted_across_files(files: list[Path]) -> bool:
    """Whether the rows of `files`, taken file by file in the order of their smallest put_timestamp,
    are ordered by put_timestamp (inside each file and across files: no two files' ranges overlap)."""
    ranges = []
    for path in files:
        stamps = pq.read_table(path, columns=["put_timestamp"]).column(0).to_pylist()
        if stamps != sorted(stamps):
            return False
        ranges.append((stamps[0], stamps[-1]))
    ranges.sort()
    return all(high <= low for (_, high), (low, _) in zip(ranges, ranges[1:], strict=False))


def compact_bridge(small_files: int = 5) -> BridgeToml:
    """`purge_bridge()` with type `orders` and a `[compaction]` section compacting a container of
    `small_files` small files or more."""
    return purge_bridge().set("types.orders").set("compaction", small_files=small_files)


def files_overlapping(container: Path, low: datetime, high: datetime) -> int:
    """The files of `container` whose put_timestamp statistics (footer) overlap [low, high]: the files
    a time-range read must read rows of; the others it answers from their footers alone."""
    found = 0
    for path in data_files(container):
        meta = pq.read_metadata(path)
        column = meta.schema.to_arrow_schema().get_field_index("put_timestamp")
        for g in range(meta.num_row_groups):
            stats = meta.row_group(g).column(column).statistics
            if stats.min.replace(tzinfo=timezone.utc) <= high and stats.max.replace(tzinfo=timezone.utc) >= low:
                found += 1
                break
    return found
