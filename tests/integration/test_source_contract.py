"""One contract for every source adapter (kombu's idea): the same tests run against the IBM MQ
source on the fake queue manager and the STOMP source on the real ActiveMQ.

What every `Source` must do: connect; hand out messages inside a unit of work that other consumers
cannot see; commit removes them; rollback returns them and the redelivery shows; a poison move
happens atomically with the removal (and not at all if the unit dies); after a lost connection a
new connection gets the held messages again.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, Protocol

import pytest

from mqbridge.config import StompSourceConfig
from mqbridge.errors import InDoubtError, SourceConnectionError, SourceError
from mqbridge.source import BackoutMove, DeliveryTracker, Source
from tests.support.fakes.mq_server import FakeQueueManagerServer
from tests.support.fakes.mq_testing import make_source, unique, wait_until
from tests.support.sources import receive

pytestmark = pytest.mark.integration


class Harness(Protocol):
    """Puts and inspects messages on one broker, and makes sources for it."""

    def new_queue(self) -> str: ...
    def backout_queue(self, queue: str) -> str: ...
    def put(self, queue: str, bodies: list[bytes]) -> None: ...
    def bodies(self, queue: str) -> list[bytes]: ...  # committed and not held by anyone, left in place
    def moved(self, queue: str) -> list[tuple[bytes, str]]: ...  # (body, reason) on the backout queue
    def source(self, queue: str, *, cuttable: bool = False) -> Source: ...
    def cut(self, source: Source) -> None: ...  # lose every cuttable connection, as a network would


class MqHarness:
    def __init__(self) -> None:
        self.server = FakeQueueManagerServer(dead_letter_queue="SYSTEM.DEAD.LETTER.QUEUE")
        self.sources: list[Source] = []

    def new_queue(self) -> str:
        name = unique("CONTRACT")
        # BOTHRESH 0: the contract tests moves requested by the listener, like STOMP's.
        self.server.define_queue(name, backout_threshold=0, backout_queue=self.backout_queue(name))
        self.server.define_queue(self.backout_queue(name))
        return name

    def backout_queue(self, queue: str) -> str:
        return queue + ".BACKOUT"

    def put(self, queue: str, bodies: list[bytes]) -> None:
        self.server.put_many(queue, bodies)

    def bodies(self, queue: str) -> list[bytes]:
        return self.server.queue(queue).bodies()

    def moved(self, queue: str) -> list[tuple[bytes, str]]:
        return [(m.data, m.prop("mqbridge_reason")) for m in self.server.queue(self.backout_queue(queue)).visible()]

    def source(self, queue: str, *, cuttable: bool = False) -> Source:
        src = make_source(self.server, queue, batch=10)
        self.sources.append(src)
        return src

    def cut(self, source: Source) -> None:
        self.server.break_connections()

    def close(self) -> None:
        for src in self.sources:
            src.close()
        assert self.server.disconnects_with_open_uow == []
        self.server.close()


class StompHarness:
    def __init__(self, amq: Any, broker: tuple[str, int], ack_mode: str) -> None:
        from tests.support.tcpproxy import TcpProxy

        self.amq = amq
        self.broker = broker
        self.ack_mode = ack_mode
        self.proxy = TcpProxy(broker)
        self.sources: list[Source] = []
        self.queues: list[str] = []

    def new_queue(self) -> str:
        from tests.support.amq import unique_queue

        queue = unique_queue("contract")
        self.queues.append(queue)
        return queue

    def backout_queue(self, queue: str) -> str:
        return queue + ".backout"

    def put(self, queue: str, bodies: list[bytes]) -> None:
        self.amq.put_many(queue, bodies)

    def bodies(self, queue: str) -> list[bytes]:
        return [bytes(f.body) for f in self.amq.browse(queue)]

    def moved(self, queue: str) -> list[tuple[bytes, str]]:
        return [(bytes(f.body), f.headers.get("mqbridge-reason", "")) for f in self.amq.browse(self.backout_queue(queue))]

    def source(self, queue: str, *, cuttable: bool = False) -> Source:
        from mqbridge.listeners.stomp import StompSource

        port = self.proxy.port if cuttable else self.broker[1]
        cfg = StompSourceConfig(host=self.broker[0], port=port, heartbeat=2.0, connect_timeout=3.0,
                                ack_mode=self.ack_mode)  # type: ignore[arg-type]
        src = StompSource("amq", cfg, queue, prefetch=10, tracker=DeliveryTracker(), client_name="contract")
        self.sources.append(src)
        return src

    def cut(self, source: Source) -> None:
        assert self.proxy.cut() >= 1
        # Wait until stomp.py has noticed, so the next call fails at once instead of waiting
        # for a receipt that cannot come.
        wait_until(lambda: source._frames.disconnected.is_set(), 10, "stomp.py to see the cut")  # type: ignore[attr-defined]

    def close(self) -> None:
        for src in self.sources:
            src.close()
        self.proxy.close()
        for queue in self.queues:
            self.amq.drain(queue, quiet=0.2)
            self.amq.drain(self.backout_queue(queue), quiet=0.2)


@pytest.fixture(params=["mq-fake", "stomp-activemq-cumulative", "stomp-activemq-individual"])
def broker(request: pytest.FixtureRequest) -> Iterator[Harness]:
    harness: Any
    if request.param == "mq-fake":
        harness = MqHarness()
    else:
        harness = StompHarness(request.getfixturevalue("amq"), request.getfixturevalue("activemq"),
                               request.param.rsplit("-", 1)[1])
    yield harness
    harness.close()


def test_connects_and_an_empty_queue_gives_nothing(broker: Harness) -> None:
    source = broker.source(broker.new_queue())
    source.connect()
    assert source.receive(0.3) is None
    assert isinstance(source.recoverable_errors, tuple) and SourceConnectionError in source.recoverable_errors


def test_a_unit_of_work_is_hidden_from_other_consumers_until_commit_removes_it(broker: Harness) -> None:
    queue = broker.new_queue()
    broker.put(queue, [b"a", b"\x00\xffb", b"c"])
    first, second = broker.source(queue), broker.source(queue)
    first.connect()
    messages = receive(first, 3)
    assert sorted(m.body for m in messages) == sorted([b"a", b"\x00\xffb", b"c"])
    assert len({m.msg_id for m in messages}) == 3
    assert all(m.delivery_count == 1 and not m.redelivered and m.destination == queue for m in messages)
    second.connect()
    assert second.receive(0.5) is None
    first.commit()
    first.close()
    assert second.receive(0.5) is None
    assert broker.bodies(queue) == []


def test_rollback_returns_the_messages_and_the_redelivery_is_visible(broker: Harness) -> None:
    queue = broker.new_queue()
    broker.put(queue, [b"a", b"b"])
    source = broker.source(queue)
    source.connect()
    first = receive(source, 2)
    source.rollback()
    again = receive(source, 2)
    assert {m.msg_id for m in again} == {m.msg_id for m in first}
    assert all(m.redelivered and m.delivery_count == 2 for m in again)
    source.commit()
    source.close()
    assert broker.bodies(queue) == []


def test_a_poison_move_happens_with_the_removal(broker: Harness) -> None:
    queue = broker.new_queue()
    broker.put(queue, [b"bad", b"good"])
    source = broker.source(queue)
    source.connect()
    messages = {m.body: m for m in receive(source, 2)}
    source.commit(moves=[BackoutMove(messages[b"bad"], "does not parse", broker.backout_queue(queue))])
    source.close()
    assert broker.moved(queue) == [(b"bad", "does not parse")]
    assert broker.bodies(queue) == []


def test_a_poison_move_does_not_happen_when_the_unit_dies(broker: Harness) -> None:
    queue = broker.new_queue()
    broker.put(queue, [b"bad"])
    source = broker.source(queue, cuttable=True)
    source.connect()
    [bad] = receive(source, 1)
    broker.cut(source)
    with pytest.raises((SourceConnectionError, InDoubtError)):
        source.commit(moves=[BackoutMove(bad, "does not parse", broker.backout_queue(queue))])
    source.close()
    assert broker.moved(queue) == []
    fresh = broker.source(queue)
    fresh.connect()
    [again] = receive(fresh, 1)
    assert again.body == b"bad" and again.redelivered
    fresh.commit()


def test_after_a_lost_connection_a_reconnect_gets_the_held_messages_again(broker: Harness) -> None:
    queue = broker.new_queue()
    broker.put(queue, [b"a"])
    source = broker.source(queue, cuttable=True)
    source.connect()
    [first] = receive(source, 1)
    broker.cut(source)
    with pytest.raises(SourceConnectionError):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            source.receive(0.2)
    source.close()
    source.connect()
    [again] = receive(source, 1)
    assert again.msg_id == first.msg_id and again.redelivered and again.delivery_count == 2
    source.commit()
    source.close()
    assert broker.bodies(queue) == []


def test_a_partial_commit_removes_the_rest_and_returns_the_given_messages_unchanged(broker: Harness) -> None:
    queue = broker.new_queue()
    broker.put(queue, [b"a", b"keep \xff", b"c", b"d"])
    source = broker.source(queue)
    source.connect()
    first = {m.body: m for m in receive(source, 4)}
    back = first[b"keep \xff"]
    if not source.supports_partial_commit:
        with pytest.raises(SourceError, match="whole"):
            source.commit(returns=[back])
        source.rollback()
        source.close()
        assert sorted(broker.bodies(queue)) == sorted(first)
        return
    source.commit(moves=[BackoutMove(first[b"c"], "bad", broker.backout_queue(queue))], returns=[back])
    [again] = receive(source, 1)
    # The same message as far as the bridge and the landed row can tell, on its second delivery
    assert (again.msg_id, again.body, again.put_timestamp) == (back.msg_id, back.body, back.put_timestamp)
    assert again.headers == back.headers and again.correlation_id == back.correlation_id
    assert again.redelivered and again.delivery_count == 2
    assert source.receive(0.3) is None
    source.commit()
    source.close()
    assert broker.bodies(queue) == []
    assert broker.moved(queue) == [(b"c", "bad")]


def test_stomp_a_message_given_back_by_cumulative_commit_keeps_its_count_across_restarts(
        amq: Any, activemq: tuple[str, int]) -> None:
    # ActiveMQ counts nothing over STOMP and the bridge's own count lives in memory: the copy a
    # cumulative-ack commit puts back must carry the count, or a restart would reset it.
    harness = StompHarness(amq, activemq, "cumulative")
    try:
        queue = harness.new_queue()
        harness.put(queue, [b"ok", b"back"])
        source = harness.source(queue)
        source.connect()
        got = {m.body: m for m in receive(source, 2)}
        source.tracker.failed(got[b"back"].msg_id, "Spark write failed: disk full")  # type: ignore[attr-defined]
        source.commit(returns=[got[b"back"]])
        source.close()
        restarted = harness.source(queue)  # a new process: a new, empty delivery tracker
        restarted.connect()
        [again] = receive(restarted, 1)
        assert again.msg_id == got[b"back"].msg_id and again.delivery_count == 2
        assert restarted.tracker.last_reason(again.msg_id) == "Spark write failed: disk full"  # type: ignore[attr-defined]
        assert not any(k.startswith("mqbridge-requeue") for k in again.headers)
        restarted.commit()
    finally:
        harness.close()


def test_a_partial_commit_that_dies_gives_everything_back_once(broker: Harness) -> None:
    queue = broker.new_queue()
    broker.put(queue, [b"landed", b"back"])
    source = broker.source(queue, cuttable=True)
    source.connect()
    got = {m.body: m for m in receive(source, 2)}
    conn = getattr(source, "_conn", None)
    if conn is not None:  # STOMP: lose the connection inside the transaction, after its SENDs
        ack = conn.ack

        def cut_then_ack(*args: Any, **kwargs: Any) -> Any:
            time.sleep(0.3)  # lets the SENDs reach the broker before the cut
            broker.cut(source)
            return ack(*args, **kwargs)

        conn.ack = cut_then_ack
    else:
        broker.cut(source)
    if source.supports_partial_commit:
        with pytest.raises((SourceConnectionError, InDoubtError)):
            source.commit(returns=[got[b"back"]])
    source.close()
    # Neither a removal nor a copy given back happened: each message comes again, once
    fresh = broker.source(queue)
    fresh.connect()
    again = receive(fresh, 2)
    assert sorted(m.body for m in again) == [b"back", b"landed"]
    assert {m.msg_id for m in again} == {m.msg_id for m in got.values()}
    assert fresh.receive(0.5) is None
    fresh.commit()
    fresh.close()
    assert broker.bodies(queue) == []
