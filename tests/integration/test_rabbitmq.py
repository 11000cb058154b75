"""The STOMP adapter on a real RabbitMQ (3.10 from Debian), in both ack modes: RabbitMQ keeps a
removed subscription's unacknowledged messages until the connection closes, so the adapter gives
messages back with NACK there; a partly committed unit puts copies back (cumulative) or NACKs the
returned messages (individual)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import stomp
from pydantic import SecretStr

from mqbridge.config import StompSourceConfig
from mqbridge.listeners.stomp import StompSource
from mqbridge.source import BackoutMove, DeliveryTracker
from tests.support.sources import receive_up_to

pytestmark = pytest.mark.integration


@pytest.fixture(params=["cumulative", "individual"])
def rabbit(request: pytest.FixtureRequest, rabbitmq: tuple[str, int]) -> Iterator[Any]:
    host, port = rabbitmq
    producer = stomp.Connection12([(host, port)], auto_decode=False, vhost="/")
    producer.connect("guest", "guest", wait=True)
    sources: list[StompSource] = []

    class Rabbit:
        queue = f"/queue/mqbridge-test-{uuid.uuid4().hex[:8]}"

        def put(self, bodies: list[bytes]) -> None:
            for body in bodies:
                producer.send(self.queue, body, headers={"persistent": "true", "x-k": "v"})

        def source(self, queue: str | None = None) -> StompSource:
            cfg = StompSourceConfig(host=host, port=port, broker="rabbitmq", user="guest", password=SecretStr("guest"),
                                    vhost="/", heartbeat=2.0, ack_mode=request.param)
            src = StompSource("rabbit", cfg, queue or self.queue, prefetch=10, tracker=DeliveryTracker())
            src.connect()
            sources.append(src)
            return src

    yield Rabbit()
    for src in sources:
        src.close()
    producer.disconnect()


def test_rollback_gives_the_unit_back_at_once_on_the_same_connection(rabbit: Any) -> None:
    rabbit.put([b"a", b"b", b"c"])
    source = rabbit.source()
    first = receive_up_to(source, 3)
    assert sorted(m.body for m in first) == [b"a", b"b", b"c"]
    source.rollback()
    again = receive_up_to(source, 3, timeout=5)
    assert sorted(m.body for m in again) == [b"a", b"b", b"c"]
    assert all(m.redelivered for m in again)
    source.commit()
    assert receive_up_to(rabbit.source(), 1, timeout=1.5) == []


def test_a_partial_commit_returns_only_the_given_message_and_moves_the_poison(rabbit: Any) -> None:
    rabbit.put([b"a", b"back", b"poison", b"d"])
    source = rabbit.source()
    got = {m.body: m for m in receive_up_to(source, 4)}
    source.commit(moves=[BackoutMove(got[b"poison"], "bad body", rabbit.queue + ".backout")],
                  returns=[got[b"back"]])
    [again] = receive_up_to(source, 1, timeout=5)
    assert again.body == b"back" and again.redelivered and again.headers["x-k"] == "v"
    assert receive_up_to(source, 1, timeout=1.0) == []
    source.commit()
    assert receive_up_to(rabbit.source(), 1, timeout=1.5) == []
    moved = receive_up_to(rabbit.source(rabbit.queue + ".backout"), 1, timeout=5)
    assert [(m.body, m.headers["mqbridge-reason"]) for m in moved] == [(b"poison", "bad body")]
