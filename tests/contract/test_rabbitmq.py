"""The source contract on the STOMP adapter against the real RabbitMQ (STOMP on 127.0.0.1:61623)."""

from __future__ import annotations

import pytest

from tests.support.contract import (
    SourceContract,
    check_a_receipted_commit_cut_after_its_sends_duplicates_and_loses_nothing,
)
from tests.support.harnesses import (
    RabbitMqCumulative,
    RabbitMqIndividual,
    RabbitMqIndividualReceipted,
    RabbitMqReceipted,
    RabbitMqStamped,
    RabbitMqStampedIndividual,
    StompHarness,
)

pytestmark = pytest.mark.integration


class TestRabbitMqCumulative(SourceContract):
    harness = RabbitMqCumulative


class TestRabbitMqIndividual(SourceContract):
    harness = RabbitMqIndividual


class TestRabbitMqStamped(SourceContract):
    """identity = "stamp", the default on RabbitMQ: stable ids and counts on a classic queue."""

    harness = RabbitMqStamped


class TestRabbitMqStampedIndividual(SourceContract):
    harness = RabbitMqStampedIndividual


class TestRabbitMqReceipted(SourceContract):
    """commit_mode = "receipted" (no STOMP transaction), as on Artemis."""

    harness = RabbitMqReceipted


class TestRabbitMqIndividualReceipted(SourceContract):
    """commit_mode = "receipted" (no STOMP transaction), as on Artemis."""

    harness = RabbitMqIndividualReceipted


@pytest.mark.parametrize("harness", [RabbitMqReceipted, RabbitMqIndividualReceipted], ids=["cumulative", "individual"])
def test_a_receipted_commit_cut_after_its_sends_duplicates_and_loses_nothing(
        request: pytest.FixtureRequest, harness: type[StompHarness]) -> None:
    broker = harness.start(request)
    try:
        check_a_receipted_commit_cut_after_its_sends_duplicates_and_loses_nothing(broker)
    finally:
        broker.close()
