"""The source contract on the STOMP adapter against the real RabbitMQ (STOMP on 127.0.0.1:61623), in
both ack modes, with RabbitMQ's only commit mode, "receipted" (a STOMP transaction is not applied
atomically there); and what a commit cut between its SENDs and its ACKs leaves: duplicates on the
backout queue, never a loss."""

from __future__ import annotations

import pytest

from mqbridge.errors import SourceConnectionError
from mqbridge.source import BackoutMove
from tests.support.contract import (
    SourceContract,
    check_a_receipted_commit_cut_after_its_sends_duplicates_and_loses_nothing,
)
from tests.support.harnesses import RabbitMqCumulative, RabbitMqIndividual
from tests.support.sources import receive

pytestmark = pytest.mark.integration


class TestRabbitMqIndividual(SourceContract):
    """RabbitMQ's defaults: individual acks, give-backs by NACK."""

    harness = RabbitMqIndividual


class TestRabbitMqCumulative(SourceContract):
    """Cumulative acks, settled in runs of ACKs and NACKs: no copy is SENT to the source queue."""

    harness = RabbitMqCumulative


def test_a_cumulative_commit_cut_after_its_sends_duplicates_and_loses_nothing(request: pytest.FixtureRequest) -> None:
    broker = RabbitMqCumulative.start(request)
    try:
        check_a_receipted_commit_cut_after_its_sends_duplicates_and_loses_nothing(broker)
    finally:
        broker.close()


def test_an_individual_commit_cut_after_its_move_leaves_it_on_both_queues_and_the_landed_one_removed(
        request: pytest.FixtureRequest) -> None:
    broker = RabbitMqIndividual.start(request)
    try:
        # Given a unit of three: one landed, one to move, one to give back
        queue = broker.new_queue()
        broker.put(queue, [b"poison", b"back", b"landed"])
        source = broker.source(queue, cuttable=True)
        source.connect()
        got = {m.body: m for m in receive(source, 3)}
        # When the connection is cut after the landed message's ACK and the move's receipt, before its ACK
        broker.cut_at_ack(source, 2)  # type: ignore[attr-defined]
        with pytest.raises(SourceConnectionError):
            source.commit(moves=[BackoutMove(got[b"poison"], "bad", broker.backout_queue(queue))],
                          returns=[got[b"back"]])
        source.close()
        # Then the moved message is on both queues (a duplicate, never a loss); the landed one stays removed
        assert broker.moved(queue) == [(b"poison", "bad")]
        fresh = broker.source(queue)
        fresh.connect()
        again = receive(fresh, 2)
        assert sorted(m.body for m in again) == [b"back", b"poison"]
        assert fresh.receive(0.5) is None
        fresh.commit()
        fresh.close()
        assert broker.bodies(queue) == []
    finally:
        broker.close()
