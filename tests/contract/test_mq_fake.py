"""The source contract on the IBM MQ adapter against the fake queue manager: no broker needed."""

from __future__ import annotations

from tests.support.contract import SourceContract
from tests.support.harnesses import MqFakeHarness


class TestMqFake(SourceContract):
    harness = MqFakeHarness
