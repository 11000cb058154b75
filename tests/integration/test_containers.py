"""Containers per destination (`table = "{destination}"`) and rows ordered by put_timestamp, on a real
local Spark, and through `mqbridge run` on a real ActiveMQ."""

from __future__ import annotations

import random
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from mqbridge.config import TypeConfig
from mqbridge.counters import Counters
from mqbridge.landing.containers import containers
from mqbridge.landing.executor import SparkExecutor
from mqbridge.landing.landing import Landing
from mqbridge.landing.ledger import SqliteLedger, owner_id
from mqbridge.message import Bulk, Message, Outcome
from tests.support.amq import AmqClient, unique_queue
from tests.support.processes import landed, leftovers, mqbridge, run_until_idle, stomp_config

pytestmark = pytest.mark.integration

T0 = datetime(2024, 6, 1, 23, 0, tzinfo=timezone.utc)


def test_a_bulk_of_three_destinations_lands_in_three_tables_rows_ordered_by_put_timestamp(
        spark: Any, tmp_path: Path) -> None:
    # Given one bulk whose messages come from three queues, put times shuffled across two days
    rng = random.Random(7)
    queues = ["/queue/Orders.EU", "/queue/orders.us", "APP.ORDERS"]
    bulk = Bulk("orders")
    for n in range(300):
        put = T0 + timedelta(seconds=rng.randrange(7200))  # 23:00 to 01:00: two put_dates
        bulk.add(Message(msg_id=f"m{n}", body=f"body-{n}".encode(), source="amq", destination=queues[n % 3],
                         message_type="orders", put_timestamp=put, received_timestamp=put))
    ledger = SqliteLedger.open(tmp_path / "state" / "ledger.sqlite3", owner=owner_id())
    warehouse = tmp_path / "landing"
    landing = Landing(ledger=ledger, owner=ledger.owner, counters=Counters(), dedupe_window=3600.0, warehouse=warehouse)
    executor = SparkExecutor(spark, warehouse, "orders", TypeConfig(table="{destination}"), landing=landing)

    # When it is executed
    results = executor.execute(bulk)
    landing.close()

    # Then every message succeeded and each queue has its own table (sanitised names), created now
    assert {r.outcome for r in results} == {Outcome.SUCCESS}
    assert sorted(p.name for p in warehouse.iterdir()) == ["app.orders", "orders.eu", "orders.us"]
    for name, queue in [("orders.eu", queues[0]), ("orders.us", queues[1]), ("app.orders", queues[2])]:
        rows = spark.read.parquet(str(warehouse / name)).collect()
        assert {r.destination for r in rows} == {queue} and len(rows) == 100
        assert leftovers(warehouse / name) == []
        # and inside every file the rows are in put_timestamp order
        found = containers(warehouse / name)
        assert [c.put_date for c in found] == ["2024-06-01", "2024-06-02"]
        assert sum(c.rows for c in found) == 100
        for c in found:
            for path in c.files:
                stamps = pq.read_table(path, columns=["put_timestamp"]).column(0).to_pylist()
                assert stamps == sorted(stamps) and len(stamps) > 1
            assert c.oldest is not None and c.newest is not None and c.oldest <= c.newest
            assert c.oldest.date().isoformat() == c.put_date == c.newest.date().isoformat()


def test_three_queues_land_in_three_tables_created_on_first_use(tmp_path: Path, spark: Any,
                                                                 amq: AmqClient) -> None:
    # Given three queues with 100 messages each and one type whose table is "{destination}"
    queues = [unique_queue(f"containers-{n}") for n in range(3)]
    sent = {q: [f"{q}:{i}".encode() for i in range(100)] for q in queues}
    for q in queues:
        amq.put_many(q, sent[q])
    more = "".join(f"""
[[listeners]]
source = "amq"
queue = "{q}"
batch = 200
wait = "200ms"
message_type = "orders"
backout_queue = "{q}.backout"
""" for q in queues[1:])
    config = stomp_config(tmp_path, queues[0], threads=1)
    config.write_text(config.read_text().replace("[types.orders]\n", '[types.orders]\ntable = "{destination}"\n')
                      + more)
    warehouse = tmp_path / "landing"
    assert not warehouse.exists()

    # When the bridge runs until idle
    run_until_idle(config, idle="2s")

    # Then each queue's messages are in their own table, exactly once, and nowhere else
    for q in queues:
        table = warehouse / q.removeprefix("/queue/")
        rows = landed(spark, table)
        assert set(rows) == set(sent[q]) and set(rows.values()) == {1}
        assert amq.depth(q) == 0
    assert len([p for p in warehouse.iterdir() if not p.name.startswith("_")]) == 3
    # and `mqbridge tables` lists each table's container with its rows and key range
    proc = mqbridge("tables", "--config", str(config))
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    for q in queues:
        assert q.removeprefix("/queue/") in out
    assert len(re.findall(r"put_date=\d{4}-\d{2}-\d{2}\s+100 rows\s+\d+ bytes\s+\d+ files\s+oldest \S+\s+newest \S+",
                          out)) == 3, out
