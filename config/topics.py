"""Rules of a `[[listeners]]` entry that reads a topic through a durable subscription
(`topic` + `subscription`, docs/topics.md).

What each broker needs:

* ActiveMQ keeps a durable subscription per (client-id, subscription name) and lets one connection
  hold a client-id at a time: a topic listener has one thread and one unit in flight. A part of a
  unit is given back in `ack_mode = "cumulative"` by sending copies to the destination, which on a
  topic would reach every subscription: topic listeners need `ack_mode = "individual"`, where the
  broker redelivers what was not acknowledged to this subscription only.
* RabbitMQ keeps a durable queue per subscription, bound to the topic exchange (`amq.topic`); the
  adapter gives messages back there with NACK and never SENDs copies (the queue is
  `/amq/queue/<subscription>`, where a copy would go: `requeue_destination`).
* IBM MQ keeps a durable subscription (MQSUB, SubName) with a managed queue; `topic` is the topic
  string. One connection at a time may hold a subscription's handle (another one's MQSUB fails with
  MQRC_SUBSCRIPTION_IN_USE, 2429), and each listener thread and each unit in flight has a
  connection of its own: a topic listener has one thread and one unit in flight. No selector yet.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from mqbridge.config.sources import MqSourceConfig, SourceConfig, StompSourceConfig
from mqbridge.errors import Loc

#: The STOMP brokers whose durable subscriptions the STOMP adapter knows.
TOPIC_BROKERS = ("activemq", "rabbitmq")
#: MQ_TOPIC_STR_LENGTH: the longest IBM MQ topic string.
MQ_TOPIC_STRING_LENGTH = 10240


class TopicKeys(Protocol):
    """What these rules read of a `[[listeners]]` entry (`mqbridge.config.listener.ListenerConfig`)."""

    topic: str | None
    threads: int | None  # a topic entry's is never None (1 when unset: `ListenerConfig`)
    in_flight: int
    selector: str | None


def topic_problems(listener: TopicKeys, source: SourceConfig | None, types: Mapping[str, object],
                   where: Loc) -> list[tuple[Loc, str]]:
    """What is wrong with a topic listener for its source (none when fine or the source is unknown)."""
    if source is None or listener.topic is None:
        return []
    loc: Loc = (*where, "topic")
    if isinstance(source, MqSourceConfig):
        return _mq_topic_problems(listener, listener.topic, where)
    if not isinstance(source, StompSourceConfig) or source.broker not in TOPIC_BROKERS:
        what = f"a {source.kind} source" if not isinstance(source, StompSourceConfig) else f"broker {source.broker!r}"
        return [(loc, f"topic listeners (durable subscriptions) are for IBM MQ sources and STOMP sources with "
                      f"broker activemq or rabbitmq; not for {what}")]
    if not listener.topic.startswith("/topic/") or listener.topic == "/topic/":
        return [(loc, f"{listener.topic!r} is not a STOMP topic: write /topic/NAME")]
    if source.broker != "activemq":
        return []
    problems: list[tuple[Loc, str]] = []
    if source.ack_mode != "individual":
        problems.append((loc, 'needs ack_mode = "individual" on its source: cumulative acks give part of a unit '
                              "back by sending copies to the topic, which every subscription would get"))
    for key, value in (("threads", listener.threads), ("in_flight", listener.in_flight)):
        if value != 1:
            problems.append(((*where, key), "must be 1 on an ActiveMQ topic: one connection holds a durable "
                                            "subscription's client-id at a time"))
    return problems


def _mq_topic_problems(listener: TopicKeys, topic: str, where: Loc) -> list[tuple[Loc, str]]:
    """What is wrong with a topic listener on an IBM MQ source (module docstring)."""
    problems: list[tuple[Loc, str]] = []
    if len(topic.encode()) > MQ_TOPIC_STRING_LENGTH:
        problems.append(((*where, "topic"), f"is longer than {MQ_TOPIC_STRING_LENGTH} bytes, the longest IBM MQ "
                                            "topic string"))
    if topic.startswith("/topic/"):
        problems.append(((*where, "topic"), f"{topic!r} is a STOMP topic; on IBM MQ write the topic string "
                                            "(e.g. \"orders/eu\")"))
    for key, value in (("threads", listener.threads), ("in_flight", listener.in_flight)):
        if value != 1:
            problems.append(((*where, key), "must be 1 on an IBM MQ topic: each thread and each unit in flight "
                             "has its own connection, and one connection at a time may hold a durable "
                             "subscription (another gets MQRC_SUBSCRIPTION_IN_USE, 2429)"))
    if listener.selector is not None:
        problems.append(((*where, "selector"), "not supported on an IBM MQ topic listener (the subscription "
                                               "would need it as its MQSD SelectionString)"))
    return problems


def requeue_destination(broker: str, subscription: str | None, destination: str) -> str:
    """Where copies of a listener's messages go (parts of a unit given back with cumulative acks): the
    queue it reads, or the RabbitMQ queue of its durable subscription (a topic would reach them all)."""
    if subscription is not None and broker == "rabbitmq":
        return f"/amq/queue/{subscription}"
    return destination
