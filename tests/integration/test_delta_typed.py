"""A typed type (`format = "json"` with a `schema`) landing into a Delta table, each bulk written once:
the rows whose values Spark cannot convert are found before the bulk is prepared and go to the
backout queue with their reason, the others land once; the ledger holds exactly the landed rows, so
that a redelivered bad message is never taken for landed. A real `mqbridge run` with its own Spark
driver and the Delta jars, on a real ActiveMQ; the table read back by delta-rs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mqbridge.landing.ledger import SqliteLedger
from tests.support.amq import AmqClient, unique_queue
from tests.support.delta_tables import DELTA_SPARK, JARS
from tests.support.processes import run_until_idle, stomp_bridge

pytestmark = pytest.mark.integration

deltalake = pytest.importorskip("deltalake")



def test_a_typed_delta_bulk_lands_the_good_rows_once_and_moves_the_unconvertible_ones(
        tmp_path: Path, amq: AmqClient) -> None:
    if not (JARS / "delta").is_dir():
        pytest.fail(f"the Delta Lake jars are missing from {JARS / 'delta'}: run scripts/jars.sh delta")
    # Given good JSON orders, and among them JSON that Spark cannot convert to the columns (which only
    # the Spark job finds) and text that is not JSON at all (which Python's precheck finds)
    q = unique_queue("delta-typed")
    good = [json.dumps({"id": i, "amount": i * 10}).encode() for i in range(300)]
    unconvertible = [b'{"id": 1001, "amount": "ten"}', b'{"id": "x", "amount": 3}', b'{"id": 1003, "amount": 1e99}']
    not_json = [b"{not json", b"[1, 2"]
    amq.put_many(q, good[:100] + unconvertible[:1] + good[100:200] + not_json + unconvertible[1:] + good[200:])
    config = (stomp_bridge(q, spark=DELTA_SPARK).set("types.orders", format="json", schema="id INT, amount INT")
              .write(tmp_path / "bridge.toml"))

    # When a bridge drains the queue
    out = run_until_idle(config)

    # Then every good order is in the Delta table once, typed; every bad one is on the backout queue
    # with its reason, at its first delivery; the queue is empty
    table = deltalake.DeltaTable(str(tmp_path / "landing" / "orders")).to_pyarrow_table()
    assert sorted(zip(table.column("id").to_pylist(), table.column("amount").to_pylist(), strict=True)) == \
        [(i, i * 10) for i in range(300)], out[-3000:]
    assert len(set(table.column("identity").to_pylist())) == 300
    moved = amq.drain(q + ".backout")
    assert sorted(f.body for f in moved) == sorted(unconvertible + not_json)
    for frame in moved:
        reason = frame.headers["mqbridge-reason"]
        assert reason.startswith("body is not valid JSON for schema: "), reason
        if frame.body in unconvertible:
            assert "does not convert to the column type" in reason, reason
        assert frame.headers["mqbridge-delivery-count"] == "1"
    assert amq.depth(q) == 0
    # And the ledger knows exactly the 300 landed identities: none of a message that did not land
    ledger = SqliteLedger.open_read_only(tmp_path / "state" / "ledger.sqlite3", owner="test:0:0")
    try:
        assert ledger.stats().identities == 300
        assert ledger.published(table.column("identity").to_pylist()) == set(table.column("identity").to_pylist())
    finally:
        ledger.close()
