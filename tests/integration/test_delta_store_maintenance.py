"""The seeds on a Delta table where the data lives. On the S3 server (S3Proxy, `scripts/s3.sh`): a real
`mqbridge run` lands 300 messages from the shared ActiveMQ, 100 of them put ten days ago (a producer's
`timestamp` header, which ActiveMQ keeps: two put_date partitions); `mqbridge where` and `ledger --verify`
read the table with delta-rs (the S3 options built from the same `[spark.conf]` S3A keys, the secret from
`${FILE:…}`); with `[spark] catalog = true` the bridge registers it by its s3a:// URI, and another
driver's catalog registers it alike and reads it by name (a Hive metastore keeps such a LOCATION as
well: checked by hand); a second type whose table is a template (`q_{destination}`) lands two queues
into two rendered tables, which `mqbridge tables` finds by listing the store (delta-rs);
`mqbridge purge --strategy copy` replaces a partition by its survivors, the bridge's
scheduled compaction compacts the other (OPTIMIZE) and its scheduled purge drops both by the type's
retention (Delta's DELETE), and `mqbridge replay --as-of-version` reads the version before the purges
(time travel). On HDFS (Hadoop's mini cluster, `scripts/hdfs.sh`), a table of two bulks as the bridge
lands them (written by delta-rs, recorded in the ledger): the scheduled purge drops the partition its
retention designates, `where` and `tables` read what is left. The scheduled rounds run on the session's
Spark driver with Delta and S3A (`delta_spark`). Every row is accounted for like a total-queue checker
by delta-rs over the store's own API: exactly the designated rows leave, every other row stays, once.
First, bare delta-rs calls with those options against the S3 server and the mini cluster (no Spark):
the check the readers rely on."""

from __future__ import annotations

import collections
import json
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from mqbridge.config.warehouse import ObjectStoreUri, delta_rs_options
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
    import pyarrow as pa

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


def test_where_verify_purge_the_scheduled_rounds_and_replay_work_on_a_delta_table_on_s3(
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

    # When a round of the bridge's scheduled compaction runs, then one of its scheduled purge with a
    # retention that designates every row (each on a Spark driver with Delta and S3A)
    rounds = bridge.set("compaction", interval="1h").set("purge", interval="1h")
    compacted = delta_spark.run(scheduled_round, str(rounds.write(config)), "compaction", timeout=600)
    # Then the old partition's small files are compacted into one (OPTIMIZE), no row changed
    assert compacted["ok"], compacted.get("traceback")
    assert compacted["value"]["compaction_containers"] == 1, compacted["value"]
    assert account([b for b in old + new if b not in deleted], rows()).clean
    purged = delta_spark.run(scheduled_round, str(rounds.set("types.orders", retention="1s").write(config)),
                             "purge", timeout=600)
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
    # And the secret was in no output and on no command line
    assert s3_server.secret_key not in landed_out + out


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


def test_the_scheduled_retention_purge_where_and_tables_work_on_a_delta_table_on_hdfs(
        tmp_path: Path, hdfs_cluster: str, delta_spark: DeltaSpark) -> None:
    # Given a Delta table on HDFS of two put_date partitions (40 rows received ten days ago, 60 now),
    # both bulks published in the ledger, and a type whose retention (5 days) designates the old one
    warehouse = f"{hdfs_cluster}/mqbridge-seeds-{uuid.uuid4().hex[:8]}"
    config = (purge_bridge().set("spark", warehouse=warehouse, table_format="delta", jars_dir=str(JARS),
                                 writer="spark")
              .set("spark.conf", **SMALL_TABLE_CONF).set("purge", interval="1h")
              .set("types.orders", retention="5d").write(tmp_path / "bridge.toml"))
    old, new = land_by_hand(f"{warehouse}/orders", tmp_path / "state")

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
    assert code == 0 and "Delta table, version" in out and out.count("put_date=") == 1 and " 60 rows" in out, out
