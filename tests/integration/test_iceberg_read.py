"""Reading Iceberg tables back without Spark (`mqbridge.landing.iceberg_read`, pyiceberg) on tables the
real Iceberg runtime wrote: a Spark driver with Iceberg 1.12's jars (jars/iceberg, in a child process:
`DeltaSpark`, one per module) writes tables into a JDBC catalog on SQLite, named `mqbridge` as the
bridge names it, each bulk one append carrying its id and transaction as snapshot properties
(`snapshot-property.mqbridge.bulk-id`), then a row DELETE (copy-on-write, and merge-on-read: a
position delete file); in a second session of the same driver, a table into a JDBC catalog on a
PostgreSQL server of the test's own. First the bare fact: pyiceberg's SqlCatalog, loaded under the
same name (and only then), reads Java's catalog rows, the table's rows and the snapshot properties.
Then each reader function is compared with what Spark itself says of the same tables (snapshots,
put_date partitions, rows, time travel), the schema the schema check compares with (a table made by
the bridge's own `ensure_table`, its typed columns' declared fields in their comments), and the
catalog's failures: a missing table, a missing SQLite file, a wrong password (a configuration error
without the password in it), a PostgreSQL that does not answer (an outage)."""

from __future__ import annotations

import collections
import json
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from mqbridge.errors import ConfigError, SinkOutageError
from tests.support.exactly_once import free_port
from tests.support.iceberg_tables import bare_catalog, bare_properties, iceberg_conf, landed_rows
from tests.support.object_stores import DeltaSpark
from tests.support.postgres import PASSWORD, USER, PostgresServer, postgres_server

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

iceberg_read = pytest.importorskip("mqbridge.landing.iceberg_read")
iceberg_catalog = pytest.importorskip("mqbridge.landing.iceberg_catalog")
pytest.importorskip("pyiceberg")

NAMESPACE = "mqbridge"
ORDERS = (NAMESPACE, "orders")
DELETES = (NAMESPACE, "deletes")
EMPTY = (NAMESPACE, "empty")
PG_ORDERS = (NAMESPACE, "pg_orders")
TYPED = (NAMESPACE, "typed")
IDENTITY = "identity"
_COLUMNS = ("msg_id STRING, put_timestamp TIMESTAMP, bulk_id STRING, body BINARY, identity STRING, "
            "order_id STRING NOT NULL, amount DECIMAL(12,2), put_date DATE")


# --- the child's side (DeltaSpark.run calls these with its session) ------------------------------------


def _append(spark: Any, table: str, rows: list[tuple[str, str, str, int]], app_id: str, version: int) -> None:
    """One bulk's append, as the bridge makes it: its id and transaction as snapshot properties."""
    bulk_id = rows[0][2]
    (landed_rows(spark, rows).writeTo(table).option("snapshot-property.mqbridge.bulk-id", bulk_id)
     .option("snapshot-property.mqbridge.app-id", app_id).option("snapshot-property.mqbridge.version", str(version))
     .append())


def _create(spark: Any, table: str, location: str, properties: str = "") -> None:
    spark.sql(f"CREATE TABLE {table} ({_COLUMNS}) USING iceberg PARTITIONED BY (put_date) "
              f"LOCATION '{location}'{properties}")


def _facts(spark: Any, table: str) -> dict[str, Any]:
    """What Spark says of `table`: its snapshots, its rows per put_date, its rows, its data files."""
    snapshots = [(r[0], r[1], r[2], r[3].get("mqbridge.bulk-id"), r[3].get("mqbridge.app-id"),
                  r[3].get("mqbridge.version")) for r in spark.sql(
        f"SELECT snapshot_id, unix_millis(committed_at), operation, summary FROM {table}.snapshots "
        "ORDER BY committed_at").collect()]
    dates = {r[0]: (r[1], r[2], r[3]) for r in spark.sql(
        f"SELECT cast(put_date AS STRING), count(*), unix_micros(min(put_timestamp)), "
        f"unix_micros(max(put_timestamp)) FROM {table} GROUP BY 1").collect()}
    rows = sorted((r[0], r[1], r[2]) for r in spark.sql(
        f"SELECT identity, cast(put_date AS STRING), bulk_id FROM {table}").collect())
    files = sorted((r[0], r[1]) for r in spark.sql(
        f"SELECT file_path, file_size_in_bytes FROM {table}.data_files").collect())
    return {"snapshots": snapshots, "dates": dates, "rows": rows, "files": files}


def _typed_table(spark: Any, base: str) -> None:
    """The table TYPED as the bridge makes it (`iceberg.ensure_table`): its typed columns (order_id
    STRING NOT NULL, qty SMALLINT, which Iceberg keeps as an int) carrying their declared fields as the
    bridge's frames do; then the type's schema adds a column (channel STRING), added by ALTER TABLE."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ShortType, StringType, StructField

    from mqbridge.landing import iceberg
    from mqbridge.landing.schema_check import declared_metadata

    declared = {"order_id": StructField("order_id", StringType(), False), "qty": StructField("qty", ShortType()),
                "channel": StructField("channel", StringType())}
    rows = landed_rows(spark, [("t0", "2026-11-06 10:00:00", "b-t", 1)]).withColumn("qty", F.lit(1).cast("smallint"))
    frame = rows.select(*(F.col(c).alias(c, metadata=declared_metadata(declared[c])) if c in declared else c
                          for c in ("msg_id", "put_timestamp", "bulk_id", "body", IDENTITY, "order_id", "qty",
                                    "put_date")))
    catalog = bare_catalog(base)
    iceberg.ensure_table(spark, catalog, "typed", frame)
    iceberg.append(frame, catalog, "typed", "b-t", None)
    wider = frame.withColumn("channel", F.lit("web").alias("channel", metadata=declared_metadata(declared["channel"])))
    iceberg.ensure_table(spark, catalog, "typed", wider)


def write_tables(spark: Any, base: str, pg_uri: str | None) -> dict[str, Any]:
    """The module's tables (see the module's docstring) and Spark's facts of them."""
    orders, deletes, empty = (f"mqbridge.{'.'.join(t)}" for t in (ORDERS, DELETES, EMPTY))
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS mqbridge.{NAMESPACE}")
    _create(spark, orders, f"{base}/warehouse/orders")
    _append(spark, orders, [("i0", "2026-11-01 10:00:00", "b-1", 1), ("i1", "2026-11-01 10:00:05", "b-1", 2),
                            ("i2", "2026-11-01 23:59:59", "b-1", 3), ("i3", "2026-11-02 00:00:00", "b-1", 4),
                            ("i4", "2026-11-02 08:30:00", "b-1", 5)], "app-A", 1)
    _append(spark, orders, [("i5", "2026-11-02 09:00:00", "b-2", 6), ("i6", "2026-11-02 09:00:01", "b-2", 7),
                            ("i7", "2026-11-03 12:00:00", "b-2", 8)], "app-A", 2)
    after_b2 = _facts(spark, orders)
    spark.sql(f"DELETE FROM {orders} WHERE identity = 'i6'")
    _create(spark, deletes, f"{base}/warehouse/deletes",
            " TBLPROPERTIES ('format-version' = '2', 'write.delete.mode' = 'merge-on-read')")
    _append(spark, deletes, [(f"d{i}", f"2026-11-05 10:00:0{i}", "b-3", i) for i in range(5)], "app-B", 7)
    spark.sql(f"DELETE FROM {deletes} WHERE identity = 'd1'")
    _create(spark, empty, f"{base}/warehouse/empty")
    _typed_table(spark, base)
    found = {"orders": _facts(spark, orders), "orders_after_b2": after_b2, "deletes": _facts(spark, deletes),
             "delete_files": spark.sql(f"SELECT count(*) FROM {deletes}.delete_files").collect()[0][0]}
    if pg_uri is not None:  # the same jars, another session: the catalog `mqbridge` on PostgreSQL
        other = spark.newSession()
        for key, value in {"uri": pg_uri, "jdbc.user": USER, "jdbc.password": PASSWORD,
                           "warehouse": f"{base}/pg-warehouse"}.items():
            other.conf.set(f"spark.sql.catalog.mqbridge.{key}", value)
        pg_orders = f"mqbridge.{'.'.join(PG_ORDERS)}"
        other.sql(f"CREATE NAMESPACE IF NOT EXISTS mqbridge.{NAMESPACE}")
        _create(other, pg_orders, f"{base}/pg-warehouse/pg_orders")
        _append(other, pg_orders, [("p0", "2026-11-04 10:00:00", "b-pg", 1)], "app-P", 3)
        found["pg_orders"] = _facts(other, pg_orders)
    return found


# --- the test process's side ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    with postgres_server() as server:
        yield server


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory, postgres: PostgresServer) -> Iterator[dict[str, Any]]:
    """The tables, written once by the module's one Spark child; its facts, with "base" the directory."""
    base = tmp_path_factory.mktemp("iceberg-read")
    driver = DeltaSpark(iceberg_conf(base), base / "scratch")
    try:
        outcome = driver.run(write_tables, str(base), f"jdbc:postgresql://127.0.0.1:{postgres.port}/postgres",
                             timeout=400)
    finally:
        driver.close()
    assert outcome["ok"], outcome.get("traceback")
    yield {**outcome["value"], "base": base, "seconds": outcome["seconds"]}


@pytest.fixture(scope="module")
def catalog(written: dict[str, Any]) -> Any:
    return iceberg_catalog.open_catalog(bare_properties(written["base"]))


def test_bare_pyiceberg_reads_what_java_jdbc_catalog_wrote(written: dict[str, Any]) -> None:
    """pyiceberg's SqlCatalog alone, loaded under the Spark catalog's name, lists the table Java's
    JdbcCatalog wrote to SQLite, reads its rows and the snapshot properties of its appends; under
    another name it sees no table (JdbcCatalog keeps the name in its `catalog_name` column)."""
    from pyiceberg.catalog.sql import SqlCatalog

    uri = f"sqlite:///{written['base']}/catalog.db"
    same = SqlCatalog("mqbridge", uri=uri, init_catalog_tables="false")
    assert ORDERS in same.list_tables(NAMESPACE)
    table = same.load_table(ORDERS)
    frame = table.scan(selected_fields=("identity", "put_date", "bulk_id")).to_arrow()
    rows = sorted((r["identity"], r["put_date"].isoformat(), r["bulk_id"]) for r in frame.to_pylist())
    assert rows == [tuple(r) for r in written["orders"]["rows"]]
    summaries = [dict(s.summary.additional_properties) for s in table.metadata.snapshots if s.summary]
    assert [s.get("mqbridge.bulk-id") for s in summaries] == ["b-1", "b-2", None]
    assert summaries[1]["mqbridge.app-id"] == "app-A" and summaries[1]["mqbridge.version"] == "2"
    other = SqlCatalog("another", uri=uri, init_catalog_tables="false")
    assert not other.table_exists(ORDERS)
    print(f"Spark wrote the module's tables in {written['seconds']:.1f} s")


def test_open_catalog_and_table_exists(written: dict[str, Any], catalog: Any) -> None:
    assert iceberg_catalog.table_exists(catalog, ORDERS)
    assert iceberg_catalog.table_exists(catalog, EMPTY)
    assert not iceberg_catalog.table_exists(catalog, (NAMESPACE, "nowhere"))
    assert not iceberg_catalog.table_exists(catalog, ("no_namespace", "orders"))
    with pytest.raises(iceberg_catalog.IcebergTableMissingError, match=r"mqbridge\.mqbridge\.nowhere"):
        iceberg_catalog.load_table(catalog, (NAMESPACE, "nowhere"))


def test_a_missing_sqlite_catalog_is_not_created(tmp_path: Path) -> None:
    """No SQLite file: the table is missing (no table landed yet), and the reader creates no file."""
    properties = iceberg_catalog.pyiceberg_properties("jdbc", f"jdbc:sqlite:{tmp_path}/catalog.db")
    with pytest.raises(iceberg_catalog.IcebergTableMissingError, match="is not there yet"):
        iceberg_catalog.open_catalog(properties)
    assert not (tmp_path / "catalog.db").exists()


def test_snapshots_carry_the_bulks(written: dict[str, Any], catalog: Any) -> None:
    """An append's `snapshot-property.*` options come back in its snapshot's summary as Spark itself reads
    it (`<table>.snapshots`: how recovery finds a bulk), and pyiceberg reads the same snapshots."""
    spark = written["orders"]["snapshots"]
    assert [(s[3], s[4], s[5]) for s in spark] == [("b-1", "app-A", "1"), ("b-2", "app-A", "2"), (None, None, None)]
    table = iceberg_catalog.load_table(catalog, ORDERS)
    found = iceberg_read.snapshots(table)
    assert [(s.snapshot_id, round(s.committed_at * 1000), s.operation, s.bulk_id, s.app_id,
             str(s.version) if s.version is not None else None) for s in found] == [tuple(s) for s in spark]
    assert [s.operation for s in found] == ["append", "append", "overwrite"]
    assert [s.changes_rows for s in found] == [False, False, True]
    assert all(s.current for s in found)
    assert iceberg_read.snapshot_facts(table) == iceberg_read.SnapshotFacts(spark[-1][0], 3)
    assert iceberg_read.snapshot_of_bulk(table, "b-2") == found[1]
    assert iceberg_read.snapshot_of_bulk(table, "b-9") is None
    assert sorted(iceberg_read.bulk_ids(table)) == ["b-1", "b-2"]
    empty = iceberg_catalog.load_table(catalog, EMPTY)
    assert iceberg_read.snapshot_facts(empty) == iceberg_read.SnapshotFacts(None, 0)
    assert iceberg_read.snapshots(empty) == []


def _micros(value: datetime | None) -> int:
    assert value is not None and value.tzinfo is not None
    return round(value.timestamp() * 1_000_000)


def test_containers_per_put_date(written: dict[str, Any], catalog: Any) -> None:
    """Rows, bytes, files and put_timestamp bounds per put_date, from the manifests, as Spark counts them."""
    found = iceberg_read.containers(iceberg_catalog.load_table(catalog, ORDERS))
    spark = written["orders"]
    assert [c.put_date for c in found] == sorted(spark["dates"]) == ["2026-11-01", "2026-11-02", "2026-11-03"]
    for container in found:
        rows, oldest, newest = spark["dates"][container.put_date]
        assert (container.rows, _micros(container.oldest), _micros(container.newest)) == (rows, oldest, newest)
        assert container.table == written["base"] / "warehouse" / "orders"
        assert all(f.is_file() and f.parent.name == f"put_date={container.put_date}" for f in container.files)
        assert container.bytes == sum(f.stat().st_size for f in container.files)
    files = sorted(f for c in found for f in c.files)
    assert [str(f) for f in files] == [p.removeprefix("file:") for p, _ in spark["files"]]
    assert iceberg_read.containers(iceberg_catalog.load_table(catalog, EMPTY)) == []


def test_containers_count_merge_on_read_deletes(written: dict[str, Any], catalog: Any) -> None:
    """A partition with a position delete file: its rows are the live rows, as Spark counts them."""
    assert written["delete_files"] == 1
    [container] = iceberg_read.containers(iceberg_catalog.load_table(catalog, DELETES))
    assert container.rows == written["deletes"]["dates"]["2026-11-05"][0] == 4


def test_typed_schema_leaves_out_the_landed_columns(catalog: Any) -> None:
    import pyarrow as pa

    schema = iceberg_read.typed_schema(iceberg_catalog.load_table(catalog, ORDERS))
    assert schema.names == ["order_id", "amount"]
    assert pa.types.is_string(schema.field("order_id").type) or pa.types.is_large_string(schema.field("order_id").type)
    assert not schema.field("order_id").nullable  # NOT NULL: Iceberg's `required`
    assert schema.field("amount").type == pa.decimal128(12, 2) and schema.field("amount").nullable


def test_the_written_schema_is_the_declared_one_and_a_narrowing_change_is_refused(written: dict[str, Any]) -> None:
    """`IcebergFormat.written_schemas` (what the schema check compares a type's schema with): a table the
    bridge made keeps each typed column's declared field in its comment (NOT NULL, SMALLINT, which Iceberg
    keeps as a nullable int), a column the type added too; a table without them (written by another
    engine) is read as Iceberg keeps it. A narrowed column is refused, an added nullable one accepted."""
    from pyspark.sql.types import StructType

    from mqbridge.config.ddl import ddl_schema
    from mqbridge.config.iceberg import bind
    from mqbridge.landing.evolution import compare
    from mqbridge.table_formats.iceberg import FORMAT

    base = written["base"]
    bind(bare_catalog(base))
    try:
        [(text, where)] = FORMAT.written_schemas(base / "warehouse" / "typed", "orders").items()
        [(plain, _)] = FORMAT.written_schemas(base / "warehouse" / "orders", "orders").items()
        assert FORMAT.written_schemas(base / "warehouse" / "nowhere", "orders") == {}
        shared = FORMAT.written_schemas(base / "warehouse" / "typed", "orders", ddl_schema("qty SMALLINT"))
    finally:
        bind(None)
    old = StructType.fromJson(json.loads(text))
    assert old.simpleString() == "struct<order_id:string,qty:smallint,channel:string>"
    assert [f.nullable for f in old.fields] == [False, True, True]
    assert where.name.endswith(".metadata.json")
    assert StructType.fromJson(json.loads(plain)).simpleString() == "struct<order_id:string,amount:decimal(12,2)>"
    assert StructType.fromJson(json.loads(next(iter(shared)))).simpleString() == "struct<qty:smallint>"
    narrowed = compare(old, ddl_schema("order_id STRING NOT NULL, qty TINYINT, channel STRING"))
    assert [c.line().split(": values")[0] for c in narrowed.refused] == ["column 'qty': smallint -> tinyint: narrowed"]
    same = compare(old, ddl_schema("order_id STRING NOT NULL, qty SMALLINT, channel STRING, note STRING"))
    assert not same.refused and len(same.added) == 1


def test_rows_of_identities_and_bulks(written: dict[str, Any], catalog: Any) -> None:
    table = iceberg_catalog.load_table(catalog, ORDERS)
    rows = iceberg_read.rows_with_identities(table, ["i1", "i4", "i6", "zz"])
    assert rows.column_names == ["identity", "put_date", "bulk_id", "put_timestamp"]
    assert sorted((r["identity"], r["put_date"].isoformat(), r["bulk_id"]) for r in rows.to_pylist()) == [
        ("i1", "2026-11-01", "b-1"), ("i4", "2026-11-02", "b-1")]  # i6 deleted
    assert iceberg_read.put_dates_of(table, ["i2", "i7"]) == ["2026-11-01", "2026-11-03"]
    assert iceberg_read.put_dates_of(table, ["i2", "i7"], put_dates=["2026-11-03"]) == ["2026-11-03"]
    assert iceberg_read.put_dates_of(table, []) == []
    spark_counts = collections.Counter(r[2] for r in written["orders"]["rows"])
    assert iceberg_read.rows_by_bulk(table, ["b-1", "b-2", "b-9"]) == spark_counts == {"b-1": 5, "b-2": 2}


def test_scan_current_and_time_travel(written: dict[str, Any], catalog: Any) -> None:
    """The current snapshot, one by id and one as of a time: the rows Spark saw then."""
    table = iceberg_catalog.load_table(catalog, ORDERS)

    def identities(frame: Any) -> list[str]:
        return sorted(frame.column("identity").to_pylist())

    assert identities(iceberg_read.scan(table, ["identity"])) == [r[0] for r in written["orders"]["rows"]]
    first, second, _ = written["orders"]["snapshots"]
    assert identities(iceberg_read.scan(table, ["identity"], snapshot_id=first[0])) == ["i0", "i1", "i2", "i3", "i4"]
    before_delete = [r[0] for r in written["orders_after_b2"]["rows"]]
    assert identities(iceberg_read.scan(table, ["identity"], as_of=second[1] / 1000)) == before_delete
    when = datetime.fromtimestamp(second[1] / 1000, timezone.utc)
    assert identities(iceberg_read.scan(table, ["identity"], as_of=when)) == before_delete
    assert sum(b.num_rows for b in iceberg_read.batches(table, ["identity"])) == 7
    with pytest.raises(iceberg_catalog.IcebergReadError, match="no snapshot at or before"):
        iceberg_read.scan(table, as_of=first[1] / 1000 - 3600)
    with pytest.raises(iceberg_catalog.IcebergReadError, match="no snapshot 42"):
        iceberg_read.scan(table, snapshot_id=42)


def test_postgresql_jdbc_catalog(written: dict[str, Any], postgres: PostgresServer) -> None:
    """The catalog Java's JdbcCatalog keeps in PostgreSQL, read with the user and password as given
    to `pyiceberg_properties`; a wrong password is a configuration error and a server that does not
    answer an outage, neither message carrying the password."""
    jdbc = f"jdbc:postgresql://127.0.0.1:{postgres.port}/postgres"
    properties = iceberg_catalog.pyiceberg_properties("jdbc", jdbc, USER, PASSWORD, written["base"] / "pg-warehouse")
    assert PASSWORD not in repr(properties)
    catalog = iceberg_catalog.open_catalog(properties)
    table = iceberg_catalog.load_table(catalog, PG_ORDERS)
    assert [(s.bulk_id, s.app_id, s.version) for s in iceberg_read.snapshots(table)] == [("b-pg", "app-P", 3)]
    assert [(c.put_date, c.rows) for c in iceberg_read.containers(table)] == [("2026-11-04", 1)]
    assert not iceberg_catalog.table_exists(catalog, ORDERS)  # that one is in the SQLite catalog

    wrong = iceberg_catalog.pyiceberg_properties("jdbc", jdbc, USER, "not-the-Password-9")
    with pytest.raises(ConfigError) as refused:
        iceberg_catalog.open_catalog(wrong)
    assert "refuses the credentials" in str(refused.value) and "not-the-Password-9" not in str(refused.value)
    assert f"127.0.0.1:{postgres.port}" in str(refused.value)

    closed = iceberg_catalog.pyiceberg_properties("jdbc", f"jdbc:postgresql://127.0.0.1:{free_port()}/postgres",
                                               USER, PASSWORD)
    started = time.monotonic()
    with pytest.raises(iceberg_catalog.IcebergCatalogUnavailableError) as down:
        iceberg_catalog.open_catalog(closed)
    assert isinstance(down.value, SinkOutageError) and PASSWORD not in str(down.value)
    assert f"{USER}:***@127.0.0.1" in str(down.value)
    assert time.monotonic() - started < 10
