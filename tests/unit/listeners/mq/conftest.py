"""Fixtures for the IBM MQ unit tests: a fake queue manager with ORDERS (BOTHRESH 3, BOQNAME
ORDERS.BACKOUT) and a connected source on it. Every test also checks that no disconnect
committed an open unit of work."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mqbridge.listeners.mq import MqSource
from tests.support.fakes.mq_server import FakeQueueManagerServer
from tests.support.fakes.mq_testing import DLQ, make_source


@pytest.fixture
def qm() -> Iterator[FakeQueueManagerServer]:
    server = FakeQueueManagerServer(dead_letter_queue=DLQ)
    server.define_queue("ORDERS", backout_threshold=3, backout_queue="ORDERS.BACKOUT")
    server.define_queue("ORDERS.BACKOUT")
    yield server
    assert server.disconnects_with_open_uow == [], "a disconnect committed an open unit of work"
    server.close()


@pytest.fixture
def source(qm: FakeQueueManagerServer) -> Iterator[MqSource]:
    src = make_source(qm, "ORDERS")
    src.connect()
    yield src
    src.close()
