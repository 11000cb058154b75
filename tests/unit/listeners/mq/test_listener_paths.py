"""Every failure path of a listener on an IBM MQ queue backs out before it disconnects.

MQDISC with an open unit of work *commits* it, so a failure path that disconnects first silently
deletes the messages it was holding. The fake queue manager records every such disconnect; each
scenario below drives the real listener loop (real collector, a stub executor instead of Spark)
into one failure and then checks that none happened and that no message was lost.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from mqbridge.bulks.collector import BulkCollector, CollectorLimits, TypeLimits
from mqbridge.counters import Counters
from mqbridge.errors import (
    BackoutFailedError,
    InDoubtError,
    PreprocessorError,
    SourceConnectionError,
    SourceQuiescingError,
    UnknownMessageTypeError,
)
from mqbridge.listeners.mq import MqSource
from mqbridge.loop.listener import ListenerSpec, ListenerThread, PlainChain
from mqbridge.message import Bulk, Message, MessageResult
from mqbridge.records import DeliveryTracker
from tests.support.fakes import pymqi_fake
from tests.support.fakes.mq_server import FakeQueueManagerServer
from tests.support.fakes.mq_testing import make_source
from tests.support.listener_run import RunningListener
from tests.support.waiting import wait_until

C = pymqi_fake.CMQC
DLQ = "SYSTEM.DEAD.LETTER.QUEUE"
BODIES = [f"m{i:02d}".encode() for i in range(30)]


@dataclass
class StubExecutor:
    """Stands in for Spark: decides each message's result; records what 'landed'."""

    outcome: Callable[[Message], MessageResult] = lambda m: MessageResult.success(m.msg_id)
    gate: threading.Event | None = None  # if set, execute waits for it
    landed: list[bytes] = field(default_factory=list)
    calls: int = 0

    def execute(self, bulk: Bulk) -> list[MessageResult]:
        self.calls += 1
        if self.gate is not None:
            self.gate.wait(10)
        results = [self.outcome(m) for m in bulk.messages]
        self.landed += [m.body for m, r in zip(bulk.messages, results, strict=True) if r.ok]
        return results


class FailingChain(PlainChain):
    def __init__(self, fail: Callable[[Message], BaseException | None] | None = None,
                 classify: str | None = None) -> None:
        super().__init__()
        self._fail, self._type = fail, classify

    def classify(self, message: Message) -> str | None:
        return self._type

    def process(self, message: Message) -> Message | None:
        error = self._fail(message) if self._fail else None
        if error is not None:
            raise error
        return message


@pytest.fixture
def qm() -> Iterator[FakeQueueManagerServer]:
    server = FakeQueueManagerServer(dead_letter_queue=DLQ)
    server.define_queue("ORDERS", backout_threshold=0, backout_queue="ORDERS.BACKOUT")  # hot retry loops here
    server.define_queue("ORDERS.BACKOUT")
    server.put_many("ORDERS", BODIES)
    yield server
    server.close()


class Run(RunningListener):
    """One listener thread on ORDERS, with its collector, until a condition or its end."""

    def __init__(self, qm: FakeQueueManagerServer, executor: StubExecutor, *, chain: PlainChain | None = None,
                 source: MqSource | None = None, batch: int = 10, in_flight: int = 1) -> None:
        self.qm, self.executor = qm, executor
        self.collector = BulkCollector(CollectorLimits(memory=64 << 20, max_bulks=10, workers=2),
                                       {"orders": TypeLimits(bulk_size=1 << 20, bulk_timeout=0.2)})
        self.collector.register_executor("orders", executor)
        self.collector.start()
        self.source = source or make_source(qm, "ORDERS", batch=batch)
        spec = ListenerSpec(name="qm:ORDERS#1", source_name="qm", queue="ORDERS", batch=batch, wait=0.1,
                            message_type="orders", backout_threshold=0, backout_queue=None)
        the_chain = chain or PlainChain()
        self.counters = Counters()
        # `in_flight` connections, one unit of work each (`[[listeners]] in_flight`)
        sources = [self.source] + [make_source(qm, "ORDERS", batch=batch) for _ in range(in_flight - 1)]
        self.thread = ListenerThread(spec, sources, self.collector, lambda: the_chain, self.counters,
                                     DeliveryTracker())
        self.thread.start()

    def assert_nothing_lost(self) -> None:
        qm = self.qm
        assert qm.disconnects_with_open_uow == [], "a failure path disconnected before backing out"
        assert qm.live_connections() == [], "the listener left its connection open"
        assert qm.uncommitted() == 0
        remaining = qm.queue("ORDERS").bodies()
        moved = qm.queue("ORDERS.BACKOUT").bodies() + [b[172:] for b in qm.queue(DLQ).bodies()]
        landed_and_committed = set(BODIES) - set(remaining) - set(moved)
        assert landed_and_committed <= set(self.executor.landed), "a message left the queue without landing"
        assert sorted(set(remaining) | set(moved) | set(self.executor.landed)) == sorted(BODIES)


def test_spark_failure_backs_every_message_out_with_backout_count(qm) -> None:
    executor = StubExecutor(lambda m: MessageResult.retryable(m.msg_id, "table path is a file"))
    run = Run(qm, executor)
    # (the unit of 10, then units of one: every message that failed is a suspect of its unit)
    assert run.finish(lambda: run.counters.total("messages_backed_out") >= 12) is None
    run.assert_nothing_lost()
    assert qm.queue("ORDERS").bodies() == BODIES
    assert all(m.backout_count >= 1 for m in qm.queue("ORDERS").messages[:10])


def test_connection_broken_mid_batch(qm) -> None:
    qm.inject("get", C.MQRC_CONNECTION_BROKEN, after=13)
    run = Run(qm, StubExecutor())
    assert isinstance(run.finish(), SourceConnectionError)
    run.assert_nothing_lost()
    assert len(qm.queue("ORDERS").bodies()) == 20  # the first unit of 10 was committed


def test_connection_broken_on_commit_is_in_doubt(qm) -> None:
    qm.inject("commit", C.MQRC_CONNECTION_BROKEN)
    run = Run(qm, StubExecutor())
    failure = run.finish()
    assert isinstance(failure, InDoubtError) and len(failure.msg_ids) == 10
    run.assert_nothing_lost()
    assert len(qm.queue("ORDERS").bodies()) == 30  # backed out: landed once, delivered again later


def test_connection_lost_while_waiting_for_spark(qm) -> None:
    gate = threading.Event()
    run = Run(qm, StubExecutor(gate=gate))
    wait_until(lambda: run.executor.calls >= 1, 10, "the first bulk")
    qm.break_connections()
    gate.set()
    assert isinstance(run.finish(), SourceConnectionError | InDoubtError)
    run.assert_nothing_lost()


def test_preprocessor_error_rolls_back(qm) -> None:
    chain = FailingChain(lambda m: PreprocessorError("boom", "p") if m.body == b"m03" else None)
    run = Run(qm, StubExecutor(), chain=chain)
    assert run.finish(lambda: run.counters.total("preprocessor_errors") >= 2) is None
    run.assert_nothing_lost()
    assert b"m03" in qm.queue("ORDERS").bodies()


def test_unexpected_exception_in_the_chain(qm) -> None:
    chain = FailingChain(lambda m: RuntimeError("bug") if m.body == b"m05" else None)
    run = Run(qm, StubExecutor(), chain=chain)
    assert isinstance(run.finish(), RuntimeError)
    run.assert_nothing_lost()


def test_unknown_message_type(qm) -> None:
    run = Run(qm, StubExecutor(), chain=FailingChain(classify="nope"))
    assert isinstance(run.finish(), UnknownMessageTypeError)
    run.assert_nothing_lost()
    assert qm.queue("ORDERS").bodies() == BODIES


def test_quiescing_mid_batch_finishes_the_unit_and_stops(qm) -> None:
    qm.inject("get", C.MQRC_Q_MGR_QUIESCING, after=4)
    run = Run(qm, StubExecutor())
    assert isinstance(run.finish(), SourceQuiescingError)
    run.assert_nothing_lost()
    assert len(qm.queue("ORDERS").bodies()) == 26  # the unit of 4 in hand was finished


def test_poison_message_nobody_can_take(qm) -> None:
    qm.queue("ORDERS.BACKOUT").put_inhibited = True
    qm.queue(DLQ).put_inhibited = True
    executor = StubExecutor(lambda m: MessageResult.permanent(m.msg_id, "bad") if m.body == b"m02"
                            else MessageResult.success(m.msg_id))
    run = Run(qm, executor)
    assert isinstance(run.finish(), BackoutFailedError)
    run.assert_nothing_lost()
    assert qm.queue("ORDERS").bodies() == BODIES


def test_stop_while_messages_flow(qm) -> None:
    run = Run(qm, StubExecutor(), batch=3)
    assert run.finish(lambda: run.counters.total("messages_committed") >= 3) is None
    assert run.thread.state.phase == "stopped"
    run.assert_nothing_lost()


def test_the_detector_catches_a_disconnect_before_backout(qm) -> None:
    """The guard above is real: a source that disconnects without backing out is caught."""

    class CarelessSource(MqSource):
        def close(self) -> None:
            if self._qmgr is not None:
                self._qmgr.disconnect()
                self._qmgr = None

    careless = CarelessSource("qm", make_source(qm, "ORDERS").config, "ORDERS", driver=pymqi_fake)
    chain = FailingChain(lambda m: RuntimeError("bug") if m.body == b"m05" else None)
    run = Run(qm, StubExecutor(), chain=chain, source=careless)
    assert isinstance(run.finish(), RuntimeError)
    assert len(qm.disconnects_with_open_uow) == 1
    with pytest.raises(AssertionError, match="disconnected before backing out"):
        run.assert_nothing_lost()


def test_units_in_flight_on_three_connections_are_all_committed(qm) -> None:
    # Given a listener holding up to 3 units of 10, each on a connection of its own, and a sink that
    # holds its first write until the listener has read two more units
    gate = threading.Event()
    run = Run(qm, StubExecutor(gate=gate), in_flight=3)
    wait_until(lambda: run.counters.total("messages_received") >= 30, 10,
               "30 messages read on three connections while the first write is held")
    assert qm.uncommitted() == 30  # three units of work open at once
    gate.set()
    # Then every unit is committed on its own connection, none disconnects with its unit open
    assert run.finish(lambda: run.counters.total("messages_committed") == 30) is None
    run.assert_nothing_lost()
    assert qm.queue("ORDERS").bodies() == [] and sorted(run.executor.landed) == BODIES


def test_connection_lost_with_units_in_flight_loses_nothing(qm) -> None:
    gate = threading.Event()
    run = Run(qm, StubExecutor(gate=gate), in_flight=3)
    wait_until(lambda: run.counters.total("messages_received") >= 30, 10, "three units in flight")
    qm.break_connections()
    gate.set()
    assert isinstance(run.finish(), SourceConnectionError | InDoubtError)
    run.assert_nothing_lost()
