"""The preprocessors' transactional outbox (`mqbridge.outbound.outbox`): what `emit` accepts, what one pass
through a chain keeps, and, on the listener loop over the in-memory source (whose commit puts the
derived messages in the same atomic step), that derived messages go out once per landed message,
never for a moved, consumed or given-back delivery, and again for a message the ledger recognises.
The real brokers under kill -9: tests/integration/test_outbox.py."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from mqbridge import OutboxRefused, emit, rederiving
from mqbridge.errors import SourceConnectionError
from mqbridge.listeners.memory import MemoryBroker, MemorySource
from mqbridge.loop.preprocess import PlainChain, preprocess
from mqbridge.message import Message, MessageResult
from mqbridge.outbound.outbox import Derived, OutboxAllow
from tests.support.undo import Listening, RecordingChain, StubExecutor, StubLedger

ALLOW = OutboxAllow(["audit.*"], "mem:orders")


class Emitting(RecordingChain):
    """Emits `n:<body>` to `audit.<body>` for every message it processes (`to`: another destination)."""

    def __init__(self, to: str = "", **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.to = to
        self.again: list[bytes] = []  # bodies processed only to re-derive

    def process(self, message: Message) -> Message | None:
        if rederiving():
            self.again.append(message.body)
        emit(self.to or f"audit.{message.body.decode()}", b"n:" + message.body, {"of": message.msg_id})
        return super().process(message)


def msg(body: bytes) -> Message:
    return Message(msg_id=f"id-{body.decode()}", body=body, source="mem", destination="orders")


def test_emit_outside_a_preprocessor_is_refused() -> None:
    with pytest.raises(OutboxRefused, match=r"only available inside a preprocessor's process\(\)"):
        emit("audit.x", b"body")


def test_a_pass_keeps_what_it_emitted_only_for_messages_that_may_land() -> None:
    chain = Emitting(fail=lambda m: m.body == b"bad", consume=lambda m: m.body == b"eat")
    pre = preprocess([msg(b"ok"), msg(b"bad"), msg(b"eat")], chain, "orders", ALLOW)
    assert [m.body for m in pre.submitted] == [b"ok"]
    assert pre.derived == {id(pre.submitted[0]): (Derived("audit.ok", b"n:ok", {"of": "id-ok"}),)}


@pytest.mark.parametrize(("allow", "error"), [
    (OutboxAllow(["results.*"], "mem:orders"), r"'audit.ok' refused: not allowed by outbox_allow = \['results.\*'\]"),
    (None, r"refused: this listener has no outbox_allow"),
])
def test_a_destination_the_listener_does_not_allow_fails_the_message(allow: OutboxAllow | None, error: str) -> None:
    def notify(message: Message) -> Message:
        emit("audit.ok", b"n:ok")
        return message

    pre = preprocess([msg(b"ok")], PlainChain([("notify", notify)]), "orders", allow)
    assert pre.submitted == [] and pre.derived == {}
    [(_, exc)] = pre.failed
    assert isinstance(exc.__cause__, OutboxRefused)
    assert exc.plugin == "notify"
    assert re.search(error, str(exc)), str(exc)


def derived_on(broker: MemoryBroker) -> Counter[bytes]:
    return Counter(m.body for q in [f"audit.{b}" for b in ("ok1", "ok2", "perm", "eat", "flaky", "bad")]
                   for m in broker.browse(q))


def test_derived_messages_go_out_once_per_landed_message_and_never_for_others() -> None:
    # Given messages that land, one moved (permanent result), one consumed, one refused by a
    # preprocessor once and one given back once (retryable)
    broker = MemoryBroker()
    broker.put_many("orders", [b"ok1", b"perm", b"eat", b"flaky", b"bad", b"ok2"])
    tries: Counter[bytes] = Counter()

    def outcome(m: Message) -> MessageResult:
        tries[m.body] += 1
        if m.body == b"perm":
            return MessageResult.permanent(m.msg_id, "not JSON")
        if m.body == b"flaky" and tries[m.body] == 1:
            return MessageResult.retryable(m.msg_id, "failed on its own")
        return MessageResult.success(m.msg_id)

    failed: Counter[bytes] = Counter()

    def fail_once(m: Message) -> bool:
        failed[m.body] += m.body == b"bad"
        return m.body == b"bad" and failed[m.body] == 1

    chain = Emitting(fail=fail_once, consume=lambda m: m.body == b"eat")
    source = MemorySource("mem", broker, "orders", backout_queue="orders.backout")
    run = Listening([source], StubExecutor(outcome), chain, batch=6, threshold=3, backout_queue="orders.backout",
                    outbox_allow=("audit.*",))
    # When the listener runs until the queue is empty
    assert run.finish(lambda: broker.depth("orders") == 0 and broker.depth("orders.backout") == 1
                      and not source._unit and len(derived_on(broker)) == 4) is None
    # Then each landed message's derived message is there once; the moved and the consumed have none
    assert derived_on(broker) == Counter({b"n:ok1": 1, b"n:ok2": 1, b"n:flaky": 1, b"n:bad": 1})
    assert [m.headers for m in broker.browse("audit.ok1")] == [{"of": "ID:memory:1"}]


def test_a_message_recognised_as_landed_gets_its_derived_messages_again() -> None:
    # Given a message the ledger shows as landed (its first unit crashed before the source commit)
    broker = MemoryBroker()
    [first] = broker.put_many("orders", [b"ok1"])
    broker.put("orders", b"ok2")
    ledger = StubLedger()
    ledger.add([first])
    chain, executor = Emitting(), StubExecutor(ledger=ledger)
    source = MemorySource("mem", broker, "orders", backout_queue="orders.backout")
    run = Listening([source], executor, chain, batch=2, ledger=ledger, outbox_allow=("audit.*",))
    # When the listener commits it
    assert run.finish(lambda: broker.depth("orders") == 0 and not source._unit
                      and len(derived_on(broker)) == 2) is None
    # Then it did not land again, but its derived message was re-derived and sent with the commit
    assert executor.landed == [b"ok2"]
    assert chain.again == [b"ok1"]
    assert derived_on(broker) == Counter({b"n:ok1": 1, b"n:ok2": 1})


class CommitLost(MemorySource):
    """A memory source whose first commit is lost with the connection: nothing of it happens."""

    lost = False

    def commit(self, *args: object, **kwargs: object) -> None:  # type: ignore[override]
        if not CommitLost.lost:
            CommitLost.lost = True
            self.cut()
            raise SourceConnectionError("connection lost during the commit")
        super().commit(*args, **kwargs)  # type: ignore[arg-type]


def test_a_commit_lost_after_landing_sends_the_derived_messages_once_with_the_redelivery() -> None:
    # Given a bridge whose first commit is lost after its unit landed (the ledger has it)
    broker = MemoryBroker()
    broker.put_many("orders", [b"ok1", b"ok2"])
    ledger = StubLedger()
    chain, executor = Emitting(), StubExecutor(ledger=ledger)
    CommitLost.lost = False
    source = CommitLost("mem", broker, "orders", backout_queue="orders.backout")
    run = Listening([source], executor, chain, batch=2, ledger=ledger, outbox_allow=("audit.*",))
    assert isinstance(run.finish(), SourceConnectionError)
    assert derived_on(broker) == Counter() and broker.depth("orders") == 2
    # When a listener reads the unit again
    source = MemorySource("mem", broker, "orders", backout_queue="orders.backout")
    chain = Emitting()
    run = Listening([source], executor, chain, batch=2, ledger=ledger, outbox_allow=("audit.*",))
    assert run.finish(lambda: broker.depth("orders") == 0 and not source._unit
                      and len(derived_on(broker)) == 2) is None
    # Then the messages landed once, and their derived messages were sent once
    assert executor.landed == [b"ok1", b"ok2"]
    assert sorted(chain.again) == [b"ok1", b"ok2"]
    assert derived_on(broker) == Counter({b"n:ok1": 1, b"n:ok2": 1})
