"""Undo on IBM MQ, which commits or backs out a unit of work whole: on the fake queue manager (ORDERS
with BOTHRESH 3 and BOQNAME ORDERS.BACKOUT), every message of a unit that is backed out is told,
once per delivery — its own failure if it has one, else "unit_backout" with whether it landed — and
a commit that fails or is in doubt tells the messages not told yet. With the landing ledger, a
landed message that comes back is recognised and committed without being preprocessed or told
again."""

from __future__ import annotations

from collections import Counter

import pytest

from mqbridge.errors import InDoubtError, PreprocessorError, SourceConnectionError, UnitBackedOutError
from mqbridge.message import Message, MessageResult, RollbackKind
from tests.support.fakes import pymqi_fake
from tests.support.fakes.mq_server import FakeQueueManagerServer
from tests.support.fakes.mq_testing import make_source
from tests.support.undo import Listening, RecordingChain, StubExecutor, StubLedger

C = pymqi_fake.CMQC
K = RollbackKind
BODIES = [f"m{i:02d}".encode() for i in range(10)]
NEIGHBOURS = [b for b in BODIES if b != b"m04"]


def listening(qm: FakeQueueManagerServer, executor: StubExecutor, chain: RecordingChain,
              ledger: StubLedger | None) -> Listening:
    executor.ledger = ledger
    return Listening([make_source(qm, "ORDERS", batch=10)], executor, chain, batch=10, ledger=ledger)


def assert_told_once_per_delivery(chain: RecordingChain) -> None:
    deliveries = chain.deliveries_told()
    assert len(deliveries) == len(set(deliveries)), f"a delivery was told twice: {deliveries}"


def until_moved(qm: FakeQueueManagerServer) -> bool:
    return qm.queue("ORDERS.BACKOUT").bodies() == [b"m04"] and qm.queue("ORDERS").bodies() == [] \
        and qm.uncommitted() == 0


@pytest.mark.parametrize("ledger", [True, False], ids=["ledger", "no-ledger"])
def test_a_write_failing_for_one_message_backs_its_unit_out_and_tells_every_message(
        qm: FakeQueueManagerServer, ledger: bool) -> None:
    # Given a unit of 10 in which Spark fails one message every time, while taking the others
    qm.put_many("ORDERS", BODIES)
    chain = RecordingChain()
    executor = StubExecutor(lambda m: MessageResult.retryable(m.msg_id, "failed on its own while the sink takes writes")
                            if m.body == b"m04" else MessageResult.success(m.msg_id))
    stub = StubLedger() if ledger else None
    # When the listener runs until the queue manager moved it (BOTHRESH 3)
    run = listening(qm, executor, chain, stub)
    assert run.finish(lambda: until_moved(qm)) is None
    # Then it was told "write_failed" on each of its 3 deliveries (never "moved": the queue manager
    # moves it at its next get, unseen by the chain)
    assert [(t.delivery, t.kind, t.reason.moved) for t in chain.of(b"m04")] == [
        (1, K.WRITE_FAILED, False), (2, K.WRITE_FAILED, False), (3, K.WRITE_FAILED, False)]
    # And each neighbour once, for its first delivery: its unit went back whole although it had landed
    for body in NEIGHBOURS:
        [told] = chain.of(body)
        assert (told.delivery, told.kind, told.reason.landed, told.reason.moved) == (1, K.UNIT_BACKOUT, True, False)
        assert isinstance(told.reason.error, UnitBackedOutError)
    assert "failed on its own" in str(chain.of(b"m00")[0].reason.error)
    # And with the ledger their redelivery was recognised (not preprocessed again); without it they
    # were preprocessed again and landed again, untold
    processed = Counter(b for b, _ in chain.processed)
    assert all(processed[b] == (1 if ledger else 2) for b in NEIGHBOURS) and processed[b"m04"] == 3
    assert Counter(executor.landed) == Counter({b: 1 if ledger else 2 for b in NEIGHBOURS})
    assert_told_once_per_delivery(chain)


@pytest.mark.parametrize("ledger", [True, False], ids=["ledger", "no-ledger"])
def test_a_preprocessor_failure_backs_its_unit_out_and_tells_every_message(
        qm: FakeQueueManagerServer, ledger: bool) -> None:
    # Given a unit of 10 in which a preprocessor fails on one message every time
    qm.put_many("ORDERS", BODIES)
    chain = RecordingChain(fail=lambda m: m.body == b"m04")
    stub = StubLedger() if ledger else None
    executor = StubExecutor()
    run = listening(qm, executor, chain, stub)
    assert run.finish(lambda: until_moved(qm)) is None
    # Then the failing message is told "preprocessor" on each of its deliveries
    assert [(t.delivery, t.kind) for t in chain.of(b"m04")] == [(1, K.PREPROCESSOR), (2, K.PREPROCESSOR),
                                                                (3, K.PREPROCESSOR)]
    # And each neighbour once: without the ledger nothing of the unit was landed (told with the
    # preprocessor's error); with it they landed before the unit went back
    for body in NEIGHBOURS:
        [told] = chain.of(body)
        assert (told.delivery, told.kind, told.reason.landed) == (1, K.UNIT_BACKOUT, ledger)
        assert isinstance(told.reason.error, UnitBackedOutError if ledger else PreprocessorError)
    assert sorted(executor.landed) == NEIGHBOURS
    assert_told_once_per_delivery(chain)


@pytest.mark.parametrize(("reason", "kind", "error"), [
    (C.MQRC_CONNECTION_BROKEN, K.IN_DOUBT, InDoubtError),
    (C.MQRC_BACKED_OUT, K.UNIT_BACKOUT, SourceConnectionError),
], ids=["in-doubt", "backed-out-by-the-queue-manager"])
def test_a_commit_that_fails_tells_every_message_of_the_unit_and_its_redelivery_is_recognised(
        qm: FakeQueueManagerServer, reason: int, kind: RollbackKind, error: type[BaseException]) -> None:
    # Given a unit of 10 that lands, and whose MQCMIT fails: the connection breaks (in doubt), or
    # the queue manager backs the unit out (2003)
    qm.put_many("ORDERS", BODIES)
    qm.inject("commit", reason)
    chain, stub, executor = RecordingChain(), StubLedger(), StubExecutor()
    failure = listening(qm, executor, chain, stub).finish()
    assert isinstance(failure, error)
    # Then every message is told so, once, as landed
    assert sorted((t.body, t.delivery, t.kind, t.reason.landed) for t in chain.told) == [
        (b, 1, kind, True) for b in BODIES]
    assert all(t.reason.error is failure for t in chain.told)
    # When the unit comes back to a listener that commits
    assert qm.queue("ORDERS").bodies() == BODIES
    again = listening(qm, executor, chain, stub)
    assert again.finish(lambda: qm.queue("ORDERS").bodies() == [] and qm.uncommitted() == 0) is None
    # Then the ledger recognised every message: none preprocessed or told again, none landed twice
    assert Counter(b for b, _ in chain.processed) == Counter(BODIES)
    assert len(chain.told) == 10 and sorted(executor.landed) == BODIES


def test_a_message_the_queue_manager_moves_at_get_time_is_never_told(qm: FakeQueueManagerServer) -> None:
    # Given a message already backed out 3 times (BOTHRESH 3): the adapter moves it when it gets it
    qm.put("ORDERS", b"poison", backout_count=3)
    qm.put_many("ORDERS", [b"ok"])
    chain = RecordingChain()
    run = listening(qm, StubExecutor(), chain, StubLedger())
    assert run.finish(lambda: qm.queue("ORDERS").bodies() == [] and qm.uncommitted() == 0) is None
    assert qm.queue("ORDERS.BACKOUT").bodies() == [b"poison"]
    assert chain.processed == [(b"ok", 1)] and chain.told == []


def test_messages_are_told_as_received(qm: FakeQueueManagerServer) -> None:
    qm.put_many("ORDERS", [b"x"])
    qm.inject("commit", C.MQRC_CONNECTION_BROKEN)
    seen: list[Message] = []

    class Keeps(RecordingChain):
        def on_submit_error(self, message: Message, reason: object) -> None:
            seen.append(message)

    listening(qm, StubExecutor(), Keeps(), None).finish()
    [message] = seen
    assert message.body == b"x" and "seen" not in message.headers  # not the chain's copy
