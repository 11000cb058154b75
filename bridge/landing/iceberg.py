"""Apache Iceberg tables with Spark: each bulk ONE append (one snapshot) of the table
`mqbridge.<namespace>.<table>` of the `[spark.iceberg]` catalog, whose snapshot summary carries the
bulk's id (`mqbridge.bulk-id`) and its ledger transaction (`mqbridge.app-id`, `mqbridge.version`).

The protocol is the Delta one (`Landing.commit`: prepare, append, mark published, source commit),
but Iceberg has no idempotent append and nothing to fence a version with: recovery of a dead
process's prepared bulk (`settle`) looks its id up in the table's snapshots, published if found,
forgotten if not. That answer holds only once no writer of the dead process can still commit. The
bridge lands Iceberg tables by its own local driver only (a Spark Connect `remote` is refused,
`config.iceberg`), whose JVM exits when its Python parent dies (PythonGatewayServer reads its stdin
until EOF; tests/integration/test_iceberg_facts.py measures it): each process records its driver
JVM (`record_driver`, before its first append) and `settle` waits until the dead owner's recorded JVM
is gone. A dead owner on another host sharing a PostgreSQL ledger is taken for dead after its lease,
longer than its JVM outlives it.

The jars are the `iceberg` set (`mqbridge jars iceberg`): the runtime and the JDBC drivers of the
JDBC catalog (SQLite for the embedded catalog, `<warehouse>/_iceberg/catalog.db`; PostgreSQL). The
catalog's password is a `spark.sql.catalog.mqbridge.jdbc.password` setting: named like a credential,
it reaches the driver JVM in a private properties file, never on its command line
(`mqbridge.landing.driver_secrets`).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from mqbridge.config.iceberg import (
    APP_ID_PROPERTY,
    BULK_ID_PROPERTY,
    ICEBERG_CATALOG,
    VERSION_PROPERTY,
    IcebergCatalog,
)
from mqbridge.errors import ConfigError, LedgerUnavailableError
from mqbridge.landing import jar_sets
from mqbridge.landing.schema_check import DECLARED
from mqbridge.landing.verdicts import holds_rows_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructField

    from mqbridge.landing.ledger import Ledger, PreparedBulk, TableTransaction

log = logging.getLogger(__name__)

#: The jar set (`mqbridge.landing.jar_sets`, under `[spark] jars_dir`) and the command that fetches it.
JAR_SET = "iceberg"
FETCH_COMMAND = "mqbridge jars iceberg"
#: The jars the set must hold (prefixes of their file names).
REQUIRED_JARS = ("iceberg-spark-runtime-", "sqlite-jdbc-", "postgresql-")
#: Iceberg's SQL extension (its CALL procedures, metadata tables): listed with any other (Delta's).
EXTENSION = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
#: How a typed column's comment starts: its declared field's JSON follows (`declared_comment`).
DECLARED_COMMENT = "mqbridge.declared="
#: Properties of a table the bridge creates: a typed type's new column is added by its append
#: (`merge-schema`, which needs `accept-any-schema`); format version 2 (row-level deletes for a purge).
TABLE_PROPERTIES = {"format-version": "2", "write.spark.accept-any-schema": "true"}
#: `[types.X] partition_by` -> the transform of the table's hidden partitioning: a reader filtering on
#: put_timestamp skips the other partitions; put_date stays a column (the landed row's contract).
PARTITION_TRANSFORMS = {"day": "days(put_timestamp)", "hour": "hours(put_timestamp)"}
#: The partition fields of put time a table of the bridge may have: the two above, and `put_date` (the
#: identity partitioning of tables made before `partition_by`), each evolved into the configured one.
TIME_FIELDS = ("put_date", *PARTITION_TRANSFORMS.values())
#: How long `settle` waits for a dead process's driver JVM to exit before it leaves the bulk undecided.
DRIVER_EXIT_WAIT = 60.0
_DRIVER_POLL = 0.2


def jar_files(jars_dir: Path) -> list[Path]:
    """The Iceberg jars under `<jars_dir>/iceberg`; ConfigError naming the command that fetches them
    when the folder or one of them is missing (a start-up error, before any listener connects)."""
    return jar_sets.present(jars_dir, JAR_SET, REQUIRED_JARS,
                            "table_format = \"iceberg\" needs the Iceberg jars", FETCH_COMMAND)


def catalog_conf(catalog: IcebergCatalog) -> dict[str, str]:
    """The Spark settings of the catalog `mqbridge` (`spark.sql.catalog.mqbridge.*`). The embedded
    SQLite catalog's folder (`<warehouse>/_iceberg`) is made (0700) here: SQLite does not make it."""
    section = catalog.section
    prefix = f"spark.sql.catalog.{ICEBERG_CATALOG}"
    conf = {prefix: "org.apache.iceberg.spark.SparkCatalog", f"{prefix}.type": section.catalog,
            f"{prefix}.uri": catalog.uri, f"{prefix}.warehouse": str(catalog.warehouse)}
    if section.catalog == "jdbc" and section.uri is None:
        catalog.sqlite_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    password = section.password.get_secret_value() if section.password is not None else None
    if section.catalog == "jdbc":
        if section.user is not None:
            conf[f"{prefix}.jdbc.user"] = section.user
        if password is not None:
            conf[f"{prefix}.jdbc.password"] = password
    elif section.catalog == "rest" and section.user is not None:
        conf[f"{prefix}.rest.auth.type"] = "basic"
        conf[f"{prefix}.rest.auth.basic.username"] = section.user
        if password is not None:
            conf[f"{prefix}.rest.auth.basic.password"] = password
    return conf


def session_conf(jars_dir: Path, conf: Mapping[str, str], catalog: IcebergCatalog) -> dict[str, str]:
    """The Spark settings a session that writes Iceberg tables gets besides `conf` (`[spark] conf`,
    which wins, except that the jars and the SQL extensions are merged with its own): the jars, the
    extension and the catalog (`catalog_conf`)."""
    jars = [str(j) for j in jar_files(jars_dir)]
    given = [j for j in conf.get("spark.jars", "").split(",") if j]
    extensions = [e for e in conf.get("spark.sql.extensions", "").split(",") if e]
    return {**catalog_conf(catalog), **conf, "spark.jars": ",".join([*given, *(j for j in jars if j not in given)]),
            "spark.sql.extensions": ",".join([*extensions, *([EXTENSION] if EXTENSION not in extensions else [])])}


#: Why a Spark without Iceberg cannot write an Iceberg type: an outage of its sink.
MISSING_FROM_SPARK = (f"Spark cannot write Iceberg tables: the Iceberg runtime or its catalog `{ICEBERG_CATALOG}` is "
                      f"not in the session (the bridge's own driver gets the jars of `{FETCH_COMMAND}` and the "
                      "[spark.iceberg] catalog)")


def missing_from_spark(exc: BaseException) -> bool:
    """Whether `exc` says Spark has no Iceberg runtime or no catalog `mqbridge`."""
    text = str(exc)
    return (("CATALOG_NOT_FOUND" in text and ICEBERG_CATALOG in text)
            or ("ClassNotFoundException" in text and "org.apache.iceberg" in text))


def snapshot_options(bulk_id: str, transaction: TableTransaction | None) -> dict[str, str]:
    """The options of a bulk's append: its schema merged (a typed type's new column added), and the
    snapshot properties that tell recovery which bulk the snapshot is."""
    options = {"merge-schema": "true", f"snapshot-property.{BULK_ID_PROPERTY}": bulk_id}
    if transaction is not None:
        options |= {f"snapshot-property.{APP_ID_PROPERTY}": transaction.app_id,
                    f"snapshot-property.{VERSION_PROPERTY}": str(transaction.version)}
    return options


def _quoted(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")


def declared_comment(field: StructField) -> str | None:
    """The comment of a typed column: its declared field (`DECLARED_COMMENT` and the JSON of the
    field as the type's schema declares it, `mqbridge.landing.schema_check.DECLARED`), or None for a
    landed column. Iceberg keeps no Spark column metadata, and Spark's `from_json` makes every column
    nullable, and Iceberg widens a SMALLINT to an int: the comment is what the schema check compares."""
    declared = field.metadata.get(DECLARED)
    return f"{DECLARED_COMMENT}{declared}" if isinstance(declared, str) else None


def _column(field: StructField) -> str:
    comment = declared_comment(field)
    return f"`{field.name}` {field.dataType.simpleString()}" + (f" COMMENT '{_quoted(comment)}'" if comment else "")


def ensure_table(spark: SparkSession, catalog: IcebergCatalog, table: str, frame: DataFrame,
                 partition_by: str = "day", key: str = "partition_by") -> None:
    """Create the namespace and the table `table` (at `<warehouse>/<table>`, hidden-partitioned by the
    transform of `partition_by`, `PARTITION_TRANSFORMS`, with `frame`'s columns, each typed one commented
    with its declared field, `declared_comment`) if they are missing; evolve an existing table's partition
    spec to it (`evolve_partitioning`; `key` names the setting in its errors and logs); add the typed
    columns `frame` has and the table lacks (a type's schema added a column), commented alike (the
    append's `merge-schema` would add them without the comment)."""
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {ICEBERG_CATALOG}.{catalog.namespace}")
    identifier = catalog.identifier(table)
    columns = ", ".join(_column(f) for f in frame.schema.fields)
    properties = ", ".join(f"'{k}' = '{v}'" for k, v in TABLE_PROPERTIES.items())
    spark.sql(f"CREATE TABLE IF NOT EXISTS {identifier} ({columns}) USING iceberg "
              f"PARTITIONED BY ({PARTITION_TRANSFORMS[partition_by]}) "
              f"LOCATION '{_quoted(str(catalog.warehouse / table))}' TBLPROPERTIES ({properties})")
    evolve_partitioning(spark, identifier, partition_by, key)
    present = {f.name.lower() for f in spark.table(identifier).schema.fields}
    missing = [f for f in frame.schema.fields if f.name.lower() not in present]
    if missing:
        spark.sql(f"ALTER TABLE {identifier} ADD COLUMNS ({', '.join(_column(f) for f in missing)})")


def partition_fields(spark: SparkSession, identifier: str) -> list[str]:
    """The table's current partition spec, each field as Spark's DESCRIBE shows it (`put_date`,
    `days(put_timestamp)`, `hours(put_timestamp)`, ...), in order (`describe_partitioning`)."""
    rows = spark.sql(f"DESCRIBE TABLE {identifier}").collect()
    return describe_partitioning([(str(r["col_name"] or ""), str(r["data_type"] or "")) for r in rows])


def describe_partitioning(rows: list[tuple[str, str]]) -> list[str]:
    """The partition fields in the rows (col_name, data_type) of Spark 4.1's DESCRIBE TABLE of an Iceberg
    table: after `# Partitioning`, a row `Part N` per field with its transform (`days(put_timestamp)`);
    a spec of identity fields only is shown as Hive's `# Partition Information` instead, a `# col_name`
    header and then a row per column (checked with Iceberg 1.12; a spec of none: neither section)."""
    names = [name.strip() for name, _ in rows]
    if "# Partitioning" in names:
        start = names.index("# Partitioning") + 1
        return [kind.strip() for name, kind in rows[start:] if name.startswith("Part ")]
    if "# Partition Information" in names:
        fields: list[str] = []
        for name in names[names.index("# Partition Information") + 1:]:
            if not name or (name.startswith("#") and fields):
                break
            if not name.startswith("#"):
                fields.append(name)
        return fields
    return []


def partition_change(fields: list[str], partition_by: str, key: str = "partition_by") -> str | None:
    """The clause of `ALTER TABLE` that evolves a spec of `fields` into the transform of `partition_by`:
    its put-time field replaced (`TIME_FIELDS`), any other field kept; None when it is that transform
    already. ConfigError, naming the setting `key`, for a spec with no put-time field or with two (not made by
    the bridge: it changes no partitioning it cannot tell)."""
    wanted = PARTITION_TRANSFORMS[partition_by]
    times = [f for f in fields if f in TIME_FIELDS]
    if times == [wanted]:
        return None
    if len(times) != 1:
        raise ConfigError(f"{key} = \"{partition_by}\" wants an Iceberg table partitioned by "
                          f"{wanted}, but the table is partitioned by ({', '.join(fields) or 'nothing'}): not "
                          "a partitioning the bridge made or can evolve; repartition the table by hand "
                          f"(ALTER TABLE ... ADD/DROP PARTITION FIELD) to include {wanted}")
    return f"REPLACE PARTITION FIELD {times[0]} WITH {wanted}"


def evolve_partitioning(spark: SparkSession, identifier: str, partition_by: str, key: str = "partition_by") -> None:
    """Evolve the table's partition spec to `partition_by`'s transform (`partition_change`), one metadata
    commit: files written before keep their partitions (readers and the maintenance handle both specs),
    until a compaction rewrites them into the new spec. Logged as a warning: an operator changed
    `partition_by`, and the table is partitioned two ways until then."""
    fields = partition_fields(spark, identifier)
    change = partition_change(fields, partition_by, key)
    if change is None:
        return
    try:
        spark.sql(f"ALTER TABLE {identifier} {change}")
    except Exception:
        # Another process evolved it first (Iceberg commits a spec update once, without retrying on a
        # newer table): done if the table, read again, is partitioned as wanted now.
        spark.sql(f"REFRESH TABLE {identifier}")
        if partition_change(partition_fields(spark, identifier), partition_by, key) is None:
            return
        raise
    log.warning("Iceberg table %s: partition spec evolved from (%s) to %s (%s = \"%s\"); its files written "
                "before keep their old partitions until a compaction rewrites them (mqbridge compact)",
                identifier, ", ".join(fields), PARTITION_TRANSFORMS[partition_by], key, partition_by)


def append(frame: DataFrame, catalog: IcebergCatalog, table: str, bulk_id: str,
           transaction: TableTransaction | None) -> None:
    """Append `frame` (the landed columns and the identity) to the table `table` (made before,
    `ensure_table`) as one snapshot carrying the bulk (`snapshot_options`)."""
    frame.writeTo(catalog.identifier(table)).options(**snapshot_options(bulk_id, transaction)).append()


def table_exists(spark: SparkSession, catalog: IcebergCatalog, table: str) -> bool:
    """Whether the catalog holds the table `table`, by listing its namespace (made if missing, as by the
    probe): Spark's `catalog.tableExists` asks a missing table's name as a view as well, which Java's
    JdbcCatalog refuses in the layout it creates ("initialized without view support"). On an object
    store its warehouse is asked first (`session.store_answers`): every caller goes on to read the
    table, and Iceberg itself reads a table's metadata file with 20 tries over about 90 s whatever the
    error (`BaseMetastoreTableOperations.refreshFromMetadataLocation`), so a refused key met there would
    be named only after them."""
    from mqbridge.landing.session import store_answers

    store_answers(spark, catalog.warehouse)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {ICEBERG_CATALOG}.{catalog.namespace}")
    rows = spark.sql(f"SHOW TABLES IN {ICEBERG_CATALOG}.{catalog.namespace}").collect()
    return any(str(row["tableName"]).lower() == table.lower() for row in rows)


def committed(spark: SparkSession, catalog: IcebergCatalog, table: str, bulk_id: str) -> bool | None:
    """Whether a snapshot of the table `table` carries `bulk_id`; None when there is no such table."""
    if not table_exists(spark, catalog, table):
        return None
    rows = spark.sql(f"SELECT count(*) AS n FROM {catalog.identifier(table)}.snapshots "
                     f"WHERE summary['{BULK_ID_PROPERTY}'] = '{_quoted(bulk_id)}'").collect()
    return int(rows[0]["n"]) > 0


def write_probe(spark: SparkSession, catalog: IcebergCatalog) -> None:
    """The catalog and the warehouse answer: the catalog's namespace created if missing, and listed (the
    probe of an Iceberg sink: a write of the table itself would add a snapshot to it); the warehouse on
    an object store asked once (`session.store_answers`)."""
    from mqbridge.landing.session import store_answers

    store_answers(spark, catalog.warehouse)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {ICEBERG_CATALOG}.{catalog.namespace}")
    spark.sql(f"SHOW TABLES IN {ICEBERG_CATALOG}.{catalog.namespace}").collect()


# -- the dead process's driver ---------------------------------------------------------------------
def _drivers_dir(catalog: IcebergCatalog) -> Path:
    return catalog.state_dir / "iceberg" / "drivers"


def _record_file(catalog: IcebergCatalog, owner: str) -> Path:
    return _drivers_dir(catalog) / (owner.replace("/", "_").replace(":", "_") + ".json")


def record_driver(spark: SparkSession, catalog: IcebergCatalog, owner: str) -> None:
    """Record the driver JVM of `spark` as `owner`'s (its pid and start time), before the owner's
    first append, so that `settle` can wait for it to be gone once the owner is dead."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:  # Spark Connect: refused with Iceberg types (config.iceberg)
        return
    record_process(catalog, owner, int(jvm.java.lang.ProcessHandle.current().pid()))


def record_process(catalog: IcebergCatalog, owner: str, pid: int) -> None:
    """Record the process `pid` (this host's) as the driver JVM of `owner` (see `record_driver`)."""
    record = {"pid": pid, "create_time": psutil.Process(pid).create_time()}
    path = _record_file(catalog, owner)
    if path.exists() and json.loads(path.read_text(encoding="utf-8")) == record:
        return
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(record), encoding="utf-8")
    os.replace(partial, path)
    for other in path.parent.glob("*.json"):  # records of JVMs that are gone tell nothing any more
        if other != path and not _record_alive(other):
            other.unlink(missing_ok=True)


def driver_alive(catalog: IcebergCatalog, owner: str) -> bool:
    """Whether the driver JVM recorded for `owner` (`record_driver`) still runs on this host."""
    return _record_alive(_record_file(catalog, owner))


def _record_alive(path: Path) -> bool:
    """Whether the process a driver record at `path` names still runs (the same pid and start time)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        process = psutil.Process(int(record["pid"]))
        same = abs(process.create_time() - float(record["create_time"])) < 0.01
        return same and bool(process.status() != psutil.STATUS_ZOMBIE)
    except (OSError, ValueError, KeyError, psutil.Error):
        return False


def await_driver_gone(catalog: IcebergCatalog, owner: str, timeout: float = DRIVER_EXIT_WAIT) -> None:
    """Wait until the dead `owner`'s driver JVM is gone (it exits once its parent's pipe closes);
    LedgerUnavailableError after `timeout` seconds (the bulk is decided later)."""
    deadline = time.monotonic() + timeout
    while driver_alive(catalog, owner):
        if time.monotonic() >= deadline:
            raise LedgerUnavailableError(f"the Spark driver JVM of the dead bridge process {owner} still runs after "
                                         f"{timeout:.0f}s: its bulks are decided once it is gone")
        time.sleep(_DRIVER_POLL)
    _record_file(catalog, owner).unlink(missing_ok=True)


def settle(ledger: Ledger, bulk: PreparedBulk, spark: SparkSession, catalog: IcebergCatalog) -> bool:
    """Decide a prepared bulk by the table's snapshots (see the module docstring): True when one
    carries its id, or none does but the table holds its rows (its snapshot expired after a purge or
    compaction: `verdicts.holds_rows_of`): recorded published; False otherwise (forgotten: its messages
    land again when they come back). A dead owner's driver JVM is waited for first; this process's own bulk (its
    append raised) is asked at once: its append ran in this process's driver, and returned."""
    if bulk.owner != ledger.owner:
        await_driver_gone(catalog, bulk.owner)
    found = committed(spark, catalog, bulk.table, bulk.bulk_id)
    if found or (found is False and holds_rows_of(spark.table(catalog.identifier(bulk.table)), bulk.bulk_id)):
        # (no snapshot kept carries the id, but its rows are there: its snapshot expired since)
        ledger.mark_published(bulk.bulk_id)
        return True
    ledger.forget(bulk.bulk_id)
    return False


__all__ = ["APP_ID_PROPERTY", "BULK_ID_PROPERTY", "DECLARED_COMMENT", "EXTENSION", "JAR_SET", "MISSING_FROM_SPARK",
           "PARTITION_TRANSFORMS", "TIME_FIELDS", "VERSION_PROPERTY", "append", "await_driver_gone", "catalog_conf",
           "committed", "declared_comment", "describe_partitioning", "driver_alive", "ensure_table",
           "evolve_partitioning", "jar_files", "missing_from_spark", "partition_change", "partition_fields",
           "record_driver", "record_process", "session_conf", "settle", "snapshot_options", "table_exists",
           "write_probe"]
