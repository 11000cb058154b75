"""The write side of the table-format seam: how one bulk lands in a table of one format.

`SparkExecutor` (`mqbridge.landing.executor`) decides what of a bulk lands where (the typed bodies'
prechecks, twins, one ledger bulk per rendered table) and what a failure means (outage or not); the
writer of the type's table format, chosen once by `bulk_writes_for`, writes and probes:

- `parquet` (`writes/parquet.py`): a directory of Parquet files; a bulk is staged under
  `<table>/_staging/<owner>/<bulk>` by Spark or pyarrow, its footers verified, and published by renames.
- `delta` (`writes/delta.py`): a Delta Lake table; a bulk is one Delta commit carrying its
  transaction (`txnAppId`/`txnVersion`), so that the table itself says whether it landed.
- `iceberg` (`writes/iceberg.py`): an Apache Iceberg table of the configuration's catalog; a bulk is
  one append whose snapshot carries its id, which recovery looks up in the table's snapshots.

What both use (a bulk's rows as Spark's DataFrame, its tasks and files, the turns writers of one
table take) is in `writes/frames.py` and `writes/table_turns.py`. Another format is one module with
a class implementing `BulkWrites` and one line in `WRITERS`.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from mqbridge.errors import ConfigError

if TYPE_CHECKING:
    from mqbridge.config.warehouse import ObjectStoreUri
    from mqbridge.landing.formats import BodyFormat
    from mqbridge.landing.landing import Landing
    from mqbridge.landing.session import SparkSessions
    from mqbridge.message import Bulk, MessageResult

#: Table format name (`[spark] table_format`, `[types.X] table_format`) -> "module:Class" of its writer,
#: imported only when a type of that format is built.
WRITERS: dict[str, str] = {
    "parquet": "mqbridge.landing.writes.parquet:ParquetWrites",
    "delta": "mqbridge.landing.writes.delta:DeltaWrites",
    "iceberg": "mqbridge.landing.writes.iceberg:IcebergWrites",
}


class WriteContext(Protocol):
    """What a writer reads of the executor of its message type (`SparkExecutor` is one)."""

    @property
    def sessions(self) -> SparkSessions:
        """The process's Spark sessions (a session is started on first use, again if its JVM died)."""
        ...

    @property
    def message_type(self) -> str:
        """The message type whose bulks are written (names its writes in logs and errors)."""
        ...

    @property
    def table(self) -> str:
        """The type's table, or its template such as "{destination}" (`mqbridge.landing.containers`)."""
        ...

    @property
    def path(self) -> Path | ObjectStoreUri:
        """The table's directory or URI (of a template: with its placeholders)."""
        ...

    @property
    def landing(self) -> Landing | None:
        """The landing protocol (exactly-once through the ledger); None: at-least-once."""
        ...

    @property
    def write_timeout(self) -> float:
        """`[spark] write_timeout`: a write or probe running longer is cancelled, an outage."""
        ...

    @property
    def partition_by(self) -> str:
        """`[types.X] partition_by`: "day" or "hour" (of put_timestamp; "hour" for Iceberg tables only)."""
        ...

    @property
    def body_format(self) -> BodyFormat | None:
        """How a typed type's bodies are parsed (None for a raw type); the first use needs Spark."""
        ...

    @property
    def pyarrow_codec(self) -> str | None:
        """The codec pyarrow would write this type's raw bulks with (`[spark] writer`,
        `mqbridge.landing.writer_choice`); None where Spark writes them, and for a typed type."""
        ...


@runtime_checkable
class BulkWrites(Protocol):
    """How the bulks of one message type are written into tables of one format, and probed."""

    #: The table format's name in the configuration ("parquet", "delta").
    name: str
    #: The pyarrow codec when pyarrow writes this type's bulks (`mqbridge.landing.arrow_writer`), else None.
    arrow: str | None

    def write(self, bulk: Bulk, keep: list[int], table: str, location: Path | ObjectStoreUri,
              ledger_bulk_id: str, results: list[MessageResult | None]) -> list[int]:
        """Land the rows `keep` of `bulk` into the table `table` at `location` as the ledger's bulk
        `ledger_bulk_id` (exactly-once through the executor's `landing` when it has one), marking
        the rows that cannot be landed (a typed body Spark cannot convert) PERMANENT in `results`;
        returns the positions landed. Raises when the write failed: nothing of it is in the table."""
        ...

    def probe(self, owner: str) -> None:
        """One probe write where this format writes the type's bulks (`owner`: this process in the
        ledger, whose private staging the probe uses), removed after; raises if the sink cannot be
        written. The executor refuses a stuck table before and probes the ledger after."""
        ...

    def outage(self, exc: BaseException) -> str:
        """Why `exc` is an outage of this format's writes whatever the messages (e.g. the format's
        library missing from Spark), or "" if this format knows nothing of it."""
        ...


def bulk_writes_for(table_format: str, context: WriteContext) -> BulkWrites:
    """The writer of the table format named `table_format` for the executor `context`; ConfigError
    naming the allowed formats if there is no such format."""
    target = WRITERS.get(table_format)
    if target is None:
        allowed = ", ".join(f'"{name}"' for name in WRITERS)
        raise ConfigError(f"type {context.message_type}: unknown table_format {table_format!r}: it is one of "
                          f"{allowed} (`[spark] table_format`, `[types.{context.message_type}] table_format`)")
    module, name = target.split(":")
    writes: BulkWrites = getattr(importlib.import_module(module), name)(context)
    return writes


__all__ = ["WRITERS", "BulkWrites", "WriteContext", "bulk_writes_for"]
