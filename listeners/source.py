"""The source adapter protocol and the small types the listener loop shares with adapters."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from mqbridge.message import Message


@dataclass(frozen=True, slots=True)
class BackoutMove:
    """A message to move to a backout (or error) queue, atomically with its removal."""

    message: Message
    reason: str
    queue: str | None = None  # None: the adapter's configured/inquired backout queue


@runtime_checkable
class Source(Protocol):
    """One connection to one queue, owned by one listener thread.

    A unit of work is every message `receive` returned since the last commit or rollback.
    Only the thread that received the messages may call commit or rollback.
    """

    name: str
    destination: str
    #: Errors after which dropping the connection and reconnecting may help.
    recoverable_errors: tuple[type[BaseException], ...]
    #: True if commit can remove some messages and return others (STOMP: per-message acks, or
    #: copies put back in the commit's transaction);
    #: False if a unit of work can only be committed or backed out whole (IBM MQ syncpoint).
    supports_partial_commit: bool

    def connect(self) -> None:
        """Open the connection and start consuming."""

    def receive(self, timeout: float) -> Message | None:
        """The next message of the unit of work, or None if none came within `timeout` seconds."""

    def commit(self, moves: Sequence[BackoutMove] = (), returns: Sequence[Message] = ()) -> None:
        """End the unit of work: remove its messages from the source, put each of `moves` to its
        backout queue in the same unit of work, and give `returns` back to the source
        (only when `supports_partial_commit`)."""

    def rollback(self) -> None:
        """End the unit of work by returning every message of it to the source."""

    def close(self) -> None:
        """Return any open unit of work to the source, then disconnect. Never raises."""


class DeliveryTracker:
    """Counts deliveries per message id for sources that do not report a delivery count
    (ActiveMQ over STOMP), shared by every listener thread of one queue.

    Entries are dropped when a message is committed; the map is bounded so a stream of
    messages that never come back cannot grow it without limit. Counts live in memory: after a
    restart of the bridge a message starts counting again (the broker's `redelivered` flag
    still shows it was seen before).
    """

    def __init__(self, max_entries: int = 1_000_000) -> None:
        self._lock = threading.Lock()
        self._counts: OrderedDict[str, int] = OrderedDict()
        self._reasons: dict[str, str] = {}
        self._max = max_entries

    def delivered(self, msg_id: str) -> int:
        """Record one delivery and return how many the bridge has seen, this one included."""
        with self._lock:
            count = self._counts.pop(msg_id, 0) + 1
            self._counts[msg_id] = count
            while len(self._counts) > self._max:
                old, _ = self._counts.popitem(last=False)
                self._reasons.pop(old, None)
            return count

    def failed(self, msg_id: str, reason: str) -> None:
        """Remember why the last delivery failed, for the backout queue's reason header."""
        with self._lock:
            if msg_id in self._counts:
                self._reasons[msg_id] = reason

    def last_reason(self, msg_id: str) -> str | None:
        with self._lock:
            return self._reasons.get(msg_id)

    def forget(self, msg_ids: Sequence[str]) -> None:
        """The messages left the source: stop counting them."""
        with self._lock:
            for msg_id in msg_ids:
                self._counts.pop(msg_id, None)
                self._reasons.pop(msg_id, None)
