"""The in-memory source beyond the contract (tests/contract/test_memory.py): how it is configured
and found by its kind, named brokers, and what tests and demos see of its queues."""

from __future__ import annotations

import threading

import pytest

from mqbridge.config import MemorySourceConfig, parse_config
from mqbridge.drivers import open_source
from mqbridge.errors import ConfigError, SourceConnectionError, SourceError
from mqbridge.listeners.memory import REASON_HEADER, MemoryBroker, MemorySource
from mqbridge.source import BackoutMove, QueueShared, Source, SourceContext
from tests.support.sources import receive

CONFIG = """
[types.orders]
[sources.demo]
kind = "memory"
broker = "unit-{name}"
[[listeners]]
source = "demo"
queue = "orders"
message_type = "orders"
backout_queue = "orders.backout"
"""


def test_a_memory_source_is_configured_and_opened_by_its_kind(request: pytest.FixtureRequest) -> None:
    # Given a configuration with a memory source on a named broker
    cfg = parse_config(CONFIG.format(name=request.node.name), "demo.toml", env={})
    section = cfg.sources["demo"]
    assert isinstance(section, MemorySourceConfig)
    context = SourceContext("demo", section, cfg.listeners[0], "bridge", 1, QueueShared())
    # When the registry opens it
    source = open_source(context)
    # Then it is a MemorySource on that broker, whose messages tests put by the broker's name
    assert isinstance(source, MemorySource) and isinstance(source, Source)
    assert source.broker is MemoryBroker.named(section.broker)
    assert (source.supports_partial_commit, source.applies_backout_threshold) == (True, False)
    source.connect()
    MemoryBroker.named(section.broker).put("orders", b"x", headers={"h": "1"}, correlation_id="c-1")
    [message] = receive(source, 1)
    assert (message.body, message.headers, message.correlation_id, message.source) == (b"x", {"h": "1"}, "c-1", "demo")
    source.commit(moves=[BackoutMove(message, "line one\nline two")])  # no queue: the listener's backout_queue
    [moved] = MemoryBroker.named(section.broker).browse("orders.backout")
    assert moved.headers[REASON_HEADER] == "line one line two" and moved.msg_id == message.msg_id
    source.close()


def test_a_memory_listener_needs_a_backout_queue_like_a_stomp_one() -> None:
    text = CONFIG.format(name="x").replace('backout_queue = "orders.backout"\n', "")
    with pytest.raises(ConfigError, match=r"listeners\[0\]\.backout_queue: required for a memory source"):
        parse_config(text, "demo.toml", env={})
    assert parse_config(text + "backout_threshold = 0\n", "demo.toml", env={})


def test_named_brokers_are_one_per_name_and_depth_does_not_count_held_messages() -> None:
    assert MemoryBroker.named("unit-a") is MemoryBroker.named("unit-a") is not MemoryBroker.named("unit-b")
    broker = MemoryBroker()
    broker.put_many("q", [b"1", b"2"])
    source = MemorySource("m", broker, "q")
    source.connect()
    receive(source, 1)
    assert broker.depth("q") == 1 and [m.body for m in broker.browse("q")] == [b"2"]
    source.close()  # gives the held message back, to the head of the queue
    assert [m.body for m in broker.browse("q")] == [b"1", b"2"]


def test_a_waiting_receive_wakes_for_a_put_and_for_a_cut() -> None:
    broker = MemoryBroker()
    source = MemorySource("m", broker, "q")
    source.connect()
    threading.Timer(0.05, broker.put, ("q", b"late")).start()
    message = source.receive(10)
    assert message is not None and message.body == b"late"
    threading.Timer(0.05, broker.cut).start()
    with pytest.raises(SourceConnectionError):
        source.receive(10)
    assert broker.depth("q") == 1  # the held message went back with the connection


def test_commit_refuses_a_move_without_a_queue_and_changes_nothing() -> None:
    broker = MemoryBroker()
    broker.put("q", b"a")
    source = MemorySource("m", broker, "q")  # no backout queue configured
    source.connect()
    [message] = receive(source, 1)
    with pytest.raises(SourceError, match="no backout queue"):
        source.commit(moves=[BackoutMove(message, "bad")])
    source.rollback()
    assert [m.body for m in broker.browse("q")] == [b"a"]
