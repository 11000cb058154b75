"""What a listener loop runs its messages through: the `Chain` protocol (one snapshot of a
listener's preprocessor chain per unit of work), a chain of plain callables, and one pass of a
unit of work's messages through a chain.

The plugin host's chains (`mqbridge.plugins.chain.PreprocessorChain`) implement `Chain`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from mqbridge.errors import PreprocessorError
from mqbridge.message import Message


class Chain(Protocol):
    """An ordered preprocessor chain, fixed for one unit of work."""

    def classify(self, message: Message) -> str | None:
        """The message type chosen from the original content, or None for the default."""

    def process(self, message: Message) -> Message | None:
        """Run every preprocessor; None means a preprocessor consumed the message.
        Raises PreprocessorError naming the preprocessor that failed."""

    def on_submit_error(self, message: Message, error: BaseException) -> None:
        """Undo hook: the unit of work holding `message` is being rolled back."""

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

    def on_submit_error(self, message: Message, error: BaseException) -> None:
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

    @property
    def succeeded(self) -> int:
        """Messages the chain went through without raising (consumed ones included)."""
        return len(self.submitted) + self.consumed


def preprocess(messages: list[Message], chain: Chain, default_type: str) -> Preprocessed:
    """Classify (on the original content) and preprocess each message; a failure is noted and the
    unit goes on. Each processed message keeps the identity of its original."""
    out = Preprocessed()
    for message in messages:
        try:
            message.message_type = chain.classify(message) or default_type
            processed = chain.process(message)
        except PreprocessorError as exc:
            out.failed.append((message, exc))
            continue
        if processed is None:
            out.consumed += 1
            continue
        processed.identity = message.identity  # of the original, whatever the chain made
        out.submitted.append(processed)
    return out
