"""Run-time control of listeners (mqbridge.supervision.control, followed by Bridge.reconcile): names, commands
and refusals; then pause, resume, stop, start and thread counts on a running bridge of the
in-memory source, without a broker or Spark: what lands, what stays on the queue, the connections,
the errors counted, /status, health and the metrics, and a reload that keeps it all."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from mqbridge.drivers import open_source
from mqbridge.errors import (
    AmbiguousListenerError,
    BackoutFailedError,
    ControlConflictError,
    ControlError,
    UnknownListenerError,
)
from mqbridge.listeners.memory import MemoryBroker
from mqbridge.message import Bulk, MessageResult
from mqbridge.monitoring.health import health_problems
from mqbridge.monitoring.metrics import BridgeMetrics
from mqbridge.source import Source, SourceContext
from mqbridge.supervision.control import MAX_THREADS, PAUSED, RUNNING, STOPPED, ListenerControls, progress
from mqbridge.supervision.supervisor import Bridge
from tests.support.bridge import RunningBridge, run_until_idle
from tests.support.memory import FailingSource, RecordingExecutor, memory_app, memory_config
from tests.support.waiting import wait_until

LISTENER = "mem:orders"


def controls() -> ListenerControls:
    return ListenerControls([("amq", "/queue/orders", 2), ("amq", "/queue/refunds", 1),
                             ("rabbit", "/queue/refunds", 1)])


def test_a_listener_is_named_by_its_queue_or_as_source_and_queue() -> None:
    c = controls()
    assert c.resolve("/queue/orders").name == "amq:/queue/orders"
    assert c.resolve("amq:/queue/orders").name == "amq:/queue/orders"
    assert c.resolve("rabbit:/queue/refunds").name == "rabbit:/queue/refunds"


def test_an_unknown_name_lists_the_listeners_and_a_shared_queue_name_asks_for_source_and_queue() -> None:
    c = controls()
    with pytest.raises(UnknownListenerError) as unknown:
        c.command("/queue/nothing", "pause")
    assert str(unknown.value) == ("no listener '/queue/nothing'; this bridge's listeners are amq:/queue/orders, "
                                  "amq:/queue/refunds, rabbit:/queue/refunds (name one by its queue, or as "
                                  "source:queue)")
    with pytest.raises(AmbiguousListenerError) as ambiguous:
        c.command("/queue/refunds", "stop")
    assert "name one as source:queue (amq:/queue/refunds, rabbit:/queue/refunds)" in str(ambiguous.value)
    assert all(entry.state == RUNNING for entry in c)  # nothing changed


def test_commands_move_between_the_states_and_the_gate_is_closed_unless_running() -> None:
    c = controls()
    entry = c.get("amq:/queue/orders")
    steps = [("pause", PAUSED, False, True), ("pause", PAUSED, False, False), ("resume", RUNNING, True, True),
             ("resume", RUNNING, True, False), ("stop", STOPPED, False, True), ("stop", STOPPED, False, False),
             ("start", RUNNING, True, True), ("pause", PAUSED, False, True), ("stop", STOPPED, False, True),
             ("start", RUNNING, True, True), ("start", RUNNING, True, True)]
    for action, state, gate_open, changed in steps:
        outcome = c.command("/queue/orders", action)
        assert (outcome.state, entry.gate.is_open, outcome.changed) == (state, gate_open, changed), action
    assert entry.starts == 3 and entry.last_command == "start" and entry.changed_at.endswith("Z")


def test_commands_the_state_does_not_allow_and_thread_counts_out_of_range_are_refused() -> None:
    c = controls()
    c.command("/queue/orders", "stop")
    with pytest.raises(ControlConflictError, match="is stopped, not paused: use start"):
        c.command("/queue/orders", "resume")
    with pytest.raises(ControlConflictError, match="is stopped: start it first"):
        c.command("/queue/orders", "pause")
    for bad in (0, -1, MAX_THREADS + 1, None):
        with pytest.raises(ControlError, match=f"threads: {bad} is not a thread count from 1 to 64"):
            c.command("/queue/orders", "threads", bad)
    outcome = c.command("/queue/orders", "threads", 5)  # kept for when it is started
    assert outcome.message == "threads 2 -> 5 (in force once it is started); configured: 2, until the bridge restarts"
    assert c.get("amq:/queue/orders").wanted == 0
    c.command("/queue/orders", "start")
    assert c.get("amq:/queue/orders").wanted == 5 and c.get("amq:/queue/orders").wants(5)


def test_plugins_needs_a_plugin_host_and_a_target_and_hands_the_move_to_it() -> None:
    c = controls()
    with pytest.raises(ControlError, match="no plugin host"):
        c.command("/queue/orders", "plugins", target="latest")
    moves: list[tuple[str, str]] = []

    def move(listener: str, target: str) -> str:
        moves.append((listener, target))
        return f"{listener}: plugins pinned"

    c.move_plugins = move
    with pytest.raises(ControlError, match="name the generation: a number, 'latest' or 'follow'"):
        c.command("/queue/orders", "plugins")
    with pytest.raises(AmbiguousListenerError):
        c.command("/queue/refunds", "plugins", target="3")
    outcome = c.command("/queue/orders", "plugins", target="3")
    assert moves == [("amq:/queue/orders", "3")]
    assert (outcome.listener, outcome.message, outcome.state) == ("amq:/queue/orders", "plugins pinned", RUNNING)
    assert c.get("amq:/queue/orders").last_command == "plugins 3"


def test_progress_says_what_the_threads_still_have_to_do() -> None:
    entry = controls().get("amq:/queue/orders")
    assert progress(entry, up=2, at_gate=0, alive=2, retiring=0, halted=0) == ""
    assert progress(entry, up=1, at_gate=0, alive=1, retiring=0, halted=1) == "1 of 2 threads connected, 1 halted"
    entry.state = PAUSED
    assert progress(entry, up=2, at_gate=1, alive=2, retiring=0, halted=0) == "1 threads finishing their units of work"
    assert progress(entry, up=2, at_gate=2, alive=3, retiring=1, halted=0) == \
        "1 threads beyond the count finishing their units of work"
    entry.state = STOPPED
    assert progress(entry, up=0, at_gate=0, alive=2, retiring=2, halted=0) == "2 threads finishing their units of work"
    assert progress(entry, up=0, at_gate=0, alive=0, retiring=0, halted=0) == ""


# -- on a running bridge ------------------------------------------------------------------------
class SlowExecutor(RecordingExecutor):
    """Lands each bulk after `seconds`: units of work are in flight when a command comes."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def execute(self, bulk: Bulk) -> list[MessageResult]:
        time.sleep(self.seconds)
        return super().execute(bulk)


@contextmanager
def running(threads: int = 2, *, seconds: float = 0.0, config: Any = None,
            broker: MemoryBroker | None = None) -> Iterator[tuple[Bridge, MemoryBroker, RecordingExecutor]]:
    """A running bridge of one memory listener (`threads` threads, 2 units in flight each) whose
    bulks take `seconds` to land; stopped after the block."""
    if config is None:
        config, broker = memory_config(threads=threads, extra="in_flight = 2")
    assert broker is not None
    executor = SlowExecutor(seconds)
    run = RunningBridge(memory_app(config, executor).bridge)
    try:
        wait_until(lambda: run.bridge.status()["ready"], 10, "the listener threads to connect")
        yield run.bridge, broker, executor
    finally:
        assert run.stop() in (0, 1)


def control(bridge: Bridge) -> dict[str, Any]:
    [entry] = bridge.status()["listener_controls"]
    return dict(entry)


def in_effect(bridge: Bridge, what: str) -> None:
    wait_until(lambda: control(bridge)["in_effect"], 10, what)


def connections(broker: MemoryBroker) -> int:
    with broker._cond:
        return len(broker._sources)


def test_pause_finishes_the_units_in_flight_takes_no_new_one_keeps_connections_and_resume_drains() -> None:
    # Given two threads reading 300 messages whose bulks take 0.2 s to land
    sent = [f"m{i:04d}".encode() for i in range(300)]
    with running(2, seconds=0.2) as (bridge, broker, executor):
        broker.put_many("orders", sent[:200])
        wait_until(lambda: executor.bodies(), 10, "a first landing")
        # When the listener is paused while units are in flight
        outcome = bridge.controls.command("orders", "pause")
        assert outcome.state == PAUSED and control(bridge)["in_effect"] is False
        in_effect(bridge, "every thread to finish its units")
        # Then every unit it held is finished (landed and committed, nothing held back), the threads
        # wait at the gate with their connections up, and nothing more is read while messages arrive
        landed = len(executor.bodies())
        assert broker.depth("orders") == 200 - landed and 0 < landed < 200
        assert {e["phase"] for e in bridge.status()["listeners"]} == {"paused"}
        assert connections(broker) == 2 * 2
        broker.put_many("orders", sent[200:])
        time.sleep(1.0)
        assert len(executor.bodies()) == landed and broker.depth("orders") == 300 - landed
        assert health_problems(bridge.status()) == [] and control(bridge)["pending"] == ""
        # When it is resumed, then it drains the queue: every message lands once
        bridge.controls.command("orders", "resume")
        wait_until(lambda: len(executor.bodies()) == 300, 30, "the queue to drain")
        assert sorted(executor.bodies()) == sent and broker.depth("orders") == 0
        assert bridge.counters.total("listener_errors") == 0


def test_stop_ends_the_threads_and_their_connections_without_an_error_and_start_brings_them_back() -> None:
    with running(2) as (bridge, broker, executor):
        broker.put_many("orders", [b"before"])
        wait_until(lambda: executor.bodies() == [b"before"], 10, "the first message to land")
        # When the listener is stopped
        bridge.controls.command("orders", "stop")
        in_effect(bridge, "the threads to end")
        # Then its threads have ended and closed their connections; no error, no restart; healthy
        wait_until(lambda: connections(broker) == 0, 5, "the connections to close")
        status = bridge.status()
        assert [(e["alive"], e["phase"], e["state"]) for e in status["listeners"]] == [(False, "stopped", STOPPED)] * 2
        assert health_problems(status) == []
        time.sleep(0.5)  # several control ticks: nothing is restarted
        assert all(s.thread is None for s in bridge.slots)
        assert bridge.counters.total("listener_errors") == 0 and bridge.counters.total("listener_restarts") == 0
        assert bridge.counters.gauge("listener_threads_configured") == 0
        assert bridge.counters.gauge("listener_state", listener=LISTENER, state=STOPPED) == 1
        broker.put_many("orders", [b"while stopped"])
        time.sleep(0.3)
        assert broker.depth("orders") == 1
        # When it is started again, then it connects and reads
        bridge.controls.command("orders", "start")
        in_effect(bridge, "the threads to start")
        wait_until(lambda: executor.bodies() == [b"before", b"while stopped"], 10, "the message to land")
        assert connections(broker) == 4 and bridge.counters.total("listener_errors") == 0
        assert bridge.counters.gauge("listener_state", listener=LISTENER, state=RUNNING) == 1


def test_the_thread_count_is_raised_and_lowered_while_running() -> None:
    with running(1) as (bridge, broker, executor):
        created = bridge.counters.total("listener_threads_created")
        # When the count goes from 1 to 3
        bridge.controls.command("orders", "threads", 3)
        in_effect(bridge, "3 threads")
        # Then 3 threads run, each with connections of its own, and the gauges say so
        assert [e["name"] for e in bridge.status()["listeners"]] == [f"{LISTENER}#{i}" for i in (1, 2, 3)]
        assert bridge.counters.total("listener_threads_created") == created + 2
        assert connections(broker) == 3 * 2
        assert bridge.counters.gauge("listener_threads", listener=LISTENER) == 3
        assert bridge.counters.gauge("listener_threads_configured") == 3
        wait_until(lambda: bridge.counters.gauge("listener_threads_alive", listener=LISTENER) == 3, 5, "gauge")
        entry = control(bridge)
        assert (entry["threads"], entry["configured_threads"], entry["threads_alive"]) == (3, 1, 3)
        broker.put_many("orders", [f"{i}".encode() for i in range(50)])
        wait_until(lambda: len(executor.bodies()) == 50, 10, "the messages to land")
        # When it goes back to 1, then the threads beyond it end and leave /status; nothing failed
        bridge.controls.command("orders", "threads", 1)
        in_effect(bridge, "1 thread")
        wait_until(lambda: len(bridge.status()["listeners"]) == 1, 5, "the ended threads to leave")
        assert connections(broker) == 2 and bridge.counters.total("listener_errors") == 0
        assert sorted(executor.bodies()) == sorted(f"{i}".encode() for i in range(50))


def test_a_reload_keeps_the_run_time_state(tmp_path: Path) -> None:
    # Given a bridge loaded from a file, paused with 2 threads instead of 1
    config, broker = memory_config(threads=1, path=tmp_path / "bridge.toml")
    assert config.path is not None
    with running(config=config, broker=broker) as (bridge, broker, executor):
        bridge.controls.command("orders", "threads", 2)
        bridge.controls.command("orders", "pause")
        in_effect(bridge, "the pause")
        # When the configuration is reloaded (what SIGHUP does)
        bridge.reload_event.set()
        wait_until(lambda: not bridge.reload_event.is_set(), 5, "the reload")
        time.sleep(0.5)
        # Then it is still paused with 2 threads
        entry = control(bridge)
        assert (entry["state"], entry["threads"], entry["in_effect"]) == (PAUSED, 2, True)
        broker.put_many("orders", [b"x"])
        time.sleep(0.5)
        assert executor.bodies() == []


def test_start_restarts_a_halted_listener_at_once() -> None:
    # Given a listener that halted on a poison message nothing could move
    cfg, _broker = memory_config()
    poisoned = [True]

    def factory(context: SourceContext) -> Source:
        if poisoned[0]:
            return FailingSource(BackoutFailedError("poison: backout and dead-letter queues refused it"),
                                 on="receive")
        return open_source(context)

    bridge = memory_app(cfg, RecordingExecutor(), source_factory=factory).bridge
    bridge.start()
    try:
        [slot] = bridge.slots
        wait_until(lambda: slot.thread is not None and not slot.thread.is_alive(), 5, "the halt")
        bridge.reconcile()
        assert slot.halted and slot.thread is None
        bridge.reconcile()
        assert slot.thread is None  # never restarted by itself
        # When the cause is fixed and an operator starts it, then it runs again at once
        poisoned[0] = False
        bridge.controls.command("orders", "start")
        bridge.reconcile()
        assert not slot.halted and slot.thread is not None
        assert bridge.counters.total("listener_threads_created") == 2
        wait_until(lambda: bridge.status()["listeners"][0]["phase"] == "receiving", 5, "the thread to read")
    finally:
        bridge.stop()
        bridge.shutdown()


def test_a_stopped_listener_ends_an_idle_run_with_1_and_its_messages_stay() -> None:
    cfg, broker = memory_config()
    broker.put_many("orders", [b"a"])
    bridge = memory_app(cfg, RecordingExecutor()).bridge
    bridge.controls.command("orders", "stop")
    assert run_until_idle(bridge, idle=0.3, timeout=30) == 1
    assert broker.depth("orders") == 1


def test_the_metrics_show_each_listeners_state_and_thread_counts() -> None:
    with running(1) as (bridge, _broker, _executor):
        bridge.controls.command("orders", "pause")
        bridge.controls.command("orders", "threads", 2)
        in_effect(bridge, "the pause with 2 threads")
        registry = CollectorRegistry(auto_describe=False)
        registry.register(BridgeMetrics(bridge.counters))
        text = generate_latest(registry).decode()
    for line in (f'mqbridge_listener_state{{listener="{LISTENER}",state="paused"}} 1.0',
                 f'mqbridge_listener_state{{listener="{LISTENER}",state="running"}} 0.0',
                 f'mqbridge_listener_state{{listener="{LISTENER}",state="stopped"}} 0.0',
                 f'mqbridge_listener_threads{{listener="{LISTENER}"}} 2.0',
                 f'mqbridge_listener_threads_alive{{listener="{LISTENER}"}} 2.0',
                 "mqbridge_listener_threads_configured 2.0"):
        assert line in text, line
