"""Reading Delta Lake tables back (`table_format = "delta"`) on the real parts: `mqbridge run` with its
own Spark driver and the Delta jars lands from the shared ActiveMQ, then the commands read the Delta
table: `mqbridge where` names the version that committed a message's bulk and, after a purge's DELETE
(by delta-rs), that its row is gone from the newest version; `mqbridge ledger --verify` counts each
bulk's rows in the table (a deleted row counted apart, a duplicated bulk an error); `mqbridge replay
--as-of-version` reads the version before the purge (time travel) and sends every row once; `mqbridge
follow` forwards the newest version's rows once, saying which bulk lost a row to the purge; `mqbridge
ledger --abandon` decides a killed bridge's prepared bulk by the table's log (committed: recorded
published; not: its version fenced, then forgotten), and the next run lands every message once;
`[spark] catalog = true` registers the Delta table by name in a Hive metastore, read by a separate
Spark with Delta. The replay runs in the session's Delta-enabled driver (`delta_spark`,
`tests.support.delta_tables.run_in_driver`) rather than in a driver of its own: what it reads and sends
is the subject here; `mqbridge replay` starting its own driver with Delta is
tests/integration/test_delta_store_maintenance.py's (on S3)."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from mqbridge.config import load_config
from mqbridge.landing.delta import FENCE_MARK
from mqbridge.landing.jvm import JIT_OPTIONS
from mqbridge.landing.ledger import open_ledger_for_reading, owner_id
from tests.support import class_archive as shared_archive
from tests.support.amq import AmqClient, unique_queue
from tests.support.delta_tables import (
    DELTA_SPARK,
    JARS,
    delta_jars_fetched,  # noqa: F401 (the module's autouse fixture)
    run_in_driver,
)
from tests.support.exactly_once import account, bodies
from tests.support.object_stores import DeltaSpark
from tests.support.processes import ROOT, mqbridge, run_until_idle, run_until_killed, stomp_config

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

deltalake = pytest.importorskip("deltalake")


def command(*args: str, timeout: float = 300) -> tuple[int, str]:
    """An `mqbridge` command run to its end: exit code and output."""
    proc = mqbridge(*args)
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


def delta_rows(table: Path) -> collections.Counter[bytes]:
    """How often each body is in the newest version of the Delta table, read by delta-rs."""
    rows = deltalake.DeltaTable(str(table)).to_pyarrow_table(columns=["body"]).column("body").to_pylist()
    return collections.Counter(bytes(b) for b in rows)


def purged_body(sent: list[bytes], target: dict[str, Any], table: Path) -> list[bytes]:
    """The body of the row a purge deleted (the one of `sent` the table's newest version lacks)."""
    rows = delta_rows(table)
    gone = [b for b in sent if b not in rows]
    assert len(gone) == 1, f"{len(gone)} rows missing from the newest version, one expected ({target['msg_id']})"
    return gone


def prepared_bulk(config: Path) -> Any:
    """The one bulk a killed bridge left prepared in its ledger."""
    cfg = load_config(str(config), secrets=False)
    ledger = open_ledger_for_reading(cfg, owner=owner_id())
    try:
        [bulk] = ledger.in_progress()
    finally:
        ledger.close()
    return bulk


def test_where_verify_and_replay_read_the_delta_table_and_a_version_before_a_purge(
        tmp_path: Path, amq: AmqClient, delta_spark: DeltaSpark) -> None:
    # Given 120 messages landed by a bridge into a Delta table, in several bulks (one commit each)
    q = unique_queue("delta-read")
    sent = bodies(120, "dr")
    amq.put_many(q, sent)
    config = stomp_config(tmp_path, q, batch=40, spark=DELTA_SPARK)
    run_until_idle(config)
    table = tmp_path / "landing" / "orders"
    landed = deltalake.DeltaTable(str(table)).to_pyarrow_table(columns=["msg_id", "bulk_id", "put_date"]).to_pylist()
    assert len(landed) == 120
    target = landed[0]
    history = deltalake.DeltaTable(str(table)).history()
    [commit] = [h for h in history if h.get("userMetadata") == target["bulk_id"]]

    # When `mqbridge where` asks for one message (no bridge runs: the ledger, then the table)
    code, out = command("where", "--config", str(config), "--json", target["msg_id"])
    # Then it is landed in table orders, its put_date, its bulk and the Delta version that committed it
    doc = json.loads(out[out.index("{"):])
    assert code == 0 and doc["state"] == "landed", out
    found = doc["landed"]
    assert (found["table"], found["bulk"], found["put_date"]) == ("orders", target["bulk_id"],
                                                                  str(target["put_date"])), found
    assert found["delta_version"] == commit["version"] and found["in_table"] is True, found
    # ... and `ledger --verify` counts every bulk's rows in the table
    code, out = command("ledger", "--config", str(config), "--verify")
    assert code == 0 and "bulks of 1 Delta tables hold one row per identity" in out and "verify: OK (" in out, out

    # When a purge deletes that message's row (a DELETE commit, by delta-rs)
    deltalake.DeltaTable(str(table)).delete(f"msg_id = '{target['msg_id']}'")
    before_purge = deltalake.DeltaTable(str(table)).version() - 1
    # Then `where` says the row is no longer in the newest version, and which version still reads it
    code, out = command("where", "--config", str(config), target["msg_id"])
    assert code == 0 and f"version {commit['version']} committed it" in out, out
    assert "purged" in out and f"version {commit['version']} still reads it" in out, out
    # ... and `--verify` counts that bulk apart instead of failing it
    code, out = command("ledger", "--config", str(config), "--verify")
    assert code == 0 and "(1 with rows deleted since by purges: not compared)" in out, out

    # When the table's rows are replayed as of the version before the purge (time travel; in the
    # session's Delta-enabled driver)
    destination = unique_queue("delta-replayed")
    code, out = run_in_driver(delta_spark, "replay", "--config", str(config), "--table", "orders", "--to",
                              destination, "--as-of-version", str(before_purge), "--batch", "50")
    assert code == 0 and "120 rows sent now" in out, out[-4000:]
    # Then every row arrived once, the purged one too
    accounting = account(sent, collections.Counter(bytes(f.body) for f in amq.drain(destination)))
    assert accounting.clean, accounting

    # When `mqbridge follow` forwards the table's bulks from the landing ledger (a forward that starts
    # with every bulk the ledger holds)
    followed = unique_queue("delta-followed")
    config.write_text(config.read_text() + f'\n[[forwards]]\nname = "all"\ntable = "orders"\nsource = "amq"\n'
                                           f'to = ["{followed}"]\nstart = "all"\nevery = "300ms"\n')
    code, out = command("follow", "--config", str(config), "--until-idle", "2s", timeout=600)
    # Then it reads the Delta table: every row of the newest version arrives once, and the bulk whose
    # row the purge deleted is said
    assert code == 0 and f"forward all to {followed}: 119 rows sent now" in out, out[-4000:]
    assert f"bulk {target['bulk_id']} landed " in out and "are left there (purged before the forward" in out, out
    accounting = account([b for b in sent if b not in purged_body(sent, target, table)],
                         collections.Counter(bytes(f.body) for f in amq.drain(followed)))
    assert accounting.clean, accounting

    # When a bulk's rows are in the table twice (appended again by hand)
    bulk_rows = deltalake.DeltaTable(str(table)).to_pyarrow_table(filters=[("bulk_id", "=", landed[-1]["bulk_id"])])
    deltalake.write_deltalake(str(table), bulk_rows, mode="append", partition_by=["put_date"])
    # Then `--verify` names it and fails
    code, out = command("ledger", "--config", str(config), "--verify")
    assert code == 1 and f"{landed[-1]['bulk_id']}: " in out and "do not hold one row per identity" in out, out


def test_abandon_asks_the_delta_table_and_the_next_run_lands_every_message_once(
        tmp_path: Path, amq: AmqClient) -> None:
    # Given a bridge killed after its first Delta commit, before the ledger recorded it published
    q = unique_queue("delta-abandon")
    first, second = bodies(200, "ab1"), bodies(200, "ab2")
    amq.put_many(q, first)
    config = stomp_config(tmp_path, q, spark=DELTA_SPARK)
    table = tmp_path / "landing" / "orders"
    run_until_killed(config, "after_publish")
    committed = prepared_bulk(config)
    # When an operator abandons that bulk
    code, out = command("ledger", "--config", str(config), "--abandon", committed.bulk_id)
    # Then the table's log says it committed: recorded published
    assert code == 0 and "holds the commit of bulk" in out and "recorded published" in out, out

    # Given 200 more messages and a bridge killed after preparing a bulk, before its commit
    amq.put_many(q, second)
    run_until_killed(config, "after_prepare")
    never = prepared_bulk(config)
    # When an operator abandons it
    code, out = command("ledger", "--config", str(config), "--abandon", never.bulk_id)
    # Then it never committed: its version is fenced in the table's log, and the bulk forgotten
    assert code == 0 and "never committed" in out and "fenced" in out, out
    delta = deltalake.DeltaTable(str(table))
    assert delta.transaction_version(never.transaction.app_id) == never.transaction.version
    assert delta.history(1)[0].get("userMetadata", "").startswith(FENCE_MARK)

    # When the bridge runs again
    out = run_until_idle(config)
    # Then every message is in the table once: 0 lost, 0 duplicated, 0 unexpected; the queue is empty
    accounting = account(first + second, delta_rows(table))
    assert accounting.clean, (accounting, out[-3000:])
    assert amq.depth(q) == 0 and amq.depth(q + ".backout") == 0


READER = textwrap.dedent('''
    import glob, json, sys
    from pyspark.sql import SparkSession
    from mqbridge.landing.delta import SESSION_CONF
    # 2 tasks per shuffle and per rebuild of the table's state (200 and 50 by default: 7 s of this read)
    SMALL = {"spark.sql.shuffle.partitions": "2", "spark.databricks.delta.snapshotPartitions": "2"}
    tmp, java = sys.argv[1], sys.argv[2]
    builder = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
    if java:
        builder = builder.config("spark.driver.extraJavaOptions", java)
    builder = (builder.config("spark.jars", ",".join(glob.glob(sys.argv[3] + "/delta/*.jar")))
               .config("spark.sql.catalogImplementation", "hive")
               .config("spark.sql.warehouse.dir", tmp + "/hive-warehouse")
               .config("spark.hadoop.javax.jdo.option.ConnectionURL",
                       "jdbc:derby:;databaseName=" + tmp + "/metastore_db;create=true"))
    for key, value in {**SESSION_CONF, **SMALL}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    rows = spark.table("orders")
    detail = spark.sql("DESCRIBE DETAIL orders").collect()[0]
    print(json.dumps({"rows": rows.count(), "distinct": rows.select("msg_id").distinct().count(),
                      "format": detail["format"], "columns": rows.columns}))
''')


def test_a_delta_table_is_registered_by_name_and_read_as_delta(tmp_path: Path, amq: AmqClient) -> None:
    # Given a bridge landing into a Delta table whose catalog is a Hive metastore (`catalog = true`)
    q = unique_queue("delta-catalog")
    sent = bodies(150, "cat")
    amq.put_many(q, sent)
    hive = f"""
catalog = true
[spark.conf]
"spark.sql.catalogImplementation" = "hive"
"spark.sql.warehouse.dir" = "{tmp_path}/hive-warehouse"
"spark.hadoop.javax.jdo.option.ConnectionURL" = "jdbc:derby:;databaseName={tmp_path}/metastore_db;create=true"
"""
    config = stomp_config(tmp_path, q, batch=50, spark=DELTA_SPARK + hive)
    # When it lands them
    out = run_until_idle(config)
    assert "catalog: Delta table orders registered" in out and "could not be registered" not in out, out[-3000:]
    # Then a separate Spark with Delta reads the table by name: a Delta table, every message once, with
    # every bulk committed after its registration (no REFRESH)
    # (its driver maps the tests' class-data archive and compiles with C1 only, as the bridges' drivers do)
    java = f"{JIT_OPTIONS} {shared_archive.java_options()}".strip()
    result = subprocess.run([sys.executable, "-c", READER, str(tmp_path), java, str(JARS)],
                            capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    read = json.loads(result.stdout.strip().splitlines()[-1])
    assert read["format"] == "delta" and read["rows"] == 150 and read["distinct"] == 150, read
    assert "identity" in read["columns"] and "put_date" in read["columns"]
