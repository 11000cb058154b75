"""The source contract on the STOMP adapter against the real RabbitMQ (STOMP on 127.0.0.1:61623)."""

from __future__ import annotations

import pytest

from tests.support.contract import SourceContract
from tests.support.harnesses import RabbitMqCumulative, RabbitMqIndividual

pytestmark = pytest.mark.integration


class TestRabbitMqCumulative(SourceContract):
    harness = RabbitMqCumulative


class TestRabbitMqIndividual(SourceContract):
    harness = RabbitMqIndividual
