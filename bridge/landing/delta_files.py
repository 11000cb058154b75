"""Delta `add` actions for data files that pyarrow wrote (`mqbridge.landing.arrow_writer`): the file's path
under the table, its partition value, size and time, and the per-file statistics Delta's own writer would
collect, so that a raw bulk's files need no Spark job and only their commit goes through the driver
(`delta_commit.ArrowFiles`).

Why: a Delta commit written by Spark spends most of its time in the Spark job that copies the bulk's
rows from the handoff file into the table's Parquet files (docs/performance.md, "Delta Lake": 0.74 of
the acking consumer against 0.87 for the Parquet path, whose raw bulks pyarrow writes). The files are
Parquet files in either case; what makes them a Delta table's is the commit that adds them.

The statistics are those of the table's `delta.dataSkippingStatsColumns` (a table the bridge makes names
`delta.STATS_COLUMNS`; `shape_problem` sends any other table to Spark's writer): the number of rows, and per
column its null count and, for strings and timestamps, its minimum and maximum. A string's bounds are
its exact values (Delta's writer keeps a 32-character prefix: a looser bound; both are valid). A
timestamp's are rounded outwards to the millisecond, as precise as Delta keeps them: its own writer
truncates both, and Delta's data skipping allows for a truncated maximum (tests/integration/
test_delta_arrow_files.py finds a row put between two milliseconds either way); a maximum rounded up is
a true bound for any reader, delta-rs and the others included."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

#: The one partition column of a bridge's Delta table (`delta_create.PARTITION_COLUMN`).
PARTITION = "put_date"
#: Table properties that change what a writer must do beyond adding files (column mapping renames the
#: files' columns, constraints and generated or identity columns are checked or filled by Delta's
#: writer, UniForm needs Iceberg's field ids): a table with any of them is written by Spark.
WRITER_PROPERTIES = ("delta.columnMapping.mode", "delta.universalFormat.enabledFormats", "delta.constraints.")
#: Column metadata of the same kind (Delta's generated columns, identity columns, invariants).
WRITER_METADATA = ("delta.generationExpression", "delta.identity.", "delta.invariants")


def shape_problem(schema_json: str, partition_columns: Iterable[str], configuration: Mapping[str, str],
                  columns: Mapping[str, str]) -> str:
    """Why the Delta table of `schema_json` (its metadata's schema string), `partition_columns` and
    `configuration` cannot take files pyarrow wrote with `columns` (name -> Spark type name) and the
    statistics of `stats_columns`; empty when it can: partitioned by put_date alone, every column of the
    table one of the files' of the same type (a column the table lacks would need its schema merged),
    none filled or checked by Delta's writer, its statistics columns named."""
    if list(partition_columns) != [PARTITION]:
        return f"partitioned by {list(partition_columns)}, not [{PARTITION!r}]"
    for key in configuration:
        if any(key == name or (name.endswith(".") and key.startswith(name)) for name in WRITER_PROPERTIES):
            if key == "delta.columnMapping.mode" and configuration[key] == "none":
                continue
            return f"table property {key}"
    if not configuration.get("delta.dataSkippingStatsColumns"):
        return "no delta.dataSkippingStatsColumns"
    fields = json.loads(schema_json)["fields"]
    table = {field["name"]: field for field in fields if field["name"] != PARTITION}
    if set(table) != set(columns):
        return f"columns {sorted(table)} against the files' {sorted(columns)}"
    for name, field in table.items():
        if _type_name(field["type"]) != columns[name]:
            return f"column {name} is {_type_name(field['type'])}, the files' {columns[name]}"
        if any(key.startswith(WRITER_METADATA) for key in field.get("metadata", {})):
            return f"column {name} is filled or checked by Delta's writer"
        if not field.get("nullable", True):
            return f"column {name} is NOT NULL"
    return ""


def _type_name(delta_type: Any) -> str:
    """A Delta schema's type as `spark_type_names` names it: the type's name, or its JSON for a nested one."""
    return delta_type if isinstance(delta_type, str) else json.dumps(delta_type, sort_keys=True)


def spark_type_names(schema: pa.Schema, spark_schema_json: str) -> dict[str, str]:
    """The columns of files pyarrow writes from `schema` (put_date and `_` columns left out), by name, with
    the type Spark reads each as, named as a Delta schema names it (`spark_schema_json`: the Spark
    StructType of `schema`, as JSON)."""
    spark = {field["name"]: field["type"] for field in json.loads(spark_schema_json)["fields"]}
    return {name: _type_name(spark[name]) for name in schema.names if name != PARTITION and not name.startswith("_")}


def add_action(table_dir: Path, path: Path, date: dt.date, rows: pa.Table, stats_columns: Iterable[str],
               deletion_vectors: bool) -> str:
    """The JSON of the `add` action of the data file at `path` (under `table_dir`) of put_date `date`
    holding `rows`, with the statistics of `stats_columns` (those the file has); `deletion_vectors`:
    the table keeps them, so the bounds say they are tight (no row of the file deleted yet), as Delta's
    writer says of a new file there."""
    stat = path.stat()
    add = {"path": path.relative_to(table_dir).as_posix(), "partitionValues": {PARTITION: date.isoformat()},
           "size": stat.st_size, "modificationTime": stat.st_mtime_ns // 1_000_000, "dataChange": True,
           "stats": json.dumps(statistics(rows, stats_columns, deletion_vectors), separators=(",", ":"))}
    return json.dumps({"add": add}, separators=(",", ":"))


def statistics(rows: pa.Table, stats_columns: Iterable[str], deletion_vectors: bool = False) -> dict[str, Any]:
    """Delta's per-file statistics of `rows` for `stats_columns` (module docstring)."""
    minimum: dict[str, Any] = {}
    maximum: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for name in stats_columns:
        if name not in rows.column_names:
            continue
        column = rows.column(name)
        nulls[name] = column.null_count
        if column.null_count == len(column):
            continue
        kind = column.type
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            bounds = pc.min_max(column)
            minimum[name], maximum[name] = bounds["min"].as_py(), bounds["max"].as_py()
        elif pa.types.is_timestamp(kind):
            bounds = pc.min_max(column.cast(pa.int64()))
            low, high = bounds["min"].as_py(), bounds["max"].as_py()
            if kind.unit == "s":
                low, high = low * 1000, high * 1000
            else:
                per_milli = _PER_MILLI[kind.unit]
                low, high = low // per_milli, -(-high // per_milli)
            minimum[name], maximum[name] = _millis(low), _millis(high)
    stats: dict[str, Any] = {"numRecords": rows.num_rows, "minValues": minimum, "maxValues": maximum,
                             "nullCount": nulls}
    if deletion_vectors:
        stats["tightBounds"] = True
    return stats


#: Units of a timestamp column per millisecond (seconds are multiplied instead).
_PER_MILLI = {"ms": 1, "us": 1_000, "ns": 1_000_000}


def _millis(millis: int) -> str:
    """A UTC time in milliseconds since the epoch as Delta's statistics write a timestamp."""
    moment = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(milliseconds=millis)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
