"""One queue on ActiveMQ and one on RabbitMQ, for the fault tests that drive both brokers through one
run of a fault (a pair of bridges on each queue, sharing the fault): put bodies, count a queue and its
backout queue, the `stomp_bridge` of a bridge on it. On RabbitMQ the identity is a header the producer
sets (`identity = "header:x-eo-id"`: its `message-id` is per delivery, docs/guarantees.md)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.support.amq import AmqClient, unique_queue
from tests.support.configs import BridgeToml
from tests.support.exactly_once import RABBIT_SOURCE, Rabbit
from tests.support.processes import stomp_bridge

#: The header that carries a message's identity on RabbitMQ.
HEADER = "x-eo-id"


def identity_of(body: bytes) -> str:
    """The identity a test's producer gives a body on RabbitMQ: its tag and number
    (`tests.support.exactly_once.bodies`: "tag-00042:…"), unique across the test's puts."""
    return body.split(b":", 1)[0].decode()


@dataclass(frozen=True)
class BrokerQueue:
    """A fresh queue of one broker (`broker`: "activemq" or "rabbitmq") on STOMP port `port`."""

    broker: str
    name: str
    port: int
    _put: Callable[[list[bytes]], None]
    _depth: Callable[[str], int]

    @property
    def backout(self) -> str:
        return f"{self.name}.backout"

    def put(self, sent: list[bytes]) -> None:
        """Put `sent`, persistent (on RabbitMQ each with its identity header); return once the broker has them."""
        self._put(sent)

    def depths(self) -> tuple[int, int]:
        """(messages on the queue, messages on its backout queue)."""
        return self._depth(self.name), self._depth(self.backout)

    def bridge(self, **options: Any) -> BridgeToml:
        """`stomp_bridge` on this queue (the broker's port unless `port` is given); on RabbitMQ with the
        guest login and the header identity."""
        options.setdefault("port", self.port)
        if self.broker == "rabbitmq":
            options.update(broker="rabbitmq", extra_source=RABBIT_SOURCE,
                           extra_listener=f'identity = "header:{HEADER}"')
        return stomp_bridge(self.name, **options)

    def read_by(self, toml: BridgeToml, message_type: str, **listener: Any) -> BridgeToml:
        """`toml` with this queue's broker as source `[sources.<broker>]` and a `[[listeners]]` table reading
        the queue into `message_type` (2 threads, wait 200ms, its backout queue; on RabbitMQ the guest
        login and the header identity), `listener` adding or overriding keys: one bridge reading a queue
        of each broker, a listener (and so a type, a table) for each."""
        source = f"sources.{self.broker}"
        toml = toml.set(source, kind="stomp", port=self.port, broker=self.broker, heartbeat="10s")
        keys: dict[str, Any] = {"source": self.broker, "queue": self.name, "threads": 2, "wait": "200ms",
                                "message_type": message_type, "backout_queue": self.backout}
        if self.broker == "rabbitmq":
            toml = toml.add(source, RABBIT_SOURCE)
            keys["identity"] = f"header:{HEADER}"
        return toml.listener(**{**keys, **listener})


def on_both_brokers(prefix: str, amq: AmqClient, activemq: tuple[str, int],
                    rabbitmq: tuple[str, int]) -> list[BrokerQueue]:
    """A fresh queue named after `prefix` on ActiveMQ (at `activemq`, through the test's client `amq`) and
    on RabbitMQ (at `rabbitmq`), in that order."""
    rabbit = Rabbit(rabbitmq)
    name = f"/queue/test.{prefix}.{uuid.uuid4().hex[:8]}"
    active = unique_queue(prefix)
    return [BrokerQueue("activemq", active, activemq[1], lambda sent: amq.put_many(active, sent), amq.depth),
            BrokerQueue("rabbitmq", name, rabbitmq[1],
                        lambda sent: rabbit.put(name, [(body, {HEADER: identity_of(body)}) for body in sent]),
                        rabbit.depth)]
