"""`confirm = "reply-to"` on the real ActiveMQ: each message with a `reply-to` gets exactly one result,
sent in the transaction that removes it from the queue, whatever kills the bridge on the way."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.amq import AmqClient, unique_queue
from tests.support.processes import leftovers, run_until_idle, run_until_killed, stomp_config

pytestmark = pytest.mark.integration


def landed_ids(spark: Any, table: Path) -> list[str]:
    return [row.msg_id for row in spark.read.parquet(str(table)).select("msg_id").collect()]


@pytest.mark.timeout(900)
def test_each_message_gets_exactly_one_result_across_kills(tmp_path: Path, spark: Any, amq: AmqClient) -> None:
    # Given 600 messages asking for a result, 20 of them too big to land (refused at the edge: backout),
    # and 50 that ask for nothing
    q = unique_queue("confirm")
    replies = q + ".replies"
    small = [f"ok-{i:04d}".encode() for i in range(580)]
    big = [f"big-{i:04d}:".encode() + b"x" * 3000 for i in range(20)]
    for body in [*small[:290], *big, *small[290:]]:
        amq.put(q, body, {"reply-to": replies, "correlation-id": "order-" + body[:8].decode()})
    amq.put_many(q, [f"quiet-{i:04d}".encode() for i in range(50)])
    config = stomp_config(tmp_path, q, extra_source='max_message_size = "2KB"',
                          extra_listener='confirm = "reply-to"')
    table = tmp_path / "landing" / "orders"

    # When the bridge is killed inside its first STOMP commit (ACKs and results sent, no COMMIT),
    # then after publishing a bulk (the ledger has it, the queue not yet), then runs to the end
    run_until_killed(config, "after_source_ack")
    run_until_killed(config, "after_publish")
    out = run_until_idle(config)

    # Then every message is landed or backed out once, and each that asked has exactly one result,
    # correlated by its message id, saying where it went
    ids = landed_ids(spark, table)
    assert len(ids) == 630 and len(set(ids)) == 630
    moved = amq.drain(q + ".backout")
    assert len(moved) == 20 and all(b"big-" in bytes(f.body) for f in moved)
    results = amq.drain(replies)
    by_id: dict[str, list[dict[str, Any]]] = {}
    for frame in results:
        body = json.loads(bytes(frame.body))
        assert frame.headers["correlation-id"] == body["message_id"]
        assert frame.headers["mqbridge_result"] == body["result"]
        assert frame.headers["mqbridge_correlation_id"] == body["correlation_id"]
        by_id.setdefault(frame.headers["correlation-id"], []).append(body)
    duplicated = [i for i, found in by_id.items() if len(found) > 1]
    assert duplicated == [], f"{len(duplicated)} messages got more than one result"
    quiet = {row.msg_id for row in spark.read.parquet(str(table)).where("body LIKE 'quiet-%'").collect()}
    expected_landed = set(ids) - quiet
    expected_moved = {f.headers["mqbridge-original-message-id"] for f in moved}
    got_landed = {i for i, [found] in by_id.items() if found["result"] == "landed"}
    got_moved = {i for i, [found] in by_id.items() if found["result"] == "backout"}
    assert got_landed == expected_landed, (f"{len(expected_landed - got_landed)} missing, "
                                           f"{len(got_landed - expected_landed)} unexpected")
    assert got_moved == expected_moved
    keys = {row.msg_id: "order-" + bytes(row.body[:8]).decode() for row in spark.read.parquet(str(table)).collect()}
    keys.update({f.headers["mqbridge-original-message-id"]: "order-" + bytes(f.body)[:8].decode() for f in moved})
    assert all(found[0]["correlation_id"] == keys[i] for i, found in by_id.items())
    for found in by_id.values():
        if found[0]["result"] == "landed":
            assert found[0]["table"] == "orders" and found[0]["bulk_id"] and found[0]["put_date"]
        else:
            assert "max_message_size" in found[0]["reason"] and found[0]["backout_queue"] == q + ".backout"
    assert "already landed; committed without landing them again" in out, out[-3000:]
    assert amq.depth(q) == 0 and leftovers(table) == []
