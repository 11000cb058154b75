"""Exactly-once on RabbitMQ with no help from the producer (`identity` unset: "stamp").

A plain STOMP producer sends no id header, and RabbitMQ gives every delivery a new `message-id`;
the bridge stamps a copy of each message with its own id before landing it (see the STOMP adapter's
docstring, "Stamping"). Killed at every step of the protocol, stamping and landing alike, it lands
every message once, identical bodies included (counted as a multiset); a message that fails on its
own on a classic queue reaches the backout queue after its threshold instead of looping.
"""

from __future__ import annotations

import collections
import uuid
from pathlib import Path
from typing import Any

import pytest

from mqbridge.listeners.stomp import StompSource
from mqbridge.records import DeliveryTracker
from tests.support.bridge import read_table
from tests.support.exactly_once import RABBIT_SOURCE, Rabbit, bodies
from tests.support.harnesses import RabbitMqStamped
from tests.support.processes import leftovers, run_until_idle, run_until_killed, stomp_config
from tests.support.sources import receive

pytestmark = pytest.mark.integration

#: The kill points where stamping could lose or duplicate, in protocol order: inside the stamping
#: commit (its copies sent, then its ACKs sent, no COMMIT), and between the publication of stamped
#: copies and their commit (the others are the same on every broker: tests/integration/test_exactly_once.py).
KILL_POINTS = ("after_backout_send", "after_source_ack", "after_publish", "before_source_commit")


def _sent(count: int, twins: int) -> list[bytes]:
    """`count` distinct bodies, and `twins` groups of five identical ones (a producer's retries)."""
    return bodies(count, "st") + [f"twin-{i:03d}".encode() * 8 for i in range(twins) for _ in range(5)]


def _multiset_difference(sent: list[bytes], rows: list[Any]) -> tuple[int, int]:
    """(lost, extra) counting each body as often as it was sent: identical bodies included."""
    want, got = collections.Counter(sent), collections.Counter(bytes(r.body) for r in rows)
    return sum((want - got).values()), sum((got - want).values())


@pytest.mark.timeout(900)
def test_defaults_and_a_plain_producer_killed_at_every_point_land_every_message_once(
        tmp_path: Path, spark: Any, rabbitmq: tuple[str, int]) -> None:
    # Given 3,000 messages from a producer that sets no id header (150 of them five identical
    # bodies each) on a RabbitMQ classic queue, and a bridge with no identity configured
    rabbit = Rabbit(rabbitmq)
    queue = f"/queue/test.stamp.{uuid.uuid4().hex[:8]}"
    sent = _sent(2850, 30)
    rabbit.put(queue, [(body, {}) for body in sent])
    config = stomp_config(tmp_path, queue, port=rabbitmq[1], broker="rabbitmq", extra_source=RABBIT_SOURCE,
                          threads=1, batch=100)
    table = tmp_path / "landing" / "orders"
    # When it is killed with kill -9 at each step in turn, and then runs until idle
    outputs = [run_until_killed(config, point) for point in KILL_POINTS]
    out = run_until_idle(config)
    outputs.append(out)
    # Then every message is in the table once, by its count, and each row has its own stamp
    rows = read_table(spark, table)
    lost, extra = _multiset_difference(sent, rows)
    assert (lost, extra, len(rows)) == (0, 0, len(sent)), out[-3000:]
    assert len({r.msg_id for r in rows}) == len(rows), "two rows with one stamp"
    assert rabbit.depth(queue) == 0 and rabbit.depth(queue + ".backout") == 0
    assert leftovers(table) == []
    # and the redelivered stamped copies of the unit killed before its commit were recognised
    assert any("already landed; committed without landing them again" in o for o in outputs), out[-3000:]


def test_a_classic_queue_message_failing_on_its_own_reaches_the_backout_queue_after_its_threshold(
        tmp_path: Path, spark: Any, rabbitmq: tuple[str, int]) -> None:
    # Given 300 messages on a classic queue (no x-delivery-count), one of which fails every write,
    # and a bridge with backout_threshold = 3
    rabbit = Rabbit(rabbitmq)
    queue = f"/queue/test.stamp-poison.{uuid.uuid4().hex[:8]}"
    sent = bodies(299, "sp")
    rabbit.put(queue, [(body, {}) for body in [*sent[:150], b"the POISON one", *sent[150:]]])
    config = stomp_config(tmp_path, queue, port=rabbitmq[1], broker="rabbitmq", extra_source=RABBIT_SOURCE,
                          threads=1, batch=50, extra_listener="backout_threshold = 3")
    # When it runs until idle (it never would if the message looped)
    out = run_until_idle(config, timeout=240, env_extra={"MQBRIDGE_FAILPOINT": "spark_poison_body:POISON"})
    # Then the poison message is on the backout queue, after three deliveries, and the rest landed once
    moved = rabbit.deliveries(queue + ".backout", ack=True)
    assert [bytes(f.body) for f in moved] == [b"the POISON one"], out[-3000:]
    assert moved[0].headers["mqbridge-delivery-count"] == "3", moved[0].headers
    rows = read_table(spark, tmp_path / "landing" / "orders")
    assert _multiset_difference(sent, rows) == (0, 0)
    assert rabbit.depth(queue) == 0


def test_a_stamped_message_given_back_keeps_its_id_and_count_for_a_new_process(
        request: pytest.FixtureRequest) -> None:
    # Given a stamped message delivered once and given back whole (a failure of its own)
    broker = RabbitMqStamped.start(request)
    try:
        queue = broker.new_queue()
        broker.put(queue, [b"counted"])
        first = broker.source(queue)
        first.connect()
        [message] = receive(first, 1)
        first.commit(returns=[message])
        first.close()
        # When another process (a new source, a new delivery tracker) receives it
        again = broker.source(queue)
        assert isinstance(again, StompSource)
        again.tracker = DeliveryTracker()
        again.connect()
        [back] = receive(again, 1)
        # Then it has the same stamp, and its count went on
        assert (back.msg_id, back.delivery_count, back.redelivered) == (message.msg_id, 2, True)
        again.commit()
    finally:
        broker.close()
