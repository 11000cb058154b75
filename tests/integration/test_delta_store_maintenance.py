"""The seeds on a Delta table where the data lives. On the S3 server (S3Proxy, `scripts/s3.sh`): a real
`mqbridge run` lands 300 messages from the shared ActiveMQ, 100 of them put ten days ago (a producer's
`timestamp` header, which ActiveMQ keeps: two put_date partitions); `mqbridge where` and `ledger
--verify` read the table with delta-rs (the S3 options built from the same `[spark.conf]` S3A keys, the
secret from `${FILE:…}`); with `[spark] catalog = true` the bridge registers it by its s3a:// URI, and
another driver's catalog registers it alike and reads it by name (a Hive metastore keeps such a LOCATION
as well: checked by hand); a second type whose table is a template (`q_{destination}`) lands two queues
into two rendered tables, which `mqbridge tables` finds by listing the store (delta-rs); `mqbridge purge
--strategy copy` replaces a partition by its survivors, `mqbridge compact` compacts the other
(OPTIMIZE), the bridge's scheduled purge drops both by the type's retention (Delta's DELETE), and
`mqbridge replay --as-of-version` reads the version before the purges (time travel); then `mqbridge
ledger --abandon` decides a dead bridge's two prepared bulks by the log on S3 (one committed: recorded
published; one not: its version fenced by delta-rs, forgotten, and a late Spark commit of that version
skipped by Delta). On HDFS (Hadoop's mini cluster, `scripts/hdfs.sh`), a table of two bulks as the
bridge lands them (written by delta-rs, recorded in the ledger): the scheduled purge drops the partition
its retention designates, `where` and `tables` read what is left, and `tables` finds the two tables a
template (`h_{destination}`) rendered there by listing HDFS (delta-rs). The scheduled rounds run on the
session's Spark driver with Delta and S3A (`delta_spark`). Every row is accounted for like a total-queue
checker by delta-rs over the store's own API: exactly the designated rows leave, every other row stays,
once. First, bare delta-rs calls with those options against the S3 server and the mini cluster (no
Spark): the check the readers rely on, and that the S3 server honours the conditional put
(`If-None-Match`) by which delta-rs creates a version's log file, so that a commit never writes over
another (the fence)."""

from __future__ import annotations

import collections
import json
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from mqbridge.config.warehouse import ObjectStoreUri, delta_rs_options
from mqbridge.landing.delta import FENCE_MARK
from tests.support.amq import AmqClient, unique_queue
from tests.support.delta_tables import DELTA_SPARK, JARS, SMALL_TABLE_CONF
from tests.support.exactly_once import account, bodies
from tests.support.object_stores import DeltaSpark, S3Server, scheduled_round
from tests.support.processes import mqbridge, run_until_idle, stomp_bridge
from tests.support.purge import purge_bridge

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

deltalake = pytest.importorskip("deltalake")

#: The old messages' put_date: ten days ago (UTC), message n put n minutes after its midnight.
OLD_DAY = (datetime.now(timezone.utc) - timedelta(days=10)).replace(hour=0, minute=0, second=0, microsecond=0)
#: Every fourth new message: `mqbridge purge --where` designates them.
EVERY_FOURTH_NEW = ("cast(substring(body, 1, 4) AS STRING) = 'new-' AND "
                    "cast(cast(substring(body, 5, 5) AS STRING) AS INT) % 4 = 0")


@pytest.fixture(scope="module", autouse=True)
def _jars() -> None:
    for name in ("delta", "s3"):
        if not (JARS / name).is_dir():
            pytest.fail(f"the {name} jars are missing from {JARS / name}: run scripts/jars.sh {name}")


def command(config: Path, *args: str, timeout: float = 600) -> tuple[int, str]:
    """`mqbridge ARGS[0] --config CONFIG ARGS[1:]` run to its end: exit code and output."""
    proc = mqbridge(args[0], "--config", str(config), *args[1:])
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


def put_old_and_new(amq: AmqClient, queue: str, old: int, new: int) -> tuple[list[bytes], list[bytes]]:
    """`old` messages put on OLD_DAY (message n at n minutes past midnight) and `new` ones put now."""
    old_bodies, new_bodies = bodies(old, "old"), bodies(new, "new")
    for n, body in enumerate(old_bodies):
        amq.put(queue, body, {"timestamp": str(int((OLD_DAY + timedelta(minutes=n)).timestamp() * 1000))})
    amq.put_many(queue, new_bodies)
    return old_bodies, new_bodies


def store_bridge(queue: str, warehouse: str, conf: dict[str, str]) -> Any:
    """A bridge landing `queue` into the Delta table `orders` under `warehouse`, in bulks of about 12 KB
    (a unit of 50 each: several commits, small files to compact), with an operator's equal per-row purge
    costs."""
    return (stomp_bridge(queue, batch=50, spark=DELTA_SPARK)
            .set("spark", warehouse=warehouse, until_idle_outage_limit="20s")
            .set("spark.conf", **SMALL_TABLE_CONF, **conf)
            .set("types.orders", bulk_size="12KB")
            .set("purge", delete_row_seconds=1e-5, copy_row_seconds=1e-5, container_seconds=0)
            .set("compaction", small_files=2))


def read_by_name(spark: Any, name: str, location: str) -> dict[str, Any]:
    """In the `delta_spark` driver: the Delta table at `location` registered in its catalog as `name` by
    the bridge's own `CatalogRegistrar` (first call), then read by that name: its format and location as
    the catalog has them, its rows and distinct msg_ids."""
    from mqbridge.landing.catalog import CatalogRegistrar

    registrar = CatalogRegistrar(lambda: spark)
    registrar.register(name, ObjectStoreUri(location), [])
    detail = spark.sql(f"DESCRIBE DETAIL `{name}`").collect()[0]
    rows = spark.table(name)
    return {"failures": registrar.failures, "format": detail["format"], "location": detail["location"],
            "rows": rows.count(), "distinct": rows.select("msg_id").distinct().count()}


def test_delta_rs_reads_and_writes_tables_on_the_s3_server_and_hdfs_with_the_options_of_the_s3a_keys(
        s3_server: S3Server, hdfs_cluster: str) -> None:
    # Given delta-rs's options built from the S3A settings a bridge is configured with
    bucket = s3_server.new_bucket("bare")
    uri = ObjectStoreUri(f"s3a://{bucket}/wh")
    options = delta_rs_options(uri, s3_server.spark_conf())
    assert s3_server.secret_key not in repr(options) + str(options)
    for location, storage in ((f"{uri}/t", dict(options)), (f"{hdfs_cluster}/bare-{bucket}/t", None)):
        # When delta-rs writes a table at the s3a:// (or hdfs://) URI and reads it back
        deltalake.write_deltalake(location, pa.table({"n": [1, 2, 3]}), mode="append", storage_options=storage)
        # Then it holds the rows (on S3 too: the bridge's `s3a://` URI as it is, path style, plain http)
        table = deltalake.DeltaTable(location, storage_options=storage)
        assert sorted(table.to_pyarrow_table().column("n").to_pylist()) == [1, 2, 3] and table.version() == 0
    # And the server refuses a wrong secret (the options do carry the key delta-rs signs with)
    wrong = {**dict(options), "AWS_SECRET_ACCESS_KEY": "not-the-secret"}
    with pytest.raises(OSError, match="(?i)403|forbidden|signature|access denied"):
        deltalake.DeltaTable(f"{uri}/t", storage_options=wrong)

    # When a writer whose snapshot is stale (version 0 of a table at version 1) commits: delta-rs creates
    # the version's log file by a conditional put (If-None-Match: *), what `ledger --abandon`'s fence and
    # every delta-rs commit on S3 rely on to never write over another commit
    deltalake.write_deltalake(f"{uri}/t", pa.table({"n": [4]}), mode="append", storage_options=dict(options))
    stale = deltalake.DeltaTable(f"{uri}/t", version=0, storage_options=dict(options))
    # Then the server refuses it for version 1, which exists: without retries the commit fails ...
    with pytest.raises(deltalake.exceptions.CommitFailedError):
        deltalake.write_deltalake(stale, pa.table({"n": [5]}), mode="append",
                                  commit_properties=deltalake.CommitProperties(max_commit_retries=0))
    # ... with them it lands as version 2; version 1 kept its rows (nothing was written over)
    deltalake.write_deltalake(stale, pa.table({"n": [6]}), mode="append")
    table = deltalake.DeltaTable(f"{uri}/t", storage_options=dict(options))
    assert table.version() == 2 and sorted(table.to_pyarrow_table().column("n").to_pylist()) == [1, 2, 3, 4, 6]
    # ... and without a conditional put delta-rs does not commit at all (it never falls back to a plain put)
    with pytest.raises(OSError, match="conditional put is disabled"):
        deltalake.write_deltalake(f"{uri}/t", pa.table({"n": [7]}), mode="append",
                                  storage_options={**dict(options), "conditional_put": "disabled"})


def test_where_verify_purge_compact_replay_and_abandon_work_on_a_delta_table_on_s3(
        tmp_path: Path, amq: AmqClient, s3_server: S3Server, delta_spark: DeltaSpark) -> None:
    # Given 100 messages put ten days ago and 200 put now, landed by a bridge into a Delta table on
    # S3 in several commits (the secret key only in a file read by ${FILE:…}), registered in its catalog
    # ... and, by a second type whose table is a template (`q_{destination}`), 10 messages from each of
    # two more queues into two rendered tables
    q = unique_queue("store-s3")
    old, new = put_old_and_new(amq, q, 100, 200)
    # (queue names of letters, digits and '_': a catalog name is no more, see docs/spark-and-tables.md)
    by_queue = {f"/queue/tpl_{uuid.uuid4().hex[:8]}": bodies(10, f"tpl{n}") for n in range(2)}
    for queue, sent in by_queue.items():
        amq.put_many(queue, sent)
    rendered = {f"q_{queue.removeprefix('/queue/')}": sent for queue, sent in by_queue.items()}
    assert len(rendered) == 2
    bucket = s3_server.new_bucket("seeds")
    secret = tmp_path / "s3-secret"
    secret.write_text(s3_server.secret_key)
    secret.chmod(0o600)
    bridge = store_bridge(q, f"s3a://{bucket}/wh", {**s3_server.spark_conf(),
                                                    "spark.hadoop.fs.s3a.secret.key": f"${{FILE:{secret}}}"}
                          ).set("spark", catalog=True).set("types.queued", bulk_timeout="500ms")
    bridge = bridge.add("types.queued", 'table = "q_{destination}"')
    for queue in by_queue:
        bridge = bridge.listener(source="amq", queue=queue, threads=1, batch=50, wait="200ms",
                                 message_type="queued", backout_queue=f"{queue}.backout")
    config = bridge.write(tmp_path / "bridge.toml")
    landed_out = run_until_idle(config)
    for table, sent in rendered.items():
        assert account(sent, s3_server.delta_bodies(bucket, f"wh/{table}")).clean, table
    # Then `mqbridge tables` finds both rendered tables by listing the store (delta-rs), with their rows
    code, out = command(config, "tables")
    for table in rendered:
        assert code == 0 and f"  {table}  (Delta table, version " in out, out
    assert out.count("; types: queued)") == 2 and out.count(" 10 rows") >= 2, out
    location = f"s3://{bucket}/wh/orders"

    def rows() -> collections.Counter[bytes]:
        return s3_server.delta_bodies(bucket)

    assert account(old + new, rows()).clean
    # ... registered in the bridge's catalog by its URI (`[spark] catalog = true`)
    assert f"catalog: Delta table orders registered at s3a://{bucket}/wh/orders" in landed_out, landed_out[-3000:]
    assert "could not be registered" not in landed_out, landed_out[-3000:]
    # When another driver's catalog registers it as the bridge does and reads it by name
    by_name = f"orders_{bucket.replace('-', '_')}"
    read = delta_spark.run(read_by_name, by_name, f"s3a://{bucket}/wh/orders")
    # Then the catalog holds a Delta table at the s3a:// URI, every message once
    assert read["ok"], read.get("traceback")
    assert read["value"] == {"failures": 0, "format": "delta", "location": f"s3a://{bucket}/wh/orders",
                             "rows": 300, "distinct": 300}, read["value"]
    landed = deltalake.DeltaTable(location, storage_options=s3_server.storage_options()).to_pyarrow_table(
        columns=["msg_id", "body"]).to_pylist()
    by_body = {bytes(r["body"]): r["msg_id"] for r in landed}
    before_purge = deltalake.DeltaTable(location, storage_options=s3_server.storage_options()).version()

    # When `where` asks for a message and `ledger --verify` checks every bulk (delta-rs on S3, no Spark)
    code, out = command(config, "where", "--json", by_body[new[4]])
    doc = json.loads(out[out.index("{"):])
    assert code == 0 and doc["state"] == "landed" and doc["landed"]["in_table"] is True, out
    assert doc["landed"]["delta_version"] is not None and not any("not read" in n for n in doc["notes"]), out
    code, out = command(config, "ledger", "--verify")
    assert code == 0 and "bulks of 3 Delta tables hold one row per identity" in out and "verify: OK (" in out, out

    # When `mqbridge purge` removes every fourth new message by a copy of the partition's survivors
    code, out = command(config, "purge", "--where", EVERY_FOURTH_NEW, "--strategy", "copy", "--type", "orders")
    # Then exactly those rows left the table, and the version before the purge is named for time travel
    deleted = {b for i, b in enumerate(new) if i % 4 == 0}
    assert code == 0 and "designated 50/200" in out and "strategy copy  measured" in out, out
    assert f"versionAsOf {before_purge} until VACUUM" in out, out
    assert account([b for b in old + new if b not in deleted], rows()).clean
    # ... `where` says the row of one of them is gone and which version still reads it, and `--verify`
    # counts the bulks purged since apart
    code, out = command(config, "where", by_body[new[4]])
    assert code == 0 and "purged" in out and "still reads it" in out, out
    code, out = command(config, "ledger", "--verify")
    assert code == 0 and "with rows deleted since by purges: not compared" in out, out

    # When two more small commits land in the old partition (by delta-rs, as the bridge's: however the
    # run split its bulks, that partition has small files now) and `mqbridge compact` runs (its own Spark
    # driver with Delta and S3A; the bridge's scheduled compaction carries out the same plans,
    # `maintenance.rounds.Compaction`)
    late = [bodies(5, "late-a"), bodies(5, "late-b")]
    for sent in late:
        commit_rows(location, "orders", q, sent, OLD_DAY, s3_server.storage_options())
    code, out = command(config, "compact", "--table", "orders")
    # Then the old partition's small files are compacted into one (OPTIMIZE), no row changed
    assert code == 0 and "orders: 2 containers" in out and out.count("1 files after") == 1, out[-4000:]
    assert account([b for b in old + new if b not in deleted] + late[0] + late[1], rows()).clean
    # When a round of the bridge's scheduled purge runs with a retention that designates every row (on
    # the session's Spark driver with Delta and S3A)
    rounds = bridge.set("purge", interval="1h").set("types.orders", retention="1s")
    purged = delta_spark.run(scheduled_round, str(rounds.write(config)), "purge", timeout=600)
    # ... and both partitions are dropped (Delta's DELETE) by the retention: the table is empty
    assert purged["ok"], purged.get("traceback")
    assert purged["value"]["purge_containers"] == 2, purged["value"]
    assert rows() == collections.Counter()
    # ... and a reader by name sees it empty too, without REFRESH TABLE (Delta reads its log at each query)
    again = delta_spark.run(read_by_name, by_name, f"s3a://{bucket}/wh/orders")
    assert again["ok"] and again["value"]["rows"] == 0, again

    # When the table is replayed as of the version before the purges (time travel on S3)
    destination = unique_queue("store-s3-replayed")
    code, out = command(config, "replay", "--table", "orders", "--to", destination,
                        "--as-of-version", str(before_purge), "--batch", "100")
    # Then every message landed arrives once, the purged ones too
    assert code == 0 and "300 rows sent now" in out, out[-4000:]
    assert account(old + new, collections.Counter(bytes(f.body) for f in amq.drain(destination))).clean
    replayed_out = out

    # Given a bridge that died with two bulks prepared for the table on S3: one killed after its commit,
    # one before it (its writer, a Spark Connect server or a cluster, may still finish that commit)
    app = f"mqbridge:s3-abandon-{uuid.uuid4().hex[:8]}"
    committed, never = prepare_as_dead_owner(tmp_path / "state", app, 2)
    table = deltalake.DeltaTable(location, storage_options=s3_server.storage_options())
    deltalake.write_deltalake(  # an empty commit carrying the bulk's id and transaction, as the bridge's does
        table, pa.schema(table.schema().to_arrow()).empty_table(), mode="append", partition_by=["put_date"],
        commit_properties=deltalake.CommitProperties(custom_metadata={"userMetadata": committed},
                                                     app_transactions=[deltalake.Transaction(app, 1)]))
    # When an operator abandons each (`ledger --abandon`: the table's log on S3 decides, by delta-rs)
    code, out = command(config, "ledger", "--abandon", committed)
    # Then the one whose commit is in the log is recorded published ...
    assert code == 0 and f"holds the commit of bulk {committed}" in out and "recorded published" in out, out
    code, out = command(config, "ledger", "--abandon", never)
    # ... and the other one's version is fenced in the log first (an empty commit carrying it), then it is
    # forgotten: its messages land when read again
    assert code == 0 and "never committed" in out and "fenced" in out, out
    fenced = deltalake.DeltaTable(location, storage_options=s3_server.storage_options())
    assert fenced.transaction_version(app) == 2 and fenced.history(1)[0]["userMetadata"].startswith(FENCE_MARK)
    # When the dead bridge's writer finishes the forgotten bulk's commit after all (Spark through S3A,
    # rows of the table's own schema, as that bulk's transaction)
    finished = delta_spark.run(append_as_transaction, f"s3a://{bucket}/wh/orders", before_purge, app, 2)
    # Then Delta skips it: no version, no row (its messages land once, when read again)
    assert finished["ok"], finished.get("traceback")
    assert finished["value"] == {"rows_given": 5, "versions_added": 0, "rows_now": 0}, finished["value"]
    # And the secret was in no output and on no command line
    assert s3_server.secret_key not in landed_out + replayed_out + out


def prepare_as_dead_owner(state_dir: Path, app: str, count: int) -> list[str]:
    """`count` bulks of table `orders` recorded prepared in the ledger under `state_dir` by an owner that
    is gone (this host, a pid that started at another time), bulk n with version n of transaction `app`;
    their ids."""
    import os

    from mqbridge.landing.ledger import SqliteLedger, TableTransaction, ledger_path
    from mqbridge.landing.ledger.owners import this_host

    ledger = SqliteLedger.open(ledger_path(state_dir), owner=f"{this_host()}:{os.getpid()}:1.00")
    ids = [f"orders-dead-{uuid.uuid4().hex[:8]}-{n}" for n in range(1, count + 1)]
    try:
        for version, bulk_id in enumerate(ids, start=1):
            ledger.prepare(bulk_id, "orders", (), [f"{bulk_id}-message"], transaction=TableTransaction(app, version))
    finally:
        ledger.close()
    return ids


def append_as_transaction(spark: Any, location: str, as_of: int, app: str, version: int) -> dict[str, int]:
    """In the `delta_spark` driver: 5 rows of version `as_of` of the Delta table at `location` appended to
    it as Spark's write of the transaction (`app`, `version`) (`txnAppId` / `txnVersion`, as the bridge's
    commits): the rows it was given, the versions it added and the rows in the table after."""
    def newest() -> int:
        return int(spark.sql(f"DESCRIBE HISTORY delta.`{location}` LIMIT 1").collect()[0]["version"])

    before = newest()
    rows = spark.read.format("delta").option("versionAsOf", str(as_of)).load(location).limit(5)
    given = rows.count()
    rows.write.format("delta").mode("append").option("txnAppId", app).option("txnVersion", str(version)).save(location)
    return {"rows_given": given, "versions_added": newest() - before,
            "rows_now": spark.read.format("delta").load(location).count()}


def land_by_hand(table: str, state_dir: Path) -> tuple[list[str], list[str]]:
    """The Delta table at `table` as a bridge lands it, written by delta-rs (no Spark): a bulk of 40
    messages put and received on OLD_DAY, one of 60 put and received in the last minute, each one commit
    carrying its bulk id as the bridge's commits do, and both recorded published in the ledger under
    `state_dir`. Returns the msg_ids of each bulk."""
    from deltalake import CommitProperties

    from mqbridge.landing.ledger import SqliteLedger, TableTransaction, owner_id
    from mqbridge.landing.rows import IDENTITY_COLUMN, arrow_table
    from mqbridge.message import Bulk, Message

    state_dir.mkdir(parents=True, exist_ok=True)
    ledger = SqliteLedger.open(state_dir / "ledger.sqlite3", owner=owner_id())
    now = datetime.now(timezone.utc)
    landed: list[list[str]] = []
    try:
        for version, (tag, count) in enumerate((("old", 40), ("new", 60)), start=1):
            bulk = Bulk("orders")
            for n in range(count):
                put = OLD_DAY + timedelta(minutes=n) if tag == "old" else now - timedelta(seconds=count - n)
                bulk.add(Message(msg_id=f"{tag}{n}", body=f"{tag}-{n}:".encode() + bytes(range(256)), source="amq",
                                 destination="/queue/orders", message_type="orders", put_timestamp=put,
                                 received_timestamp=put))
            rows = arrow_table(bulk, list(range(count))).drop_columns(["_row"])
            rows = rows.rename_columns([IDENTITY_COLUMN if c == "_identity" else c for c in rows.column_names])
            ids = [m.msg_id for m in bulk.messages]
            ledger.prepare(bulk.bulk_id, "orders", (), ids, transaction=TableTransaction("mqbridge:by-hand", version))
            commit = CommitProperties(custom_metadata={"userMetadata": bulk.bulk_id})  # as the bridge's commits
            deltalake.write_deltalake(table, rows, mode="append", partition_by=["put_date"], commit_properties=commit)
            ledger.mark_published(bulk.bulk_id)
            landed.append(ids)
    finally:
        ledger.close()
    return landed[0], landed[1]


def commit_rows(table: str, message_type: str, destination: str, sent: list[bytes], put: datetime,
                storage_options: dict[str, str] | None = None) -> None:
    """The messages `sent` of `message_type` from `destination`, put and received at `put`, as the bridge
    lands them (`mqbridge.landing.rows`), in one commit of the Delta table at `table` (written by delta-rs)."""
    from mqbridge.landing.rows import IDENTITY_COLUMN, arrow_table
    from mqbridge.message import Bulk, Message

    bulk = Bulk(message_type)
    for body in sent:
        bulk.add(Message(msg_id=body.split(b":")[0].decode(), body=body, source="amq", destination=destination,
                         message_type=message_type, put_timestamp=put, received_timestamp=put))
    rows = arrow_table(bulk, list(range(len(sent)))).drop_columns(["_row"])
    rows = rows.rename_columns([IDENTITY_COLUMN if c == "_identity" else c for c in rows.column_names])
    deltalake.write_deltalake(table, rows, mode="append", partition_by=["put_date"], storage_options=storage_options)


def test_the_scheduled_retention_purge_where_and_tables_work_on_a_delta_table_on_hdfs(
        tmp_path: Path, hdfs_cluster: str, delta_spark: DeltaSpark) -> None:
    # Given a Delta table on HDFS of two put_date partitions (40 rows received ten days ago, 60 now),
    # both bulks published in the ledger, and a type whose retention (5 days) designates the old one
    # ... and a second type whose table is a template (`h_{destination}`), rendered into two tables
    warehouse = f"{hdfs_cluster}/mqbridge-seeds-{uuid.uuid4().hex[:8]}"
    config = (purge_bridge().set("spark", warehouse=warehouse, table_format="delta", jars_dir=str(JARS),
                                 writer="spark")
              .set("spark.conf", **SMALL_TABLE_CONF).set("purge", interval="1h")
              .set("types.orders", retention="5d").set("types.queued")
              .add("types.queued", 'table = "h_{destination}"')
              .write(tmp_path / "bridge.toml"))
    old, new = land_by_hand(f"{warehouse}/orders", tmp_path / "state")
    rendered = {f"h_{name}": bodies(5 + n, name) for n, name in enumerate(("eu", "us"))}
    for table, sent in rendered.items():
        commit_rows(f"{warehouse}/{table}", "queued", f"/queue/{table.removeprefix('h_')}", sent,
                    datetime.now(timezone.utc))

    # When a round of the bridge's scheduled purge runs (on a Spark driver with Delta)
    purged = delta_spark.run(scheduled_round, str(config), "purge", timeout=600)
    # Then the old partition is dropped and every new row stays once (read by delta-rs over HDFS)
    assert purged["ok"], purged.get("traceback")
    assert purged["value"]["purge_containers"] == 1, purged["value"]
    ids = deltalake.DeltaTable(f"{warehouse}/orders").to_pyarrow_table(columns=["msg_id"]).column("msg_id")
    assert collections.Counter(ids.to_pylist()) == collections.Counter(new)
    # ... `where` says an old message's row was purged and which version still reads it, a new one's is
    # there, and `tables` lists the one partition left
    code, out = command(config, "where", old[0])
    assert code == 0 and "purged" in out and "still reads it" in out, out
    code, out = command(config, "where", "--json", new[0])
    doc = json.loads(out[out.index("{"):])
    assert code == 0 and doc["landed"]["in_table"] is True and doc["landed"]["delta_version"] == 1, out
    code, out = command(config, "tables")
    assert code == 0 and "  orders  (Delta table, version" in out and " 60 rows" in out, out
    # ... and the two tables the template rendered, found by listing HDFS (delta-rs), each with its rows
    for table, sent in rendered.items():
        assert f"  {table}  (Delta table, version 0" in out and f" {len(sent)} rows" in out, out
    assert out.count("; types: queued)") == 2 and out.count("put_date=") == 3, out
