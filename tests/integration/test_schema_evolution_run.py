"""A type's schema changed between two real `mqbridge run` processes on ActiveMQ: v1, then v2 with a
new column and a widened type (lands beside v1: one merged table, NULL for the old rows), then v3
dropping a column, refused by `check-config` and by `run` before any listener connects (exit 2, the
table, the column, the old and the new type named; every message still on the queue, never delivered)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mqbridge.landing.containers import data_files
from tests.support.amq import AmqClient, unique_queue
from tests.support.processes import mqbridge, run_until_idle, stomp_bridge

pytestmark = pytest.mark.integration

V1 = "order_id STRING, qty INT"
V2 = "order_id STRING, qty BIGINT, channel STRING"
V3 = "order_id STRING, qty BIGINT"  # channel dropped


def config(tmp_path: Path, queue: str, version: str, schema: str) -> Path:
    toml = stomp_bridge(queue, threads=1, batch=50).set("types.orders", format="json", schema=schema)
    return toml.write(tmp_path / f"{version}.toml")  # one directory: the same state_dir and warehouse


@pytest.mark.timeout(900)  # two bridges with a Spark JVM each: about 2 minutes on a loaded 2-core machine
def test_v2_lands_beside_v1_and_a_dropped_column_is_refused_before_anything_is_read(
        tmp_path: Path, amq: AmqClient, spark: Any) -> None:
    q = unique_queue("evolution")
    # Given 20 orders landed by a bridge with schema v1
    amq.put_many(q, [json.dumps({"order_id": f"a{i}", "qty": i}).encode() for i in range(20)])
    run_until_idle(config(tmp_path, q, "v1", V1))
    # When 20 more, with the new column and quantities past INT, are landed by a bridge with v2
    amq.put_many(q, [json.dumps({"order_id": f"b{i}", "qty": 2**40 + i, "channel": "web"}).encode()
                     for i in range(20)])
    out = run_until_idle(config(tmp_path, q, "v2", V2))
    assert "column 'channel': (none) -> string" in out and "column 'qty': int -> bigint" in out, out[-3000:]
    # Then a reader of the table with its current schema sees each order once, NULL in channel for v1 rows
    table = tmp_path / "landing" / "orders"
    newest = max((f for d in table.glob("put_date=*") for f in data_files(d)), key=lambda f: f.stat().st_mtime)
    rows = spark.read.schema(spark.read.parquet(str(newest)).schema).parquet(str(table)).collect()
    got = sorted((r.order_id, r.qty, r.channel) for r in rows)
    assert got == sorted([(f"a{i}", i, None) for i in range(20)] + [(f"b{i}", 2**40 + i, "web") for i in range(20)])
    # When v3 drops the column, with 5 more orders waiting
    amq.put_many(q, [json.dumps({"order_id": f"c{i}", "qty": i}).encode() for i in range(5)])
    v3 = config(tmp_path, q, "v3", V3)
    checked = mqbridge("check-config", "--config", str(v3))
    check_out, _ = checked.communicate(timeout=120)
    refused = mqbridge("run", "--config", str(v3), "--until-idle", "3s")
    run_out, _ = refused.communicate(timeout=300)
    # Then check-config and run refuse it, naming the table, the column, its old and its new type
    expected = f"table {table}: column 'channel': string -> (dropped)"
    assert checked.returncode == 1 and expected in check_out, check_out
    assert refused.returncode == 2 and expected in run_out and "set `table` to a new name" in run_out, run_out[-3000:]
    # And the 5 orders are still on the queue, never delivered to the refused bridge
    waiting = amq.browse(q)
    assert len(waiting) == 5 and not any(f.headers.get("redelivered") == "true" for f in waiting), \
        [f.headers for f in waiting]
    assert len(spark.read.schema(spark.read.parquet(str(newest)).schema).parquet(str(table)).collect()) == 40
