"""`run` gives at start the RabbitMQ advice `check-config` warns about (`mqbridge.lint.broker_advice`):
both read one list, so they cannot drift apart."""

from __future__ import annotations

import logging

import pytest

from mqbridge.config import parse_config
from tests.support.memory import RecordingExecutor, memory_app, memory_config

RABBIT = '[sources.rabbit]\nkind = "stomp"\nbroker = "rabbitmq"\n'
LISTENER = ('[[listeners]]\nsource = "rabbit"\nqueue = "/queue/orders"\nmessage_type = "orders"\n'
            'backout_queue = "/queue/orders.dlq"\n[types.orders]\n')


def test_the_rabbitmq_advice_is_logged_when_the_bridge_starts(caplog: pytest.LogCaptureFixture) -> None:
    # Given a bridge on the in-memory source, with a RabbitMQ source configured beside it
    cfg, _broker = memory_config()
    other = parse_config(RABBIT + LISTENER, "<string>")
    cfg.sources["rabbit"] = other.sources["rabbit"]
    # When it runs until idle
    app = memory_app(cfg, RecordingExecutor())
    with caplog.at_level(logging.WARNING, logger="mqbridge.app"):
        assert app.run(until_idle=0.2) == 0
    # Then the guest identity is named once, with what to write instead
    advice = [r.getMessage() for r in caplog.records if "guest" in r.getMessage()]
    assert advice == ["sources.rabbit.user: RabbitMQ's default guest identity — create a user for the bridge and "
                      'set user = "mqbridge", password = "${ENV:MQBRIDGE_PASSWORD}"']
