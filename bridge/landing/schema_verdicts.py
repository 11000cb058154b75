"""The check of a configuration's typed schemas against the schemas their tables were written with,
run by `mqbridge check-config` and by `mqbridge run` before any listener connects: a compatible change
(an added nullable column, a widened type) is logged, a narrowing one refused, naming the type, the
table, the column, the old and the new type, and what to do (`FIX`).

Which schemas a table was written with is its format's answer (`TableFormat.written_schemas`): a Parquet
table's footers, a Delta table's log on a local disk or a store (`mqbridge.landing.schema_check` reads
both, without Spark, so that `check-config` stays cheap and `run` checks before Spark has started).
"""

from __future__ import annotations

import collections
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql.types import ArrayType, MapType, StructField, StructType, TimestampNTZType, TimestampType

from mqbridge.config.ddl import DdlError, ddl_schema
from mqbridge.config.warehouse import Location, ObjectStoreUri
from mqbridge.errors import ConfigError
from mqbridge.landing.evolution import Change, Verdict, compare
from mqbridge.landing.tables import tables_of_type
from mqbridge.table_formats import format_of

if TYPE_CHECKING:
    from mqbridge.config import BridgeConfig

log = logging.getLogger("mqbridge.landing.schema_check")  # the check's messages, by the name operators know

#: What to do about a refused change: in every message, so the operator need not look it up.
FIX = ("keep the old column and type in `schema` (a body without the column lands NULL in it), or land "
       "the new schema into a new table: set `table` to a new name (or move the table's directory "
       "away); see docs/spark-and-tables.md \"Changing a type's schema\"")


@dataclass(frozen=True)
class TableVerdict:
    """The verdict on one table of a type: `old` as written in `file`, `new` as configured now."""

    message_type: str
    table: Location
    file: Path
    old: StructType
    new: StructType
    verdict: Verdict

    def refusal(self, change: Change) -> str:
        """One refused change, naming the type, the table, the column, the old and the new type."""
        return (f"types.{self.message_type}.schema: table {self.table}: {change.line()} (written as "
                f"{self.old.simpleString()} in {self.file.name}; configured now: {self.new.simpleString()})")


def schema_verdicts(config: BridgeConfig) -> Iterator[TableVerdict]:
    """The verdict on each typed type's schema against each schema its tables were written with, as
    each table's format says (`TableFormat.written_schemas`: a Parquet table's footers, a Delta table's
    log). A schema that does not parse is skipped: `check-config` reports it, and Spark refuses it at
    start. A store that cannot be read now (down, its keys not loaded) is skipped with a warning: the
    bridge's own start waits for it as for any outage, and Delta refuses a narrowing change at the write."""
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
        shared_by = new if sharing[type_config.table or name] > 1 else None
        for table in tables_of_type(warehouse, name, type_config.table or name):
            for text, path in format_of(table).written_schemas(table, name, shared_by).items():
                old = StructType.fromJson(json.loads(text))
                yield TableVerdict(name, table, path, old, new, compare(old, new))


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
