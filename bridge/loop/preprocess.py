"""What a listener loop runs its messages through: the `Chain` protocol (one snapshot of a
listener's preprocessor chain per unit of work), a chain of plain callables, and one pass of a
unit of work's messages through a chain (`preprocess`), again on the last good plugin generation
when a new one fails on all of them (`preprocess_unit`). What a chain is told when its messages do
not land: `mqbridge.loop.undo`.

The plugin host's chains (`mqbridge.plugins.chain.PreprocessorChain`) implement `Chain`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from mqbridge.errors import PreprocessorError
from mqbridge.message import Message, Rollback
from mqbridge.outbound.outbox import Derived, OutboxAllow, collecting, process_collecting

log = logging.getLogger("mqbridge.listener")


class Chain(Protocol):
    """An ordered preprocessor chain, fixed for one unit of work."""

    def classify(self, message: Message) -> str | None:
        """The message type chosen from the original content, or None for the default."""

    def process(self, message: Message) -> Message | None:
        """Run every preprocessor; None means a preprocessor consumed the message.
        Raises PreprocessorError naming the preprocessor that failed."""

    def on_submit_error(self, message: Message, reason: Rollback) -> None:
        """Undo hook: this delivery of `message` (as received) does not leave the queue as landed,
        for `reason`. Called at most once per delivery (`mqbridge.loop.undo`)."""

    def fallback(self) -> Chain | None:
        """The chain of the last good plugin generation, when this chain's generation was swapped
        in by a reload and has not yet preprocessed a message without raising; else None."""

    def record(self, succeeded: int, blamed: int) -> None:
        """How this chain did on one unit of work: messages it preprocessed without raising, and
        messages it raised on that its `fallback` chain preprocessed without raising."""


class PlainChain:
    """A chain of plain callables `message -> message | None`, in order."""

    def __init__(self, steps: list[tuple[str, Callable[[Message], Message | None]]] | None = None) -> None:
        self.steps = steps or []

    def classify(self, message: Message) -> str | None:
        return None

    def process(self, message: Message) -> Message | None:
        current: Message | None = message
        for name, step in self.steps:
            if current is None:
                return None
            try:
                current = step(current)
            except Exception as exc:
                raise PreprocessorError(f"preprocessor {name!r} failed: {exc!r}", name) from exc
        return current

    def on_submit_error(self, message: Message, reason: Rollback) -> None:
        return None

    def fallback(self) -> Chain | None:
        return None

    def record(self, succeeded: int, blamed: int) -> None:
        return None


@dataclass
class Preprocessed:
    """One pass of a unit of work's messages through a chain."""

    submitted: list[Message] = field(default_factory=list)
    failed: list[tuple[Message, PreprocessorError]] = field(default_factory=list)
    consumed: int = 0
    #: id() of each submitted message -> the message as received it was made from.
    origins: dict[int, Message] = field(default_factory=dict)
    #: id() of each submitted message -> what its pass emitted (`mqbridge.outbound.outbox`), if anything.
    derived: dict[int, tuple[Derived, ...]] = field(default_factory=dict)

    @property
    def succeeded(self) -> int:
        """Messages the chain went through without raising (consumed ones included)."""
        return len(self.submitted) + self.consumed


def preprocess(messages: list[Message], chain: Chain, default_type: str,
               allow: OutboxAllow | None = None) -> Preprocessed:
    """Classify (on the original content) and preprocess each message; a failure is noted and the
    unit goes on. Each processed message keeps the identity of its original, and what its pass
    emitted (to the destinations `allow` allows; None: emitting is off)."""
    out = Preprocessed()
    if allow is None or allow.patterns is None:
        # Emitting is off: one box for the unit, which `emit` refuses to fill with a clear error,
        # instead of a box per message on the hot path.
        with collecting(allow if allow is not None else OutboxAllow(None, "this listener")):
            _pass(out, messages, chain, default_type, None)
    else:
        _pass(out, messages, chain, default_type, allow)
    return out


def _pass(out: Preprocessed, messages: list[Message], chain: Chain, default_type: str,
          allow: OutboxAllow | None) -> None:
    """`preprocess` into `out`, with a box per message's `process` when `allow` is given."""
    box: list[Derived] = []
    for message in messages:
        try:
            message.message_type = chain.classify(message) or default_type
            if allow is None:
                processed = chain.process(message)
            else:
                processed, box = process_collecting(chain, message, allow)
        except PreprocessorError as exc:
            out.failed.append((message, exc))
            continue
        if processed is None:
            out.consumed += 1
            continue
        processed.identity = message.identity  # of the original, whatever the chain made
        out.submitted.append(processed)
        out.origins[id(processed)] = message
        if box:  # kept only while the message may land: a pass that consumed it dropped them
            out.derived[id(processed)] = tuple(box)


@dataclass
class Fallback:
    """A unit of work the new plugin generation's `chain` raised on for every message (`failed`),
    preprocessed again on the last good generation; `blamed`: the failures the last good one does not
    share."""

    chain: Chain
    failed: list[tuple[Message, PreprocessorError]]
    blamed: list[tuple[Message, PreprocessorError]]


def preprocess_unit(messages: list[Message], chain: Chain, default_type: str, listener: str,
                    allow: OutboxAllow | None = None) -> tuple[Chain, Preprocessed, Fallback | None]:
    """Preprocess the unit; if the chain's plugin generation is new, has never got a message
    through, and failed here on every message, preprocess the whole unit again with the last
    good generation (a unit of work still runs on one generation). Failures that the last good
    generation does not share are blamed on the new one; they are not the messages' failures,
    so they count towards no backout threshold (the plugin host falls back for good after
    enough of them). Returns the chain the unit goes on with, its pass, and the fallback if any."""
    pre = preprocess(messages, chain, default_type, allow)
    if not pre.failed or pre.succeeded:
        chain.record(pre.succeeded, 0)
        return chain, pre, None
    good = chain.fallback()
    if good is None:
        return chain, pre, None
    again = preprocess(messages, good, default_type, allow)
    still = {id(m) for m, _ in again.failed}
    blamed = [(m, exc) for m, exc in pre.failed if id(m) not in still]
    if blamed:
        log.warning("%s: the new plugin generation got no message of the unit of work through and raised on "
                    "%d that the last good generation preprocessed: the unit runs on the last good one "
                    "(first error: %s)", listener, len(blamed), blamed[0][1])
    chain.record(0, len(blamed))
    return good, again, Fallback(chain, pre.failed, blamed)
