"""`[types.X] results_to` on the real ActiveMQ (and the fake IBM MQ queue manager): every final result
of the type — landed or moved — also reaches the station's destination, sent in the unit of work that
removes the message, exactly once whatever kills the bridge on the way (`mqbridge.outbound.stations`); on
RabbitMQ, a station the broker refuses halts the listener and leaves the message on its queue."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.support.amq import AmqClient, unique_queue
from tests.support.bridge import listener_toml, make_config, read_table
from tests.support.exactly_once import Rabbit
from tests.support.fakes.mq_server import FakeQueueManagerServer
from tests.support.http import get
from tests.support.processes import (
    MQ_BOQ,
    MQ_DLQ,
    MQ_QUEUE,
    fake_mq_env,
    leftovers,
    mq_bridge,
    run_until_idle,
    run_until_killed,
    stomp_bridge,
)
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


def accounting(expected: set[str], got: list[str]) -> dict[str, int]:
    """Lost, duplicated and unexpected results, by message id."""
    counts = Counter(got)
    return {"lost": len(expected - set(counts)), "duplicated": sum(1 for n in counts.values() if n > 1),
            "unexpected": len(set(counts) - expected)}


@pytest.mark.timeout(900)
def test_a_station_gets_each_result_of_its_type_exactly_once_across_kills(
        tmp_path: Path, spark: Any, amq: AmqClient) -> None:
    # Given 300 orders, 15 of them too big to land (refused at the edge: moved with the reason), whose
    # type sends its results to a station; and 40 messages of another type, which has no results_to
    q, other = unique_queue("stations"), unique_queue("stations-other")
    station = q + ".audit"
    small = [f"ok-{i:04d}".encode() for i in range(285)]
    big = [f"big-{i:04d}:".encode() + b"x" * 3000 for i in range(15)]
    amq.put_many(q, [*small[:140], *big, *small[140:]])
    amq.put_many(other, [f"other-{i:04d}".encode() for i in range(40)])
    config = (stomp_bridge(q, extra_source='max_message_size = "2KB"')
              .set("types.orders", results_to=station).set("types.other", bulk_timeout="500ms")
              .listener(source="amq", queue=other, message_type="other", backout_queue=f"{other}.backout",
                        wait="200ms")
              .write(tmp_path / "bridge.toml"))
    table = tmp_path / "landing" / "orders"

    # When the bridge is killed inside a STOMP commit (results and ACKs sent, no COMMIT), then after
    # publishing a bulk (the ledger has it, the queue not yet), then runs to the end
    run_until_killed(config, "after_source_ack")
    amq.put_many(q, [f"late-{i:04d}".encode() for i in range(30)])
    run_until_killed(config, "after_publish")
    out = run_until_idle(config)

    # Then the station has exactly one result per order landed or moved: 0 lost, 0 duplicated, 0
    # unexpected; each says where its message went (the table's own bulk id) or why it was moved
    rows = {r.msg_id: r for r in read_table(spark, table)}
    assert len(rows) == 315 and len(read_table(spark, tmp_path / "landing" / "other")) == 40
    with AmqClient() as client:  # a new connection: the broker may have closed the idle one during the runs
        moved = client.drain(q + ".backout")
        results = [json.loads(bytes(f.body)) for f in client.drain(station)]
        assert client.depth(q) == 0 and client.depth(other) == 0
    assert len(moved) == 15
    landed = [r["message_id"] for r in results if r["result"] == "landed"]
    backout = [r["message_id"] for r in results if r["result"] == "backout"]
    assert accounting(set(rows), landed) == {"lost": 0, "duplicated": 0, "unexpected": 0}
    moved_ids = {f.headers["mqbridge-original-message-id"] for f in moved}
    assert accounting(moved_ids, backout) == {"lost": 0, "duplicated": 0, "unexpected": 0}
    for result in results:
        assert result["message_type"] == "orders" and result["source"] == "amq" and result["queue"] == q
        if result["result"] == "landed":
            row = rows[result["message_id"]]
            assert (result["table"], result["bulk_id"], result["put_date"]) == (
                "orders", row.bulk_id, row.put_date.isoformat())
        else:
            assert "max_message_size" in result["reason"] and result["backout_queue"] == q + ".backout"
    assert "already landed; committed without landing them again" in out, out[-3000:]
    assert leftovers(table) == []


@pytest.mark.timeout(600)
def test_an_ibm_mq_station_queue_gets_each_result_exactly_once_across_kills(tmp_path: Path, spark: Any) -> None:
    # Given 400 messages on the persistent fake queue manager, 20 of them already at BOTHRESH (moved
    # at get time), none asking for reports; their type sends its results to queue AUDIT
    state, name = tmp_path / "qm.state", "QMSTATION"
    qm = FakeQueueManagerServer(name, dead_letter_queue=MQ_DLQ, state_file=state)
    try:
        qm.define_queue(MQ_QUEUE, backout_threshold=5, backout_queue=MQ_BOQ)
        for queue in (MQ_BOQ, "AUDIT"):
            qm.define_queue(queue)
        with qm.deferred_persistence():
            ids = [qm.put(MQ_QUEUE, f"order-{i:04d}".encode(), backout_count=5 if i % 20 == 0 else 0)
                   for i in range(400)]
    finally:
        qm.close()
    poison = {ids[i].hex() for i in range(0, 400, 20)}
    config = mq_bridge(name).set("types.orders", results_to="AUDIT").write(tmp_path / "bridge.toml")
    env, table = fake_mq_env(state), tmp_path / "landing" / "orders"

    # When the bridge is killed after putting a unit's results (no MQCMIT), then (100 more having
    # come: the first run may have published every bulk before its first commit) after publishing a
    # bulk, then runs until idle
    run_until_killed(config, "after_results_put", env_extra=env)
    qm = FakeQueueManagerServer(state_file=state, register=False)
    try:
        ids += qm.put_many(MQ_QUEUE, [f"late-{i:04d}".encode() for i in range(100)])
    finally:
        qm.close()
    run_until_killed(config, "after_publish", env_extra=env)
    out = run_until_idle(config, env_extra=env)

    # Then AUDIT holds exactly one persistent datagram per message, correlated by its MsgId: landed
    # (with its bulk) for the 480 in the table, backout for the 20 moved
    rows = {r.msg_id: r for r in read_table(spark, table)}
    assert set(rows) == {i.hex() for i in ids} - poison
    qm = FakeQueueManagerServer(state_file=state, register=False)
    try:
        results = qm.queue("AUDIT").visible()
        assert all(r.md["MsgType"] == 8 and r.md["Persistence"] == 1 for r in results)
        bodies = [json.loads(r.data) for r in results]
        assert [r.md["CorrelId"].hex() for r in results] == [b["message_id"] for b in bodies]
        assert qm.queue(MQ_QUEUE).depth == 0 and qm.queue(MQ_BOQ).depth == 20 and qm.queue(MQ_DLQ).depth == 0
    finally:
        qm.close()
    landed = [b["message_id"] for b in bodies if b["result"] == "landed"]
    backout = [b["message_id"] for b in bodies if b["result"] == "backout"]
    assert accounting(set(rows), landed) == {"lost": 0, "duplicated": 0, "unexpected": 0}
    assert accounting(poison, backout) == {"lost": 0, "duplicated": 0, "unexpected": 0}
    for body in bodies:
        assert body["message_type"] == "orders" and body["queue_manager"] == name
        if body["result"] == "landed":
            assert (body["table"], body["bulk_id"]) == ("orders", rows[body["message_id"]].bulk_id)
        else:
            assert "reached the backout threshold 5 of ORDERS" in body["reason"] and body["moved_to"] == MQ_BOQ
    assert "already landed; committed without landing them again" in out, out[-3000:]
    assert leftovers(table) == []


@pytest.mark.timeout(300)
def test_a_station_the_broker_refuses_halts_the_listener_and_keeps_the_message(
        tmp_path: Path, spark: Any, rabbitmq: tuple[str, int], monitored: Any) -> None:
    # Given, on RabbitMQ, a type whose results_to is an exchange that does not exist (the broker
    # answers the SEND with ERROR, before the message's ACK: RabbitMQ's commits are receipted)
    rabbit = Rabbit(rabbitmq)
    q = f"/queue/test.station-refused.{uuid.uuid4().hex[:8]}"
    rabbit.put(q, [(b"order-1", {"x-eo-id": "order-1"})])
    body = ('[types.orders]\nbulk_timeout = "500ms"\nresults_to = "/exchange/mqbridge-no-such-exchange"\n'
            + listener_toml(q, "orders", batch=10, extra='identity = "header:x-eo-id"'))
    cfg = make_config(tmp_path, body, port=rabbitmq[1], source={
        "broker": "rabbitmq", "user": "guest", "password": "guest", "allow_plaintext_password": True, "vhost": "/"})

    # When the bridge lands the message and commits its unit with the result
    _bridge, monitor = monitored(cfg)

    def halted() -> bool:
        code, text = get(monitor.url + "/healthz")
        return code == 503 and "results_to" in text

    wait_until(halted, 120, "/healthz to report the listener halted by the refused results_to")

    # Then the listener halted, naming the destination, and the message is still on its queue
    # (landed once: the ledger recognises it when the station takes results again)
    _, text = get(monitor.url + "/healthz")
    assert "/exchange/mqbridge-no-such-exchange" in text, text
    wait_until(lambda: rabbit.depth(q) == 1, 60, "the message to be back on its queue")
    assert [bytes(r.body) for r in read_table(spark, tmp_path / "landing" / "orders")] == [b"order-1"]
