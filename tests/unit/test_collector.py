"""BulkCollector: flush rules, execution per type, result fan-out, backpressure, shutdown.

No Spark and no broker: a recording executor stands in for Spark, a fake clock drives bulk age.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator

import pytest

from mqbridge.collector import BulkCollector, CollectorLimits, TypeLimits
from mqbridge.errors import CollectorClosedError, UnknownMessageTypeError
from mqbridge.message import Bulk, Message, MessageResult, Outcome
from tests.support.waiting import wait_until

DEADLINE = 3.0


def msg(msg_id: str, mtype: str = "a", size: int = 1000, received: float | None = None) -> Message:
    """A message whose `Message.size` is exactly `size` (body plus 256 bytes of overhead)."""
    message = Message(msg_id=msg_id, body=b"x" * (size - 256), source="test", destination="/queue/t",
                      message_type=mtype)
    if received is not None:
        message.received_monotonic = received
    return message


class FakeClock:
    """A clock that moves only when told to; counts its readers so a test can tell that the
    timer thread has looked at it."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now
        self.calls = 0

    def __call__(self) -> float:
        self.calls += 1
        return self.now


class Concurrency:
    """Counts bulks executing at once, overall and per type."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: dict[str, int] = defaultdict(int)
        self.max_type: dict[str, int] = defaultdict(int)
        self.max_total = 0

    def enter(self, mtype: str) -> None:
        with self.lock:
            self.running[mtype] += 1
            self.max_type[mtype] = max(self.max_type[mtype], self.running[mtype])
            self.max_total = max(self.max_total, sum(self.running.values()))

    def leave(self, mtype: str) -> None:
        with self.lock:
            self.running[mtype] -= 1


def all_success(bulk: Bulk) -> list[MessageResult]:
    return [MessageResult.success(m.msg_id, bulk.bulk_id) for m in bulk.messages]


class RecordingExecutor:
    """Records every bulk; blocks in execute until `gate` is set; answers with `respond`."""

    def __init__(self, respond: Callable[[Bulk], list[MessageResult]] = all_success, *,
                 gated: bool = False, concurrency: Concurrency | None = None) -> None:
        self.respond = respond
        self.gate = threading.Event()
        if not gated:
            self.gate.set()
        self.concurrency = concurrency or Concurrency()
        self.bulks: list[tuple[str, list[str], str]] = []  # (bulk_id, msg_ids, flush_reason)
        self.entered = threading.Event()

    def execute(self, bulk: Bulk) -> list[MessageResult]:
        self.concurrency.enter(bulk.message_type)
        try:
            self.bulks.append((bulk.bulk_id, [m.msg_id for m in bulk.messages], bulk.flush_reason))
            self.entered.set()
            assert self.gate.wait(DEADLINE), "test never opened the gate"
            return self.respond(bulk)
        finally:
            self.concurrency.leave(bulk.message_type)

    @property
    def batches(self) -> list[list[str]]:
        return [ids for _, ids, _ in self.bulks]


class Results:
    """A result handler that records what it is given."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.got: dict[str, list[MessageResult]] = defaultdict(list)

    def __call__(self, message: Message, result: MessageResult) -> None:
        assert message.msg_id == result.msg_id
        with self.lock:
            self.got[message.msg_id].append(result)

    def count(self) -> int:
        with self.lock:
            return sum(len(r) for r in self.got.values())

    def one(self, msg_id: str) -> MessageResult:
        wait_until(lambda: self.got.get(msg_id), DEADLINE, f"the result of {msg_id}")
        with self.lock:
            (result,) = self.got[msg_id]
            return result


Factory = Callable[..., tuple[BulkCollector, dict[str, RecordingExecutor]]]


@pytest.fixture
def make() -> Iterator[Factory]:
    """Builds started collectors with one recording executor per type; always closes them,
    opening every gate first so nothing hangs."""
    made: list[tuple[BulkCollector, dict[str, RecordingExecutor]]] = []

    def factory(types: tuple[str, ...] = ("a", "b"), *, memory: int = 10**6, max_bulks: int = 10,
                workers: int = 2, bulk_size: int = 10**6, bulk_timeout: float = 60.0,
                clock: Callable[[], float] = time.monotonic, executors: dict[str, RecordingExecutor] | None = None,
                start: bool = True) -> tuple[BulkCollector, dict[str, RecordingExecutor]]:
        collector = BulkCollector(CollectorLimits(memory=memory, max_bulks=max_bulks, workers=workers),
                                  {t: TypeLimits(bulk_size=bulk_size, bulk_timeout=bulk_timeout) for t in types},
                                  clock=clock, tick=0.005)
        if executors is None:
            executors = {t: RecordingExecutor() for t in types}
        for mtype, executor in executors.items():
            collector.register_executor(mtype, executor)
        if start:
            collector.start()
        made.append((collector, executors))
        return collector, executors

    yield factory
    for collector, executors in made:
        for executor in executors.values():
            executor.gate.set()
        collector.close(timeout=DEADLINE)


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
