"""The supervisor (mqbridge.supervision.supervisor): restart with capped backoff, halt, retry later, stop the
bridge; and the observers it tells. On the in-memory source, without a broker or Spark."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from mqbridge.drivers import open_source
from mqbridge.errors import (
    BackoutFailedError,
    ConfigError,
    SourceConnectionError,
    SourceQuiescingError,
    UnknownMessageTypeError,
)
from mqbridge.observer import BridgeView, Observer
from mqbridge.source import Source, SourceContext
from mqbridge.supervision.decision import Decision, decide
from mqbridge.supervision.supervisor import BACKOFF_INITIAL, BACKOFF_MAX, Bridge
from tests.support.bridge import RunningBridge, run_until_idle
from tests.support.memory import FailingSource, RecordingExecutor, memory_app, memory_config
from tests.support.waiting import wait_until


@pytest.mark.parametrize(("error", "decision"), [
    (ConfigError("x"), Decision.STOP_BRIDGE),
    (UnknownMessageTypeError("x"), Decision.STOP_BRIDGE),
    (BackoutFailedError("x"), Decision.HALT),
    (SourceQuiescingError("x"), Decision.RETRY_LATER),
    (SourceConnectionError("x"), Decision.RESTART),
    (RuntimeError("a bug"), Decision.RESTART),
])
def test_decisions_follow_the_error_types(error: BaseException, decision: Decision) -> None:
    assert decide(error) is decision


def dead_threads(bridge: Bridge) -> None:
    """Wait until every spawned listener thread has ended (they fail at connect)."""
    for slot in bridge.slots:
        if slot.thread is not None:
            slot.thread.join(5)
            assert not slot.thread.is_alive()


@contextmanager
def bridge_that_cannot_connect() -> Iterator[Bridge]:
    """A started bridge of one listener whose source cannot connect; stopped after the block."""
    cfg, _broker = memory_config()
    app = memory_app(cfg, RecordingExecutor(),
                     source_factory=lambda _ctx: FailingSource(SourceConnectionError("broker down")))
    app.bridge.start()
    try:
        yield app.bridge
    finally:
        app.bridge.stop()
        app.bridge.shutdown()


def test_a_failing_listener_is_restarted_with_doubling_capped_backoff() -> None:
    # Given a source that cannot connect
    with bridge_that_cannot_connect() as bridge:
        [slot] = bridge.slots
        waits = []
        for _ in range(8):
            dead_threads(bridge)
            before = time.monotonic()
            bridge.reconcile()  # reaps the dead thread: restart later, with backoff
            waits.append(round(slot.next_start - before, 1))
            slot.next_start = 0.0  # do not actually wait
            bridge.reconcile()  # spawns the next try
        # Then each wait doubles up to the cap, and every try counts as a restart and an error
        assert waits[:3] == [BACKOFF_INITIAL, 2 * BACKOFF_INITIAL, 4 * BACKOFF_INITIAL]
        assert max(waits) == BACKOFF_MAX and waits[-1] == BACKOFF_MAX
        assert slot.restarts == 8 and "broker down" in slot.last_error
        assert bridge.counters.total("listener_restarts") == 8
        assert bridge.fatal is None


def test_a_lost_connection_gives_the_unit_back_and_the_restarted_listener_lands_it_once() -> None:
    # Given a bridge whose executor blocks the first bulk until the connection is cut
    cfg, broker = memory_config(batch=5)
    broker.put_many("orders", [f"c{i}".encode() for i in range(5)])
    release = threading.Event()
    calls: list[int] = []

    def decide(message: Any) -> Any:
        if not calls:
            calls.append(1)
            broker.cut()  # the network fails while the bulk is being written
            release.set()
        return None

    executor = RecordingExecutor(decide)
    app = memory_app(cfg, executor)
    running = RunningBridge(app.bridge, until_idle=0.5)
    assert running.wait(30) == 0
    # Then the first try could not commit; after the restart every message is committed, and the
    # messages written twice are exactly those of the cut unit (at-least-once until the ledger)
    assert release.is_set()
    assert broker.depth("orders") == 0
    assert app.bridge.counters.total("listener_restarts") >= 1
    assert set(executor.bodies()) == {f"c{i}".encode() for i in range(5)}


def test_a_halted_listener_is_not_restarted_and_the_run_ends_with_1() -> None:
    # Given two listener entries, one of which cannot move a poison message anywhere
    cfg, broker = memory_config(extra='\n[[listeners]]\nsource = "mem"\nqueue = "other"\nmessage_type = "orders"\n'
                                      'backout_queue = "other.backout"\nwait = "50ms"\n')
    broker.put_many("other", [b"fine"])

    def factory(context: SourceContext) -> Source:
        if context.listener.queue == "orders":
            return FailingSource(BackoutFailedError("poison: backout and dead-letter queues refused it"),
                                 on="receive")
        return open_source(context)

    executor = RecordingExecutor()
    app = memory_app(cfg, executor, source_factory=factory)
    # When it runs until idle
    code = run_until_idle(app.bridge, idle=0.3, timeout=30)
    # Then the healthy listener did its work, the halted one was never restarted, and the exit code says so
    assert code == 1
    assert executor.bodies() == [b"fine"]
    halted = [s for s in app.bridge.slots if s.halted]
    assert [s.config.queue for s in halted] == ["orders"] and halted[0].restarts == 0
    assert "halted: poison" in halted[0].last_error


def test_a_fatal_error_stops_the_bridge_with_2() -> None:
    cfg, broker = memory_config()
    broker.put_many("orders", [b"x"])
    app = memory_app(cfg, RecordingExecutor(),
                     source_factory=lambda _ctx: FailingSource(ConfigError("sources.mem: no such thing")))
    assert run_until_idle(app.bridge, idle=5, timeout=30) == 2
    assert isinstance(app.bridge.fatal, ConfigError)


def test_a_quiescing_source_is_retried_later_without_growing_the_backoff() -> None:
    cfg, _broker = memory_config()
    app = memory_app(cfg, RecordingExecutor(),
                     source_factory=lambda _ctx: FailingSource(SourceQuiescingError("QM1 is quiescing")))
    bridge = app.bridge
    bridge.start()
    try:
        dead_threads(bridge)
        before = time.monotonic()
        bridge.reconcile()
        [slot] = bridge.slots
        assert slot.next_start - before == pytest.approx(SourceQuiescingError.retry_after, abs=1)
        assert slot.backoff == BACKOFF_INITIAL and slot.restarts == 0
        assert "quiescing" in slot.last_error
    finally:
        bridge.stop()
        bridge.shutdown()


class Recorder(Observer):
    def __init__(self) -> None:
        self.events: list[str] = []

    def on_ready(self, bridge: BridgeView) -> None:
        self.events.append("ready")

    def on_tick(self, bridge: BridgeView) -> None:
        self.events.append("tick")

    def on_wake(self, bridge: BridgeView) -> None:
        self.events.append("wake")

    def on_reload(self, bridge: BridgeView) -> None:
        self.events.append("reload")

    def on_stopping(self, bridge: BridgeView) -> None:
        self.events.append("stopping")

    def status_fields(self) -> dict[str, Any]:
        return {"recorder": len(self.events)}


class Broken(Observer):
    def on_wake(self, bridge: BridgeView) -> None:
        raise RuntimeError("observer bug")

    def status_fields(self) -> dict[str, Any]:
        raise RuntimeError("status bug")


def test_observers_hear_every_event_and_a_broken_one_changes_nothing() -> None:
    cfg, broker = memory_config()
    recorder = Recorder()
    app = memory_app(cfg, RecordingExecutor(), observers=[Broken(), recorder])
    running = RunningBridge(app.bridge)
    wait_until(lambda: "ready" in recorder.events and "tick" in recorder.events, 10, "ready and a tick")
    app.bridge.reload_event.set()
    wait_until(lambda: "reload" in recorder.events, 10, "the reload")
    status = app.bridge.status()
    assert status["recorder"] > 0 and status["Broken"] == {"error": "RuntimeError: status bug"}
    assert {"plugins", "guard"} <= set(status)  # the composition root's own observers
    assert running.stop() == 0
    events = recorder.events
    assert events[-1] == "stopping" and events.count("ready") == 1 and "wake" in events


def test_errors_per_second_is_the_listener_errors_of_the_last_interval_over_its_length() -> None:
    # Given a source that cannot connect
    with bridge_that_cannot_connect() as bridge:
        [slot] = bridge.slots
        bridge.measure_rates()  # the start of the first interval
        started = time.monotonic()
        # When 6 more connects fail within the interval
        for _ in range(6):
            dead_threads(bridge)
            bridge.reconcile()
            slot.next_start = 0.0
            bridge.reconcile()
        dead_threads(bridge)
        bridge.reconcile()
        slot.next_start = float("inf")  # no more tries
        errors = bridge.counters.total("listener_errors")
        time.sleep(0.5)
        elapsed = time.monotonic() - started
        bridge.measure_rates()
        # Then the gauge is those errors over the interval's length, and 0 once an interval has none
        assert errors >= 6
        assert bridge.counters.gauge("errors_per_second") == pytest.approx(errors / elapsed, rel=0.05)
        time.sleep(0.2)
        bridge.measure_rates()
        assert bridge.counters.gauge("errors_per_second") == 0.0
