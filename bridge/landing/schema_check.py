"""The schema a typed table was written with, and the check of a configuration's schemas against it
(`schema_refusals`), run by `mqbridge check-config` and by `mqbridge run` before any listener connects.

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

On an object store or HDFS (Delta tables only) the old schema is the one the table's log keeps, read by
delta-rs (`store_table_schemas`): no file is listed there, and Delta keeps each column's metadata, the
declared field among it.
"""

from __future__ import annotations

import collections
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql.types import ArrayType, MapType, StructField, StructType, TimestampNTZType, TimestampType

from mqbridge.config.ddl import DdlError, ddl_schema
from mqbridge.config.warehouse import ObjectStoreUri
from mqbridge.errors import ConfigError
from mqbridge.landing.containers import PARTITION, data_files
from mqbridge.landing.evolution import Change, Verdict, compare
from mqbridge.landing.rows import IDENTITY_COLUMN, LANDED_COLUMNS
from mqbridge.landing.tables import file_types, tables_of_type

if TYPE_CHECKING:
    from mqbridge.config import BridgeConfig

log = logging.getLogger(__name__)

#: Where Spark keeps the written schema (JSON of a StructType) in a Parquet footer.
SPARK_ROW_METADATA = b"org.apache.spark.sql.parquet.row.metadata"
#: The key of a typed column's metadata holding its declared field (JSON of a StructField).
DECLARED = "mqbridge.declared"
#: What to do about a refused change: in every message, so the operator need not look it up.
FIX = ("keep the old column and type in `schema` (a body without the column lands NULL in it), or land "
       "the new schema into a new table: set `table` to a new name (or move the table's directory "
       "away); see docs/spark-and-tables.md \"Changing a type's schema\"")
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


@dataclass(frozen=True)
class TableVerdict:
    """The verdict on one table of a type: `old` as written in `file`, `new` as configured now."""

    message_type: str
    table: Path | ObjectStoreUri
    file: Path
    old: StructType
    new: StructType
    verdict: Verdict

    def refusal(self, change: Change) -> str:
        """One refused change, naming the type, the table, the column, the old and the new type."""
        return (f"types.{self.message_type}.schema: table {self.table}: {change.line()} (written as "
                f"{self.old.simpleString()} in {self.file.name}; configured now: {self.new.simpleString()})")


def schema_verdicts(config: BridgeConfig) -> Iterator[TableVerdict]:
    """The verdict on each typed type's schema against each schema its tables were written with. A
    schema that does not parse is skipped: `check-config` reports it, and Spark refuses it at start.
    On an object store or HDFS the schemas are those of the Delta tables' logs (`store_table_schemas`);
    a store that cannot be read now (down, its keys not loaded) is skipped with a warning: the bridge's
    own start waits for it as for any outage, and Delta refuses a narrowing change at the write."""
    warehouse: Path | ObjectStoreUri = config.resolve_warehouse()
    if isinstance(warehouse, ObjectStoreUri):
        try:
            warehouse = config.tables_warehouse()
        except ConfigError as exc:  # a command loaded without secrets: the store's keys are not known
            log.warning("schema check: the tables on %s are not read (%s)", warehouse, exc)
            return
    sharing = collections.Counter(t.table or n for n, t in config.types.items())
    for name, type_config in config.types.items():
        if not type_config.schema_ddl:
            continue
        try:
            new = ddl_schema(type_config.schema_ddl)
        except DdlError:
            continue
        if str(config.spark.conf.get("spark.sql.timestampType", "")).upper() == "TIMESTAMP_NTZ":
            new = _ntz(new)  # then Spark's parser reads TIMESTAMP as TIMESTAMP_NTZ, and writes it so
        for table in tables_of_type(warehouse, name, type_config.table or name):
            if isinstance(table, ObjectStoreUri):
                schemas = store_table_schemas(table, new if sharing[type_config.table or name] > 1 else None)
            else:
                schemas = table_schemas(table, name)
            for text, path in schemas.items():
                old = StructType.fromJson(json.loads(text))
                yield TableVerdict(name, Path(table) if isinstance(table, Path) else table, path, old, new,
                                   compare(old, new))


#: What a verdict on a store's table names as where its schema was read (`TableVerdict.file`).
DELTA_LOG = Path("_delta_log")


def store_table_schemas(table: ObjectStoreUri, shared_by: StructType | None = None) -> dict[str, Path]:
    """The schema of the Delta table at `table` on an object store or HDFS, as its log keeps it (read by
    delta-rs with the URI's storage options), its typed columns as declared (`DECLARED`), the landed
    columns left out: {its JSON: DELTA_LOG}; {} when no table is there yet or it cannot be read now
    (logged). The log keeps one schema for the table, the union of every type landing there: for a
    table shared by several types (`shared_by`: the type's schema now) only the columns that type names
    are compared, so another type's columns are not taken for dropped ones (a column the type dropped
    is then not refused here: Delta lands NULL in it)."""
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


def _ntz(data_type: Any) -> Any:
    """`data_type` with every TIMESTAMP (with local time zone) as TIMESTAMP_NTZ."""
    if isinstance(data_type, TimestampType):
        return TimestampNTZType()
    if isinstance(data_type, StructType):
        return StructType([StructField(f.name, _ntz(f.dataType), f.nullable, f.metadata) for f in data_type.fields])
    if isinstance(data_type, ArrayType):
        return ArrayType(_ntz(data_type.elementType), data_type.containsNull)
    if isinstance(data_type, MapType):
        return MapType(_ntz(data_type.keyType), _ntz(data_type.valueType), data_type.valueContainsNull)
    return data_type


def check_schemas(config: BridgeConfig) -> None:
    """At start, before any listener connects: log what changed compatibly, and raise
    SchemaEvolutionError (a ConfigError: `run` exits 2) naming every refused change."""
    refused: list[str] = []
    for found in schema_verdicts(config):
        refused += [found.refusal(change) for change in found.verdict.refused]
        for change in (*found.verdict.added, *found.verdict.widened):
            log.info("types.%s.schema: table %s: %s (compatible: readers see one merged schema)",
                     found.message_type, found.table, change.line())
    if refused:
        raise ConfigError("schema change refused: " + "; ".join(refused) + f" — {FIX}")


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
