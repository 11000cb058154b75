"""The source contract on the STOMP adapter against the real ActiveMQ (STOMP on 127.0.0.1:61613),
and what only a cumulative-ack STOMP source promises."""

from __future__ import annotations

import pytest

from mqbridge.listeners.stomp import StompSource
from tests.support.contract import (
    SourceContract,
    check_a_receipted_commit_cut_after_its_sends_duplicates_and_loses_nothing,
)
from tests.support.harnesses import (
    ActiveMqCumulative,
    ActiveMqIndividual,
    ActiveMqIndividualReceipted,
    ActiveMqReceipted,
    StompHarness,
)
from tests.support.sources import receive

pytestmark = pytest.mark.integration


class TestActiveMqCumulative(SourceContract):
    harness = ActiveMqCumulative


class TestActiveMqIndividual(SourceContract):
    harness = ActiveMqIndividual


class TestActiveMqReceipted(SourceContract):
    """commit_mode = "receipted" (no STOMP transaction), as on Artemis."""

    harness = ActiveMqReceipted


class TestActiveMqIndividualReceipted(SourceContract):
    """commit_mode = "receipted" (no STOMP transaction), as on Artemis."""

    harness = ActiveMqIndividualReceipted


def test_a_message_given_back_by_cumulative_commit_keeps_its_count_across_restarts(
        request: pytest.FixtureRequest) -> None:
    # ActiveMQ counts nothing over STOMP and the bridge's own count lives in memory: the copy a
    # cumulative-ack commit puts back must carry the count, or a restart would reset it.
    harness = ActiveMqCumulative.start(request)
    try:
        queue = harness.new_queue()
        harness.put(queue, [b"ok", b"back"])
        source = harness.source(queue)
        assert isinstance(source, StompSource)
        source.connect()
        got = {m.body: m for m in receive(source, 2)}
        source.tracker.failed(got[b"back"].msg_id, "Spark write failed: disk full")
        source.commit(returns=[got[b"back"]])
        source.close()
        restarted = harness.source(queue)  # a new process: a new, empty delivery tracker
        assert isinstance(restarted, StompSource)
        restarted.connect()
        [again] = receive(restarted, 1)
        assert again.msg_id == got[b"back"].msg_id and again.delivery_count == 2
        assert restarted.tracker.last_reason(again.msg_id) == "Spark write failed: disk full"
        assert not any(k.startswith("mqbridge-requeue") for k in again.headers)
        restarted.commit()
    finally:
        harness.close()


@pytest.mark.parametrize("harness", [ActiveMqReceipted, ActiveMqIndividualReceipted], ids=["cumulative", "individual"])
def test_a_receipted_commit_cut_after_its_sends_duplicates_and_loses_nothing(
        request: pytest.FixtureRequest, harness: type[StompHarness]) -> None:
    broker = harness.start(request)
    try:
        check_a_receipted_commit_cut_after_its_sends_duplicates_and_loses_nothing(broker)
    finally:
        broker.close()
