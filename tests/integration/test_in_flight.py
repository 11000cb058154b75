"""Units in flight (`[[listeners]] in_flight`) on the real parts: a listener thread holding several
units of work, each on a connection of its own, lands every message exactly once, on ActiveMQ and
on RabbitMQ with a producer id (`identity = "header:NAME"`), run to the end and killed with SIGKILL
at the steps of the landing protocol while several units are in flight. On RabbitMQ without one
(message ids per delivery) nothing is lost and only the units in flight at the kill may land twice."""

from __future__ import annotations

import collections
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.amq import AmqClient, unique_queue
from tests.support.bridge import read_table
from tests.support.exactly_once import RABBIT_SOURCE, Rabbit, bodies
from tests.support.processes import leftovers, run_until_idle, run_until_killed, stomp_bridge

pytestmark = pytest.mark.integration

IN_FLIGHT = "in_flight = 3"


def spark_config(tmp_path: Path, queue: str, **options: Any) -> Path:
    """`stomp_bridge` with the default writer: Spark writes every bulk."""
    return stomp_bridge(queue, **options).set("spark", writer="spark").write(tmp_path / "bridge.toml")


def _accounted(sent: list[bytes], rows: list[Any]) -> tuple[int, int, int]:
    """(lost, duplicated, unexpected), each body counted as often as it was sent."""
    want, got = collections.Counter(sent), collections.Counter(bytes(r.body) for r in rows)
    missing, extra = want - got, got - want
    duplicated = sum(n for body, n in extra.items() if body in want)
    return sum(missing.values()), duplicated, sum(extra.values()) - duplicated


def test_one_thread_with_units_in_flight_reads_every_connection_and_lands_each_message_once(
        tmp_path: Path, spark: Any, amq: AmqClient) -> None:
    # Given 2,500 messages and one listener thread holding up to 3 units of 100 (ActiveMQ dispatches
    # to all three connections: one never read again would keep its prefetched messages)
    q = unique_queue("inflight")
    sent = bodies(2500, "if")
    amq.put_many(q, sent)
    config = spark_config(tmp_path, q, threads=1, batch=100, extra_listener=IN_FLIGHT)
    # When the bridge runs until idle
    out = run_until_idle(config)
    # Then every message is in the table once and the queue is empty
    rows = read_table(spark, tmp_path / "landing" / "orders")
    assert _accounted(sent, rows) == (0, 0, 0), out[-3000:]
    assert amq.depth(q) == 0 and amq.depth(q + ".backout") == 0
    assert leftovers(tmp_path / "landing" / "orders") == []


def test_killed_with_units_in_flight_then_restarted_lands_every_message_exactly_once(
        tmp_path: Path, spark: Any, amq: AmqClient) -> None:
    # Given 3,000 messages, two threads holding up to 3 units each, killed after a bulk was
    # published and before its unit's commit (the other units in flight are given back by the broker)
    failpoint = "before_source_commit"
    q = unique_queue("inflight-kill")
    sent = bodies(3000, failpoint)
    amq.put_many(q, sent)
    config = spark_config(tmp_path, q, threads=2, batch=200, extra_listener=IN_FLIGHT)
    run_until_killed(config, failpoint)
    # When it is started again and runs until idle
    out = run_until_idle(config)
    # Then lost, duplicated, unexpected: all 0; nothing is left behind
    rows = read_table(spark, tmp_path / "landing" / "orders")
    assert _accounted(sent, rows) == (0, 0, 0), out[-3000:]
    assert amq.depth(q) == 0 and amq.depth(q + ".backout") == 0
    assert leftovers(tmp_path / "landing" / "orders") == []


@pytest.mark.timeout(600)
@pytest.mark.parametrize("identity", ["header:x-eo-id", "default"])
def test_rabbitmq_with_units_in_flight_killed_before_commit_loses_nothing(
        tmp_path: Path, spark: Any, rabbitmq: tuple[str, int], identity: str) -> None:
    # Given 2,000 messages on RabbitMQ, each with a producer's id header, and one thread holding up to
    # 3 units of 100, killed before a commit; identity the header, or the default (per delivery there)
    rabbit = Rabbit(rabbitmq)
    queue = f"/queue/test.inflight.{uuid.uuid4().hex[:8]}"
    sent = bodies(2000, "rif")
    rabbit.put(queue, [(body, {"x-eo-id": f"id-{i}"}) for i, body in enumerate(sent)])
    extra = IN_FLIGHT + (f'\nidentity = "{identity}"' if identity != "default" else "")
    config = spark_config(tmp_path, queue, port=rabbitmq[1], broker="rabbitmq", extra_source=RABBIT_SOURCE,
                          threads=1, batch=100, extra_listener=extra)
    run_until_killed(config, "before_source_commit")
    # When it runs again until idle
    out = run_until_idle(config)
    # Then nothing is lost; with the producer's id every message landed once, without it only the
    # units in flight at the kill (3 x 100 at most) may have landed twice
    rows = read_table(spark, tmp_path / "landing" / "orders")
    lost, duplicated, unexpected = _accounted(sent, rows)
    assert (lost, unexpected) == (0, 0), out[-3000:]
    assert duplicated == 0 if identity != "default" else duplicated <= 300, (duplicated, out[-3000:])
    assert rabbit.depth(queue) == 0 and rabbit.depth(queue + ".backout") == 0
