"""The table-format seam: what the landing, the purge, the compaction, replay, `where`, the catalog and
`ledger --verify` need from a landed table, one implementation per format (`TableFormat`, `base`):
Parquet directories (`parquet`, the default), Delta Lake tables (`delta`) and Apache Iceberg tables
(`iceberg`, of the configuration's catalog). Another format is one more module listed in `FORMATS`.

The lookups: `format_named` (a name of the configuration), `format_of` (what is on disk at a path),
`format_of_bulk` (the table a ledger bulk landed in), `format_for` (what the configuration says for the
types of one table) and `session_conf_for` (what a Spark driver of the bridge's own needs for the
formats the configuration uses).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mqbridge.config.iceberg import bound_or_none
from mqbridge.config.warehouse import Location, ObjectStoreUri
from mqbridge.errors import ConfigError
from mqbridge.table_formats import delta, iceberg, parquet
from mqbridge.table_formats.base import CompactionDone, TableCompaction, TableFormat, TablePurger

if TYPE_CHECKING:
    from mqbridge.config import BridgeConfig, TypeConfig

#: Every format, by its name. Parquet, the default, claims any directory no other format claims, so
#: it is asked last (`format_of`).
FORMATS: dict[str, TableFormat] = {f.name: f for f in (delta.FORMAT, iceberg.FORMAT, parquet.FORMAT)}
DEFAULT = parquet.FORMAT
#: The format whose bulks its table's own commit publishes: the one an object store or HDFS holds.
TRANSACTIONAL = delta.FORMAT

__all__ = ["DEFAULT", "FORMATS", "TRANSACTIONAL", "CompactionDone", "TableCompaction", "TableFormat", "TablePurger",
           "command_session_conf", "format_for", "format_named", "format_of", "format_of_bulk", "formats_configured",
           "session_conf_for", "type_format"]


def format_named(name: str) -> TableFormat:
    """The format `name` ("parquet", "delta"); ConfigError naming the known ones otherwise."""
    try:
        return FORMATS[name]
    except KeyError:
        raise ConfigError(f"table_format = {name!r}: not a table format (known: {', '.join(sorted(FORMATS))})") \
            from None


def format_of(path: Location) -> TableFormat:
    """The format of the table at `path`. A local directory: the first format that claims it (a
    directory with a `_delta_log` is a Delta table), else Parquet (also for no directory yet). On an
    object store or HDFS, where only a table that commits by its own transaction lands
    (`config.warehouse`), that format, whether its table is there yet or not (its answers then say so):
    Iceberg on the warehouse where the loaded configuration lands Iceberg tables (it lands no other
    format there: `config.iceberg.store_problems`), else Delta."""
    if isinstance(path, ObjectStoreUri):
        catalog = bound_or_none()
        return iceberg.FORMAT if catalog is not None and catalog.on_store(path) else TRANSACTIONAL
    return next((f for f in FORMATS.values() if f is not DEFAULT and f.holds(Path(path))), DEFAULT)


def format_of_bulk(table: Location, bulk: Any) -> TableFormat:
    """The format of the table at `table` that the ledger's `bulk` (prepared or published) landed in:
    the one there (`format_of`); a bulk its table committed by its own transaction whose table is gone
    (dropped, moved), the transactional format (whose answers then say there is no such table)."""
    found = format_of(table)
    if found is DEFAULT and getattr(bulk, "transaction", None) is not None:
        return TRANSACTIONAL
    return found


def type_format(config: TypeConfig, default: str) -> TableFormat:
    """The format of one type: its own `table_format`, else `[spark] table_format` (`default`)."""
    return format_named(config.table_format or default)


def format_for(config: BridgeConfig, type_names: Iterable[str]) -> TableFormat:
    """The format the configuration gives the table that the types `type_names` land in. Types of one
    table with different formats are refused (ConfigError naming them): one table has one format.
    No types: the default of `[spark] table_format`."""
    names = sorted(set(type_names))
    found = {n: type_format(config.types[n], config.spark.table_format) for n in names}
    kinds = sorted({f.name for f in found.values()})
    if len(kinds) > 1:
        said = "; ".join(f"{k}: {', '.join(n for n in names if found[n].name == k)}" for k in kinds)
        raise ConfigError(f"the types {', '.join(names)} land in one table but with different table_format values "
                          f"({said}): one table has one format; set [types.X] table_format alike")
    return found[names[0]] if names else format_named(config.spark.table_format)


def formats_configured(types: Mapping[str, TypeConfig], default: str) -> dict[str, list[str]]:
    """The formats the configured `types` land in, each with its types (sorted)."""
    found: dict[str, list[str]] = {}
    for name in sorted(types):
        found.setdefault(type_format(types[name], default).name, []).append(name)
    return found


def command_session_conf(config: BridgeConfig) -> dict[str, str]:
    """`[spark] conf` for a command's own Spark session (`mqbridge purge`, `compact`, `replay`): with
    what the configured formats need (`session_conf_for`) and what the warehouse's object store or
    HDFS needs (`mqbridge.landing.object_stores.session_conf`: S3A's jars, credentials provider and
    timeouts), as the bridge's own driver gets them. A Spark Connect server is started with them by
    its operator: `[spark] conf` as it is."""
    from mqbridge.landing.object_stores import session_conf as store_session_conf

    section = config.spark
    if section.remote:
        return dict(section.conf)
    jars_dir = config.resolve_path(section.jars_dir)
    warehouse = config.resolve_warehouse()
    conf = store_session_conf(warehouse, section.conf, jars_dir)
    return session_conf_for(config.types, section.table_format, jars_dir, conf, warehouse)


def session_conf_for(types: Mapping[str, TypeConfig], default: str, jars_dir: Path,
                     conf: Mapping[str, str], warehouse: Location | None = None) -> dict[str, str]:
    """`conf` with what a Spark driver of the bridge's own needs for every format the `types` land in
    (Delta's jars, SQL extension and catalog, and its log store on `s3a://`; ConfigError naming the
    command that fetches the jars when they are missing); nothing added for Parquet."""
    result = dict(conf)
    for name in formats_configured(types, default):
        result = format_named(name).session_conf(jars_dir, result, warehouse)
    return result
