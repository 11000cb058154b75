"""The preprocessor chain as the listener loop uses it: copies, order, consume, errors, classify,
on_submit_error, and one snapshot per unit of work."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from mqbridge import current_chain
from mqbridge.errors import PreprocessorError
from mqbridge.message import Message, Rollback, RollbackKind
from mqbridge.plugins.chain import ChainSpec, PreprocessorChain, Step
from tests.support.plugins import listener, make_host, message, request, write_plugin


class Recorder:
    """A preprocessor that records what it saw and applies `action`."""

    def __init__(self, name: str, action: Any = None, classify_as: str | None = None) -> None:
        self.name = name
        self.action = action
        self.classify_as = classify_as
        self.seen: list[Message] = []
        self.undone: list[tuple[str, str]] = []

    def process(self, msg: Message) -> Message | None:
        self.seen.append(msg)
        if self.action is not None:
            return self.action(msg)
        msg.headers[self.name] = "1"
        msg.body += self.name.encode()
        return msg

    def classify(self, msg: Message) -> str | None:
        msg.headers["touched"] = "yes"
        return self.classify_as

    def on_submit_error(self, msg: Message, error: BaseException) -> None:
        self.undone.append((msg.msg_id, str(error)))


def chain_of(*steps: Recorder, hook: Any = None) -> PreprocessorChain:
    return PreprocessorChain(ChainSpec("amq:/queue/q", tuple(Step(s.name, f"plugin-{s.name}", s) for s in steps),
                                       generation=7, classify_hook=hook), unit=3)


def test_steps_run_in_order_on_a_copy_and_the_original_is_untouched() -> None:
    a, b = Recorder("a"), Recorder("b")
    original = message(b"x", headers={"h": "v"}, token=object())
    original.message_type = "orders"
    out = chain_of(a, b).process(original)
    assert out is not None and out.body == b"xab" and out.headers == {"h": "v", "a": "1", "b": "1"}
    assert original.body == b"x" and original.headers == {"h": "v"}
    assert a.seen[0] is not original and b.seen[0] is a.seen[0]
    assert out.token is original.token and out.message_type == "orders" and out.msg_id == original.msg_id


def test_a_new_message_built_by_a_preprocessor_keeps_token_and_type() -> None:
    token = object()
    fresh = Recorder("fresh", action=lambda m: Message(m.msg_id, b"new", m.source, m.destination))
    original = message(token=token)
    original.message_type = "orders"
    out = chain_of(fresh).process(original)
    assert out is not None and out.body == b"new" and out.token is token and out.message_type == "orders"


def test_none_consumes_the_message_and_later_steps_do_not_run() -> None:
    eat, after = Recorder("eat", action=lambda m: None), Recorder("after")
    assert chain_of(eat, after).process(message()) is None
    assert after.seen == []


@pytest.mark.parametrize(("action", "expected"), [
    (lambda m: 1 / 0, "preprocessor 'bad' (plugin plugin-bad) failed on message m-1: ZeroDivisionError"),
    (lambda m: b"bytes", "preprocessor 'bad' (plugin plugin-bad) returned bytes, not a Message or None"),
    (lambda m: Message("other", b"", m.source, m.destination), "changed msg_id 'm-1' to 'other'"),
])
def test_a_failing_step_raises_preprocessor_error_naming_it(action: Any, expected: str) -> None:
    with pytest.raises(PreprocessorError) as info:
        chain_of(Recorder("ok"), Recorder("bad", action=action)).process(message())
    assert expected in str(info.value) and info.value.plugin == "bad"


def test_on_submit_error_reaches_every_step_even_if_one_fails(caplog: pytest.LogCaptureFixture) -> None:
    a, c = Recorder("a"), Recorder("c")
    b = Recorder("b")
    b.on_submit_error = lambda m, e: 1 / 0  # type: ignore[method-assign]
    chain_of(a, b, c).on_submit_error(message(), Rollback(RollbackKind.UNIT_BACKOUT, RuntimeError("rolled back")))
    assert a.undone == [("m-1", "rolled back")] and c.undone == [("m-1", "rolled back")]
    assert "on_submit_error of preprocessor 'b' (plugin plugin-b) failed" in caplog.text


class Undoes:
    """A preprocessor written for the `Rollback`: its hook's second parameter is named `reason`."""

    def __init__(self) -> None:
        self.told: list[tuple[Message, Rollback]] = []

    def process(self, msg: Message) -> Message | None:
        return msg

    def on_submit_error(self, msg: Message, reason: Rollback) -> None:
        msg.body = b"changed by the hook"
        self.told.append((msg, reason))


def test_a_hook_taking_reason_gets_the_rollback_and_one_taking_error_its_exception() -> None:
    # Given a chain with a step written for the Rollback, one written before it (`error`), and a
    # plain function step (no hook at all)
    new, old = Undoes(), Recorder("old")
    steps = (Step("new", "plugin-new", new), Step("old", "plugin-old", old),
             Step("fn", "plugin-fn", lambda m: m))  # type: ignore[arg-type]
    chain = PreprocessorChain(ChainSpec("amq:/queue/q", steps), unit=1)
    error = PreprocessorError("preprocessor 'x' failed", "x")
    reason = Rollback(RollbackKind.PREPROCESSOR, error, moved=True)
    original = message(b"as received")
    # When the chain is told a delivery did not land
    chain.on_submit_error(original, reason)
    # Then the new hook gets the Rollback itself, on its own copy of the message as received
    [(copy, told)] = new.told
    assert told is reason and told.kind is RollbackKind.PREPROCESSOR and told.kind == "preprocessor"
    assert copy is not original and original.body == b"as received"
    # And the old hook gets the exception, as before there was a Rollback
    assert old.undone == [("m-1", "preprocessor 'x' failed")]
    assert str(reason) == "preprocessor: preprocessor 'x' failed"


def test_classify_asks_steps_in_order_then_the_hook_on_copies() -> None:
    calls: list[str] = []

    class Hook:
        def get_hookimpls(self) -> list[Any]:
            return [object()]

        def __call__(self, message: Message, listener: str) -> str | None:
            calls.append(listener)
            message.headers["hook"] = "1"
            return "from-hook"

    original = message()
    assert chain_of(Recorder("a"), Recorder("b", classify_as="b-type"), hook=Hook()).classify(original) == "b-type"
    assert calls == []
    assert chain_of(Recorder("a"), hook=Hook()).classify(original) == "from-hook"
    assert calls == ["amq:/queue/q"] and original.headers == {}
    assert chain_of(Recorder("a")).classify(original) is None


def test_the_running_chain_is_visible_to_preprocessors_and_only_while_running() -> None:
    seen: list[tuple[str, int, int]] = []

    def look(m: Message) -> Message:
        chain = current_chain()
        assert chain is not None
        seen.append((chain.listener, chain.generation, chain.unit))
        return m

    chain_of(Recorder("look", action=look)).process(message())
    assert seen == [("amq:/queue/q", 7, 3)] and current_chain() is None


def test_classify_hook_errors_blame_the_plugin_that_raised(tmp_path: Path) -> None:
    write_plugin(tmp_path, "router", """
        from mqbridge import hookimpl

        @hookimpl
        def mqbridge_classify(message, listener):
            if message.body == b"boom":
                raise ValueError("cannot route")
            return "routed" if message.body.startswith(b"<") else None
    """)
    host = make_host(tmp_path, request("envelope"))
    host.start()
    chain = host.chain(listener(0))
    assert chain.classify(message(b"<x/>")) == "routed"
    assert chain.classify(message(b"plain")) is None
    with pytest.raises(PreprocessorError) as info:
        chain.classify(message(b"boom"))
    assert info.value.plugin == "router" and "mqbridge_classify of plugin router failed" in str(info.value)
    host.close()


def test_each_call_of_the_provider_is_one_unit_of_work_snapshot(tmp_path: Path) -> None:
    # Given two listener threads taking snapshots concurrently
    host = make_host(None, request("envelope"))
    host.start()
    provider = host.chain_provider(listener(0))
    units: list[int] = []
    lock = threading.Lock()

    def take() -> None:
        for _ in range(200):
            chain = provider()
            with lock:
                units.append(chain.unit)

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Then every unit of work got its own snapshot id
    assert sorted(units) == list(range(1, 801))
