"""The backlog poller over IBM MQ's CURDEPTH on the stateful fake queue manager: readings against a
known number of waiting messages, unknown (never 0) when a read fails, logged once, the gauges of
/metrics, and what `run --until-idle` asks it."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from mqbridge.backlog import BacklogPoller
from mqbridge.backlog.poller import RECHECK, _SourceProbe
from mqbridge.listeners.mq.backlog import QueueDepths
from mqbridge.monitoring.backlog_metrics import BacklogMetrics
from tests.support.fakes import pymqi_fake
from tests.support.fakes.mq_server import FakeQueueManagerServer
from tests.support.fakes.mq_testing import make_source, receive_n, source_config

C = pymqi_fake.CMQC
LABEL = "qm:ORDERS"


@pytest.fixture
def qm() -> Iterator[FakeQueueManagerServer]:
    server = FakeQueueManagerServer(dead_letter_queue="DLQ")
    server.define_queue("ORDERS")
    yield server
    server.close()


def poller(qm: FakeQueueManagerServer, *, selectors: frozenset[str] = frozenset()) -> BacklogPoller:
    probe = QueueDepths("qm", source_config(qm), pymqi_fake)
    return BacklogPoller([_SourceProbe("qm", probe, {"ORDERS": [LABEL]})], 0.2, selectors=selectors)


def test_the_backlog_is_the_number_of_waiting_messages_on_a_connection_of_its_own(qm) -> None:
    backlog = poller(qm)
    try:
        # Given 25 messages waiting
        qm.put_many("ORDERS", [f"m{i}".encode() for i in range(25)])
        backlog.poll()
        assert backlog.readings()[LABEL].depth == 25
        # When a listener takes 10 in a unit of work, CURDEPTH still counts them until the commit
        source = make_source(qm, "ORDERS", batch=10)
        source.connect()
        receive_n(source, 10)
        backlog.poll()
        assert backlog.readings()[LABEL].depth == 25
        source.commit()
        source.close()
        backlog.poll()
        # Then 15 wait; the probe's own connection never held a unit of work
        assert backlog.readings()[LABEL].depth == 15
        assert backlog.status_fields()["backlog"][LABEL]["messages"] == 15
    finally:
        backlog.close()
    assert qm.disconnects_with_open_uow == [] and qm.live_connections() == []


def test_a_failed_read_is_unknown_not_zero_logged_once_and_recovers(qm, caplog: pytest.LogCaptureFixture) -> None:
    backlog = poller(qm)
    qm.put_many("ORDERS", [b"a", b"b", b"c"])
    qm.inject("inquire", C.MQRC_CONNECTION_BROKEN, times=2, queue="ORDERS")
    try:
        with caplog.at_level(logging.INFO, logger="mqbridge.backlog.poller"):
            backlog.poll()
            backlog.poll()
            assert backlog.readings()[LABEL].depth is None
            assert backlog.status_fields()["backlog"][LABEL]["messages"] is None
            failures = [r for r in caplog.records if "reading the backlog of source 'qm' failed" in r.message]
            assert len(failures) == 1, caplog.text
            backlog.poll()  # the fault is spent: it reconnects and reads again
        assert backlog.readings()[LABEL].depth == 3
        assert "backlog of source 'qm' is known again" in caplog.text
    finally:
        backlog.close()


def test_the_gauges_leave_an_unknown_backlog_out_instead_of_showing_zero() -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BacklogMetrics(lambda: {
        "amq:/queue/a": {"messages": 40, "oldest_age_seconds": None, "seconds_since_read": 1.0},
        "rmq:/queue/b": {"messages": 0, "oldest_age_seconds": 12.5, "seconds_since_read": 1.0},
        "amq:/queue/c": {"messages": None, "oldest_age_seconds": None, "seconds_since_read": 1.0}}))
    text = generate_latest(registry).decode()
    assert 'mqbridge_listener_backlog_messages{listener="amq:/queue/a"} 40.0' in text
    assert 'mqbridge_listener_backlog_messages{listener="rmq:/queue/b"} 0.0' in text
    assert 'mqbridge_listener_backlog_messages{listener="amq:/queue/c"}' not in text
    assert 'mqbridge_listener_backlog_known{listener="amq:/queue/c"} 0.0' in text
    assert 'mqbridge_listener_backlog_oldest_age_seconds{listener="rmq:/queue/b"} 12.5' in text


def test_until_idle_is_held_back_while_a_fresh_reading_shows_messages_and_reads_again_when_stale(qm) -> None:
    backlog = poller(qm)
    try:
        qm.put_many("ORDERS", [b"late-1", b"late-2"])
        backlog.poll()
        # A reading after the listeners' last activity that shows messages: not idle; read again
        # once it is RECHECK old, not only at the next interval
        assert backlog.holds_back_idle(since=time.monotonic() - 60)
        assert not backlog._wake.is_set()
        with backlog._lock:
            old = backlog._readings[LABEL]
            backlog._readings[LABEL] = dataclasses.replace(old, at=old.at - RECHECK)
        assert backlog.holds_back_idle(since=time.monotonic() - 60)
        assert backlog._wake.is_set()
        backlog._wake.clear()
        # A reading from before the last activity: not trusted; it asks for a read at once
        assert backlog.holds_back_idle(since=time.monotonic() + 1)
        assert backlog._wake.is_set()
        # An empty queue read after the activity: idle may proceed
        for _ in range(2):
            source = make_source(qm, "ORDERS")
            source.connect()
            receive_n(source, 1)
            source.commit()
            source.close()
        since = time.monotonic()
        backlog.poll()
        assert not backlog.holds_back_idle(since)
    finally:
        backlog.close()


def test_a_listener_with_a_selector_never_holds_back_idle(qm) -> None:
    # Its queue may hold messages meant for no listener of this bridge.
    backlog = poller(qm, selectors=frozenset({LABEL}))
    try:
        qm.put("ORDERS", b"for someone else")
        backlog.poll()
        assert backlog.readings()[LABEL].depth == 1 and not backlog.holds_back_idle(0.0)
    finally:
        backlog.close()


def test_only_the_listeners_that_still_read_are_held_back_by_their_queue(qm) -> None:
    # A stopped or halted listener's queue keeps its messages: `run --until-idle` reports it instead.
    backlog = poller(qm)
    try:
        qm.put("ORDERS", b"left for a stopped listener")
        backlog.poll()
        assert backlog.holds_back_idle(0.0, frozenset({LABEL}))
        assert not backlog.holds_back_idle(0.0, frozenset({"qm:OTHER"}))
    finally:
        backlog.close()


def test_messages_the_idle_listeners_never_get_hold_a_run_back_only_for_a_while(
        qm, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # Given a queue whose messages no idle listener receives (another consumer holds them)
    monkeypatch.setattr("mqbridge.backlog.poller.VETO_LIMIT", 0.3)
    backlog = poller(qm)
    try:
        qm.put("ORDERS", b"held elsewhere")
        backlog.poll()
        assert backlog.holds_back_idle(0.0)
        time.sleep(0.4)  # past the (lowered) limit with the same last activity
        with caplog.at_level(logging.WARNING, logger="mqbridge.backlog.poller"):
            assert not backlog.holds_back_idle(0.0)
        assert "ending the run anyway" in caplog.text and "qm:ORDERS: 1" in caplog.text
    finally:
        backlog.close()
