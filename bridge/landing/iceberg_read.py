"""Reading a landed Apache Iceberg table back without Spark: what `mqbridge tables`, `where`, `replay`,
`ledger --verify` / `--abandon`, the ledger's rebuild and the schema check ask of an Iceberg table,
answered with pyiceberg (the `iceberg` extra) from a table its catalog loaded
(`mqbridge.landing.iceberg_catalog`: the catalog, its errors and their redaction).

What is read, each from the table's metadata unless said otherwise: its snapshots (`snapshots`: each
bulk's append carries the bulk's id and the ledger's transaction as snapshot properties,
`mqbridge.config.iceberg.BULK_ID_PROPERTY` and the others beside it, read through its publication,
`mqbridge.landing.iceberg_snapshots`); its containers per put_date
(`containers`: the data files' record counts, sizes and put_timestamp bounds of the current snapshot,
without reading a row); its typed columns (`typed_schema`); and, by reading rows, the rows of some
identities (`rows_with_identities`), the rows per bulk (`rows_by_bulk`) and a whole scan, of the
current snapshot or an older one (`scan`: time travel for `replay`). A table that cannot be read is
an outage (`IcebergCatalogUnavailableError`).
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import unquote, urlsplit

from mqbridge.config.warehouse import Location, ObjectStoreUri
from mqbridge.errors import BridgeError
from mqbridge.landing.containers import Container
from mqbridge.landing.iceberg_snapshots import publication
from mqbridge.landing.rows import IDENTITY_COLUMN, LANDED_COLUMNS

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.table import Table


from mqbridge.landing.iceberg_catalog import (
    IcebergCatalogUnavailableError,
    IcebergReadError,
    error_line,
    shown_identifier,
)

#: The snapshot operations that change rows (a DELETE, an overwrite: a purge); `replace` is a rewrite
#: (compaction) that keeps every row, `append` adds rows.
ROW_CHANGING = frozenset({"overwrite", "delete"})
#: The landed columns (and the identity) are not typed columns (`mqbridge.landing.schema_check`).
_NOT_TYPED = frozenset(c.lower() for c in (*LANDED_COLUMNS, "_row", "_identity", IDENTITY_COLUMN))


def _table_name(table: Table) -> str:
    return shown_identifier(cast("tuple[str, str]", tuple(table.name())))


# --- what the metadata says ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SnapshotFacts:
    """What `describe` says of a table: its current snapshot (None: no row was ever written) and how
    many snapshots its metadata keeps (older ones expired are gone)."""

    current_snapshot_id: int | None
    snapshots: int


def snapshot_facts(table: Table) -> SnapshotFacts:
    """The current snapshot and the number of snapshots of `table`."""
    current = table.current_snapshot()
    return SnapshotFacts(current.snapshot_id if current is not None else None, len(table.metadata.snapshots))


@dataclass(frozen=True)
class SnapshotBulk:
    """One snapshot of a table, with the bulk it carries when a bulk's append made it."""

    snapshot_id: int
    committed_at: float  # epoch seconds (the snapshot's timestamp-ms)
    operation: str  # append, overwrite, delete, replace
    bulk_id: str | None  # the bulk it published (`publication`); None: not a bulk's (a fence, a purge, a compaction)
    app_id: str | None  # APP_ID_PROPERTY: the ledger's TableTransaction of the bulk
    version: int | None  # VERSION_PROPERTY
    current: bool  # the current snapshot or one of its ancestors (False: rolled back, staged)

    @property
    def changes_rows(self) -> bool:
        """Whether it removed or rewrote rows (a DELETE, an overwrite: a purge), `ROW_CHANGING`."""
        return self.operation in ROW_CHANGING


def snapshots(table: Table) -> list[SnapshotBulk]:
    """Every snapshot the metadata of `table` keeps, oldest first, with the bulk ids and transactions
    their appends carry: what `ledger --verify`, `--abandon`, recovery and the ledger's rebuild look
    bulks up in. A snapshot expired (`expire_snapshots`) is no longer listed."""
    current = table.current_snapshot()
    lineage: set[int] = set()
    by_id = {s.snapshot_id: s for s in table.metadata.snapshots}
    walk = current
    while walk is not None and walk.snapshot_id not in lineage:
        lineage.add(walk.snapshot_id)
        walk = by_id.get(walk.parent_snapshot_id) if walk.parent_snapshot_id is not None else None
    summaries = {s.snapshot_id: _summary(s) for s in table.metadata.snapshots}
    found = []
    for snapshot in sorted(table.metadata.snapshots, key=lambda s: (s.timestamp_ms, s.sequence_number or 0)):
        operation = str(snapshot.summary.operation.value) if snapshot.summary else ""
        published = publication(summaries[snapshot.snapshot_id], summaries)
        found.append(SnapshotBulk(snapshot.snapshot_id, snapshot.timestamp_ms / 1000.0, operation,
                                  published.bulk_id, published.app_id, published.version,
                                  snapshot.snapshot_id in lineage))
    return found


def _summary(snapshot: Any) -> dict[str, str]:
    return dict(snapshot.summary.additional_properties) if snapshot.summary else {}


def snapshot_of_bulk(table: Table, bulk_id: str) -> SnapshotBulk | None:
    """The snapshot of the current lineage of `table` whose append carries `bulk_id`; None when there
    is none (the bulk did not commit, was rolled back, or its snapshot expired)."""
    return next((s for s in reversed(snapshots(table)) if s.bulk_id == bulk_id and s.current), None)


def bulk_ids(table: Table) -> dict[str, SnapshotBulk]:
    """The bulks whose appends are in the current lineage of `table`, by bulk id."""
    return {s.bulk_id: s for s in snapshots(table) if s.bulk_id is not None and s.current}


def containers(table: Table) -> list[Container]:
    """Every put_date partition of `table` with rows in its current snapshot, oldest first (rows, size,
    data files, put_timestamp bounds), from its manifests: no row is read unless a partition has
    delete files (merge-on-read deletes: its rows are then counted by reading them)."""
    current = table.current_snapshot()
    if current is None:
        return []
    try:
        files = table.inspect.files(current.snapshot_id).to_pylist()
    except Exception as exc:
        raise _read_error(exc, table, "cannot list its files") from exc
    root = _location(table.location())
    by_date: dict[str, list[dict[str, Any]]] = {}
    with_deletes: set[str] = set()
    for entry in files:
        put_date = _put_date(entry)
        if entry["content"] != 0:  # position or equality deletes
            with_deletes.add(put_date)
            continue
        by_date.setdefault(put_date, []).append(entry)
    found = []
    for put_date, entries in sorted(by_date.items()):
        bounds = [(entry.get("readable_metrics") or {}).get("put_timestamp") or {} for entry in entries]
        oldest = [b["lower_bound"] for b in bounds if b.get("lower_bound") is not None]
        newest = [b["upper_bound"] for b in bounds if b.get("upper_bound") is not None]
        rows = sum(int(entry["record_count"]) for entry in entries)
        if put_date in with_deletes:
            rows = _count_rows(table, put_date)
        if rows == 0:
            continue
        found.append(Container(cast(Path, root), put_date,
                               tuple(cast(Path, _location(str(entry["file_path"]))) for entry in entries),
                               rows, sum(int(entry["file_size_in_bytes"]) for entry in entries),
                               _utc(min(oldest)) if oldest else None, _utc(max(newest)) if newest else None))
    return found


def _put_date(entry: Mapping[str, Any]) -> str:
    """The put_date of a data or delete file: its partition's (`put_date`, made before `[types.X]
    partition_by`; `days(put_timestamp)`, a date; `hours(put_timestamp)`, hours since the epoch: every
    partition is one UTC day or an hour of one), or (a spec without them) its put_date column's bounds.
    A table whose spec evolved has every field of its specs, the others' null."""
    partition = entry.get("partition") or {}
    value = partition.get("put_date")
    if value is None:
        value = partition.get("put_timestamp_day")
        if isinstance(value, int):  # days since the epoch
            value = _EPOCH + timedelta(days=value)
    if value is None and isinstance(partition.get("put_timestamp_hour"), int):
        value = _EPOCH + timedelta(days=partition["put_timestamp_hour"] // 24)
    if value is None:
        value = ((entry.get("readable_metrics") or {}).get("put_date") or {}).get("lower_bound")
    return value.isoformat() if isinstance(value, date) else str(value)


_EPOCH = date(1970, 1, 1)


def _count_rows(table: Table, put_date: str) -> int:
    from pyiceberg.expressions import EqualTo, Reference
    from pyiceberg.expressions.literals import literal

    only = EqualTo(term=Reference("put_date"), value=literal(put_date))
    return int(scan(table, ["put_date"], row_filter=only).num_rows)


def _location(text: str) -> Location:
    """A file's or the table's location as the bridge names it: a local Path, else the URI."""
    if text.startswith("file:"):
        return Path(unquote(urlsplit(text).path))
    if "://" not in text:
        return Path(text)
    return ObjectStoreUri(text)


def _utc(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)
    raise TypeError(f"put_timestamp bounds are not timestamps: {value!r}")


def typed_schema(table: Table) -> pa.Schema:
    """The typed columns of `table` (its current schema, the landed columns and the identity left
    out) as a pyarrow schema: what the schema check compares a type's configured schema with. Each
    field's nullability is Iceberg's (`required` as not nullable); a column's comment (Iceberg's `doc`)
    is in its metadata as b"doc"."""
    import pyarrow as pa

    schema = table.schema().as_arrow()
    fields = []
    for field in schema:
        if field.name.lower() in _NOT_TYPED:
            continue
        metadata = {k: v for k, v in (field.metadata or {}).items() if not k.startswith(b"PARQUET:")}
        fields.append(field.with_metadata(metadata or None))
    return pa.schema(fields)


# --- reading rows -------------------------------------------------------------------------------------


def scan(table: Table, columns: Sequence[str] | None = None, *, snapshot_id: int | None = None,
         as_of: float | datetime | None = None, row_filter: Any = None) -> pa.Table:
    """The rows of `table` (only `columns` when given, in that order) as a pyarrow Table: of its current snapshot, of
    the snapshot `snapshot_id`, or of the snapshot that was current at `as_of` (epoch seconds or an
    aware datetime: time travel, as `replay` reads); `row_filter` a pyiceberg expression or string.
    IcebergReadError naming the table when there is no such snapshot."""
    from pyiceberg.expressions import AlwaysTrue

    if as_of is not None:
        seconds = as_of.timestamp() if isinstance(as_of, datetime) else float(as_of)
        snapshot = table.snapshot_as_of_timestamp(int(seconds * 1000))
        if snapshot is None:
            raise IcebergReadError(f"the Iceberg table {_table_name(table)} has no snapshot at or before "
                                   f"{datetime.fromtimestamp(seconds, timezone.utc).isoformat()} (its oldest "
                                   "kept snapshot is younger, or it was created later)")
        snapshot_id = snapshot.snapshot_id
    elif snapshot_id is not None and table.snapshot_by_id(snapshot_id) is None:
        raise IcebergReadError(f"the Iceberg table {_table_name(table)} has no snapshot {snapshot_id} (expired, "
                               "or of another table)")
    selected = tuple(columns) if columns is not None else ("*",)
    try:
        frame = table.scan(row_filter=row_filter if row_filter is not None else AlwaysTrue(),
                           selected_fields=selected, snapshot_id=snapshot_id).to_arrow()
    except Exception as exc:
        raise _read_error(exc, table, "cannot be read") from exc
    return frame.select(list(columns)) if columns is not None else frame  # in the order asked for


def _read_error(exc: BaseException, table: Table, doing: str) -> BridgeError:
    """A failed read of `table`'s files: an outage (their storage does not answer or a file is gone)."""
    if isinstance(exc, BridgeError):
        return exc
    return IcebergCatalogUnavailableError(f"the Iceberg table {_table_name(table)} {doing}: {error_line(exc)}")


def rows_with_identities(table: Table, identities: Iterable[str],
                         columns: Sequence[str] = (IDENTITY_COLUMN, "put_date", "bulk_id", "put_timestamp"),
                         put_dates: Sequence[str] = ()) -> pa.Table:
    """The rows of the current snapshot of `table` whose identity column is one of `identities` (in
    the partitions `put_dates` only, when given: the ledger knows them), their `columns`: what
    `mqbridge where` shows of a landed message. Files whose identity bounds exclude them are skipped."""
    from pyiceberg.expressions import And

    wanted = sorted(set(identities))
    if not wanted:
        import pyarrow as pa

        return pa.table({c: pa.array([], pa.string()) for c in columns})
    expression: Any = _in(IDENTITY_COLUMN, wanted)
    if put_dates:
        expression = And(expression, _in("put_date", put_dates))
    return scan(table, list(columns), row_filter=expression)


def _in(column: str, values: Iterable[str]) -> Any:
    """pyiceberg's `column IN (values)` (a file whose bounds exclude them all is not read)."""
    from pyiceberg.expressions import In, Reference
    from pyiceberg.expressions.literals import literal

    return In(term=Reference(column), values={literal(v) for v in values})


def put_dates_of(table: Table, identities: Iterable[str], put_dates: Sequence[str] = ()) -> list[str]:
    """The put_dates (YYYY-MM-DD) of the rows of `table` whose identity is one of `identities`."""
    rows = rows_with_identities(table, identities, (IDENTITY_COLUMN, "put_date"), put_dates)
    return sorted({d.isoformat() if isinstance(d, date) else str(d) for d in rows.column("put_date").to_pylist()})


def rows_by_bulk(table: Table, bulk_ids: Iterable[str]) -> collections.Counter[str]:
    """How many rows of the current snapshot of `table` carry each of `bulk_ids` (its `bulk_id` column)."""
    wanted = sorted(set(bulk_ids))
    if not wanted:
        return collections.Counter()
    column = scan(table, ["bulk_id"], row_filter=_in("bulk_id", wanted)).column("bulk_id")
    counts = column.value_counts().to_pylist()  # [{"values": bulk id, "counts": rows}]
    return collections.Counter({str(c["values"]): int(c["counts"]) for c in counts})


def batches(table: Table, columns: Sequence[str] | None = None, *, snapshot_id: int | None = None) -> Iterator[Any]:
    """The rows of `scan` as pyarrow record batches, read one file at a time (a large table's replay)."""
    from pyiceberg.expressions import AlwaysTrue

    selected = tuple(columns) if columns is not None else ("*",)
    try:
        reader = table.scan(row_filter=AlwaysTrue(), selected_fields=selected,
                            snapshot_id=snapshot_id).to_arrow_batch_reader()
        yield from reader
    except Exception as exc:
        raise _read_error(exc, table, "cannot be read") from exc
