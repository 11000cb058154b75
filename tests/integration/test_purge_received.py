"""Retention never purges a row received within the retention, whatever its put time says: a
producer's clock far behind (or a put time read in the wrong unit) puts recent rows into an old
`put_date` container, and a purge by put time alone dropped that container whole. On a real local
Spark, with both strategies that rewrite a container (delete, copy-and-drop)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from mqbridge.config import TypeConfig
from mqbridge.counters import Counters
from mqbridge.landing.executor import SparkExecutor
from mqbridge.landing.landing import Landing
from mqbridge.landing.ledger import SqliteLedger, owner_id
from mqbridge.maintenance.engine.costs import CostModel
from mqbridge.maintenance.purge import Designation, Purger
from mqbridge.message import Bulk, Message

pytestmark = pytest.mark.integration

OLD = datetime(2024, 6, 1, tzinfo=timezone.utc)
RETENTION = timedelta(days=30)


def land(spark: Any, tmp_path: Path, now: datetime) -> Path:
    """Container put_date=2024-06-01: o0-o4 put and received then, r0-r4 put then but received an hour
    ago; container put_date=2024-06-02: n0-n2 put then, received an hour ago. One bulk each."""
    warehouse = tmp_path / "landing"
    ledger = SqliteLedger.open(tmp_path / "state" / "ledger.sqlite3", owner=owner_id())
    landing = Landing(ledger=ledger, owner=ledger.owner, counters=Counters(), dedupe_window=3600.0, warehouse=warehouse)
    executor = SparkExecutor(spark, warehouse, "orders", TypeConfig(table="orders"), landing=landing)
    recent = now - timedelta(hours=1)
    rows = ([(f"o{n}", OLD + timedelta(minutes=n), OLD + timedelta(minutes=n)) for n in range(5)]
            + [(f"r{n}", OLD + timedelta(minutes=10 + n), recent) for n in range(5)]
            + [(f"n{n}", OLD + timedelta(days=1, minutes=n), recent) for n in range(3)])
    for prefix in (("o", "r"), ("n",)):
        bulk = Bulk("orders")
        for msg_id, put, received in rows:
            if msg_id.startswith(prefix):
                bulk.add(Message(msg_id=msg_id, body=msg_id.encode(), source="amq", destination="/queue/orders",
                                 message_type="orders", put_timestamp=put, received_timestamp=received))
        executor.execute(bulk)
    landing.close()
    return warehouse / "orders"


@pytest.mark.parametrize("strategy", ["delete", "copy"])
def test_rows_received_within_the_retention_survive_whatever_their_put_date(
        spark: Any, tmp_path: Path, strategy: str) -> None:
    # Given two old put_date containers, one holding 5 rows received long ago and 5 received an
    # hour ago, the other only rows received an hour ago
    now = datetime.now(timezone.utc)
    table = land(spark, tmp_path, now)
    purger = Purger(spark, CostModel(tmp_path / "state" / "purge_costs.json"), counters=Counters())
    designation = Designation(cutoff=now - RETENTION)  # retention = "30d"

    # When the retention purge is planned and run with the strategy
    plans = purger.plan(table, designation, strategy)

    # Then only the rows received before the retention are designated: the mixed container is
    # rewritten, not dropped, and the container of recent receipts is not touched at all
    assert [(p.put_date, p.designated, p.rows, p.estimate.strategy) for p in plans] == [
        ("2024-06-01", 5, 10, strategy)]
    [result] = list(purger.run(plans, designation))
    assert result.rows_deleted == 5
    survivors = sorted(r.msg_id for r in spark.read.parquet(str(table)).collect())
    assert survivors == sorted([f"r{n}" for n in range(5)] + [f"n{n}" for n in range(3)])
    assert purger.counters.total("purge_containers_dropped") == 0
