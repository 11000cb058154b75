"""BulkCollector: flush rules, registration, result fan-out and the executor's results.

No Spark and no broker: a recording executor stands in for Spark, a fake clock drives bulk age
(`tests.support.collector`). Execution, backpressure and shutdown: test_collector_execution.py.
"""

from __future__ import annotations

import logging

import pytest

from mqbridge.bulks.sizing import Target
from mqbridge.errors import UnknownMessageTypeError
from mqbridge.message import Bulk, MessageResult, Outcome
from tests.support.collector import (
    DEADLINE,
    Factory,
    FakeClock,
    RecordingExecutor,
    Results,
    all_success,
    make,
    msg,
)
from tests.support.waiting import wait_until

__all__ = ["make"]  # the fixture, used by name


# -- flush conditions ------------------------------------------------------------------------

def test_size_flush_when_bulk_bytes_reach_bulk_size(make: Factory) -> None:
    collector, ex = make(bulk_size=2500)
    results = Results()
    # Given two messages (2000 bytes) below the bulk size, nothing is forwarded
    collector.submit(msg("a1"), results)
    collector.submit(msg("a2"), results)
    assert collector.stats().active_bulks == 1
    # When the third reaches it
    collector.submit(msg("a3"), results)
    # Then the bulk goes to the executor, counted as "size"
    wait_until(lambda: results.count() == 3, DEADLINE, "3 results")
    assert ex["a"].batches == [["a1", "a2", "a3"]]
    assert ex["a"].bulks[0][2] == "size"
    assert collector.stats().flushed == {"size": 1}


def test_memory_flush_forwards_every_active_bulk(make: Factory) -> None:
    collector, ex = make(memory=3000)
    collector.submit(msg("a1", "a"))
    collector.submit(msg("b1", "b"))
    assert collector.stats().flushed == {}
    collector.submit(msg("a2", "a"))  # collector bytes reach memory
    wait_until(lambda: ex["a"].bulks and ex["b"].bulks, DEADLINE, "a bulk of each type")
    assert ex["a"].batches == [["a1", "a2"]] and ex["b"].batches == [["b1"]]
    assert collector.stats().flushed == {"memory": 2}


def test_count_flush_forwards_the_oldest_active_bulk(make: Factory) -> None:
    collector, ex = make(("a", "b", "c"), max_bulks=2)
    collector.submit(msg("a1", "a"))
    collector.submit(msg("b1", "b"))  # now 2 active bulks: the oldest (a) goes
    wait_until(lambda: ex["a"].bulks, DEADLINE, "a bulk")
    assert ex["a"].batches == [["a1"]] and ex["a"].bulks[0][2] == "count"
    stats = collector.stats()
    assert stats.flushed == {"count": 1} and stats.active_bulks == 1
    assert not ex["b"].bulks


def test_timer_flushes_a_bulk_whose_oldest_message_is_too_old(make: Factory) -> None:
    clock = FakeClock()
    collector, ex = make(bulk_timeout=5.0, clock=clock)
    collector.submit(msg("a1", received=clock.now))
    # Given a bulk just younger than the timeout, the timer looks at it but keeps it
    clock.now += 4.9
    seen = clock.calls
    wait_until(lambda: clock.calls >= seen + 3, DEADLINE, "the timer to look at the bulk 3 times")
    assert collector.stats().flushed == {} and not ex["a"].bulks
    # When it reaches the timeout, the timer forwards it
    clock.now += 0.1
    wait_until(lambda: ex["a"].bulks, DEADLINE, "the timed-out bulk")
    assert ex["a"].bulks[0][2] == "timeout"
    assert collector.stats().flushed == {"timeout": 1}


def test_requested_flush_by_msg_ids_forwards_only_their_bulks(make: Factory) -> None:
    collector, ex = make()
    collector.submit(msg("a1", "a"))
    collector.submit(msg("b1", "b"))
    assert collector.flush(msg_ids=["a1", "unknown"]) == 1
    wait_until(lambda: ex["a"].bulks, DEADLINE, "a bulk")
    assert collector.stats().active_bulks == 1 and not ex["b"].bulks
    assert collector.flush(msg_ids=["a1"]) == 0  # its bulk is no longer active
    assert collector.flush(message_type="b") == 1
    assert collector.flush() == 0
    assert collector.stats().flushed == {"requested": 2}
    with pytest.raises(ValueError):
        collector.flush(message_type="a", msg_ids=["a1"])


def test_flush_without_arguments_forwards_all_with_the_given_reason(make: Factory) -> None:
    collector, ex = make()
    collector.submit(msg("a1", "a"))
    collector.submit(msg("b1", "b"))
    assert collector.flush(reason="shutdown") == 2
    wait_until(lambda: ex["a"].bulks and ex["b"].bulks, DEADLINE, "a bulk of each type")
    assert collector.stats().flushed == {"shutdown": 2}


# -- the latency target (mqbridge.bulks.sizing) ---------------------------------------------------------

def timer_looked(clock: FakeClock, times: int = 3) -> None:
    """Wait until the collector's timer has read the clock `times` more times (so it saw the state)."""
    start = clock.calls
    wait_until(lambda: clock.calls >= start + times, DEADLINE, f"{times} more reads of the clock by the timer")


def test_an_idle_sink_takes_a_bulk_only_once_time_passes(make: Factory) -> None:
    clock = FakeClock()
    collector, ex = make(("a",), clock=clock, latency=1.0)
    results = Results()
    # Given two messages, and no time passing: the intake has not paused yet
    collector.submit(msg("a1", received=clock.now), results)
    collector.submit(msg("a2", received=clock.now), results)
    timer_looked(clock)
    assert collector.stats().active_bulks == 1 and ex["a"].bulks == []
    # When the intake pauses for longer than the idle gap
    clock.now += 0.03
    # Then the bulk goes whole: it reached the size its measured intake needs ("target"; at two
    # messages in 30 ms that is one or two rows), or else the intake paused ("idle")
    wait_until(lambda: results.count() == 2, DEADLINE, "both results")
    (_, ids, reason), = ex["a"].bulks
    assert ids == ["a1", "a2"] and reason in ("target", "idle")


def test_while_the_sink_writes_the_next_bulk_grows_and_goes_when_the_write_ends(make: Factory) -> None:
    clock = FakeClock()
    executor = RecordingExecutor(gated=True)
    collector, _ = make(("a",), clock=clock, latency=1.0, executors={"a": executor})
    results = Results()
    # Given a first bulk being written (the executor holds it)
    collector.submit(msg("a1", received=clock.now), results)
    clock.now += 0.03
    assert executor.entered.wait(DEADLINE), "the first bulk never reached the executor"
    # When more messages come and their intake pauses while the write runs
    for name in ("a2", "a3"):
        collector.submit(msg(name, received=clock.now), results)
    clock.now += 0.5
    timer_looked(clock)
    # Then they wait in the active bulk (group commit) ...
    assert collector.stats().active_bulks == 1 and len(executor.bulks) == 1
    # ... and go together as soon as the write ends
    executor.gate.set()
    wait_until(lambda: results.count() == 3, DEADLINE, "three results")
    assert executor.batches == [["a1"], ["a2", "a3"]]


def test_a_bulk_goes_at_the_latency_target_even_while_the_sink_writes(make: Factory) -> None:
    clock = FakeClock()
    executor = RecordingExecutor(gated=True)
    collector, _ = make(("a",), clock=clock, latency=1.0, executors={"a": executor})
    results = Results()
    collector.submit(msg("a1", received=clock.now), results)
    clock.now += 0.03
    assert executor.entered.wait(DEADLINE), "the first bulk never reached the executor"
    # Given a message that has waited the latency target while the sink is still busy
    collector.submit(msg("a2", received=clock.now), results)
    clock.now += 1.0
    # Then its bulk is forwarded ("latency"), queued behind the write
    wait_until(lambda: collector.stats().flushed.get("latency") == 1, DEADLINE, "a latency flush")
    assert collector.stats().queued_bulks == 1
    executor.gate.set()
    wait_until(lambda: results.count() == 2, DEADLINE, "both results")
    assert [reason for _, _, reason in executor.bulks][1:] == ["latency"]
    assert collector.stats().sizing["a"]["writes_measured"] == 2


def test_a_unit_goes_into_one_bulk_although_the_size_target_falls_within_it(make: Factory) -> None:
    clock = FakeClock()
    collector, ex = make(("a",), clock=clock, latency=1.0)
    # Given an idle sink whose measured intake and costs call for bulks of two rows
    collector._sizers["a"].target = Target(2, "keep-up", 100.0, 0.2, 2e-5)
    results = Results()
    # When a unit of work of five messages is handed over
    collector.submit_unit([msg(f"a{i}", received=clock.now) for i in range(5)], results)
    # Then its messages share one bulk, closed at the target once the whole unit is in: the unit's
    # commit waits for one write, not for the next one too
    wait_until(lambda: results.count() == 5, DEADLINE, "five results")
    (_, ids, reason), = ex["a"].bulks
    assert ids == [f"a{i}" for i in range(5)] and reason == "target"


def test_a_unit_with_a_type_nobody_writes_is_refused_whole(make: Factory) -> None:
    collector, _ = make(("a", "b"), executors={"a": RecordingExecutor()})
    with pytest.raises(UnknownMessageTypeError, match=r"'b'.*'a'"):
        collector.submit_unit([msg("a1", "a"), msg("b1", "b")], Results())
    stats = collector.stats()
    assert (stats.messages, stats.bytes, stats.active_bulks) == (0, 0, 0)


# -- registration ----------------------------------------------------------------------------

def test_unknown_type_is_refused_and_nothing_is_kept(make: Factory) -> None:
    collector, ex = make(("a", "b"), executors={"a": RecordingExecutor()})
    producer = Results()
    with pytest.raises(UnknownMessageTypeError, match=r"'b'.*'a'"):
        collector.submit(msg("m1", "b"), producer)
    stats = collector.stats()
    assert (stats.messages, stats.bytes, stats.active_bulks) == (0, 0, 0)
    assert not collector.is_bulk_mode_on("m1")
    # The refused handler was not registered: a later message with that id does not reach it
    collector.register_executor("b", RecordingExecutor())
    observer = Results()
    collector.register_result_handler(observer, message_type="b")
    collector.submit(msg("m1", "b"))
    collector.flush()
    observer.one("m1")
    assert producer.count() == 0


def test_executor_for_an_unconfigured_type_is_refused(make: Factory) -> None:
    collector, _ = make(("a",))
    with pytest.raises(UnknownMessageTypeError, match="zzz"):
        collector.register_executor("zzz", RecordingExecutor())
    with pytest.raises(UnknownMessageTypeError):
        collector.register_result_handler(Results(), message_type="zzz")


def test_registering_an_executor_again_replaces_it(make: Factory, caplog: pytest.LogCaptureFixture) -> None:
    collector, ex = make(("a",))
    replacement = RecordingExecutor()
    with caplog.at_level(logging.INFO, logger="mqbridge.collector"):
        collector.register_executor("a", replacement)
    assert "replaced" in caplog.text
    collector.submit(msg("a1"))
    collector.flush()
    wait_until(lambda: replacement.bulks, DEADLINE, "a bulk on the replacement executor")
    assert not ex["a"].bulks


def test_handler_registration_needs_exactly_one_key(make: Factory) -> None:
    collector, _ = make()
    with pytest.raises(ValueError):
        collector.register_result_handler(Results())
    with pytest.raises(ValueError):
        collector.register_result_handler(Results(), message_type="a", msg_id="m1")


# -- result fan-out --------------------------------------------------------------------------

def test_producer_handler_is_called_once_then_removed(make: Factory) -> None:
    collector, _ = make(("a",))
    producer, observer = Results(), Results()
    collector.register_result_handler(observer, message_type="a")
    collector.submit(msg("m1"), producer)
    collector.flush()
    assert producer.one("m1").ok
    wait_until(lambda: observer.count() == 1, DEADLINE, "1 observed result")
    # The same id again, without a handler: the first producer hears nothing more
    collector.submit(msg("m1"))
    collector.flush()
    wait_until(lambda: observer.count() == 2, DEADLINE, "2 observed results")
    assert producer.count() == 1


def test_handlers_registered_by_msg_id_and_unregistered(make: Factory) -> None:
    collector, _ = make(("a",))
    kept, dropped, observer = Results(), Results(), Results()
    collector.register_result_handler(kept, msg_id="m1")
    collector.register_result_handler(dropped, msg_id="m2")
    collector.unregister_result_handler(dropped, msg_id="m2")
    collector.register_result_handler(observer, message_type="a")
    collector.submit(msg("m1"))
    collector.submit(msg("m2"))
    collector.flush()
    wait_until(lambda: observer.count() == 2, DEADLINE, "2 observed results")
    assert kept.one("m1").ok and dropped.count() == 0


def test_intermediate_handlers_see_every_message_of_their_type(make: Factory) -> None:
    collector, _ = make(("a", "b"))
    producer, observer_a, observer_b, gone = Results(), Results(), Results(), Results()
    collector.register_result_handler(observer_a, message_type="a")
    collector.register_result_handler(observer_b, message_type="b")
    collector.register_result_handler(gone, message_type="a")
    collector.unregister_result_handler(gone, message_type="a")
    for i in range(3):
        collector.submit(msg(f"a{i}", "a"), producer)
    collector.submit(msg("b0", "b"), producer)
    collector.flush()
    wait_until(lambda: producer.count() == 4 and observer_a.count() == 3 and observer_b.count() == 1, DEADLINE,
               "every producer's and observer's result")
    assert sorted(observer_a.got) == ["a0", "a1", "a2"] and list(observer_b.got) == ["b0"]
    assert gone.count() == 0


def test_is_bulk_mode_on_while_held_and_off_after_the_result(make: Factory) -> None:
    executor = RecordingExecutor(gated=True)
    collector, _ = make(("a",), executors={"a": executor})
    seen_in_handler: list[bool] = []
    collector.submit(msg("m1"), lambda m, r: seen_in_handler.append(collector.is_bulk_mode_on(m.msg_id)))
    assert collector.is_bulk_mode_on("m1")  # in the active bulk
    collector.flush()
    assert executor.entered.wait(DEADLINE)
    assert collector.is_bulk_mode_on("m1")  # executing
    executor.gate.set()
    wait_until(lambda: not collector.is_bulk_mode_on("m1"), DEADLINE, "bulk mode off for m1")
    # The handler ran while the message was still held: a listener that sees "not held"
    # can rely on its result having been delivered.
    assert seen_in_handler == [True]
    assert collector.stats().bytes == 0 and collector.stats().messages == 0


def test_two_deliveries_of_one_msg_id_in_a_bulk_each_get_their_result_and_both_are_released(make: Factory) -> None:
    # A redelivery taken by another listener while the first copy is still held: one bulk holds both
    executor = RecordingExecutor(gated=True)
    collector, _ = make(("a",), executors={"a": executor})
    first, second = Results(), Results()
    collector.submit(msg("m1"), first)
    collector.submit(msg("m1"), second)
    collector.submit(msg("m2"), first)
    assert collector.stats().messages == 3
    collector.flush()
    assert executor.entered.wait(DEADLINE)
    executor.gate.set()
    wait_until(lambda: not collector.is_bulk_mode_on("m1"), DEADLINE, "bulk mode off for both deliveries of m1")
    assert first.one("m1").ok and second.one("m1").ok and first.one("m2").ok
    assert first.count() == 2 and second.count() == 1
    assert (collector.stats().bytes, collector.stats().messages) == (0, 0)


# -- executor results ------------------------------------------------------------------------

def test_executor_exception_makes_every_result_retryable(make: Factory, caplog: pytest.LogCaptureFixture) -> None:
    def explode(bulk: Bulk) -> list[MessageResult]:
        raise RuntimeError("spark is down")

    executor = RecordingExecutor(explode)
    collector, _ = make(("a",), executors={"a": executor})
    results = Results()
    with caplog.at_level(logging.ERROR, logger="mqbridge.collector"):
        for i in range(3):
            collector.submit(msg(f"m{i}"), results)
        collector.flush()
        wait_until(lambda: results.count() == 3, DEADLINE, "3 results")
    bulk_id = executor.bulks[0][0]
    for i in range(3):
        result = results.one(f"m{i}")
        assert result.outcome is Outcome.RETRYABLE
        assert "spark is down" in result.reason and result.bulk_id == bulk_id
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is not None
    # The worker survived: the next bulk is executed
    executor.respond = all_success
    collector.submit(msg("m9"), results)
    collector.flush()
    assert results.one("m9").ok


def test_wrong_result_count_and_unknown_ids_are_handled(make: Factory) -> None:
    def partial(bulk: Bulk) -> list[MessageResult]:
        return [MessageResult.success("m0", bulk.bulk_id), MessageResult.success("stranger", bulk.bulk_id)]

    collector, _ = make(("a",), executors={"a": RecordingExecutor(partial)})
    results = Results()
    for i in range(3):
        collector.submit(msg(f"m{i}"), results)
    collector.flush()
    wait_until(lambda: results.count() == 3, DEADLINE, "3 results")
    assert results.one("m0").ok
    for missing in ("m1", "m2"):
        result = results.one(missing)
        assert result.outcome is Outcome.RETRYABLE and "no result" in result.reason
    assert "stranger" not in results.got
    assert collector.stats().messages == 0


def test_permanent_results_are_passed_through(make: Factory) -> None:
    def one_bad(bulk: Bulk) -> list[MessageResult]:
        # No bulk id given: the collector fills it in.
        return [MessageResult.permanent(m.msg_id, "body does not parse") if m.msg_id == "bad"
                else MessageResult.success(m.msg_id) for m in bulk.messages]

    executor = RecordingExecutor(one_bad)
    collector, _ = make(("a",), executors={"a": executor})
    results = Results()
    collector.submit(msg("good"), results)
    collector.submit(msg("bad"), results)
    collector.flush()
    bad = results.one("bad")
    assert bad.outcome is Outcome.PERMANENT and bad.reason == "body does not parse"
    assert results.one("good").ok
    assert bad.bulk_id == results.one("good").bulk_id == executor.bulks[0][0]
