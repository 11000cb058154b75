"""Topic listeners (`topic` + `subscription`, docs/topics.md) on the real ActiveMQ and RabbitMQ,
with the landing ledger on and Spark reading the tables.

Two durable subscriptions on one topic, each landing in its own table (`orders_{subscription}`).
Messages are published while no bridge runs (before its first start, and while it lies killed):
the broker keeps them for each subscription. The bridge is killed with SIGKILL at
`before_source_commit` (the ledger says published, the broker has no acknowledgement), then run
again until idle: every message must be in EACH subscription's table exactly once. On ActiveMQ both
subscriptions get the same message id, so this also shows that the ledger tells the
subscriptions apart (`mqbridge.identity.scoped`); on RabbitMQ, whose message-id is per delivery,
the identity is the producer's id header (scoped by subscription too), and a part of a unit is given
back by NACK (its default individual acks). Two poison messages, refused by a preprocessor, are given back
on the durable subscription once and then moved to each subscription's backout queue. Two bridge
runs per broker."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.exactly_once import RABBIT_SOURCE, account, bodies
from tests.support.plugins import poison_refusing_plugins
from tests.support.processes import landed, process_bridge, run_until_idle, run_until_killed
from tests.support.topics import EO_ID, Broker

pytestmark = pytest.mark.integration

SUBSCRIPTIONS = ("a", "b")
BEFORE, WHILE_KILLED = 150, 60
#: A preprocessor failing every poison message: given back (on ActiveMQ by replacing the durable
#: subscription, on RabbitMQ by NACK) until its second delivery moves it to the backout queue.


def topic_config(tmp_path: Path, broker: str, port: int, topic: str, subscriptions: dict[str, str]) -> Path:
    """A bridge with one listener per subscription on `topic`, type orders landing in
    `landing/orders_<subscription>`."""
    # ActiveMQ needs individual acks on a topic; RabbitMQ's default is individual acks (NACK, no copies).
    source: dict[str, Any] = {"kind": "stomp", "port": port, "broker": broker, "heartbeat": "10s"}
    if broker == "activemq":
        source["ack_mode"] = "individual"
    poison_refusing_plugins(tmp_path)
    toml = (process_bridge("topics").set("spark", master="local[1]").set("bridge", plugin_dirs=["plugins"])
            .add("types.orders", 'table = "orders_{subscription}"')
            .set("sources.amq", **source))
    if broker == "rabbitmq":
        toml = toml.add("sources.amq", RABBIT_SOURCE)
    for name in subscriptions.values():
        toml = toml.listener(source="amq", topic=topic, subscription=name, batch=50, wait="200ms",
                             message_type="orders", backout_queue=f"/queue/{name}.backout",
                             preprocessors=["reject_poison"], backout_threshold=2,
                             identity=f"header:{EO_ID}" if broker == "rabbitmq" else None)
    return toml.write(tmp_path / "bridge.toml")


@pytest.mark.parametrize("broker", ["activemq", "rabbitmq"])
def test_two_durable_subscriptions_land_every_message_once_each_across_a_kill(
        tmp_path: Path, spark: Any, activemq: tuple[str, int], rabbitmq: tuple[str, int], broker: str) -> None:
    address = activemq if broker == "activemq" else rabbitmq
    client = Broker(broker, address)
    tag = uuid.uuid4().hex[:8]
    topic = f"/topic/test.topics.{tag}"
    names = {letter: f"test.topics.{tag}.{letter}" for letter in SUBSCRIPTIONS}
    config = topic_config(tmp_path, broker, address[1], topic, names)
    try:
        # Given two durable subscriptions to a topic (made as the bridge makes them) and messages
        # published while no bridge runs
        for name in names.values():
            client.subscribe(topic, name)
        first, second = bodies(BEFORE, f"before-{tag}"), bodies(WHILE_KILLED, f"killed-{tag}")
        poison = [f"poison {tag} {i}".encode() for i in range(2)]
        client.publish(topic, first[:70] + poison[:1] + first[70:] + poison[1:])
        # When the bridge is killed after a unit's bulk is published, before the source commit,
        # more messages are published while it lies dead, and it runs again until idle
        run_until_killed(tmp_path / "bridge.toml", "before_source_commit")
        client.publish(topic, second)
        out = run_until_idle(config, idle="5s")
        moved = {name: client.drain(f"/queue/{name}.backout") for name in names.values()}
    finally:
        for name in names.values():
            client.drop(topic, name)
    # Then each subscription's table holds every message exactly once
    assert "already landed; committed without landing them again" in out, out[-4000:]
    for name in names.values():
        table = tmp_path / "landing" / f"orders_{name}"
        result = account(first + second, landed(spark, table))
        assert result.clean, f"{name}: {result}\n{out[-4000:]}"
        # And each subscription moved each poison message to its backout queue once, after its
        # second delivery (given back once on the durable subscription)
        assert sorted(moved[name]) == sorted(poison), f"{name}: {moved[name]!r:.300}"


def test_a_durable_subscription_held_by_another_connection_is_retried_not_refused(
        activemq: tuple[str, int]) -> None:
    # Given a connection holding a durable subscription (its client-id) on the real ActiveMQ
    from mqbridge.config import StompSourceConfig
    from mqbridge.errors import SubscriptionInUseError
    from mqbridge.listeners.stomp.connection import Connection
    from mqbridge.supervision.decision import Decision, decide

    tag = uuid.uuid4().hex[:8]
    topic, name = f"/topic/test.topics.{tag}", f"test.topics.{tag}.held"
    config = StompSourceConfig(host=activemq[0], port=activemq[1], ack_mode="individual")
    holder = Connection("amq", config, topic, prefetch=10, client_name="test", durable=name)
    holder.open()
    try:
        # When another bridge (or this one, restarted before the broker saw the old connection die)
        # connects for the same subscription
        other = Connection("amq", config, topic, prefetch=10, client_name="test", durable=name)
        with pytest.raises(SubscriptionInUseError) as info:
            other.open()
        # Then it is retried a few seconds later (not a refusal that halts), naming the subscription
        assert decide(info.value) is Decision.RETRY_LATER
        assert f"the durable subscription {name!r} is in use by another connection" in str(info.value)
    finally:
        holder.close()
        Broker("activemq", activemq).drop(topic, name)
