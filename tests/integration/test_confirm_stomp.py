"""`confirm = "reply-to"` on the real ActiveMQ and RabbitMQ: each message with a `reply-to` gets exactly
one result, sent in the transaction that removes it from the queue, whatever kills the bridge on the way.
On RabbitMQ (no atomic transaction: results are confirmed before the ACK) a kill between a unit's
results and its ACK sends that unit's results twice: at least one each, the duplicates only that unit's,
each result saying the same."""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.amq import AmqClient, unique_queue
from tests.support.bridge import listener_toml, make_config
from tests.support.exactly_once import RABBIT_SOURCE, Rabbit
from tests.support.http import get
from tests.support.processes import leftovers, run_until_idle, run_until_killed, stomp_config
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


def landed_ids(spark: Any, table: Path) -> list[str]:
    return [row.msg_id for row in spark.read.parquet(str(table)).select("msg_id").collect()]


@pytest.mark.timeout(900)
def test_each_message_gets_exactly_one_result_across_kills(tmp_path: Path, spark: Any, amq: AmqClient) -> None:
    # Given 600 messages asking for a result, 20 of them too big to land (refused at the edge: backout),
    # and (later) 50 that ask for nothing
    q = unique_queue("confirm")
    replies = q + ".replies"
    small = [f"ok-{i:04d}".encode() for i in range(580)]
    big = [f"big-{i:04d}:".encode() + b"x" * 3000 for i in range(20)]
    for body in [*small[:290], *big, *small[290:]]:
        amq.put(q, body, {"reply-to": replies, "correlation-id": "order-" + body[:8].decode()})
    config = stomp_config(tmp_path, q, extra_source='max_message_size = "2KB"',
                          extra_listener='confirm = "reply-to"')
    table = tmp_path / "landing" / "orders"

    # When the bridge is killed inside its first STOMP commit (ACKs and results sent, no COMMIT),
    # then after publishing a bulk (the ledger has it, the queue not yet), then runs to the end
    # (the 50 arrive after the first kill: with units in flight, the first run may have published every
    # bulk before its first commit, and the second run must still have something new to publish)
    run_until_killed(config, "after_source_ack")
    amq.put_many(q, [f"quiet-{i:04d}".encode() for i in range(50)])
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


@pytest.mark.timeout(900)
def test_on_rabbitmq_each_message_gets_a_result_matched_by_the_producers_key_twice_only_across_a_kill(
        tmp_path: Path, spark: Any, rabbitmq: tuple[str, int]) -> None:
    # Given, on RabbitMQ (whose STOMP message-id changes per delivery, so the identity is the
    # producer's x-eo-id header), 290 messages asking for a result with the producer's own
    # correlation-id, 10 of them too big to land, and 30 that ask for nothing
    rabbit = Rabbit(rabbitmq)
    name = f"test.confirm.{uuid.uuid4().hex[:8]}"
    q, replies = f"/queue/{name}", f"/queue/{name}.replies"
    rabbit.depth(replies)  # declared before any result is sent to it
    small = [f"ok-{i:04d}".encode() for i in range(280)]
    big = [f"big-{i:04d}:".encode() + b"x" * 3000 for i in range(10)]
    asking = [*small[:140], *big, *small[140:]]
    rabbit.put(q, [(body, {"x-eo-id": body[:8].decode(), "reply-to": replies,
                           "correlation-id": "order-" + body[:8].decode()}) for body in asking]
               + [(f"quiet-{i:04d}".encode(), {"x-eo-id": f"quiet-{i:04d}"}) for i in range(30)])
    # (one thread, batch 40: the first kill leaves most of the queue for the run killed after publishing)
    config = stomp_config(tmp_path, q, port=rabbitmq[1], broker="rabbitmq", threads=1, batch=40,
                          extra_source=RABBIT_SOURCE + '\nmax_message_size = "2KB"',
                          extra_listener='confirm = "reply-to"\nidentity = "header:x-eo-id"')
    table = tmp_path / "landing" / "orders"

    # When the bridge is killed inside a commit (its first unit's results confirmed, no ACK yet), then
    # after publishing a bulk, then runs to the end
    run_until_killed(config, "after_backout_send")
    run_until_killed(config, "after_publish")
    out = run_until_idle(config)

    # Then each message that asked has a result, found by its producer's key, saying where it went:
    # landed for the 280 in the table, backout for the 10 on the backout queue; only the messages of
    # the unit killed after its results (a unit of 40 at most) have two, both alike
    bodies = [bytes(row.body) for row in spark.read.parquet(str(table)).collect()]
    assert len(bodies) == 310 and len(set(bodies)) == 310
    moved = rabbit.deliveries(f"{q}.backout", ack=True)
    assert sorted(bytes(f.body) for f in moved) == sorted(big)
    by_key: dict[str, list[dict[str, Any]]] = {}
    for frame in rabbit.deliveries(replies, ack=True):
        result = json.loads(bytes(frame.body))
        assert frame.headers["mqbridge_correlation_id"] == result["correlation_id"]
        by_key.setdefault(result["correlation_id"], []).append(result)
    twice = [k for k, found in by_key.items() if len(found) > 1]
    assert 0 < len(twice) <= 40 and all(len(by_key[k]) == 2 for k in twice), twice
    assert all(by_key[k][0]["result"] == by_key[k][1]["result"] == "landed" for k in twice)
    landed_keys = {"order-" + b[:8].decode() for b in bodies if not b.startswith(b"quiet-")}
    assert {k for k, found in by_key.items() if found[0]["result"] == "landed"} == landed_keys
    assert {k for k, found in by_key.items() if found[0]["result"] == "backout"} == {
        "order-" + b[:8].decode() for b in big}
    assert "already landed; committed without landing them again" in out, out[-3000:]
    assert rabbit.depth(q) == 0 and leftovers(table) == []


def counter_totals(url: str) -> dict[str, float]:
    """Every counter of /metrics summed over its labels, by name."""
    code, text = get(url + "/metrics")
    assert code == 200, text
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return totals


def test_results_go_only_to_reply_destinations_the_listener_allows(
        tmp_path: Path, amq: AmqClient, monitored: Any, caplog: pytest.LogCaptureFixture) -> None:
    # Given messages asking for results at an allowed destination, at one the listener does not
    # allow, and messages asking for nothing
    q = unique_queue("allow")
    allowed, elsewhere = f"{q}.results.ok", unique_queue("elsewhere")
    for n in range(10):
        amq.put(q, f"ok-{n}".encode(), {"reply-to": allowed})
        amq.put(q, f"no-{n}".encode(), {"reply-to": elsewhere})
    amq.put_many(q, [f"quiet-{n}".encode() for n in range(5)])
    listener = listener_toml(q, "orders", batch=50, extra=f'confirm = "reply-to"\nreply_to_allow = ["{q}.results.*"]')
    cfg = make_config(tmp_path, '[types.orders]\nbulk_timeout = "500ms"\n' + listener)
    # When the bridge has committed them all
    with caplog.at_level(logging.WARNING, logger="mqbridge.reply_to"):
        _bridge, monitor = monitored(cfg)
        wait_until(lambda: counter_totals(monitor.url).get("mqbridge_messages_committed_total") == 25, 180,
                   "25 messages committed")
        totals = counter_totals(monitor.url)
    # Then only the allowed destination got results; the others were counted, logged once, and
    # their messages landed and left the queue as if they had asked for nothing
    assert totals.get("mqbridge_results_sent_total") == 10
    assert totals.get("mqbridge_results_not_allowed_total") == 10
    assert sorted(json.loads(bytes(f.body))["result"] for f in amq.drain(allowed)) == ["landed"] * 10
    assert amq.depth(elsewhere) == 0 and amq.depth(q) == 0
    refusals = [r.getMessage() for r in caplog.records if "is not allowed by reply_to_allow" in r.getMessage()]
    assert len(refusals) == 1 and f"reply-to {elsewhere} is not allowed" in refusals[0], refusals
