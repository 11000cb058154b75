"""The contract of `mqbridge.source.Source`, one class for every adapter (kombu's
t/integration/common.py): each tests/contract module subclasses `SourceContract` in one line,
naming its harness (tests/support/harnesses.py).

What every `Source` must do: connect; hand out messages inside a unit of work that other consumers
cannot see; commit removes them; rollback returns them and the redelivery shows; a poison move
happens atomically with the removal (and not at all if the unit dies); after a lost connection a
new connection gets the held messages again.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import ClassVar

import pytest

from mqbridge.errors import InDoubtError, SourceConnectionError, SourceError
from mqbridge.source import BackoutMove, Source
from tests.support.harnesses import Harness
from tests.support.sources import receive


def _receive_until_lost(source: Source, timeout: float = 10.0) -> None:
    """Poll `source` until it reports its lost connection; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        source.receive(0.2)
    raise AssertionError(f"no SourceConnectionError within {timeout}s")


class SourceContract:
    """Subclass as `class TestX(SourceContract): harness = XHarness`."""

    harness: ClassVar[type[Harness]]

    @pytest.fixture
    def broker(self, request: pytest.FixtureRequest) -> Iterator[Harness]:
        reason = self.harness.limitations.get(request.node.originalname)
        if reason:
            pytest.skip(f"{self.harness.__name__}: {reason}")
        harness = self.harness.start(request)
        yield harness
        harness.close()

    def test_conforms_to_the_protocol_and_an_empty_queue_gives_nothing(self, broker: Harness) -> None:
        source = broker.source(broker.new_queue())
        assert isinstance(source, Source)
        assert isinstance(source.supports_partial_commit, bool)
        assert isinstance(source.applies_backout_threshold, bool)
        source.connect()
        assert source.receive(0.3) is None
        assert isinstance(source.recoverable_errors, tuple) and SourceConnectionError in source.recoverable_errors

    def test_a_unit_of_work_is_hidden_from_other_consumers_until_commit_removes_it(self, broker: Harness) -> None:
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

    def test_rollback_returns_the_messages_and_the_redelivery_is_visible(self, broker: Harness) -> None:
        queue = broker.new_queue()
        broker.put(queue, [b"a", b"b"])
        source = broker.source(queue)
        source.connect()
        receive(source, 2)
        source.rollback()
        again = receive(source, 2)
        assert sorted(m.body for m in again) == [b"a", b"b"]
        assert all(m.redelivered for m in again)  # the count: test_a_redelivered_message_keeps_its_id...
        assert source.receive(0.3) is None
        source.commit()
        source.close()
        assert broker.bodies(queue) == []

    def test_a_redelivered_message_keeps_its_id_and_its_count_rises(self, broker: Harness) -> None:
        queue = broker.new_queue()
        broker.put(queue, [b"a"])
        source = broker.source(queue)
        source.connect()
        [first] = receive(source, 1)
        source.rollback()
        [second] = receive(source, 1)
        source.rollback()
        [third] = receive(source, 1)
        assert first.msg_id == second.msg_id == third.msg_id
        assert [m.delivery_count for m in (first, second, third)] == [1, 2, 3]
        source.commit()
        source.close()

    def test_a_poison_move_happens_with_the_removal(self, broker: Harness) -> None:
        queue = broker.new_queue()
        broker.put(queue, [b"bad", b"good"])
        source = broker.source(queue)
        source.connect()
        messages = {m.body: m for m in receive(source, 2)}
        source.commit(moves=[BackoutMove(messages[b"bad"], "does not parse", broker.backout_queue(queue))])
        source.close()
        assert broker.moved(queue) == [(b"bad", "does not parse")]
        assert broker.bodies(queue) == []

    def test_a_poison_move_does_not_happen_when_the_unit_dies(self, broker: Harness) -> None:
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

    def test_after_a_lost_connection_a_reconnect_gets_the_held_messages_again(self, broker: Harness) -> None:
        queue = broker.new_queue()
        broker.put(queue, [b"a"])
        source = broker.source(queue, cuttable=True)
        source.connect()
        receive(source, 1)
        broker.cut(source)
        with pytest.raises(SourceConnectionError):
            _receive_until_lost(source)
        source.close()
        source.connect()
        [again] = receive(source, 1)
        assert again.body == b"a" and again.redelivered
        source.commit()
        source.close()
        assert broker.bodies(queue) == []

    def test_after_a_lost_connection_the_message_comes_back_with_its_id(self, broker: Harness) -> None:
        queue = broker.new_queue()
        broker.put(queue, [b"a"])
        source = broker.source(queue, cuttable=True)
        source.connect()
        [first] = receive(source, 1)
        broker.cut(source)
        source.close()
        source.connect()
        [again] = receive(source, 1)
        assert again.msg_id == first.msg_id and again.delivery_count == 2
        source.commit()
        source.close()

    def test_a_partial_commit_returns_the_given_messages_unchanged(self, broker: Harness) -> None:
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

    def test_a_partial_commit_gives_back_only_the_returned_message(self, broker: Harness) -> None:
        queue = broker.new_queue()
        broker.put(queue, [b"a", b"back", b"poison", b"d"])
        source = broker.source(queue)
        source.connect()
        got = {m.body: m for m in receive(source, 4)}
        source.commit(moves=[BackoutMove(got[b"poison"], "bad body", broker.backout_queue(queue))],
                      returns=[got[b"back"]])
        [again] = receive(source, 1)
        assert again.body == b"back" and again.redelivered and again.headers == got[b"back"].headers
        assert source.receive(0.5) is None
        source.commit()
        source.close()
        assert broker.bodies(queue) == []
        assert broker.moved(queue) == [(b"poison", "bad body")]

    def test_a_partial_commit_that_dies_gives_everything_back_once(self, broker: Harness) -> None:
        queue = broker.new_queue()
        # The poison first: with individual acks, its move is SENT before the first ACK
        broker.put(queue, [b"poison", b"back", b"landed"])
        source = broker.source(queue, cuttable=True)
        source.connect()
        got = {m.body: m for m in receive(source, 3)}
        if source.supports_partial_commit:
            broker.cut_after_puts(source)
            with pytest.raises((SourceConnectionError, InDoubtError)):
                source.commit(moves=[BackoutMove(got[b"poison"], "bad", broker.backout_queue(queue))],
                              returns=[got[b"back"]])
        else:
            broker.cut(source)
        source.close()
        # Neither a removal, nor a move, nor a copy given back happened: each message comes again, once
        assert broker.moved(queue) == []
        fresh = broker.source(queue)
        fresh.connect()
        again = receive(fresh, 3)
        assert sorted(m.body for m in again) == [b"back", b"landed", b"poison"]
        assert fresh.receive(0.5) is None
        fresh.commit()
        fresh.close()
        assert broker.bodies(queue) == []


def check_a_receipted_commit_cut_after_its_sends_duplicates_and_loses_nothing(broker: Harness) -> None:
    """commit_mode = "receipted" (no transaction): a connection lost after the moves and copies
    were confirmed and before the ACK leaves them in place *and* gives the unit back: the moved
    message is on both queues, a copy given back comes twice (no copy on RabbitMQ, which gives back
    by NACK); nothing is lost."""
    queue = broker.new_queue()
    broker.put(queue, [b"poison", b"back", b"landed"])
    source = broker.source(queue, cuttable=True)
    source.connect()
    got = {m.body: m for m in receive(source, 3)}
    broker.cut_after_puts(source)
    with pytest.raises(SourceConnectionError):
        source.commit(moves=[BackoutMove(got[b"poison"], "bad", broker.backout_queue(queue))],
                      returns=[got[b"back"]])
    source.close()
    assert broker.moved(queue) == [(b"poison", "bad")]
    fresh = broker.source(queue)
    fresh.connect()
    copies = [b"back"] if source.cumulative and not source.ids_per_delivery else []  # type: ignore[attr-defined]
    again = receive(fresh, 3 + len(copies))
    assert sorted(m.body for m in again) == sorted([b"back", b"landed", b"poison", *copies])
    assert fresh.receive(0.5) is None
    fresh.commit()
    fresh.close()
    assert broker.bodies(queue) == []
