"""The opt-in "stored" result (`[types.X] stored_result = true`, `mqbridge.outbound.stored`) on the real
ActiveMQ and RabbitMQ: a producer asking for results (`confirm = "reply-to"`; on ActiveMQ the type's
`results_to` too) gets, per message and destination, at most one "stored, not yet landed" result and
exactly one final result, across a kill -9 between the two (failpoint `after_stored_result`: the
first stored result confirmed, nothing landed or committed yet). The killed unit comes back unlanded
and joins a bulk again; the stored-results log remembers the claim, so it gets no second "stored". On
RabbitMQ the identity is the producer's header (its `message-id` is per delivery). Raw bulks
(pyarrow, no JVM per bridge run); Spark reads the table."""

from __future__ import annotations

import collections
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.amq import AmqClient, unique_queue
from tests.support.exactly_once import RABBIT_SOURCE, Rabbit, account
from tests.support.processes import landed, run_until_idle, run_until_killed, stomp_bridge

pytestmark = pytest.mark.integration

COUNT = 60


def results_by_key(frames: list[Any]) -> dict[str, collections.Counter[str]]:
    """How many results of each kind ("stored", "landed", "backout") each producer key got."""
    found: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for frame in frames:
        body = json.loads(bytes(frame.body))
        assert frame.headers["mqbridge_result"] == body["result"]
        if body["result"] == "stored":
            assert body["landed"] == "false" and frame.headers["mqbridge_landed"] == "false"
        found[body["correlation_id"]][body["result"]] += 1
    return found


def check(keys: list[str], frames: list[Any], where: str) -> int:
    """Each key has exactly one final ("landed") result and at most one "stored"; how many have one."""
    found = results_by_key(frames)
    assert set(found) == set(keys), f"{where}: results for unknown or missing keys"
    twice = [k for k, c in found.items() if c["stored"] > 1]
    finals = [k for k, c in found.items() if c["landed"] != 1 or c["backout"]]
    assert (twice, finals) == ([], []), f"{where}: {len(twice)} with two 'stored', {len(finals)} without one final"
    return sum(1 for c in found.values() if c["stored"])


@pytest.mark.parametrize("broker", ["activemq", "rabbitmq"])
def test_at_most_one_stored_and_exactly_one_final_result_across_a_kill_between_them(
        tmp_path: Path, spark: Any, activemq: tuple[str, int], rabbitmq: tuple[str, int], broker: str) -> None:
    # Given 60 messages asking for results (reply-to, the producer's correlation-id), a type with
    # stored_result (on ActiveMQ with a results_to station too), one listener thread in units of 20, one in flight
    bodies = [f"stored-{broker}-{i:04d}".encode() for i in range(COUNT)]
    keys = [f"order-{i:04d}" for i in range(COUNT)]
    if broker == "activemq":
        queue = unique_queue("stored")
        with AmqClient(*activemq) as client:
            for body, key in zip(bodies, keys, strict=True):
                client.put(queue, body, {"reply-to": f"{queue}.replies", "correlation-id": key})
        toml = stomp_bridge(queue, threads=1, batch=20, extra_listener='confirm = "reply-to"\nin_flight = 1')
        toml = toml.add("types.orders", f'stored_result = true\nresults_to = "{queue}.station"')
    else:
        rabbit = Rabbit(rabbitmq)
        queue = f"/queue/test.stored.{uuid.uuid4().hex[:8]}"
        rabbit.depth(f"{queue}.replies")  # declared before any result is sent to it
        rabbit.put(queue, [(body, {"x-eo-id": key, "reply-to": f"{queue}.replies", "correlation-id": key})
                           for body, key in zip(bodies, keys, strict=True)])
        toml = stomp_bridge(queue, port=rabbitmq[1], broker="rabbitmq", threads=1, batch=20,
                            extra_source=RABBIT_SOURCE,
                            extra_listener='confirm = "reply-to"\nin_flight = 1\nidentity = "header:x-eo-id"')
        toml = toml.add("types.orders", "stored_result = true")
    config = toml.write(tmp_path / "bridge.toml")

    def drain(destination: str) -> list[Any]:
        if broker == "rabbitmq":
            return rabbit.deliveries(destination, ack=True)
        with AmqClient(*activemq) as client:
            return client.drain(destination)

    # When the bridge is killed right after its first stored result is confirmed, then runs until idle
    run_until_killed(config, "after_stored_result")
    before = drain(f"{queue}.replies")
    # (the kill fell between the two: a "stored" came, no final result yet)
    assert [json.loads(bytes(f.body))["result"] for f in before][:1] == ["stored"], before
    assert all(json.loads(bytes(f.body))["result"] == "stored" for f in before)
    run_until_idle(config)

    # Then every message is in the table once, and each got exactly one final result and at most one
    # "stored" (the killed unit's messages joined a bulk again: no second one); those read after the
    # kill get theirs (the killed unit's claimed but unsent ones are gone: at most one, not exactly one)
    result = account(bodies, landed(spark, tmp_path / "landing" / "orders"))
    assert result.clean, str(result)
    replies = before + drain(f"{queue}.replies")
    assert check(keys, replies, "reply-to") >= COUNT - 20
    if broker == "activemq":
        station = drain(f"{queue}.station")
        assert all(f.headers["mqbridge_message_type"] == "orders" for f in station)
        assert check(keys, station, "results_to") >= COUNT - 20
