"""The source contract on the IBM MQ adapter against the fake queue manager, reading a queue and a
topic through a durable subscription: no broker needed."""

from __future__ import annotations

from tests.support.contract import SourceContract
from tests.support.harnesses import MqFakeHarness, MqTopicHarness


class TestMqFake(SourceContract):
    harness = MqFakeHarness


class TestMqFakeTopic(SourceContract):
    harness = MqTopicHarness
