"""Purges to test: a container landed as the bridge lands it, and the configuration `mqbridge
purge` and `mqbridge ledger` run with."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from mqbridge.config import TypeConfig
from mqbridge.counters import Counters
from mqbridge.landing.executor import SparkExecutor
from mqbridge.landing.landing import Landing
from mqbridge.landing.ledger import SqliteLedger, owner_id
from mqbridge.message import Bulk, Message
from tests.support.configs import BridgeToml

T0 = datetime(2024, 6, 1, tzinfo=timezone.utc)
ROWS, BULKS = 1000, 10


def land_container(spark: Any, warehouse: Path, state: Path, next_day: int = 0) -> Path:
    """One container (put_date 2024-06-01) of ROWS rows in BULKS files; message n put n minutes
    after midnight, its body holding every byte value; `next_day` more rows on 2024-06-02."""
    ledger = SqliteLedger.open(state / "ledger.sqlite3", owner=owner_id())
    landing = Landing(ledger=ledger, owner=ledger.owner, counters=Counters(), dedupe_window=3600.0, warehouse=warehouse)
    executor = SparkExecutor(spark, warehouse, "orders", TypeConfig(table="orders"), landing=landing)
    per_bulk = ROWS // BULKS
    for b in range(BULKS):
        bulk = Bulk("orders")
        for n in range(b * per_bulk, (b + 1) * per_bulk):
            put = T0 + timedelta(minutes=n)
            bulk.add(Message(msg_id=f"m{n}", body=f"{n}:".encode() + bytes(range(256)), source="amq",
                             destination="/queue/orders", message_type="orders", headers={"n": str(n)},
                             put_timestamp=put, received_timestamp=put))
        executor.execute(bulk)
    if next_day:
        bulk = Bulk("orders")
        for n in range(next_day):
            put = T0 + timedelta(days=1, minutes=n)
            bulk.add(Message(msg_id=f"d{n}", body=b"next day", source="amq", destination="/queue/orders",
                             message_type="orders", put_timestamp=put, received_timestamp=put))
        executor.execute(bulk)
    landing.close()
    return warehouse / "orders"


def purge_bridge(*, queue: str = "/queue/orders", message_type: str = "orders") -> BridgeToml:
    """A configuration for `mqbridge purge` and `mqbridge ledger`: the ledger in `state` and the
    tables in `landing` beside the file, local Spark; one STOMP listener (never started) of
    `message_type`, whose `[types.X]` table the caller adds."""
    return BridgeToml({
        "bridge": {"state_dir": "state", "plugin_dirs": []},
        "spark": {"master": "local[1]", "warehouse": "landing", "writer": "auto"},  # as in process_bridge
        "sources.amq": {"kind": "stomp"},
    }).listener(source="amq", queue=queue, message_type=message_type, backout_queue=f"{queue}.backout")
