"""Topic listeners on IBM MQ (`topic` + `subscription`, docs/topics.md): `mqbridge run` as a real
process on the fake queue manager in persistent mode (its state file outlives the bridge, as a
queue manager's log does), the landing ledger on, Spark reading the tables.

Two durable subscriptions on one topic string, each landing in its own table (`orders_{subscription}`),
made as the bridge makes them (MQSUB create/resume, managed queues). 150 messages and 2 poison ones
are published before the bridge's first start; the bridge is killed with SIGKILL at
`before_source_commit` (the ledger says published, the queue manager backs the unit out when it is
next opened); 60 more are published while it lies dead; it runs again until idle. Each
subscription's table holds all 210 exactly once (both subscriptions' copies carry the same MsgId,
so this also shows the ledger's identities are scoped by subscription), and each poison message,
refused by a preprocessor, is moved once to its subscription's backout queue (the listener's
`backout_queue`) at the backout threshold. One bridge process pair, no Spark JVM in the bridge."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.configs import fake_mq_source
from tests.support.exactly_once import account, bodies
from tests.support.fakes import pymqi_fake
from tests.support.fakes.mq_server import FakeQueueManagerServer
from tests.support.fakes.mq_testing import make_topic_source
from tests.support.plugins import poison_refusing_plugins
from tests.support.processes import MQ_DLQ, fake_mq_env, landed, process_bridge, run_until_idle, run_until_killed

pytestmark = pytest.mark.integration

TOPIC = "orders/test"
SUBSCRIPTIONS = {"a": "topics.a", "b": "topics.b"}
BEFORE, WHILE_KILLED = 150, 60


def backout_queue(subscription: str) -> str:
    return f"{subscription.upper()}.BACKOUT"


def topic_config(tmp_path: Path, queue_manager: str) -> Path:
    """A bridge with one listener per subscription on TOPIC, type orders landing in
    `landing/orders_<subscription>`, poison refused by a preprocessor, moved at the second delivery."""
    poison_refusing_plugins(tmp_path)
    toml = (process_bridge("topics-mq").set("spark", master="local[1]").set("bridge", plugin_dirs=["plugins"])
            .add("types.orders", 'table = "orders_{subscription}"')
            .set("sources.qm", **fake_mq_source(queue_manager)))
    for name in SUBSCRIPTIONS.values():
        toml = toml.listener(source="qm", topic=TOPIC, subscription=name, batch=50, wait="200ms",
                             message_type="orders", backout_queue=backout_queue(name),
                             preprocessors=["reject_poison"], backout_threshold=2)
    return toml.write(tmp_path / "bridge.toml")


def publish(state: Path, messages: list[bytes], *, subscribe: bool = False) -> None:
    """Open the persistent queue manager on `state` (as the next process would), optionally make
    the subscriptions first (exactly as the bridge does: its MQ source connects once and closes),
    publish `messages` to TOPIC, and close it again."""
    qm = FakeQueueManagerServer(state_file=state)
    try:
        if subscribe:
            for name in SUBSCRIPTIONS.values():
                qm.define_queue(backout_queue(name))
                source = make_topic_source(qm, TOPIC, name)
                source.connect()
                source.close()
        with qm.deferred_persistence():
            for body in messages:
                qm.publish(TOPIC, body)
    finally:
        qm.close()


def test_two_durable_subscriptions_on_ibm_mq_land_every_message_once_each_across_a_kill(
        tmp_path: Path, spark: Any) -> None:
    # Given a persistent queue manager with two durable subscriptions on one topic, and 150 messages
    # and 2 poison ones published while no bridge runs
    state = tmp_path / "qm.state"
    FakeQueueManagerServer("QMTOPICS", dead_letter_queue=MQ_DLQ, state_file=state).close()
    first, second = bodies(BEFORE, "before"), bodies(WHILE_KILLED, "killed")
    poison = [f"poison {i}".encode() for i in range(2)]
    publish(state, first[:70] + poison[:1] + first[70:] + poison[1:], subscribe=True)
    config, env = topic_config(tmp_path, "QMTOPICS"), fake_mq_env(state)
    # When the bridge is killed after a unit's bulk is published, before the source commit, 60 more
    # messages are published while it lies dead, and it runs again until idle
    run_until_killed(config, "before_source_commit", env_extra=env)
    publish(state, second)
    out = run_until_idle(config, idle="5s", env_extra=env)
    # Then each subscription's table holds every message exactly once
    assert "already landed; committed without landing them again" in out, out[-4000:]
    qm = FakeQueueManagerServer(state_file=state, register=False)
    try:
        for name in SUBSCRIPTIONS.values():
            result = account(first + second, landed(spark, tmp_path / "landing" / f"orders_{name}"))
            assert result.clean, f"{name}: {result}\n{out[-4000:]}"
            # And each poison message was moved once to the subscription's backout queue, nothing
            # is left on its managed queue or the dead-letter queue, no unit of work is left open
            assert sorted(qm.queue(backout_queue(name)).bodies()) == sorted(poison), name
            assert qm.subscription_queue(name).depth == 0, f"{name}: {qm.subscription_queue(name).bodies()[:3]}"
        assert qm.queue(MQ_DLQ).depth == 0 and qm.recovered == {"messages_backed_out": 0}
        assert set(qm.subscriptions) == set(SUBSCRIPTIONS.values())  # the bridge never removes them
    finally:
        qm.close()
    assert pymqi_fake.REGISTRY.get("QMTOPICS") is None
