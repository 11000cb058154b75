"""Rules of a `[[listeners]]` entry that reads a topic through a durable subscription
(`topic` + `subscription`, docs/topics.md).

What each broker needs:

* ActiveMQ keeps a durable subscription per (client-id, subscription name) and lets one connection
  hold a client-id at a time: a topic listener has one thread and one unit in flight. A part of a
  unit is given back in `ack_mode = "cumulative"` by sending copies to the destination, which on a
  topic would reach every subscription: topic listeners need `ack_mode = "individual"`, where the
  broker redelivers what was not acknowledged to this subscription only.
* RabbitMQ keeps a durable queue per subscription, bound to the topic exchange (`amq.topic`);
  copies (stamps, cumulative give-backs) go to that queue alone (`/amq/queue/<subscription>`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from mqbridge.config.sources import SourceConfig, StompSourceConfig
from mqbridge.errors import Loc

#: The STOMP brokers whose durable subscriptions the STOMP adapter knows.
TOPIC_BROKERS = ("activemq", "rabbitmq")


class TopicKeys(Protocol):
    """What these rules read of a `[[listeners]]` entry (`mqbridge.config.listener.ListenerConfig`)."""

    topic: str | None
    threads: int
    in_flight: int


def topic_problems(listener: TopicKeys, source: SourceConfig | None, types: Mapping[str, object],
                   where: Loc) -> list[tuple[Loc, str]]:
    """What is wrong with a topic listener for its source (none when fine or the source is unknown)."""
    if source is None or listener.topic is None:
        return []
    loc: Loc = (*where, "topic")
    if not isinstance(source, StompSourceConfig) or source.broker not in TOPIC_BROKERS:
        what = f"a {source.kind} source" if not isinstance(source, StompSourceConfig) else f"broker {source.broker!r}"
        return [(loc, f"topic listeners (durable subscriptions) are for STOMP sources with broker activemq or "
                      f"rabbitmq; not for {what}")]
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


def requeue_destination(broker: str, subscription: str | None, destination: str) -> str:
    """Where copies of a listener's messages go (stamps, parts of a unit given back): the queue
    it reads, or the RabbitMQ queue of its durable subscription (a topic would reach them all)."""
    if subscription is not None and broker == "rabbitmq":
        return f"/amq/queue/{subscription}"
    return destination
