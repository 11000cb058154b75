"""Apache Iceberg tables with Spark: each bulk ONE append (one snapshot) of the table
`mqbridge.<namespace>.<table>` of the `[spark.iceberg]` catalog, whose snapshot summary carries the
bulk's id (`mqbridge.bulk-id`) and its ledger transaction (`mqbridge.app-id`, `mqbridge.version`).

The protocol is the Delta one (`Landing.commit`: prepare, append, mark published, source commit).
Iceberg has no idempotent append (Delta's `txnAppId`), so a bulk's append is made idempotent and
fenceable by Iceberg's write-audit-publish, on tables made with `write.wap.enabled`: the append is
*staged* under a WAP id, the bulk's id (`stage`: a snapshot readers do not see; the bridge's writer
stages before the table's turn, before the bulk is prepared), then *published* in the turn, after
`prepare`, by a cherry-pick (`publish`), and Iceberg publishes a WAP id once: a second publish of it fails
with DuplicateWAPCommitException, whichever was staged first (tests/integration/test_iceberg_wap.py).
Recovery of a prepared bulk that is not in the table (`settle`) first *fences* it: an empty append
published under its WAP id (`fence`). From then on the bulk's own staged append can never be
published: a dead process's Spark still finishing it, or a bridge that stalled or was cut off past its
lease and goes on, fails (BulkFencedError) instead of landing its messages a second time; which of the
two came first is told by the table's lineage (`published_as`, `mqbridge.landing.iceberg_snapshots`).

The bridge lands Iceberg tables by its own local driver only (a Spark Connect `remote` is refused,
`config.iceberg`). `mqbridge ledger --abandon`, which reads the table without Spark (pyiceberg) and so
cannot fence, waits instead until the dead owner's driver JVM is gone: it exits when its Python parent
dies (PythonGatewayServer reads its stdin until EOF; tests/integration/test_iceberg_facts.py measures
it), and each process records its driver JVM (`record_driver`, before its first append).

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

from mqbridge import failpoints
from mqbridge.config.iceberg import (
    APP_ID_PROPERTY,
    BULK_ID_PROPERTY,
    FENCE_PROPERTY,
    ICEBERG_CATALOG,
    VERSION_PROPERTY,
    IcebergCatalog,
)
from mqbridge.errors import BulkFencedError, ConfigError, LedgerUnavailableError
from mqbridge.landing import jar_sets
from mqbridge.landing.iceberg_snapshots import STAGED_WAP_ID, publication
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
#: (`merge-schema`, which needs `accept-any-schema`); format version 2 (row-level deletes for a purge);
#: appends made under a WAP id staged, not published (`stage`; set on a table made before, `ensure_table`).
WAP_ENABLED = "write.wap.enabled"
TABLE_PROPERTIES = {"format-version": "2", "write.spark.accept-any-schema": "true", WAP_ENABLED: "true"}
#: The session setting under which Iceberg's Spark writer stages an append (read when the write is planned).
WAP_ID_CONF = "spark.wap.id"
#: The Java exception of a second publish of one WAP id (a bulk fenced, or a fence met its bulk).
DUPLICATE_WAP = "DuplicateWAPCommitException"
#: What `published_as` finds in a table's lineage for a bulk: its rows, or a fence of it.
ROWS, FENCE = "rows", "fence"
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
    append's `merge-schema` would add them without the comment); enable write-audit-publish on a table
    made before the bridge staged its appends (`stage`)."""
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
    wap = spark.sql(f"SHOW TBLPROPERTIES {identifier} ('{WAP_ENABLED}')").collect()
    if not wap or str(wap[0]["value"]).lower() != "true":  # a table made before appends were staged
        spark.sql(f"ALTER TABLE {identifier} SET TBLPROPERTIES ('{WAP_ENABLED}' = 'true')")


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
    `ensure_table`) as one snapshot carrying the bulk (`snapshot_options`): staged and published under
    the bulk's WAP id when the bulk has a ledger transaction (`stage`, `publish`), else appended at once.
    `frame`'s session must be one that no other write uses meanwhile (see `stage`)."""
    if transaction is None:
        frame.writeTo(catalog.identifier(table)).options(**snapshot_options(bulk_id, None)).append()
        return
    publish_staged(frame.sparkSession, catalog, table, stage(frame, catalog, table, bulk_id, transaction), bulk_id)


def publish_staged(spark: SparkSession, catalog: IcebergCatalog, table: str, staged: int | None, bulk_id: str) -> None:
    """The second half of a bulk's append, in its table's turn after the bulk is prepared: `publish` the
    snapshot `stage` gave (None: the table did not stage it, it is published already)."""
    failpoints.wait("holding_staged")  # tests only: the bridge stalls between its stage and its publish
    if staged is not None:
        publish(spark, catalog, table, staged, bulk_id)


def stage(frame: DataFrame, catalog: IcebergCatalog, table: str, wap_id: str,
          transaction: TableTransaction | None, properties: Mapping[str, str] | None = None) -> int | None:
    """Append `frame` to the table `table` staged under `wap_id` (the bulk's id), carrying the bulk
    (`snapshot_options`) or the snapshot `properties` instead (a fence's): the staged snapshot's id, which readers do
    not see until `publish`. The WAP id is a setting of `frame`'s session (Iceberg's writer reads it
    nowhere else), set for the append only: that session must be one no other write uses meanwhile,
    or that write would be staged too (`IcebergWrites` keeps a session of its own, `fence` makes one).
    None when the table did not stage the append (its `write.wap.enabled` turned off by hand since
    `ensure_table`): the append is published already, without a fence's protection, and a bulk's before
    it is prepared (logged)."""
    spark = frame.sparkSession
    identifier = catalog.identifier(table)
    options = ({f"snapshot-property.{k}": v for k, v in properties.items()} if properties is not None
               else snapshot_options(wap_id, transaction))
    spark.conf.set(WAP_ID_CONF, wap_id)
    try:
        frame.writeTo(identifier).options(**options).append()
    finally:
        spark.conf.unset(WAP_ID_CONF)
    marker = FENCE_PROPERTY if properties is not None else BULK_ID_PROPERTY
    rows = spark.sql(f"SELECT snapshot_id FROM {identifier}.snapshots WHERE summary['{STAGED_WAP_ID}'] = "
                     f"'{_quoted(wap_id)}' AND summary['{marker}'] = '{_quoted(wap_id)}' "
                     "ORDER BY committed_at DESC LIMIT 1").collect()
    if not rows:
        log.warning("Iceberg table %s did not stage the append of bulk %s (its %s is not true): it is published "
                    "without write-audit-publish, which fences a bulk of a bridge that stalled past its lease, "
                    "and before the bulk is prepared (a crash before that lands its messages again); set it back "
                    "(ALTER TABLE ... SET TBLPROPERTIES ('%s' = 'true'))", identifier, wap_id, WAP_ENABLED,
                    WAP_ENABLED)
        return None
    return int(rows[0]["snapshot_id"])


def publish(spark: SparkSession, catalog: IcebergCatalog, table: str, snapshot_id: int, wap_id: str) -> None:
    """Publish the staged snapshot `snapshot_id` of the table `table` (Iceberg's `cherrypick_snapshot`: a
    fast-forward, or a new snapshot on top of the current one). BulkFencedError when its WAP id was
    published before: by a fence (another process decided the bulk: its owner's lease had expired),
    or by the bulk itself (a publish whose answer was lost; `settle` tells which)."""
    identifier = catalog.identifier(table)
    try:
        spark.sql(f"CALL {ICEBERG_CATALOG}.system.cherrypick_snapshot('{_quoted(identifier)}', "
                  f"{int(snapshot_id)})").collect()
    except Exception as exc:
        if DUPLICATE_WAP in str(exc):
            raise BulkFencedError(f"bulk {wap_id} of Iceberg table {table} was decided by another process: its WAP id "
                                  "was published before (a fence), its append can never be") from None
        raise


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


def published_as(spark: SparkSession, catalog: IcebergCatalog, table: str, bulk_id: str) -> str | None:
    """What the current lineage of the table `table` (read afresh: `REFRESH TABLE`, another process may
    have published since) holds of `bulk_id`: ROWS when a snapshot published its rows, FENCE when one
    published a fence of it (`mqbridge.landing.iceberg_snapshots.publication`), None when neither."""
    identifier = catalog.identifier(table)
    spark.sql(f"REFRESH TABLE {identifier}")
    summaries = {int(r["snapshot_id"]): dict(r["summary"] or {})
                 for r in spark.sql(f"SELECT snapshot_id, summary FROM {identifier}.snapshots").collect()}
    lineage = [int(r["snapshot_id"]) for r in spark.sql(
        f"SELECT snapshot_id FROM {identifier}.history WHERE is_current_ancestor").collect()]
    for snapshot_id in lineage:
        found = publication(summaries.get(snapshot_id, {}), summaries)
        if found.bulk_id == bulk_id:
            return ROWS
        if found.fenced == bulk_id:
            return FENCE
    return None


def fence(spark: SparkSession, catalog: IcebergCatalog, table: str, bulk_id: str) -> None:
    """Publish an empty append under `bulk_id`'s WAP id (`FENCE_PROPERTY` in its summary), so that the
    bulk's own staged append can never be published after it (`publish`). Done on a new session of
    `spark`'s driver (`stage` sets the WAP id on it). A bulk published first makes the fence's publish
    fail: nothing to do, `published_as` then finds the bulk's rows."""
    session = spark.newSession()
    identifier = catalog.identifier(table)
    staged = stage(session.table(identifier).limit(0), catalog, table, bulk_id, None, {FENCE_PROPERTY: bulk_id})
    if staged is None:
        raise LedgerUnavailableError(f"bulk {bulk_id} of Iceberg table {table} cannot be fenced: the table's "
                                     f"{WAP_ENABLED} is not true; set it back to decide the bulk")
    try:
        publish(session, catalog, table, staged, bulk_id)
    except BulkFencedError:
        log.info("Iceberg table %s: bulk %s was published (or fenced) before its fence", identifier, bulk_id)


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
    """Decide a prepared bulk by the table (see the module docstring): True when its rows are published
    in the table's lineage, or no snapshot kept says but the table holds its rows (its snapshot expired
    after a purge or compaction: `verdicts.holds_rows_of`): recorded published. Otherwise the bulk is
    fenced first (`fence`), so that its own append, staged by a process that may still run, can never be
    published, and the lineage asked again: a fence published, the bulk is forgotten (its messages land
    again when they come back) and False; the bulk's rows published after all (its writer was first),
    True. A table that is not there: forgotten (nothing can publish into it)."""
    if not table_exists(spark, catalog, bulk.table):
        ledger.forget(bulk.bulk_id)
        return False
    found = published_as(spark, catalog, bulk.table, bulk.bulk_id)
    if found is None and holds_rows_of(spark.table(catalog.identifier(bulk.table)), bulk.bulk_id):
        found = ROWS
    if found is None:
        fence(spark, catalog, bulk.table, bulk.bulk_id)
        found = published_as(spark, catalog, bulk.table, bulk.bulk_id)
        if found is None:
            raise LedgerUnavailableError(f"bulk {bulk.bulk_id} of Iceberg table {bulk.table} was fenced, yet its "
                                         "table's lineage shows neither the fence nor the bulk (rolled back by hand?)")
    if found == ROWS:
        ledger.mark_published(bulk.bulk_id)
        return True
    ledger.forget(bulk.bulk_id)
    return False


__all__ = ["APP_ID_PROPERTY", "BULK_ID_PROPERTY", "DECLARED_COMMENT", "DUPLICATE_WAP", "EXTENSION", "FENCE", "JAR_SET",
           "MISSING_FROM_SPARK", "PARTITION_TRANSFORMS", "ROWS", "TIME_FIELDS", "VERSION_PROPERTY", "WAP_ENABLED",
           "WAP_ID_CONF", "append", "await_driver_gone", "catalog_conf", "declared_comment", "describe_partitioning",
           "driver_alive", "ensure_table", "evolve_partitioning", "fence", "jar_files", "missing_from_spark",
           "partition_change", "partition_fields", "publish", "publish_staged", "published_as", "record_driver",
           "record_process", "session_conf", "settle", "snapshot_options", "stage", "table_exists", "write_probe"]
