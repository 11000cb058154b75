"""The transactional outbox of preprocessors: derived messages a preprocessor emits while it
processes a message (`mqbridge.emit(destination, body, headers)`), sent in the unit of work that
removes that message from its queue, and only if it lands.

How they travel (docs/plugins.md, "Derived messages"):

* `preprocess` opens a `collecting` box around each message's pass through the chain; `emit`
  checks the destination against the listener's `outbox_allow` and puts a `Derived` in the box.
  A pass that raises or consumes the message keeps nothing.
* The listener attaches each landed message's box to its `Landed` entry (`with_derived`); the source
  adapter sends them in the commit: the STOMP transaction that ACKs the message, or the IBM MQ
  syncpoint that MQCMIT ends. A unit that does not commit sends nothing (the boxes die with it) and
  the next delivery is preprocessed again, so it emits again.
* A message the landing ledger recognises as landed before (a crash or an in-doubt commit between
  the ledger's "published" and the source commit) is not preprocessed again for landing; its chain
  runs once more only to *re-derive* its box (`rederive`; `rederiving()` is True meanwhile), whose
  messages go with the commit that finally removes it. The box is never stored: the source commit
  is the single atomic step that both removes the message and sends its derived messages, so each
  landed message's derived messages are sent exactly once, provided the preprocessor emits the same
  messages for the same input (a deterministic function of the message as received).
"""

from __future__ import annotations

import contextvars
import fnmatch
import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

from mqbridge.errors import PreprocessorError
from mqbridge.message import Message

log = logging.getLogger("mqbridge.outbox")  # the name operators configure


class Chain(Protocol):
    """What the outbox runs a message through (`mqbridge.loop.preprocess.Chain`, which imports this module)."""

    def process(self, message: Message) -> Message | None:
        """Every preprocessor of the chain on `message`; None if one consumed it."""


@dataclass(frozen=True, slots=True)
class Derived:
    """One message a preprocessor emitted: sent to `destination` (a STOMP destination, or an IBM MQ
    queue on the connected queue manager) with `headers` (STOMP headers; IBM MQ: message properties)
    in the unit of work that removes the message it was derived from, if that message lands."""

    destination: str
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)


class OutboxAllow:
    """The destinations one listener's preprocessors may emit to (`[[listeners]] outbox_allow`, glob
    patterns, `fnmatch` rules, case sensitive). None: emitting is off for that listener."""

    def __init__(self, patterns: Sequence[str] | None, listener: str) -> None:
        self.patterns = None if patterns is None else tuple(patterns)
        self.listener = listener

    def check(self, destination: str) -> None:
        """Raise OutboxRefused unless a pattern allows `destination`."""
        if self.patterns is None:
            raise OutboxRefused(f"{self.listener}: derived message to {destination!r} refused: this listener "
                                "has no outbox_allow (list the destinations its preprocessors may emit to)")
        if not any(fnmatch.fnmatchcase(destination, p) for p in self.patterns):
            raise OutboxRefused(f"{self.listener}: derived message to {destination!r} refused: not allowed by "
                                "outbox_allow = [" + ", ".join(repr(p) for p in self.patterns) + "]")


class OutboxRefused(ValueError):
    """`emit` was called where it may not be, or with a destination the listener does not allow:
    raised into the preprocessor, so the chain fails the message like any preprocessor error."""


@dataclass
class _Box:
    allow: OutboxAllow
    rederiving: bool
    items: list[Derived] = field(default_factory=list)


_box: contextvars.ContextVar[_Box | None] = contextvars.ContextVar("mqbridge_outbox", default=None)


def emit(destination: str, body: bytes | str, headers: Mapping[str, str] | None = None) -> None:
    """Send a derived message to `destination` in the unit of work that removes the message being
    processed, if and only if that message lands (`str` bodies are sent as UTF-8). Call it from a
    preprocessor's `process`; it raises `OutboxRefused` (so the message fails like any preprocessor
    error) elsewhere, for a destination the listener's `outbox_allow` does not allow, or for a
    header that is not a string."""
    box = _box.get()
    if box is None:
        raise OutboxRefused("mqbridge.emit() is only available inside a preprocessor's process()")
    if not isinstance(destination, str) or not destination:
        raise OutboxRefused(f"derived message destination must be a non-empty string, not {destination!r}")
    box.allow.check(destination)
    data = body.encode() if isinstance(body, str) else bytes(body)
    copied = dict(headers or {})
    bad = [k for k, v in copied.items() if not isinstance(k, str) or not isinstance(v, str)]
    if bad:
        raise OutboxRefused(f"derived message to {destination!r}: header {bad[0]!r} must be a string with a "
                            "string value")
    box.items.append(Derived(destination, data, copied))


def rederiving() -> bool:
    """True while the chain runs on a message the ledger recognised as landed, only to derive its
    messages again (its result is discarded): a preprocessor may skip other side effects then."""
    box = _box.get()
    return box is not None and box.rederiving


@contextmanager
def collecting(allow: OutboxAllow, *, again: bool = False) -> Iterator[list[Derived]]:
    """A box for what one message's pass through the chain emits (`again`: a re-derivation)."""
    box = _Box(allow, again)
    token = _box.set(box)
    try:
        yield box.items
    finally:
        _box.reset(token)


def process_collecting(chain: Chain, message: Message, allow: OutboxAllow) -> tuple[Message | None, list[Derived]]:
    """`chain.process(message)` with a box for what it emits (`collecting` without a generator's cost:
    this runs per message on a listener that allows emitting)."""
    box = _Box(allow, False)
    token = _box.set(box)
    try:
        return chain.process(message), box.items
    finally:
        _box.reset(token)


def rederive(chain: Chain, messages: Sequence[Message], allow: OutboxAllow,
             listener: str) -> dict[int, tuple[Derived, ...]]:
    """Run `chain` once more on each of these messages the ledger recognised as landed, keeping only
    what it emits (by `id()` of the message). A pass that raises or consumes keeps nothing: logged,
    since a deterministic preprocessor does neither on a message it once let land."""
    derived: dict[int, tuple[Derived, ...]] = {}
    for message in messages:
        with collecting(allow, again=True) as box:
            try:
                kept = chain.process(message)
            except PreprocessorError as exc:
                log.error("%s: message %s is landed, but re-deriving its derived messages failed (%s): it is "
                          "committed without them", listener, message.msg_id, exc)
                continue
        if kept is not None and box:
            derived[id(message)] = tuple(box)
        elif box:
            log.error("%s: message %s is landed, but re-deriving consumed it: its %d derived messages are "
                      "not sent", listener, message.msg_id, len(box))
    return derived


def unit_outbox(chain: Chain, derived: dict[int, tuple[Derived, ...]], recognised: Sequence[Message],
                allow: OutboxAllow) -> dict[int, tuple[Derived, ...]]:
    """What a unit's commit sends with its landed messages: what the preprocessing of this delivery
    emitted (`derived`), and what the chain derives again for the messages the ledger recognised as
    landed (`recognised`), when this listener allows emitting at all."""
    if allow.patterns is None or not recognised:
        return derived
    return {**derived, **rederive(chain, recognised, allow, allow.listener)}
