"""The schema a typed table was written with, read without Spark: what the check of a configuration's
schemas (`mqbridge.landing.schema_verdicts`, run by `mqbridge check-config` and by `mqbridge run` before
any listener connects) compares them with, and what a purge or compaction reads a container with.

Where the "old" schema is: in the table's own Parquet footers, read with pyarrow (no Spark, so
`check-config` stays cheap and `run` checks before Spark has started). Why there and not in the
catalog or a schema file of the bridge's: the files are what every reader merges, whoever registered
or copied them, and a catalog is optional and may be in-memory. Spark records each file's schema in
its footer (`org.apache.spark.sql.parquet.row.metadata`); the bridge adds the *declared* field to each
typed column's metadata (`DECLARED`, `declared_metadata`), because Spark's `from_json` writes every
column nullable whatever the DDL says: without it a `NOT NULL` could not be compared. A file written
before that metadata existed counts its columns as nullable, which they are in the file.

Which footers: in every `put_date` container of every table of the type (`tables_of_type`), the
newest file holding the type's rows. The bridge refuses every incompatible change, so within a
container the newest file carries every column of the older ones; a purge or compaction that rewrote
a container writes each type's files with that type's merged schema (`mqbridge.purge.type_groups`).
The cost is one directory listing per container and about one footer read per container, whatever
the number of files. Files an older bridge wrote after dropping a column (before this check existed)
are not seen if a newer file of their container lacks it.

That is a Parquet table's. Which schemas a table was written with is its format's answer
(`TableFormat.written_schemas`): a Delta table's, on a local disk, an object store or HDFS alike, is the
one its log keeps, read by delta-rs (`log_schemas`): no data file is listed (a file its log removed may
still be on disk until VACUUM), and Delta keeps each column's metadata, the declared field among it.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from pyspark.sql.types import StructField, StructType

from mqbridge.config.warehouse import Location
from mqbridge.landing.containers import PARTITION, data_files
from mqbridge.landing.rows import IDENTITY_COLUMN, LANDED_COLUMNS
from mqbridge.landing.tables import file_types

log = logging.getLogger(__name__)

#: Where Spark keeps the written schema (JSON of a StructType) in a Parquet footer.
SPARK_ROW_METADATA = b"org.apache.spark.sql.parquet.row.metadata"
#: The key of a typed column's metadata holding its declared field (JSON of a StructField).
DECLARED = "mqbridge.declared"
_SKIPPED = frozenset(c.lower() for c in (*LANDED_COLUMNS, "_row", "_identity", IDENTITY_COLUMN))


def declared_metadata(declared: StructField) -> dict[str, str]:
    """The metadata the executor writes on a typed column: its declared field (`DECLARED`)."""
    return {DECLARED: json.dumps(declared.jsonValue(), sort_keys=True)}


def file_schema(path: str | os.PathLike[str]) -> StructType | None:
    """The typed columns of one Parquet file, as declared when it was written (see the module's
    docstring); None when Spark did not write it (pyarrow writes only raw bulks: no typed columns)."""
    import pyarrow.parquet as pq

    raw = (pq.read_metadata(path).metadata or {}).get(SPARK_ROW_METADATA)
    if raw is None:
        return None
    return typed_columns(StructType.fromJson(json.loads(raw)))


def typed_columns(written: StructType, names: set[str] | None = None) -> StructType:
    """The typed columns of a schema Spark wrote (a footer's, a Delta log's), each as declared
    (`DECLARED`), the landed columns left out; only those in `names` (lower case) when given."""
    fields = []
    for f in written.fields:
        if f.name.lower() in _SKIPPED or (names is not None and f.name.lower() not in names):
            continue
        declared = f.metadata.get(DECLARED)
        fields.append(StructField.fromJson(json.loads(declared)) if isinstance(declared, str) else f)
    return StructType(fields)


def table_schemas(table: Path, message_type: str) -> dict[str, Path]:
    """The distinct schemas (by their JSON) `message_type`'s rows were written with in `table`, each
    with one file that has it: the newest file of the type in each container."""
    found: dict[str, Path] = {}
    if not table.is_dir():
        return found
    for container in sorted(p for p in table.iterdir() if p.is_dir() and PARTITION.fullmatch(p.name)):
        for path in sorted(data_files(container), key=_mtime, reverse=True):
            try:
                types = file_types(str(path))
                schema = file_schema(path) if not types or message_type in types else None
            except (OSError, ValueError) as exc:  # removed meanwhile (a purge's swap), or not Parquet
                log.debug("schema check: %s skipped: %s", path, exc)
                continue
            if types and message_type not in types:
                continue  # another type's rows (a shared table)
            if schema is not None:
                found.setdefault(schema.json(), path)
            break
    return found


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:  # removed meanwhile (a purge's swap)
        return 0.0


#: What a verdict on a Delta table names as where its schema was read (`schema_verdicts.TableVerdict.file`).
DELTA_LOG = Path("_delta_log")


def log_schemas(table: Location, shared_by: StructType | None = None) -> dict[str, Path]:
    """The schema of the Delta table at `table` (a local directory, or on an object store or HDFS: read
    with the URI's storage options), as its log keeps it (read by delta-rs), its typed columns as
    declared (`DECLARED`), the landed columns left out: {its JSON: DELTA_LOG}; {} when no table is there
    yet or it cannot be read now (logged: delta-rs missing, the store down). The log keeps one schema for
    the table, the union of every type landing there: for a table shared by several types (`shared_by`:
    the type's schema now) only the columns that type names are compared, so another type's columns are
    not taken for dropped ones (a column the type dropped is then not refused here: Delta lands NULL in
    it)."""
    from mqbridge.landing import delta_read

    try:
        if not delta_read.is_delta(table):
            return {}
        written = StructType.fromJson(json.loads(delta_read.delta_table(table).schema().to_json()))
    except Exception as exc:  # the store down or refusing: the start's probe says so; nothing to compare
        log.warning("schema check: the Delta table %s is not read (%s): a refused change is found at the write",
                    table, delta_read.error_text(exc))
        return {}
    typed = typed_columns(written, {f.name.lower() for f in shared_by.fields} if shared_by is not None else None)
    return {typed.json(): DELTA_LOG} if typed.fields else {}


def read_schema(files: list[Path]) -> StructType | None:
    """The schema that reads `files` (of one container) together: every column any of them has, each
    with the type of the newest file that has it. The bridge only ever widens a column or adds a
    nullable one (`compare`), so the newest type reads the older files — where Spark's `mergeSchema`
    refuses them (INT with BIGINT, the day a type was widened: a purge or compaction of that container
    would fail). A column only older files have (`body_text` after `keep_body` was turned off) is kept.
    None when a file has no Spark schema in its footer (pyarrow's raw bulks): `mergeSchema` reads those."""
    import pyarrow.parquet as pq

    fields: dict[str, StructField] = {}
    for path in sorted(files, key=lambda p: p.stat().st_mtime, reverse=True):
        raw = (pq.read_metadata(path).metadata or {}).get(SPARK_ROW_METADATA)
        if raw is None:
            return None
        for f in StructType.fromJson(json.loads(raw)).fields:
            fields.setdefault(f.name.lower(), f)
    return StructType(list(fields.values()))


def read_container(spark: Any, table: Path, files: list[Path]) -> Any:
    """A DataFrame of `files` (of one container of `table`, with the `put_date` partition column),
    read with `read_schema` when every file has one."""
    reader = spark.read.option("basePath", str(table))
    schema = read_schema(files)
    reader = reader.schema(schema) if schema is not None else reader.option("mergeSchema", "true")
    return reader.parquet(*(str(p) for p in files))
