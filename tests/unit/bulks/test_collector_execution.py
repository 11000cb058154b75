"""BulkCollector: `writes_per_type` bulks per type at a time, coalescing, backpressure, shutdown, handler errors.

No Spark and no broker (`tests.support.collector`). Flush rules and results: test_collector.py.
"""

from __future__ import annotations

import logging
import threading

import pytest

from mqbridge.bulks.collector import BulkCollector
from mqbridge.errors import CollectorClosedError
from mqbridge.loop.unit_plan import UnitResults
from mqbridge.message import Bulk, Message, MessageResult, Outcome
from tests.support.collector import (
    DEADLINE,
    Concurrency,
    Factory,
    RecordingExecutor,
    Results,
    make,
    msg,
)
from tests.support.waiting import wait_until

__all__ = ["make"]  # the fixture, used by name


# -- execution -------------------------------------------------------------------------------

def test_one_bulk_per_type_at_a_time_while_types_run_in_parallel(make: Factory) -> None:
    concurrency = Concurrency()
    ex = {t: RecordingExecutor(gated=True, concurrency=concurrency) for t in ("a", "b")}
    collector, _ = make(("a", "b"), workers=2, executors=ex)
    results = Results()
    # Given a bulk of type a executing
    collector.submit(msg("a1", "a"), results)
    collector.flush()
    assert ex["a"].entered.wait(DEADLINE)
    # When a second bulk of a and a bulk of b are forwarded
    collector.submit(msg("a2", "a"), results)
    collector.flush()
    collector.submit(msg("b1", "b"), results)
    collector.flush()
    # Then b runs beside a, while the second a waits for the first
    assert ex["b"].entered.wait(DEADLINE)
    stats = collector.stats()
    assert (stats.in_flight_bulks, stats.queued_bulks) == (2, 1)
    assert ex["a"].batches == [["a1"]]
    for executor in ex.values():
        executor.gate.set()
    wait_until(lambda: results.count() == 3, DEADLINE, "3 results")
    assert ex["a"].batches == [["a1"], ["a2"]]
    assert concurrency.max_type == {"a": 1, "b": 1} and concurrency.max_total == 2


def test_writes_per_type_bulks_of_one_type_overlap_and_no_more(make: Factory) -> None:
    concurrency = Concurrency()
    executor = RecordingExecutor(gated=True, concurrency=concurrency)
    collector, _ = make(("a",), workers=3, writes_per_type=2, executors={"a": executor})
    results = Results()
    # Given two bulks of type a forwarded one after the other: both execute at once
    for msg_id in ("a1", "a2"):
        collector.submit(msg(msg_id), results)
        collector.flush()
        assert executor.entered.wait(DEADLINE)  # taken before the next is queued (else they merge)
        wait_until(lambda n=int(msg_id[1]): concurrency.running["a"] == n, DEADLINE,
                   f"{msg_id} executing")
    wait_until(lambda: concurrency.running["a"] == 2, DEADLINE, "two bulks of type a executing")
    # When a third is forwarded, it waits, although a worker is free
    collector.submit(msg("a3"), results)
    collector.flush()
    stats = collector.stats()
    assert (stats.in_flight_bulks, stats.queued_bulks) == (2, 1)
    executor.gate.set()
    wait_until(lambda: results.count() == 3, DEADLINE, "3 results")
    assert concurrency.max_type == {"a": 2}
    assert sorted(m for batch in executor.batches for m in batch) == ["a1", "a2", "a3"]


class FilesFirstExecutor(RecordingExecutor):
    """A writer whose bulks say their files are written (`Bulk.files_written`, as a Delta table's
    writer does after its Spark job) before they wait at the gate, their commit."""

    def execute(self, bulk: Bulk) -> list[MessageResult]:
        bulk.files_written()
        bulk.files_written()  # said twice: counted once
        return super().execute(bulk)


def second_bulk_behind_a_writing_one(make: Factory, executor: RecordingExecutor,
                                     concurrency: Concurrency) -> tuple[BulkCollector, Results]:
    """Bulk a1 of type a executing (held at the gate), then bulk a2 of the type forwarded, with
    `writes_per_type` 1 and workers to spare."""
    collector, _ = make(("a",), workers=3, writes_per_type=1, executors={"a": executor})
    results = Results()
    collector.submit(msg("a1"), results)
    collector.flush()
    wait_until(lambda: concurrency.running["a"] == 1, DEADLINE, "a1 executing")
    collector.submit(msg("a2"), results)
    collector.flush()
    return collector, results


def test_a_bulk_whose_files_are_written_frees_its_write_slot_while_it_commits(make: Factory) -> None:
    concurrency = Concurrency()
    executor = FilesFirstExecutor(gated=True, concurrency=concurrency)
    # Given a bulk of type a whose files are written, waiting for its commit
    # When the next bulk of the type is forwarded
    collector, results = second_bulk_behind_a_writing_one(make, executor, concurrency)
    # Then it is written at once, beside it (writes_per_type 1)
    wait_until(lambda: concurrency.running["a"] == 2, DEADLINE, "a2 executing beside a1")
    assert collector.stats().in_flight_bulks == 2
    executor.gate.set()
    wait_until(lambda: results.count() == 2, DEADLINE, "2 results")
    assert executor.batches == [["a1"], ["a2"]]


def test_a_bulk_that_does_not_say_its_files_are_written_holds_its_slot_to_the_end(make: Factory) -> None:
    concurrency = Concurrency()
    executor = RecordingExecutor(gated=True, concurrency=concurrency)
    collector, results = second_bulk_behind_a_writing_one(make, executor, concurrency)
    assert (collector.stats().in_flight_bulks, collector.stats().queued_bulks) == (1, 1)
    executor.gate.set()
    wait_until(lambda: results.count() == 2, DEADLINE, "2 results")
    assert concurrency.max_type == {"a": 1}


def test_queued_bulks_of_a_type_are_coalesced(make: Factory, caplog: pytest.LogCaptureFixture) -> None:
    executor = RecordingExecutor(gated=True)
    collector, _ = make(("a",), workers=2, executors={"a": executor})
    results = Results()
    collector.submit(msg("a1"), results)
    collector.flush()
    assert executor.entered.wait(DEADLINE)
    # Two more bulks of the same type queue up behind the executing one
    for msg_id in ("a2", "a3"):
        collector.submit(msg(msg_id), results)
        collector.flush()
    assert collector.stats().queued_bulks == 2
    with caplog.at_level(logging.DEBUG, logger="mqbridge.collector"):
        executor.gate.set()
        wait_until(lambda: results.count() == 3, DEADLINE, "3 results")
    # They were written as one bulk, under the first one's id
    assert executor.batches == [["a1"], ["a2", "a3"]]
    merged_id = executor.bulks[1][0]
    assert results.one("a2").bulk_id == results.one("a3").bulk_id == merged_id
    assert collector.stats().coalesced_bulks == 1
    (record,) = [r for r in caplog.records if "absorbed" in r.getMessage()]
    assert isinstance(record.args, tuple)
    kept, absorbed = str(record.args[0]), str(record.args[1])
    assert kept == merged_id and absorbed != merged_id and absorbed > kept  # ids grow with creation
    stats = collector.stats()
    assert (stats.executed_bulks, stats.executed_messages) == (2, 3)


# -- backpressure ----------------------------------------------------------------------------

def submit_in_thread(collector: BulkCollector, message: Message, **kwargs: object) -> dict[str, object]:
    """Run a (possibly blocking) submit on a thread; the dict gets "done" or "error"."""
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            collector.submit(message, **kwargs)  # type: ignore[arg-type]
            outcome["done"] = True
        except Exception as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="test-submit", daemon=True)
    thread.start()
    outcome["thread"] = thread
    return outcome


def test_backpressure_blocks_submit_until_results_release_memory(make: Factory) -> None:
    executor = RecordingExecutor(gated=True)
    collector, _ = make(("a",), memory=2000, executors={"a": executor})
    results = Results()
    collector.submit(msg("a1"), results)
    collector.submit(msg("a2"), results)  # memory reached: forwarded, now executing (gated)
    assert executor.entered.wait(DEADLINE)
    # When a third message does not fit, its submit blocks
    outcome = submit_in_thread(collector, msg("a3"), handler=results)
    wait_until(lambda: collector.stats().backpressure_waits == 1, DEADLINE, "a submit waiting for memory")
    assert "done" not in outcome and not collector.is_bulk_mode_on("a3")
    # Then the results of the executing bulk release memory and the submit goes through
    executor.gate.set()
    wait_until(lambda: "done" in outcome, DEADLINE, "the blocked submit to go through")
    assert collector.is_bulk_mode_on("a3")
    collector.flush()
    wait_until(lambda: results.count() == 3, DEADLINE, "3 results")
    assert collector.stats().bytes == 0


def test_blocked_submit_forwards_active_bulks_instead_of_waiting_for_their_timeout(make: Factory) -> None:
    collector, ex = make(("a",), memory=2500)
    results = Results()
    collector.submit(msg("a1"), results)
    collector.submit(msg("a2"), results)  # 2000 < 2500: still active
    collector.submit(msg("a3"), results)  # does not fit: the active bulk is sent on, then it fits
    wait_until(lambda: results.count() == 2, DEADLINE, "2 results")
    assert ex["a"].batches == [["a1", "a2"]]
    assert collector.stats().flushed == {"memory": 1} and collector.is_bulk_mode_on("a3")


def test_a_message_larger_than_memory_is_accepted_into_an_empty_collector(make: Factory) -> None:
    collector, _ = make(("a",), memory=1000)
    results = Results()
    collector.submit(msg("huge", size=5000), results, timeout=0)
    assert results.one("huge").ok  # memory flush forwarded it at once
    assert collector.stats().backpressure_waits == 0


def test_stop_event_interrupts_a_blocked_submit(make: Factory) -> None:
    executor = RecordingExecutor(gated=True)
    collector, _ = make(("a",), memory=1000, executors={"a": executor})
    collector.submit(msg("a1"))
    assert executor.entered.wait(DEADLINE)
    stop = threading.Event()
    outcome = submit_in_thread(collector, msg("a2"), stop=stop)
    wait_until(lambda: collector.stats().backpressure_waits == 1, DEADLINE, "a submit waiting for memory")
    stop.set()
    wait_until(lambda: "error" in outcome, DEADLINE, "the blocked submit to fail")
    assert isinstance(outcome["error"], CollectorClosedError) and "stopping" in str(outcome["error"])
    assert not collector.is_bulk_mode_on("a2") and collector.stats().messages == 1


def test_blocked_submit_times_out(make: Factory) -> None:
    executor = RecordingExecutor(gated=True)
    collector, _ = make(("a",), memory=1000, executors={"a": executor})
    collector.submit(msg("a1"))
    handler = Results()
    with pytest.raises(TimeoutError):
        collector.submit(msg("a2"), handler, timeout=0.05)
    assert not collector.is_bulk_mode_on("a2")
    executor.gate.set()
    wait_until(lambda: collector.stats().messages == 0, DEADLINE, "an empty collector")
    assert handler.count() == 0


# -- shutdown --------------------------------------------------------------------------------

def test_close_flushes_with_shutdown_and_delivers_every_result(make: Factory) -> None:
    collector, ex = make(("a", "b"))
    results = Results()
    collector.submit(msg("a1", "a"), results)
    collector.submit(msg("b1", "b"), results)
    assert collector.close(timeout=DEADLINE) is True
    assert results.count() == 2 and results.one("a1").ok and results.one("b1").ok
    stats = collector.stats()
    assert stats.flushed == {"shutdown": 2}
    assert (stats.messages, stats.bytes, stats.executed_bulks, stats.executed_messages) == (0, 0, 2, 2)
    assert stats.execute_seconds_total >= stats.last_execute_seconds >= 0
    assert not [t for t in threading.enumerate() if t.name.startswith("collector-") and t.is_alive()]
    with pytest.raises(CollectorClosedError):
        collector.submit(msg("a2", "a"))


def test_close_reports_undelivered_results_after_its_timeout(make: Factory) -> None:
    executor = RecordingExecutor(gated=True)
    collector, _ = make(("a",), executors={"a": executor})
    collector.submit(msg("a1"))
    assert collector.close(timeout=0.1) is False
    assert collector.is_bulk_mode_on("a1")
    executor.gate.set()  # lets the stuck worker finish


def test_close_wakes_a_blocked_submit(make: Factory) -> None:
    executor = RecordingExecutor(gated=True)
    collector, _ = make(("a",), memory=1000, executors={"a": executor})
    collector.submit(msg("a1"))
    outcome = submit_in_thread(collector, msg("a2"))
    wait_until(lambda: collector.stats().backpressure_waits == 1, DEADLINE, "a submit waiting for memory")
    closer = threading.Thread(target=collector.close, args=(DEADLINE,), name="test-close", daemon=True)
    closer.start()
    wait_until(lambda: "error" in outcome, DEADLINE, "the blocked submit to fail")
    assert isinstance(outcome["error"], CollectorClosedError)
    executor.gate.set()
    closer.join(DEADLINE)


def test_a_raising_handler_does_not_break_the_others(make: Factory, caplog: pytest.LogCaptureFixture) -> None:
    collector, _ = make(("a",))

    def broken(message: Message, result: MessageResult) -> None:
        raise ValueError("observer bug")

    producer, observer = Results(), Results()
    collector.register_result_handler(broken, message_type="a")
    collector.register_result_handler(observer, message_type="a")
    with caplog.at_level(logging.ERROR, logger="mqbridge.collector"):
        collector.submit(msg("m1"), producer)
        collector.submit(msg("m2"), producer)
        collector.flush()
        wait_until(lambda: producer.count() == 2 and observer.count() == 2, DEADLINE,
                   "2 results for the producer and the observer")
        wait_until(lambda: collector.stats().messages == 0, DEADLINE, "an empty collector")
    assert collector.stats().handler_errors == 2 and collector.stats().bytes == 0
    assert "observer bug" in caplog.text


def test_unit_results_take_a_bulk_of_results_in_one_call_and_a_raising_one_releases_its_messages(
        make: Factory, caplog: pytest.LogCaptureFixture) -> None:
    collector, _ = make(("a",))
    # Given a unit's waiter, which takes its results in one call per bulk
    first, second = msg("m1"), msg("m2")
    unit = UnitResults([first, second])
    unit.many([(msg("m1"), MessageResult.success("m1"))])  # another delivery with the same msg_id: not ours
    assert not unit.wait(0) and unit.get(first) is None
    collector.submit(first, unit)
    collector.submit(second, unit)
    collector.flush()
    # Then both results arrive together
    assert unit.wait(DEADLINE) and unit.get(first) is not None and unit.get(second) is not None

    # And a handler whose `many` raises is counted, its messages released, the next bulk unaffected
    class Broken:
        def many(self, results: list[tuple[Message, MessageResult]]) -> None:
            raise ValueError("many bug")

        def __call__(self, message: Message, result: MessageResult) -> None:
            raise AssertionError("not called: `many` takes them")

    with caplog.at_level(logging.ERROR, logger="mqbridge.collector"):
        collector.submit(msg("m3"), Broken())
        collector.flush()
        wait_until(lambda: collector.stats().messages == 0, DEADLINE, "an empty collector")
    assert collector.stats().handler_errors == 1 and "many bug" in caplog.text
    fourth = msg("m4")
    after = UnitResults([fourth])
    collector.submit(fourth, after)
    collector.flush()
    assert after.wait(DEADLINE) and after.get(fourth) is not None


def test_two_deliveries_with_one_msg_id_each_get_their_own_result(make: Factory) -> None:
    # Given two deliveries sharing a msg_id in one bulk (an MQ unit holding one MsgId twice), each
    # submitted with its own producer handler, and an executor failing the first one for good
    def first_fails(bulk: Bulk) -> list[MessageResult]:
        return [MessageResult.permanent(m.msg_id, "bad body") if m.body.startswith(b"bad")
                else MessageResult.success(m.msg_id) for m in bulk.messages]

    collector, _ = make(("a",), executors={"a": RecordingExecutor(first_fails)})
    bad, good = msg("twin"), msg("twin")
    bad.body = b"bad" + bad.body[3:]
    seen: list[tuple[Message, MessageResult]] = []
    collector.submit(bad, lambda m, r: seen.append((m, r)))
    collector.submit(good, lambda m, r: seen.append((m, r)))
    # When the bulk is executed
    collector.flush()
    wait_until(lambda: len(seen) == 2, DEADLINE, "2 results")
    # Then each delivery got its own result: neither masks the other
    outcomes = {id(m): r.outcome for m, r in seen}
    assert outcomes == {id(bad): Outcome.PERMANENT, id(good): Outcome.SUCCESS}
    assert not collector.is_bulk_mode_on("twin")


def test_holding_names_the_bulk_and_its_state_of_a_message_by_msg_id_or_identity(make: Factory) -> None:
    # Given a bulk of type a being written, another queued behind it, and a bulk of b collecting
    ex = {"a": RecordingExecutor(gated=True), "b": RecordingExecutor()}
    collector, _ = make(("a", "b"), workers=2, executors=ex)
    results = Results()
    writing = msg("a1", "a")
    writing.identity = "ORDER-1"
    collector.submit(writing, results)
    collector.flush(message_type="a")
    assert ex["a"].entered.wait(DEADLINE)
    collector.submit(msg("a2", "a"), results)
    collector.flush(message_type="a")
    collector.submit(msg("b1", "b"), results)
    # Then each is found where it is, by its msg_id, or by its identity
    [(message, bulk, state)] = collector.holding("a1")
    assert message is writing and state == "writing" and bulk.bulk_id == ex["a"].bulks[0][0]
    assert [(m.msg_id, s) for m, _, s in collector.holding("ORDER-1")] == [("a1", "writing")]
    assert [s for _, _, s in collector.holding("a2")] == ["queued"]
    assert [s for _, _, s in collector.holding("b1")] == ["collecting"]
    assert collector.holding("nope") == [] and collector.holding("") == []
    # And once its result is delivered, it is no longer held
    ex["a"].gate.set()
    results.one("a1")
    wait_until(lambda: not collector.holding("a1"), DEADLINE, "a1 released")
