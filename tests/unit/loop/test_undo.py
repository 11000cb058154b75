"""Undo on every rollback (`mqbridge.loop.undo`): which deliveries a chain's `on_submit_error` is told
about, with which `Rollback`, on each way a unit of work ends — first the routing on its own, then
the listener loop on the in-memory source (partial commits). IBM MQ's whole-unit backouts:
tests/unit/listeners/mq/test_undo_paths.py; the real broker and Spark: tests/integration/test_undo.py."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest

from mqbridge.errors import (
    InDoubtError,
    PreprocessorError,
    SinkOutageError,
    SourceConnectionError,
    UnitBackedOutError,
    UnknownMessageTypeError,
    WriteFailedError,
)
from mqbridge.listeners.memory import MemoryBroker, MemorySource
from mqbridge.loop.bookkeeping import DeliveryRecords
from mqbridge.loop.preprocess import Chain, preprocess
from mqbridge.loop.undo import UnitUndo
from mqbridge.loop.unit_plan import Unit, UnitPolicy, UnitResults, plan_unit
from mqbridge.message import Message, MessageResult, RollbackKind
from mqbridge.source import BackoutMove, Landed
from tests.support.undo import Listening, RecordingChain, StubExecutor, StubLedger

K = RollbackKind


def msg(body: bytes, delivery: int = 1) -> Message:
    return Message(msg_id=f"id-{body.decode()}", body=body, source="mem", destination="orders",
                   delivery_count=delivery)


def policy(*, partial_commit: bool = True) -> UnitPolicy:
    return UnitPolicy(queue="orders", backout_threshold=3, backout_queue="orders.backout", halt_after_failures=100,
                      partial_commit=partial_commit, source_moves=False, moving_threshold=3, ledger=True)


def told(chain: RecordingChain) -> dict[bytes, tuple[RollbackKind, bool, bool]]:
    """Each message told: (kind, landed, moved); each at most once."""
    assert len({t.body for t in chain.told}) == len(chain.told), f"a delivery told twice: {chain.told}"
    return {t.body: (t.kind, t.reason.landed, t.reason.moved) for t in chain.told}


class Ended:
    """One unit of work run through `UnitUndo` as the listener does: preprocessed, submitted, results in."""

    RESULTS = {b"perm": lambda m: MessageResult.permanent(m.msg_id, "not JSON"),
               b"down": lambda m: MessageResult.sink_outage(m.msg_id, "table path is a file"),
               b"flaky": lambda m: MessageResult.retryable(m.msg_id, "failed on its own")}

    def __init__(self, batch: list[Message], *, processed: Sequence[Message] | None = None,
                 submit: bool = True) -> None:
        self.chain = RecordingChain(fail=lambda m: m.body.startswith(b"bad"), consume=lambda m: m.body == b"eat")
        self.batch = batch
        todo = list(batch if processed is None else processed)
        self.pre = preprocess(todo, self.chain, "orders")
        self.undo = UnitUndo(self.chain, todo, self.pre, "mem:orders#1")
        self.results = UnitResults(self.pre.submitted)
        if submit:
            self.undo.results = self.results
        for m in self.pre.submitted if submit else ():
            self.results(m, self.RESULTS.get(m.body, lambda m: MessageResult.success(m.msg_id))(m))
        self.unit = Unit(tuple(batch), tuple((m, self.results.get(m)) for m in self.pre.submitted),
                         failed=tuple((m, str(e)) for m, e in self.pre.failed), consumed=self.pre.consumed)


def test_a_commit_tells_each_message_that_does_not_land_before_it_and_nothing_after() -> None:
    # Given a unit with a preprocessor failure, a consumed message, a permanent and an outage result
    # and one retryable result, among messages that land
    ended = Ended([msg(b"ok1"), msg(b"bad"), msg(b"eat"), msg(b"perm"), msg(b"down"), msg(b"flaky"), msg(b"ok2")])
    plan = plan_unit(ended.unit, policy(), DeliveryRecords())
    # When the plan is about to be carried out
    ended.undo.planned(ended.unit, plan)
    # Then each failure is told with its kind; the landed and the consumed messages are not told
    assert told(ended.chain) == {b"bad": (K.PREPROCESSOR, False, False), b"perm": (K.WRITE_FAILED, False, True),
                                 b"down": (K.OUTAGE, False, False), b"flaky": (K.WRITE_FAILED, False, False)}
    errors = {t.body: t.reason.error for t in ended.chain.told}
    assert isinstance(errors[b"bad"], PreprocessorError) and isinstance(errors[b"down"], SinkOutageError)
    assert isinstance(errors[b"perm"], WriteFailedError) and str(errors[b"perm"]) == "not JSON"
    # And the hook got each message as received, not the chain's copy
    assert all(t.delivery == 1 for t in ended.chain.told)
    # And once the source committed, nothing more is told, whatever is raised afterwards
    ended.undo.committed()
    ended.undo.not_committed(RuntimeError("a halt after the commit"))
    assert len(ended.chain.told) == 4


def test_a_message_at_its_threshold_is_told_moved() -> None:
    ended = Ended([msg(b"bad", delivery=3), msg(b"flaky", delivery=3), msg(b"ok")])
    ended.undo.planned(ended.unit, plan_unit(ended.unit, policy(), DeliveryRecords()))
    assert told(ended.chain) == {b"bad": (K.PREPROCESSOR, False, True), b"flaky": (K.WRITE_FAILED, False, True)}


@pytest.mark.parametrize(("error", "kind"), [(InDoubtError("no receipt for COMMIT", ["x"]), K.IN_DOUBT),
                                             (SourceConnectionError("lost"), K.UNIT_BACKOUT)])
def test_a_failed_commit_tells_every_message_not_told_yet(error: BaseException, kind: RollbackKind) -> None:
    # Given a unit whose failures were told before its commit
    ended = Ended([msg(b"ok1"), msg(b"perm"), msg(b"eat"), msg(b"ok2")])
    ended.undo.planned(ended.unit, plan_unit(ended.unit, policy(), DeliveryRecords()))
    # When the commit fails
    ended.undo.not_committed(error)
    ended.undo.not_committed(error)  # (the listener's last word on the unit, again: nothing new)
    # Then the landed and consumed messages are told now, once; the failure is not told again
    assert told(ended.chain) == {b"perm": (K.WRITE_FAILED, False, True), b"ok1": (kind, True, False),
                                 b"ok2": (kind, True, False), b"eat": (kind, False, False)}
    assert all(t.reason.error is error for t in ended.chain.told if t.body != b"perm")


def test_a_unit_backed_out_whole_tells_every_message_its_own_failure_or_the_backout() -> None:
    # Given a unit on a source that cannot commit in part (IBM MQ), with failures and landed messages
    ended = Ended([msg(b"ok1"), msg(b"bad"), msg(b"eat"), msg(b"perm"), msg(b"down"), msg(b"ok2")])
    plan = plan_unit(ended.unit, policy(partial_commit=False), DeliveryRecords())
    assert plan.back_out
    # When it is backed out
    ended.undo.planned(ended.unit, plan)
    ended.undo.not_committed(SourceConnectionError("MQBACK failed"))  # nothing more to tell
    # Then the failures are told as such (nothing is moved: the whole unit goes back), the others as
    # backed out, with whether they landed
    assert told(ended.chain) == {
        b"bad": (K.PREPROCESSOR, False, False), b"perm": (K.WRITE_FAILED, False, False),
        b"down": (K.OUTAGE, False, False), b"ok1": (K.UNIT_BACKOUT, True, False),
        b"ok2": (K.UNIT_BACKOUT, True, False), b"eat": (K.UNIT_BACKOUT, False, False)}
    backout = next(t.reason.error for t in ended.chain.told if t.body == b"ok1")
    assert isinstance(backout, UnitBackedOutError) and "backed out whole" in str(backout)


def test_landing_nothing_tells_the_failure_and_backs_out_the_rest_with_it() -> None:
    # Given a unit on IBM MQ without the ledger in which a preprocessor failed: nothing is submitted
    ended = Ended([msg(b"ok1"), msg(b"bad1"), msg(b"bad2"), msg(b"ok2")], submit=False)
    ended.undo.land_nothing()
    assert told(ended.chain) == {b"bad1": (K.PREPROCESSOR, False, False), b"bad2": (K.PREPROCESSOR, False, False),
                                 b"ok1": (K.UNIT_BACKOUT, False, False), b"ok2": (K.UNIT_BACKOUT, False, False)}
    first = ended.pre.failed[0][1]
    assert next(t.reason.error for t in ended.chain.told if t.body == b"ok1") is first


def test_a_message_the_chain_did_not_process_is_never_told() -> None:
    # Given a unit of which the ledger recognised one message (it is not preprocessed)
    batch = [msg(b"again"), msg(b"ok"), msg(b"perm")]
    ended = Ended(batch, processed=batch[1:])
    # When its commit is in doubt
    ended.undo.planned(ended.unit, plan_unit(ended.unit, policy(), DeliveryRecords()))
    ended.undo.not_committed(InDoubtError("in doubt", []))
    # Then the recognised message is not told
    assert set(told(ended.chain)) == {b"ok", b"perm"}


def test_a_hook_that_raises_is_logged_and_the_unit_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    class Raising(RecordingChain):
        def on_submit_error(self, message: Message, reason: Any) -> None:
            raise ValueError("undo failed")

    chain = Raising()
    batch = [msg(b"a"), msg(b"b")]
    undo = UnitUndo(chain, batch, preprocess(batch, chain, "orders"), "mem:orders#1")
    undo.not_committed(SourceConnectionError("lost"))
    assert caplog.text.count("on_submit_error failed for message") == 2


# -- the listener loop on the in-memory source ---------------------------------------------------------
def memory_source(broker: MemoryBroker) -> MemorySource:
    return MemorySource("mem", broker, "orders", backout_queue="orders.backout")


def scripted(script: dict[bytes, list[str]]) -> StubExecutor:
    """An executor failing each message of `script` as its list says, one entry per write
    ("permanent", "retryable", "outage"), and landing it once the list is used up."""
    left = {body: list(steps) for body, steps in script.items()}

    def outcome(m: Message) -> MessageResult:
        steps = left.get(m.body)
        step = steps.pop(0) if steps else "ok"
        return {"ok": MessageResult.success(m.msg_id),
                "permanent": MessageResult.permanent(m.msg_id, "not JSON"),
                "retryable": MessageResult.retryable(m.msg_id, "failed on its own while the sink takes writes"),
                "outage": MessageResult.sink_outage(m.msg_id, "table path is a file")}[step]

    return StubExecutor(outcome)


def assert_each_delivery_told_at_most_once_and_every_other_one_landed(chain: RecordingChain,
                                                                    landed: Sequence[bytes],
                                                                    consumed: Sequence[bytes] = ()) -> None:
    """Every delivery the chain processed is either told once, or its message landed (or was
    consumed) with it, and the unit committed: one delivery per message at most."""
    deliveries = chain.deliveries_told()
    assert len(deliveries) == len(set(deliveries)), "a delivery was told twice"
    processed, undone = Counter(b for b, _ in chain.processed), Counter(b for b, _ in deliveries)
    ended = Counter(landed) + Counter(consumed)
    assert processed == undone + ended, (processed, undone, ended)


@pytest.mark.parametrize("in_flight", [1, 3])
def test_every_way_a_message_fails_on_a_partial_commit_source_is_told_once_per_delivery(in_flight: int) -> None:
    # Given, among 20 good messages: one a preprocessor always fails on, one consumed, one Spark
    # refuses for good, one whose write fails twice
    broker = MemoryBroker("undo-paths")
    goods = [f"g{i:02d}".encode() for i in range(20)]
    broker.put_many("orders", goods[:7] + [b"bad", b"eat", b"perm", b"flaky"] + goods[7:])
    chain = RecordingChain(fail=lambda m: m.body == b"bad", consume=lambda m: m.body == b"eat")
    executor = scripted({b"perm": ["permanent"], b"flaky": ["retryable", "retryable"]})
    sources = [memory_source(broker) for _ in range(in_flight)]
    run = Listening(sources, executor, chain, batch=5, threshold=3, backout_queue="orders.backout")
    # When the listener runs until everything left the queue
    assert run.finish(lambda: broker.depth("orders") == 0 and broker.depth("orders.backout") == 2
                      and not any(s._unit for s in sources)) is None
    # Then each failure is told once per delivery, with its kind; the moved ones are told so on their last
    by = {body: [(t.delivery, t.kind, t.reason.moved) for t in chain.of(body)] for body in (b"bad", b"perm", b"flaky")}
    assert by == {b"bad": [(1, K.PREPROCESSOR, False), (2, K.PREPROCESSOR, False), (3, K.PREPROCESSOR, True)],
                  b"perm": [(1, K.WRITE_FAILED, True)],
                  b"flaky": [(1, K.WRITE_FAILED, False), (2, K.WRITE_FAILED, False)]}
    # And nothing that landed or was consumed is told; every other delivery was told
    assert all(b not in {t.body for t in chain.told} for b in [*goods, b"eat"])
    assert not any(t.reason.landed for t in chain.told)
    assert_each_delivery_told_at_most_once_and_every_other_one_landed(chain, executor.landed, [b"eat"])
    assert sorted(executor.landed) == sorted([*goods, b"flaky"])


def test_an_outage_give_back_is_told_on_every_delivery_and_moves_nothing() -> None:
    # Given a sink that is down for the first 5 writes (more than the backout threshold of 3)
    broker = MemoryBroker("undo-outage")
    bodies = [f"o{i}".encode() for i in range(6)]
    broker.put_many("orders", bodies)
    writes = Counter[str]()

    def outcome(m: Message) -> MessageResult:
        writes[m.msg_id] += 1
        down = writes[m.msg_id] <= 5
        return MessageResult.sink_outage(m.msg_id, "table path is a file") if down else MessageResult.success(m.msg_id)

    chain = RecordingChain()
    executor = StubExecutor(outcome)
    run = Listening([memory_source(broker)], executor, chain, batch=3, threshold=3, backout_queue="orders.backout")
    assert run.finish(lambda: broker.depth("orders") == 0 and len(executor.landed) == 6, timeout=30) is None
    # Then each message was told "outage" on each of its 5 deliveries, and none was moved
    assert Counter(t.body for t in chain.told) == Counter({b: 5 for b in bodies})
    assert {(t.kind, t.reason.landed, t.reason.moved) for t in chain.told} == {(K.OUTAGE, False, False)}
    assert broker.depth("orders.backout") == 0
    assert_each_delivery_told_at_most_once_and_every_other_one_landed(chain, executor.landed)


class CommitFails:
    """A memory source whose first commit fails with `error` before it does anything: the listener
    fails, and closing the source gives the unit back."""

    def __init__(self, source: MemorySource, error: BaseException) -> None:
        self.source, self.error, self.failed = source, error, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.source, name)

    def commit(self, moves: Sequence[BackoutMove] = (), returns: Sequence[Message] = (),
               landed: Sequence[Landed] = ()) -> None:
        if not self.failed:
            self.failed = True
            raise self.error
        self.source.commit(moves=moves, returns=returns, landed=landed)


@pytest.mark.parametrize(("error", "kind"), [(InDoubtError("no receipt for COMMIT", ["x"]), K.IN_DOUBT),
                                             (SourceConnectionError("connection lost"), K.UNIT_BACKOUT)])
@pytest.mark.parametrize("ledger", [True, False], ids=["ledger", "no-ledger"])
def test_a_failed_commit_tells_the_rest_of_its_unit_and_a_recognised_redelivery_is_not_told(
        error: BaseException, kind: RollbackKind, ledger: bool) -> None:
    # Given a unit of 5 (one of them refused by Spark for good, one consumed) whose commit fails
    broker = MemoryBroker("undo-commit")
    broker.put_many("orders", [b"a", b"perm", b"eat", b"b", b"c"])
    chain = RecordingChain(consume=lambda m: m.body == b"eat")
    stub_ledger = StubLedger() if ledger else None
    executor = scripted({b"perm": ["permanent"] * 2})
    executor.ledger = stub_ledger
    run = Listening([CommitFails(memory_source(broker), error)], executor, chain, batch=5, threshold=3,
                    backout_queue="orders.backout", ledger=stub_ledger)
    assert run.finish() is error
    # Then the failure was told before the commit, and every other message after it, with whether it landed
    assert told(chain) == {b"perm": (K.WRITE_FAILED, False, True), b"a": (kind, True, False),
                           b"b": (kind, True, False), b"c": (kind, True, False), b"eat": (kind, False, False)}
    # When the unit comes back to a listener that commits
    again = Listening([memory_source(broker)], executor, chain, batch=5, threshold=3,
                      backout_queue="orders.backout", ledger=stub_ledger)
    assert again.finish(lambda: broker.depth("orders") == 0 and broker.depth("orders.backout") == 1) is None
    # Then with the ledger the landed messages are recognised: neither preprocessed nor told again;
    # without it they are preprocessed and land again, untold
    processed = Counter(b for b, _ in chain.processed)
    assert processed == Counter({b"a": 1 if ledger else 2, b"b": 1 if ledger else 2, b"c": 1 if ledger else 2,
                                 b"perm": 2, b"eat": 2})
    assert [(t.body, t.delivery, t.kind) for t in chain.told if t.delivery == 2] == [(b"perm", 2, K.WRITE_FAILED)]
    assert sorted(executor.landed) == sorted([b"a", b"b", b"c"] * (1 if ledger else 2))


def test_a_type_nobody_configured_gives_the_unit_back_and_tells_every_message() -> None:
    broker = MemoryBroker("undo-type")
    broker.put_many("orders", [b"a", b"b", b"c"])
    chain = RecordingChain(classify="nope")
    run = Listening([memory_source(broker)], StubExecutor(), chain, batch=3)
    failure = run.finish()
    assert isinstance(failure, UnknownMessageTypeError)
    assert told(chain) == {b: (K.UNIT_BACKOUT, False, False) for b in (b"a", b"b", b"c")}
    assert all(t.reason.error is failure for t in chain.told)
    assert broker.depth("orders") == 3


class OnTrial(RecordingChain):
    """A new plugin generation's chain on trial: it fails on every message, and has a last good one."""

    def __init__(self, good: RecordingChain) -> None:
        super().__init__(fail=lambda m: True)
        self.good = good

    def fallback(self) -> Chain | None:
        return self.good


def test_a_unit_run_again_on_the_last_good_generation_tells_the_new_one_at_once() -> None:
    # Given a new generation that raises on every message, and a last good one that fails on one
    broker = MemoryBroker("undo-trial")
    broker.put_many("orders", [b"a", b"bad", b"b"])
    good = RecordingChain(fail=lambda m: m.body == b"bad")
    new = OnTrial(good)
    run = Listening([memory_source(broker)], StubExecutor(), new, batch=3, threshold=3,
                    backout_queue="orders.backout")
    assert run.finish(lambda: broker.depth("orders.backout") == 1 and broker.depth("orders") == 0) is None
    # Then the new chain was told about each message it raised on, each time it raised
    assert Counter(t.body for t in new.told) == Counter(b for b, _ in new.processed)
    assert {t.kind for t in new.told} == {K.PREPROCESSOR} and not any(t.reason.moved for t in new.told)
    # And the last good chain about its own failures only, the last one moved
    assert [(t.body, t.delivery, t.reason.moved) for t in good.of(b"bad")] == [
        (b"bad", 1, False), (b"bad", 2, False), (b"bad", 3, True)]
    assert {t.body for t in good.told} == {b"bad"}
