"""Purge and compaction of Iceberg tables (`table_format = "iceberg"`, the embedded JDBC catalog on SQLite),
partitioned by days and by hours of put_timestamp (`[types.X] partition_by`, a spec evolved), on a real
Spark with Iceberg 1.12's runtime (jars/iceberg). One spawned child process keeps ONE Spark driver for
every step (the bridge's own session, `create_spark_session`, which `mqbridge purge` and `mqbridge
compact` then reuse: each command is run by `mqbridge.cli.main` in that child), so the module
pays for one JVM start:

1. the bare facts the purger rests on, with Spark SQL alone on a table of its own: a DELETE under
   `write.delete.mode` = merge-on-read writes one position delete file and rewrites no data file; under
   copy-on-write it rewrites the file holding the rows; an overwrite validated against the snapshot it
   read is refused after a late append to the partition; `remove_orphan_files` refuses an age under 24 h;
2. rows landed by the bridge's own Iceberg writer (`SparkExecutor`, one append per bulk: 5 files per
   put_date), then `mqbridge purge --strategy delete` (position deletes), `mqbridge purge --strategy copy`
   (the first day copied, the second dropped) with `vacuum_retention = "0s"` (snapshots expired, an old
   orphan file removed, the snapshot before the purge no longer readable), more small files landed,
   `mqbridge compact` (`rewrite_data_files` sorted by put_timestamp: fewer files), a bulk left prepared
   whose snapshot the compaction expired settled as landed by its rows, `mqbridge purge` by
   the type's row cap (`max_rows`), and `mqbridge ledger --verify` (the purged bulks counted apart);
3. the table's partitioning (`[types.X] partition_by`): made `days(put_timestamp)`; with `partition_by =
   "hour"` its spec evolved to `hours(put_timestamp)` by the next append (files of both specs side by
   side), then a delete purge of rows in both specs, a compaction (every file rewritten into the hours
   spec) and a copy purge, `mqbridge tables`, `ledger --verify` and `where` reading it; a new table made
   `hours(put_timestamp)` from the start; a table made by hand with no partitions refused as an outage; a
   table evolved by another process first found evolved.

Every row is accounted for after each step by pyiceberg (an independent reader through the same catalog):
exactly the surviving rows, each once. A reader thread reads the table by pyiceberg all through the purges
and the compaction: each read sees the table whole, before or after a commit, never between."""

from __future__ import annotations

import collections
import contextlib
import io
import json
import multiprocessing
import os
import re
import threading
import time
import traceback
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from tests.support.delta_tables import JARS
from tests.support.purge import purge_bridge

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

pytest.importorskip("pyiceberg")

T0 = datetime(2024, 6, 1, tzinfo=timezone.utc)
#: Partition 2024-06-01: m0..m299, message n put n minutes after midnight; 2024-06-02: d0..d49.
DAY1, DAY2, FILES = 300, 50, 5
#: Every tenth message of the first day survives; the rest of that day is designated, in every file.
NINETY_PERCENT = "msg_id LIKE 'm%' AND cast(substring(msg_id, 2) AS INT) % 10 != 0"
#: Twenty messages of the first day, all in one of its files (file k holds the messages n % 5 == k).
ONE_FILE = "msg_id LIKE 'm%' AND cast(substring(msg_id, 2) AS INT) % 5 = 0 AND cast(substring(msg_id, 2) AS INT) < 100"


# --- the child's side: one Spark session for every step ------------------------------------------------

_child: dict[str, Any] = {}


def _session(config: str) -> Any:
    """The child's session, as `mqbridge purge` starts it (made once; the configuration bound each call)."""
    from mqbridge.config import load_config
    from mqbridge.landing import create_spark_session
    from mqbridge.table_formats import command_session_conf

    cfg = load_config(config, secrets=False)
    spark = create_spark_session(master=cfg.spark.master, app_name="iceberg-maintenance",
                                 conf=command_session_conf(cfg), state_dir=cfg.resolve_path(cfg.bridge.state_dir))
    _child["cfg"] = cfg
    return spark


def _bare_facts(config: str) -> dict[str, Any]:
    """Iceberg 1.12's DELETE in each `write.delete.mode`, and remove_orphan_files' minimum age (Spark SQL
    alone, a table `facts` of the catalog `mqbridge`)."""
    spark = _session(config)
    spark.sql("CREATE NAMESPACE IF NOT EXISTS mqbridge.facts")
    found: dict[str, Any] = {}
    for mode in ("merge-on-read", "copy-on-write"):
        name = f"mqbridge.facts.t_{mode.replace('-', '_')}"
        spark.sql(f"CREATE TABLE {name} (id INT, put_date DATE) USING iceberg PARTITIONED BY (put_date) "
                  f"TBLPROPERTIES ('format-version' = '2', 'write.delete.mode' = '{mode}')")
        for k in range(FILES):
            spark.sql(f"INSERT INTO {name} SELECT id, DATE'2024-06-01' FROM range({k}, {DAY1}, {FILES}) AS r(id)")
        started = time.perf_counter()
        spark.sql(f"DELETE FROM {name} WHERE id % 5 = 0 AND id < 100")  # 20 rows, all in one of the 5 files
        seconds = time.perf_counter() - started
        summary = spark.sql(f"SELECT operation, summary FROM {name}.snapshots ORDER BY committed_at DESC "
                            "LIMIT 1").first()
        found[mode] = {"operation": summary[0], "seconds": round(seconds, 2), "rows": spark.table(name).count(),
                       **{k: int(summary[1].get(k) or 0) for k in (
                           "added-data-files", "deleted-data-files", "added-position-delete-files",
                           "added-position-deletes", "deleted-records")}}
    # A copy's overwrite validated against the snapshot its survivors were read at, after a late append to
    # the partition: refused, as the purger's `conflict` recognises (it then reads again and retries)
    from pyspark.sql import functions as F

    from mqbridge.maintenance.iceberg.purger import conflict

    name = "mqbridge.facts.t_copy_on_write"
    read_at = spark.sql(f"SELECT snapshot_id FROM {name}.snapshots ORDER BY committed_at DESC LIMIT 1").first()[0]
    spark.sql(f"INSERT INTO {name} VALUES (1000, DATE'2024-06-01')")
    try:
        (spark.read.option("versionAsOf", str(read_at)).table(name).where("id >= 200").writeTo(name)
         .option("validate-from-snapshot-id", str(read_at)).option("isolation-level", "serializable")
         .overwrite(F.expr("put_date = DATE'2024-06-01'")))
        found["late_append"] = ("committed", spark.table(name).count())
    except Exception as exc:
        found["late_append"] = ("refused", conflict(exc), spark.table(name).count())
    try:
        spark.sql("CALL mqbridge.system.remove_orphan_files(table => 'facts.t_copy_on_write', "
                  f"older_than => TIMESTAMP '{datetime.now(timezone.utc):%Y-%m-%d %H:%M:%S}')").collect()
        found["orphans_now"] = "accepted"
    except Exception as exc:
        found["orphans_now"] = str(exc).splitlines()[0][:300]
    return found


def _land(config: str, first: int, count: int, per_bulk: int, day2: int = 0, message_type: str = "orders") -> None:
    """Land messages m<first>..m<first+count-1> (put n minutes after midnight of the first day) in bulks
    of `per_bulk` interleaved (bulk k holds the messages n % bulks == k), each bulk also holding
    `day2 / bulks` messages d.. of the next day, by the bridge's own Iceberg writer of `message_type`."""
    from mqbridge.counters import Counters
    from mqbridge.landing.executor import SparkExecutor
    from mqbridge.landing.landing import Landing
    from mqbridge.landing.ledger import SqliteLedger, owner_id
    from mqbridge.message import Bulk, Message

    spark = _session(config)
    cfg = _child["cfg"]
    state, warehouse = cfg.resolve_path(cfg.bridge.state_dir), cfg.tables_warehouse()
    ledger = SqliteLedger.open(state / "ledger.sqlite3", owner=owner_id())
    landing = Landing(ledger=ledger, owner=ledger.owner, counters=Counters(), dedupe_window=3600.0,
                      warehouse=warehouse)
    executor = SparkExecutor(spark, warehouse, message_type, cfg.types[message_type], landing=landing,
                             table_format="iceberg")
    bulks = count // per_bulk
    for k in range(bulks):
        bulk = Bulk(message_type)
        for n in range(first + k, first + count, bulks):
            put = T0 + timedelta(minutes=n)
            bulk.add(Message(msg_id=f"m{n}", body=f"{n}:".encode() + bytes(range(256)), source="amq",
                             destination="/queue/orders", message_type=message_type, put_timestamp=put,
                             received_timestamp=put))
        for n in range(k * day2 // bulks, (k + 1) * day2 // bulks):
            put = T0 + timedelta(days=1, minutes=n)
            bulk.add(Message(msg_id=f"d{n}", body=b"next day", source="amq", destination="/queue/orders",
                             message_type="orders", put_timestamp=put, received_timestamp=put))
        results = executor.execute(bulk)
        assert all(r.ok for r in results), results
    landing.close()


def _cli(config: str, *args: str) -> tuple[int, str]:
    """`mqbridge ARGS --config CONFIG` in this child (its Spark session reused); (exit code, output)."""
    from mqbridge import cli

    _session(config)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            code = cli.main([args[0], "--config", config, *args[1:]])
        except Exception:  # a Java error is not picklable: its traceback is the output
            code = -1
            out.write(traceback.format_exc())
    return code, out.getvalue()


def _table_facts(config: str, as_of: int | None = None) -> dict[str, Any]:
    """The table's data and delete files per put_date, its snapshots, and its rows as of snapshot `as_of`
    (and as of its commit time) read the way `mqbridge replay --as-of-version` (`--as-of-timestamp`) reads
    (`IcebergFormat.read`), or why not."""
    from mqbridge.table_formats.iceberg import FORMAT

    spark = _session(config)
    cfg = _child["cfg"]
    name = "mqbridge.mqbridge.orders"
    files = {(r[0], r[1]): r[2] for r in spark.sql(
        f"SELECT cast(partition.put_timestamp_day AS STRING), content, count(*) FROM {name}.files GROUP BY 1, 2")
        .collect()}
    snapshots = [int(r[0]) for r in spark.sql(f"SELECT snapshot_id FROM {name}.snapshots ORDER BY committed_at")
                 .collect()]
    found: dict[str, Any] = {"files": files, "snapshots": snapshots}
    if as_of is not None:
        table = cfg.tables_warehouse() / "orders"
        try:
            found["as_of_rows"] = FORMAT.read(spark, table, as_of_version=as_of).count()
            # and as of the time that snapshot became the table's current one (`mqbridge replay
            # --as-of-timestamp`): its publish, later than its own timestamp (its staging: write-audit-publish)
            committed = spark.sql(f"SELECT cast(made_current_at AS STRING) FROM {name}.history WHERE snapshot_id = "
                                  f"{as_of}").first()[0]
            found["as_of_time_rows"] = FORMAT.read(spark, table, as_of_timestamp=committed).count()
        except Exception as exc:
            found["as_of_rows"] = str(exc).splitlines()[0][:300]
    return found


def _settled_after_the_snapshots_expired(config: str) -> dict[str, Any]:
    """Two bulks left prepared by a dead bridge, in a ledger of their own: one whose rows are in the table
    (the bulk that landed message m300, whose snapshot a compaction's clean-up expired since) and one that
    never landed; each decided as the next bridge decides it (`iceberg.settle`)."""
    from mqbridge.config.iceberg import bound
    from mqbridge.landing import iceberg
    from mqbridge.landing.ledger import SqliteLedger

    spark = _session(config)
    cfg = _child["cfg"]
    name = "mqbridge.mqbridge.orders"
    bulk_id, identities = spark.sql(f"SELECT bulk_id, collect_list(identity) FROM {name} WHERE bulk_id = "
                                    f"(SELECT bulk_id FROM {name} WHERE msg_id = 'm300') GROUP BY bulk_id").first()
    found: dict[str, Any] = {"snapshots naming it": spark.sql(
        f"SELECT count(*) FROM {name}.snapshots WHERE summary['{iceberg.BULK_ID_PROPERTY}'] = '{bulk_id}'").first()[0]}
    ledger = SqliteLedger.open(cfg.resolve_path(cfg.bridge.state_dir) / "settle.sqlite3", owner="settler:1:1.00")
    ledger.prepare(bulk_id, "orders", [], identities)
    ledger.prepare("never-landed", "orders", [], ["never-1"])
    for prepared in ledger.prepared_holding([identities[0], "never-1"]):
        found["landed" if prepared.bulk_id == bulk_id else "never landed"] = (
            iceberg.settle(ledger, prepared, spark, bound()), ledger.state_of(prepared.bulk_id))
    ledger.close()
    return found


def _land_into_a_table_made_unpartitioned(config: str) -> tuple[list[str], int]:
    """A table `odd` made by hand without partitions, then a bulk of the type `odd` (partition_by "day")
    written to it by the bridge's writer: (each message's result: outcome, outage, reason; the table's rows)."""
    from mqbridge.landing.executor import SparkExecutor
    from mqbridge.message import Bulk, Message

    spark = _session(config)
    cfg = _child["cfg"]
    spark.sql("CREATE TABLE mqbridge.mqbridge.odd (msg_id STRING, put_timestamp TIMESTAMP) USING iceberg")
    executor = SparkExecutor(spark, cfg.tables_warehouse(), "odd", cfg.types["odd"], table_format="iceberg")
    bulk = Bulk("odd")
    bulk.add(Message(msg_id="o1", body=b"odd", source="amq", destination="/queue/orders", message_type="odd",
                     put_timestamp=T0, received_timestamp=T0))
    results = [f"{r.outcome.value} outage={r.outage}: {r.reason}" for r in executor.execute(bulk)]
    return results, spark.table("mqbridge.mqbridge.odd").count()


def _evolve_after_another_process(config: str) -> list[str]:
    """A table `race` partitioned by days, its spec read by this session (cached by its catalog), then
    evolved to hours by another session of the driver (its own catalog and cache: another process's view);
    then this session evolves it too (`iceberg.evolve_partitioning`): the table's fields as it sees them."""
    from mqbridge.landing.iceberg import evolve_partitioning, partition_fields

    spark = _session(config)
    other = spark.newSession()
    name = "mqbridge.mqbridge.race"
    spark.sql(f"CREATE TABLE {name} (msg_id STRING, put_timestamp TIMESTAMP) USING iceberg "
              "PARTITIONED BY (days(put_timestamp)) TBLPROPERTIES ('format-version' = '2')")
    assert partition_fields(spark, name) == ["days(put_timestamp)"]
    evolve_partitioning(other, name, "hour")
    evolve_partitioning(spark, name, "hour")  # its ALTER fails on the newer table: read again, done
    return partition_fields(spark, name)


def _spec_files(config: str) -> dict[tuple[int, int], int]:
    """The table's files per (partition spec id, content: 0 data, 1 position deletes)."""
    spark = _session(config)
    return {(int(r[0]), int(r[1])): int(r[2]) for r in spark.sql(
        "SELECT spec_id, content, count(*) FROM mqbridge.mqbridge.orders.files GROUP BY 1, 2").collect()}


# --- the test's side -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def child() -> Iterator[ProcessPoolExecutor]:
    if not any((JARS / "iceberg").glob("iceberg-spark-runtime-*.jar")):
        pytest.fail(f"the Iceberg jars are missing from {JARS / 'iceberg'}: run scripts/jars.sh iceberg")
    pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def call(pool: ProcessPoolExecutor, fn: Any, *args: Any) -> Any:
    return pool.submit(fn, *args).result(timeout=300)


def catalog_properties(base: Path) -> dict[str, str]:
    return {"type": "sql", "uri": f"sqlite:///{base / 'landing' / '_iceberg' / 'catalog.db'}",
            "init_catalog_tables": "false"}


def msg_ids(properties: dict[str, str], table: str = "orders") -> collections.Counter[str]:
    """How often each msg_id is in the table's current snapshot, read by pyiceberg (position deletes applied)."""
    from pyiceberg.catalog import load_catalog

    found = load_catalog("mqbridge", **properties).load_table(("mqbridge", table))
    return collections.Counter(found.scan(selected_fields=("msg_id",)).to_arrow().column("msg_id").to_pylist())


def exactly(properties: dict[str, str], expected: set[str], table: str = "orders") -> None:
    """The table holds exactly `expected`, each once: 0 lost, 0 duplicated, 0 unexpected."""
    rows = msg_ids(properties, table)
    lost, unexpected = expected - set(rows), set(rows) - expected
    duplicated = sorted(i for i, n in rows.items() if n > 1)
    assert (len(lost), len(duplicated), len(unexpected)) == (0, 0, 0), (sorted(lost)[:5], duplicated[:5],
                                                                        sorted(unexpected)[:5])


def spec(properties: dict[str, str], table: str = "orders") -> list[tuple[str, str]]:
    """The table's current partition spec as pyiceberg reads it: (source column, transform) per field."""
    from pyiceberg.catalog import load_catalog

    found = load_catalog("mqbridge", **properties).load_table(("mqbridge", table))
    return [(found.schema().find_column_name(f.source_id) or "?", str(f.transform)) for f in found.spec().fields]


class Reader:
    """A thread reading the table by pyiceberg over and over, recording each read's rows (as a frozenset;
    a read with a duplicated row is recorded as such)."""

    def __init__(self, properties: dict[str, str]) -> None:
        self.properties = properties
        self.reads: list[frozenset[str]] = []
        self.duplicated = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="iceberg-reader", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                rows = msg_ids(self.properties)
            except Exception as exc:  # the SQLite catalog busy with a commit: not a torn read, read again
                self.failures.append(f"{type(exc).__name__}: {exc}")
            else:
                self.duplicated += any(n > 1 for n in rows.values())
                self.reads.append(frozenset(rows))
            self._stop.wait(0.25)  # a read costs CPU the commands under test share (2 cores)

    def __enter__(self) -> Reader:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def only_whole(self, *states: set[str]) -> None:
        """Every read was one of `states` (the table before or after a commit), none with a duplicate."""
        torn = [r for r in self.reads if set(r) not in states]
        print(f"reader: {len(self.reads)} reads, {len(self.failures)} refused by the catalog, {len(torn)} torn")
        assert self.reads and not torn and not self.duplicated, (len(self.reads), len(torn), self.duplicated,
                                                                  self.failures[:3])


def config_for(tmp_path: Path, vacuum_retention: str, *, hourly: bool = False, **orders: Any) -> str:
    """`mqbridge purge`/`compact`'s configuration for an Iceberg type `orders` (tests.support.purge): the
    operator's equal per-row costs and no fixed partition cost, 2 shuffle partitions, 3 small files
    compact a partition; `hourly`: also a type `hourly` partitioned by hours and a type `odd` by days,
    each its own table."""
    path = tmp_path / "bridge.toml"
    toml = (purge_bridge().set("spark", table_format="iceberg", jars_dir=str(JARS), writer="spark", master="local[2]")
            .set("spark.conf", **{"spark.sql.shuffle.partitions": "2"})
            .set("purge", delete_row_seconds=1e-5, copy_row_seconds=1e-5, container_seconds=0,
                 vacuum_retention=vacuum_retention)
            .set("compaction", small_files=3)
            .set("types.orders", **orders))
    if hourly:
        toml = toml.set("types.hourly", partition_by="hour").set("types.odd", partition_by="day")
    toml.write(path)
    return str(path)


def number(msg_id: str) -> int:
    return int(msg_id[1:])


def test_iceberg_purge_by_delete_and_copy_then_compaction_keep_exactly_the_survivors(
        tmp_path: Path, child: ProcessPoolExecutor) -> None:
    started = time.monotonic()
    config = config_for(tmp_path, "7d")
    properties = catalog_properties(tmp_path)

    # The bare facts: merge-on-read DELETE writes position deletes, copy-on-write rewrites the file
    facts = call(child, _bare_facts, config)
    print("bare facts:", facts)
    mor, cow = facts["merge-on-read"], facts["copy-on-write"]
    assert (mor["operation"], mor["added-position-delete-files"], mor["added-position-deletes"],
            mor["added-data-files"], mor["deleted-data-files"], mor["rows"]) == ("delete", 1, 20, 0, 0, 280), mor
    assert (cow["operation"], cow["added-position-delete-files"], cow["added-data-files"], cow["deleted-data-files"],
            cow["deleted-records"], cow["rows"]) == ("overwrite", 0, 1, 1, 60, 280), cow
    assert "less than 24 hours" in facts["orphans_now"], facts
    assert facts["late_append"] == ("refused", True, 281), facts

    # Given 5 bulks landed by the bridge's Iceberg writer: 5 files in each of two put_date partitions
    call(child, _land, config, 0, DAY1, DAY1 // FILES, DAY2)
    every = {f"m{n}" for n in range(DAY1)} | {f"d{n}" for n in range(DAY2)}
    exactly(properties, every)
    landed = call(child, _table_facts, config)
    assert landed["files"] == {("2024-06-01", 0): FILES, ("2024-06-02", 0): FILES}, landed
    assert spec(properties) == [("put_timestamp", "day")]  # hidden partitioning by days, the default

    # When `mqbridge purge --strategy delete` designates 20 rows of the first day, all in one file
    with Reader(properties) as reader:
        code, out = call(child, _cli, config, "purge", "--where", ONE_FILE, "--strategy", "delete")
    print(out)

    # Then one position delete file holds them (no data file rewritten), exactly those rows go, every read
    # saw the table before or after, and the snapshot before the purge still reads them
    assert code == 0, out
    assert "put_date=2024-06-01  designated 20/300" in out and "strategy delete  measured" in out, out
    survivors = every - {f"m{n}" for n in range(0, 100, 5)}
    exactly(properties, survivors)
    reader.only_whole(every, survivors)
    before = landed["snapshots"][-1]
    deleted = call(child, _table_facts, config, before)
    assert deleted["files"] == {("2024-06-01", 0): FILES, ("2024-06-01", 1): 1, ("2024-06-02", 0): FILES}, deleted
    assert deleted["as_of_rows"] == deleted["as_of_time_rows"] == len(every), deleted
    assert f"orders: Iceberg table: purged by delete 1; {len(survivors)} rows left" in out, out
    assert f"as of snapshot {before}" in out, out

    # When a purge copies the first day's survivors (90% of it designated) and drops the second day, with
    # snapshots kept 0 s, and an orphan file (no snapshot reads it) two days old lies in the table's folder
    config = config_for(tmp_path, "0s")
    orphan = tmp_path / "landing" / "orders" / "data" / "orphan.parquet"
    orphan.write_bytes(b"not a snapshot's")
    os.utime(orphan, (time.time() - 2 * 86400,) * 2)
    with Reader(properties) as reader:
        code, out = call(child, _cli, config, "purge", "--where", f"({NINETY_PERCENT}) OR msg_id LIKE 'd%'",
                         "--strategy", "copy")
    print(out)

    # Then the first day is one sorted file of its survivors, the second is gone, every read was whole, the
    # old snapshots expired (the one before this purge can no longer be read) and the orphan is removed
    assert code == 0, out
    assert "put_date=2024-06-01  designated 260/280" in out and "strategy copy  measured" in out, out
    assert "put_date=2024-06-02  designated 50/50" in out and "strategy drop  measured" in out, out
    copied = {i for i in survivors if i.startswith("m") and number(i) % 10 == 0}
    exactly(properties, copied)
    reader.only_whole(survivors, copied | {f"d{n}" for n in range(DAY2)}, copied)  # the copy's, then the drop's commit
    after_copy = call(child, _table_facts, config, deleted["snapshots"][-1])
    assert after_copy["files"] == {("2024-06-01", 0): 1}, after_copy
    assert len(after_copy["snapshots"]) == 1, after_copy
    assert not isinstance(after_copy["as_of_rows"], int), after_copy
    assert not orphan.exists()
    assert f"orders: Iceberg table: purged by copy 1, drop 1; {len(copied)} rows left" in out, out

    # When 5 more small bulks land into the first day (6 files) and `mqbridge compact` runs
    call(child, _land, config, DAY1, 50, 10)
    grown = copied | {f"m{n}" for n in range(DAY1, DAY1 + 50)}
    assert call(child, _table_facts, config)["files"] == {("2024-06-01", 0): 6}
    with Reader(properties) as reader:
        code, out = call(child, _cli, config, "compact")
    print(out)

    # Then the partition is rewritten into one file, every row kept once, and every read was whole
    assert code == 0, out
    assert "action compact" in out and "1 files after" in out, out
    exactly(properties, grown)
    reader.only_whole(grown)
    compacted = call(child, _table_facts, config)
    assert compacted["files"] == {("2024-06-01", 0): 1}, compacted
    assert len(compacted["snapshots"]) == 1, compacted  # expired after the compaction (0 s)

    # And a bulk a dead bridge left prepared whose snapshot has expired since is decided by its rows: landed
    # (forgotten, its messages would land twice when they come back); one that never landed is forgotten
    settled = call(child, _settled_after_the_snapshots_expired, config)
    assert settled == {"snapshots naming it": 0, "landed": (True, "published"), "never landed": (False, None)}, settled

    # When `mqbridge purge` runs by the type's row cap (`max_rows = 60`, the lifted refusal), no --where
    config = config_for(tmp_path, "0s", max_rows=60)
    code, out = call(child, _cli, config, "purge")
    print(out)

    # Then the 10 oldest rows go (by the cost model: a delete of 10 rows), exactly the 60 youngest stay
    assert code == 0, out
    assert "put_date=2024-06-01  designated 10/70" in out and "strategy delete  measured" in out, out
    exactly(properties, grown - {f"m{n}" for n in range(100, 200, 10)})

    # And `mqbridge ledger --verify` accepts the purged bulks (fewer rows, removed by the purges' snapshots)
    code, out = call(child, _cli, config, "ledger", "--verify")
    print(out)
    assert code == 0 and "with rows removed since by purges: not compared" in out, out
    print(f"days of put_timestamp {time.monotonic() - started:.1f}s")
    hours_started = time.monotonic()
    capped = grown - {f"m{n}" for n in range(100, 200, 10)}

    # When the type's partition_by becomes "hour" and 40 messages land into hours 6 and 7 of the first day
    # in 5 bulks, and a new type partitioned by hours lands its first bulk into a table of its own
    config = config_for(tmp_path, "0s", hourly=True, partition_by="hour")
    call(child, _land, config, 400, 40, 8)
    call(child, _land, config, 1000, 10, 10, 0, "hourly")  # identities of its own: the ledger is one

    # Then the table's spec is evolved to hours, its older files kept in the days spec beside 10 new ones (5
    # bulks x 2 hours), every row there once; the new table is partitioned by hours from the start
    evolved = capped | {f"m{n}" for n in range(400, 440)}
    exactly(properties, evolved)
    assert spec(properties) == [("put_timestamp", "hour")]
    assert call(child, _spec_files, config) == {(0, 0): 1, (0, 1): 1, (1, 0): 10}
    assert spec(properties, "hourly") == [("put_timestamp", "hour")]
    exactly(properties, {f"m{n}" for n in range(1000, 1010)}, "hourly")

    # When a purge deletes rows in both specs (position deletes), one commit for the day
    code, out = call(child, _cli, config, "purge", "--type", "orders", "--where",
                     "msg_id LIKE 'm%' AND cast(substring(msg_id, 2) AS INT) % 20 = 0", "--strategy", "delete")
    print(out)

    # Then exactly those rows go
    assert code == 0 and "put_date=2024-06-01  designated 10/100" in out and "strategy delete" in out, out
    deleted = evolved - {i for i in evolved if number(i) % 20 == 0}
    exactly(properties, deleted)

    # And `mqbridge tables` (pyiceberg, no Spark) counts the day's rows from both specs' data and position
    # delete files (a delete file's day is its partition's: it has no put_date bounds)
    code, out = call(child, _cli, config, "tables")
    assert code == 0 and re.search(r"put_date=2024-06-01 +90 rows", out) and "put_date=None" not in out, out

    # When the day is compacted
    code, out = call(child, _cli, config, "compact", "--table", "orders")
    print(out)

    # Then every row stays once, and every file is in the hours spec, one per hour (3, 4, 5, 6, 7), no
    # delete file left
    assert code == 0 and "action compact" in out, out
    exactly(properties, deleted)
    assert call(child, _spec_files, config) == {(1, 0): 5}

    # When a purge copies the day's survivors (the strategy forced)
    code, out = call(child, _cli, config, "purge", "--type", "orders", "--where",
                     "msg_id LIKE 'm%' AND cast(substring(msg_id, 2) AS INT) % 20 = 10", "--strategy", "copy")
    print(out)

    # Then exactly the survivors stay, the other table untouched, and the ledger agrees
    assert code == 0 and "strategy copy" in out, out
    exactly(properties, {i for i in deleted if number(i) % 20 != 10})
    exactly(properties, {f"m{n}" for n in range(1000, 1010)}, "hourly")
    code, out = call(child, _cli, config, "ledger", "--verify")
    assert code == 0, out
    # ... and `mqbridge where` finds a surviving row of the hours spec in its day, by pyiceberg
    code, out = call(child, _cli, config, "where", "--json", "m401")
    found = json.loads(out[out.index("{"):])
    assert code == 0 and found["state"] == "landed", out
    assert (found["landed"]["put_date"], found["landed"]["in_table"]) == ("2024-06-01", True), found

    # When a type writes to a table made by hand with no partitions (a spec the bridge cannot tell)
    results, rows = call(child, _land_into_a_table_made_unpartitioned, config)

    # Then its bulk is refused as an outage (the messages go back, no backout count), naming the key, and
    # the table is left as it was
    assert rows == 0 and len(results) == 1, (results, rows)
    assert results[0].startswith("retryable outage=True: Spark write failed: [types.odd] partition_by = \"day\" "
                                 "wants an Iceberg table partitioned by days(put_timestamp), but the table is "
                                 "partitioned by (nothing)"), results

    # When two processes evolve one table at once (the second's view of it older than the first's commit)
    # Then the second finds it evolved and goes on (Iceberg does not retry a spec update on a newer table)
    assert call(child, _evolve_after_another_process, config) == ["hours(put_timestamp)"]
    print(f"hours of put_timestamp {time.monotonic() - hours_started:.1f}s; whole test "
          f"{time.monotonic() - started:.1f}s")
