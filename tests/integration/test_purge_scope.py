"""`mqbridge purge` on a real local Spark purges a type's own rows only: never the table of another
type that a template's pattern happens to match, never another type's rows in a shared table."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from mqbridge.config import TypeConfig
from mqbridge.counters import Counters
from mqbridge.landing.executor import SparkExecutor
from mqbridge.landing.landing import Landing
from mqbridge.landing.ledger import SqliteLedger, owner_id
from mqbridge.message import Bulk, Message
from tests.support.configs import TAIL
from tests.support.processes import mqbridge
from tests.support.purge import T0, purge_bridge

pytestmark = pytest.mark.integration


def land(spark: Any, tmp_path: Path, message_type: str, table: str, destination: str, rows: int) -> None:
    """`rows` messages of `message_type` (configured `table`) read from `destination`, put one a
    minute from T0 on, landed exactly once as the bridge lands them."""
    ledger = SqliteLedger.open(tmp_path / "state" / "ledger.sqlite3", owner=owner_id())
    landing = Landing(ledger=ledger, owner=ledger.owner, counters=Counters(), dedupe_window=3600.0,
                      warehouse=tmp_path / "landing")
    executor = SparkExecutor(spark, tmp_path / "landing", message_type, TypeConfig(table=table), landing=landing)
    bulk = Bulk(message_type)
    for n in range(rows):
        put = T0 + timedelta(minutes=n)
        bulk.add(Message(msg_id=f"{message_type}-{destination}-{n}", body=b"x", source="amq", destination=destination,
                         message_type=message_type, put_timestamp=put, received_timestamp=put))
    assert all(r.ok for r in executor.execute(bulk))
    landing.close()


def counts(spark: Any, table: Path) -> dict[str, int]:
    """Rows of `table` per message_type, as a reader sees them."""
    rows = spark.read.parquet(str(table)).groupBy("message_type").count().collect()
    return {r["message_type"]: int(r["count"]) for r in rows}


def purge(tmp_path: Path, types: str, *args: str) -> str:
    """Run `mqbridge purge` on a configuration of these `[types.X]` sections; its output."""
    toml = purge_bridge(queue="/queue/q1", message_type="dest").add(TAIL, types)
    config = toml.write(tmp_path / "bridge.toml")
    proc = mqbridge("purge", "--config", str(config), *args)
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, out
    return str(out)


def test_purging_a_templated_type_leaves_another_types_table_and_rows_alone(spark: Any, tmp_path: Path) -> None:
    # Given a `{destination}` type that landed into q1, a plain type's table `orders` beside it,
    # and a table `shared` of two types kept one day and ten thousand days
    land(spark, tmp_path, "dest", "{destination}", "/queue/q1", 30)
    land(spark, tmp_path, "orders", "orders", "/queue/orders", 20)
    land(spark, tmp_path, "a", "shared", "/queue/a", 10)
    land(spark, tmp_path, "b", "shared", "/queue/b", 15)
    warehouse = tmp_path / "landing"
    assert counts(spark, warehouse / "orders") == {"orders": 20}
    types = """
[types.dest]
table = "{destination}"
retention = "1d"
[types.orders]
[types.a]
table = "shared"
retention = "1d"
[types.b]
table = "shared"
retention = "10000d"
"""
    # When the templated type is purged by its retention (every row of 2024 is older than a day)
    out = purge(tmp_path, types, "--type", "dest")

    # Then its own table is emptied, and the other type's table (which `{destination}` would
    # match as a name) and the shared table are untouched
    assert counts(spark, warehouse / "q1") == {}
    assert counts(spark, warehouse / "orders") == {"orders": 20}
    assert counts(spark, warehouse / "shared") == {"a": 10, "b": 15}
    assert "q1: designated" in out and "orders:" not in out and "shared:" not in out, out

    # When every type is purged by its own retention
    out = purge(tmp_path, types)

    # Then in the shared table only the rows of the type kept one day go; the other type's stay
    assert "designated: put before" in out and "of type a" in out, out
    assert counts(spark, warehouse / "shared") == {"b": 15}
    assert counts(spark, warehouse / "orders") == {"orders": 20}

    # When more rows of the short-lived type land, and a purge names that type with --older-than
    land(spark, tmp_path, "a", "shared", "/queue/a2", 5)
    purge(tmp_path, types, "--type", "a", "--older-than", "1d")

    # Then only its rows go: the other type's rows of the table are not its to purge
    assert counts(spark, warehouse / "shared") == {"b": 15}
