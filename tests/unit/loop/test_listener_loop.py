"""The listener loop's settlement paths, on the in-memory source with a recording executor: what
is committed, returned, moved to the backout queue, and how often each message lands."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from mqbridge.loop.listener import PlainChain
from mqbridge.message import Bulk, Message, MessageResult
from tests.support.bridge import RunningBridge, run_until_idle
from tests.support.memory import RecordingExecutor, memory_app, memory_config
from tests.support.waiting import wait_until


@pytest.fixture(params=[1, 3], ids=lambda n: f"in_flight={n}")
def in_flight(request: pytest.FixtureRequest) -> int:
    """Every settlement path holds whether a listener waits for each unit or holds several in flight."""
    return int(request.param)


def bodies(n: int, prefix: str = "m") -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(n)]


def test_a_unit_that_lands_is_committed_once(in_flight: int) -> None:
    # Given 25 messages on the queue
    cfg, broker = memory_config(threads=2, batch=10, extra=f"in_flight = {in_flight}")
    broker.put_many("orders", bodies(25))
    executor = RecordingExecutor()
    # When the bridge runs until idle
    app = memory_app(cfg, executor)
    assert run_until_idle(app.bridge, idle=0.3, timeout=30) == 0
    # Then each landed exactly once, the queue is empty and the counters agree
    assert sorted(executor.bodies()) == sorted(bodies(25))
    assert broker.depth("orders") == 0 and broker.depth("orders.backout") == 0
    counters = app.bridge.counters
    assert counters.total("messages_committed") == counters.total("messages_received") == 25


def test_units_that_end_short_of_their_batch_are_counted_for_the_tuner() -> None:
    # Given 25 messages on the queue and units of 10 read by one thread
    cfg, broker = memory_config(threads=1, batch=10)
    broker.put_many("orders", bodies(25))
    app = memory_app(cfg, RecordingExecutor())
    # When the bridge runs until idle
    assert run_until_idle(app.bridge, idle=0.3, timeout=30) == 0
    # Then two whole units and a short one of 5 (no more message was ready): the arrivals' sign
    counters = app.bridge.counters
    assert counters.total("listener_units_read") == 3 and counters.total("listener_units_short") == 1


def test_a_permanent_failure_moves_only_that_message_with_its_reason(in_flight: int) -> None:
    cfg, broker = memory_config(extra=f"in_flight = {in_flight}")
    broker.put_many("orders", bodies(10))

    def decide(message: Message) -> MessageResult | None:
        return MessageResult.permanent(message.msg_id, "body is not valid JSON") if message.body == b"m4" else None

    executor = RecordingExecutor(decide)
    assert run_until_idle(memory_app(cfg, executor).bridge, idle=0.3, timeout=30) == 0
    assert sorted(executor.bodies()) == sorted(b for b in bodies(10) if b != b"m4")
    [moved] = broker.browse("orders.backout")
    assert moved.body == b"m4" and moved.headers["mqbridge-reason"] == "body is not valid JSON"
    assert broker.depth("orders") == 0


def test_a_retryable_failure_returns_only_that_message_until_it_lands(in_flight: int) -> None:
    # Given a message whose first two writes fail (an outage of its own bulk)
    cfg, broker = memory_config(extra=f"in_flight = {in_flight}")
    broker.put_many("orders", bodies(10))
    seen: Counter[bytes] = Counter()

    def decide(message: Message) -> MessageResult | None:
        seen[message.body] += 1
        if message.body == b"m7" and seen[b"m7"] <= 2:
            return MessageResult.retryable(message.msg_id, "write failed")
        return None

    executor = RecordingExecutor(decide)
    assert run_until_idle(memory_app(cfg, executor).bridge, idle=0.3, timeout=30) == 0
    # Then it lands on its third delivery; its neighbours land once; nothing goes to the backout queue
    landed = Counter(executor.bodies())
    assert set(landed) == set(bodies(10)) and set(landed.values()) == {1}
    assert [m.delivery_count for m in executor.landed if m.body == b"m7"] == [3]
    assert broker.depth("orders.backout") == 0


def test_a_message_failing_every_time_is_moved_after_exactly_the_threshold(in_flight: int) -> None:
    cfg, broker = memory_config(threshold=3, extra=f"in_flight = {in_flight}")
    broker.put_many("orders", bodies(10))
    attempts: Counter[bytes] = Counter()

    def decide(message: Message) -> MessageResult | None:
        attempts[message.body] += 1
        return MessageResult.retryable(message.msg_id, "always fails") if message.body == b"m3" else None

    executor = RecordingExecutor(decide)
    assert run_until_idle(memory_app(cfg, executor).bridge, idle=0.3, timeout=30) == 0
    assert attempts[b"m3"] == 3
    [moved] = broker.browse("orders.backout")
    assert moved.body == b"m3"
    assert moved.headers["mqbridge-reason"].startswith(
        "delivered 3 times, backout threshold is 3; last failure: always fails")
    assert Counter(executor.bodies()) == Counter(b for b in bodies(10) if b != b"m3")


def test_a_preprocessor_failure_returns_only_its_message_and_the_unit_goes_on(in_flight: int) -> None:
    # Given a chain whose one step raises on one message, once
    cfg, broker = memory_config(threshold=3, extra=f"in_flight = {in_flight}")
    broker.put_many("orders", bodies(10))
    failed: list[bytes] = []

    def flaky(message: Message) -> Message | None:
        if message.body == b"m5" and not failed:
            failed.append(message.body)
            raise ValueError("cannot parse")
        return message

    executor = RecordingExecutor()
    app = memory_app(cfg, executor, chain_factory=lambda _entry: lambda: PlainChain([("flaky", flaky)]))
    assert run_until_idle(app.bridge, idle=0.3, timeout=30) == 0
    # Then every message lands once (m5 on its second delivery), and the error is counted
    assert Counter(executor.bodies()) == Counter(bodies(10))
    assert app.bridge.counters.total("preprocessor_errors") == 1
    assert broker.depth("orders.backout") == 0


def test_a_consuming_preprocessor_commits_without_landing(in_flight: int) -> None:
    cfg, broker = memory_config(extra=f"in_flight = {in_flight}")
    broker.put_many("orders", [b"keep", b"heartbeat", b"keep"])

    def drop_heartbeats(message: Message) -> Message | None:
        return None if message.body == b"heartbeat" else message

    executor = RecordingExecutor()
    app = memory_app(cfg, executor, chain_factory=lambda _entry: lambda: PlainChain([("drop", drop_heartbeats)]))
    assert run_until_idle(app.bridge, idle=0.3, timeout=30) == 0
    assert executor.bodies() == [b"keep", b"keep"]
    assert broker.depth("orders") == 0
    assert app.bridge.counters.total("messages_consumed_by_preprocessors") == 1


def test_two_deliveries_of_one_message_in_flight_do_not_share_a_result() -> None:
    # Given a redelivered copy of a message in this unit while its first copy (same msg_id, other
    # unit) is still in a bulk
    from mqbridge.loop.listener import UnitResults

    first = Message(msg_id="ID:1", body=b"x", source="s", destination="/queue/q")
    again = Message(msg_id="ID:1", body=b"x", source="s", destination="/queue/q", redelivered=True)
    results = UnitResults([again])
    # When the first copy's result arrives (the collector hands a msg_id's result to every handler)
    results(first, MessageResult.success("ID:1"))
    # Then it does not settle this unit's copy, whose own result does
    assert not results.wait(0) and results.get(again) is None
    results(again, MessageResult.retryable("ID:1", "write failed"))
    assert results.wait(0) and results.get(again) == MessageResult.retryable("ID:1", "write failed")
    assert results.get(first) is None


def test_a_listener_reads_its_next_units_while_the_sink_writes_the_earlier_one() -> None:
    # Given one listener thread with batch 10 and 3 units in flight, and a sink whose first write
    # blocks until the test lets it go
    cfg, broker = memory_config(batch=10, extra="in_flight = 3")
    broker.put_many("orders", bodies(40))
    release = threading.Event()
    sizes: list[int] = []

    class GatedExecutor(RecordingExecutor):
        def execute(self, bulk: Bulk) -> list[MessageResult]:
            sizes.append(len(bulk.messages))
            if len(sizes) == 1:
                assert release.wait(30), "the test never released the first write"
            return super().execute(bulk)

    executor = GatedExecutor()
    app = memory_app(cfg, executor)
    running = RunningBridge(app.bridge)
    try:
        # While the first write is held, the listener reads two more units on its other connections
        wait_until(lambda: app.bridge.counters.total("messages_received") >= 30, 10,
                   "the listener to read 30 messages while its first unit's write is held")
        assert app.bridge.counters.total("messages_committed") == 0
        time.sleep(0.3)  # a fourth unit would need a free connection: none is
        assert app.bridge.counters.total("messages_received") == 30
        release.set()
        wait_until(lambda: app.bridge.counters.total("messages_committed") == 40, 10,
                   "all 40 messages committed after the first write was released")
    finally:
        release.set()
        assert running.stop() == 0
    # Then units of one thread went out together: a bulk larger than a unit; each message landed once
    assert max(sizes) > 10
    assert Counter(executor.bodies()) == Counter(bodies(40))
    assert broker.depth("orders") == 0


def test_a_unit_being_filled_does_not_hold_back_the_results_of_an_earlier_one() -> None:
    # Given a listener with 2 units in flight that waits up to 5 s to fill a unit of 2, and 3
    # messages: the first unit fills at once, the second gets one message and waits for more
    cfg, broker = memory_config(batch=2, wait="5s", extra="in_flight = 2")
    broker.put_many("orders", bodies(3))
    executor = RecordingExecutor()
    app = memory_app(cfg, executor)
    running = RunningBridge(app.bridge)
    started = time.monotonic()
    try:
        # When the first unit's results come back (its bulk closes after 100 ms)
        wait_until(lambda: app.bridge.counters.total("messages_committed") >= 2, 10,
                   "the first unit to be committed")
        first = time.monotonic() - started
        wait_until(lambda: app.bridge.counters.total("messages_committed") == 3, 10,
                   "the second unit (one message) to be committed")
    finally:
        assert running.stop() == 0
    # Then the first unit was committed without waiting for the second to fill (5 s), and the
    # second went as it was, with its one message
    assert first < 2.5, f"the first unit was committed after {first:.1f} s: it waited for the second unit to fill"
    assert Counter(executor.bodies()) == Counter(bodies(3))
    assert broker.depth("orders") == 0


def test_stopping_finishes_every_unit_in_flight_first() -> None:
    # Given a listener holding 3 units in flight, all waiting for a held write
    cfg, broker = memory_config(batch=5, extra="in_flight = 3")
    broker.put_many("orders", bodies(15))
    release = threading.Event()

    class HeldExecutor(RecordingExecutor):
        def execute(self, bulk: Bulk) -> list[MessageResult]:
            assert release.wait(30), "the test never released the writes"
            return super().execute(bulk)

    executor = HeldExecutor()
    app = memory_app(cfg, executor)
    running = RunningBridge(app.bridge)
    wait_until(lambda: app.bridge.counters.total("messages_received") == 15, 10, "3 units of 5 read")
    # When the bridge is asked to stop and the writes are let go
    app.bridge.stop()
    release.set()
    assert running.wait(30) == 0
    # Then every unit was committed before its connection closed: nothing is left or redelivered
    assert Counter(executor.bodies()) == Counter(bodies(15))
    assert broker.depth("orders") == 0


def test_until_idle_counts_the_idle_time_from_the_listeners_connect() -> None:
    # Given an empty queue (a listener thread that just connected, as after a broker restart, has
    # received nothing yet)
    cfg, _ = memory_config()
    app = memory_app(cfg, RecordingExecutor())
    # When the bridge runs until idle for 2 s
    started = time.monotonic()
    assert run_until_idle(app.bridge, idle=2.0, timeout=30) == 0
    # Then it waited the whole 2 s after connecting for messages, not just its 1 s check
    assert time.monotonic() - started >= 2.0
