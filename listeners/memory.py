"""In-memory source adapter: a thread-safe broker inside the process, for tests and demos.

Like dramatiq's stub broker and kombu's memory transport, it needs no server, yet it keeps the
semantics the bridge relies on, so that failure paths can be shown and tested without a broker:

* a received message is hidden from every other consumer until its unit of work ends;
* commit removes the unit's messages, puts each move on its backout queue with the reason in the
  `mqbridge-reason` header (STOMP's header name), and gives `returns` back, all at once;
* rollback, close and a lost connection give every held message back, to the head of its queue,
  with `redelivered` set and a delivery count one higher at its next delivery;
* a message keeps its id across redeliveries;
* `MemorySource.cut()` (or `MemoryBroker.cut()`) simulates a lost connection: held messages go
  back, and every call but `close` and `connect` raises `SourceConnectionError` until reconnected.

Configuration: `[sources.x] kind = "memory"`, `broker = "default"` (`MemoryBroker.named`).

`DRIVER` (`mqbridge.drivers`): a memory source is consumed only; it has no backlog probe (no outside
queue), no re-drive and no replay sender.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import ClassVar

from mqbridge.config import MemorySourceConfig
from mqbridge.drivers import Driver
from mqbridge.errors import SourceConnectionError, SourceError
from mqbridge.message import Message, utcnow
from mqbridge.source import BackoutMove, Landed, SourceContext

__all__ = ["DRIVER", "REASON_HEADER", "MemoryBroker", "MemorySource", "StoredMessage"]

#: Header carrying why a message was moved to a backout queue (the STOMP adapter's name too).
REASON_HEADER = "mqbridge-reason"


@dataclass(frozen=True)
class StoredMessage:
    """A message as the broker keeps it; `deliveries` counts how often it was handed out."""

    msg_id: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    correlation_id: str | None = None
    put_timestamp: datetime = field(default_factory=utcnow)
    deliveries: int = 0


class MemoryBroker:
    """Named queues of `StoredMessage`s behind one lock; `MemorySource`s consume from them."""

    _named: ClassVar[dict[str, MemoryBroker]] = {}
    _named_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, name: str = "memory") -> None:
        self.name = name
        self._cond = threading.Condition()
        self._queues: dict[str, deque[StoredMessage]] = {}
        self._ids = itertools.count(1)
        self._sources: set[MemorySource] = set()

    @classmethod
    def named(cls, name: str) -> MemoryBroker:
        """The broker of this name in this process, created on first use (`[sources.x] broker`)."""
        with cls._named_lock:
            broker = cls._named.get(name)
            if broker is None:
                broker = cls._named[name] = cls(name)
            return broker

    # -- helpers for tests and demos -------------------------------------------------------------
    def put(self, queue: str, body: bytes, *, headers: dict[str, str] | None = None,
            correlation_id: str | None = None) -> str:
        """Put one message at the tail of `queue`; returns its message id."""
        with self._cond:
            msg_id = f"ID:{self.name}:{next(self._ids)}"
            self._queue(queue).append(StoredMessage(msg_id, bytes(body), dict(headers or {}), correlation_id))
            self._cond.notify_all()
            return msg_id

    def put_many(self, queue: str, bodies: Sequence[bytes]) -> list[str]:
        """Put each body in order; returns their message ids."""
        return [self.put(queue, body) for body in bodies]

    def browse(self, queue: str) -> list[StoredMessage]:
        """The messages on `queue` that no unit of work holds, in delivery order, left in place."""
        with self._cond:
            return list(self._queues.get(queue, ()))

    def depth(self, queue: str) -> int:
        """How many messages of `queue` are available (held ones are not counted)."""
        with self._cond:
            return len(self._queues.get(queue, ()))

    def cut(self) -> int:
        """Lose every connection, as a network failure would; returns how many were cut."""
        with self._cond:
            sources = list(self._sources)
        for source in sources:
            source.cut()
        return len(sources)

    # -- used by MemorySource, always under the lock ---------------------------------------------
    def _queue(self, name: str) -> deque[StoredMessage]:
        return self._queues.setdefault(name, deque())

    def _give_back(self, queue: str, held: Sequence[StoredMessage]) -> None:
        # Back to the head, in their order: a returned message is delivered next, as on IBM MQ.
        self._queue(queue).extendleft(reversed(held))
        self._cond.notify_all()


class MemorySource:
    """One connection to one queue of a `MemoryBroker` (see the module docstring)."""

    supports_partial_commit = True
    applies_backout_threshold = False  # nothing counts for us: the listener loop does
    backout_threshold = 0  # it moves nothing by a count of its own
    landed: Callable[[Message], bool] | None = None  # never asked (applies_backout_threshold is False)

    @classmethod
    def from_context(cls, context: SourceContext) -> MemorySource:
        """The constructor of the kind's driver (`mqbridge.drivers.Driver.source`)."""
        source = context.source
        assert isinstance(source, MemorySourceConfig)
        return cls(context.source_name, MemoryBroker.named(source.broker), context.listener.queue,
                   backout_queue=context.listener.backout_queue)

    def __init__(self, name: str, broker: MemoryBroker, destination: str, *,
                 backout_queue: str | None = None) -> None:
        self.name = name
        self.destination = destination
        self.broker = broker
        self.backout_queue = backout_queue
        self.recoverable_errors: tuple[type[BaseException], ...] = (SourceConnectionError,)
        self._connected = False
        self._unit: list[StoredMessage] = []

    def connect(self) -> None:
        """Attach to the broker; a held unit of work of an earlier connection went back already."""
        self.close()
        with self.broker._cond:
            self._connected = True
            self.broker._sources.add(self)

    def receive(self, timeout: float) -> Message | None:
        """The next message of `destination`, or None after `timeout` seconds without one."""
        deadline = time.monotonic() + max(0.0, timeout)
        with self.broker._cond:
            while True:
                self._require()
                available = self.broker._queue(self.destination)
                if available:
                    held = available.popleft()
                    held = replace(held, deliveries=held.deliveries + 1)
                    self._unit.append(held)
                    return self._to_message(held)
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.broker._cond.wait(left)  # a put, a give-back or a cut wakes us

    def _to_message(self, held: StoredMessage) -> Message:
        return Message(msg_id=held.msg_id, body=held.body, source=self.name, destination=self.destination,
                       correlation_id=held.correlation_id, put_timestamp=held.put_timestamp,
                       received_timestamp=utcnow(), redelivered=held.deliveries > 1,
                       delivery_count=held.deliveries, headers=dict(held.headers), token=held.msg_id)

    def commit(self, moves: Sequence[BackoutMove] = (), returns: Sequence[Message] = (),
               landed: Sequence[Landed] = ()) -> None:
        """Remove the unit's messages, put `moves` on their backout queues, give `returns` back and put
        the `landed` messages' derived messages, atomically: a problem found raises before anything
        changed. (No producer to tell.)"""
        with self.broker._cond:
            self._require()
            held = {m.msg_id: m for m in self._unit}
            returned = {m.msg_id for m in returns}
            moved: dict[str, tuple[str, str]] = {}
            for move in moves:
                queue = move.queue or self.backout_queue
                if not queue:
                    raise SourceError(f"no backout queue for {self.destination}; "
                                      f"cannot move message {move.message.msg_id}")
                moved[move.message.msg_id] = (queue, " ".join(move.reason.split()))
            strangers = (returned | set(moved)) - set(held)
            if strangers:
                raise SourceError(f"{self.destination}: not in the unit of work: {', '.join(sorted(strangers))}")
            unit, self._unit = self._unit, []
            self.broker._give_back(self.destination, [m for m in unit if m.msg_id in returned])
            for msg_id, (queue, reason) in moved.items():
                original = held[msg_id]
                headers = {**original.headers, REASON_HEADER: reason,
                           "mqbridge-original-destination": self.destination,
                           "mqbridge-delivery-count": str(original.deliveries)}
                self.broker._queue(queue).append(replace(original, headers=headers, deliveries=0))
            for item in landed:  # the preprocessors' outbox (`mqbridge.outbound.outbox`): in the same atomic step
                for derived in item.derived:
                    self.broker._queue(derived.destination).append(StoredMessage(
                        f"ID:{self.broker.name}:{next(self.broker._ids)}", derived.body, dict(derived.headers)))

    def rollback(self) -> None:
        """Give every message of the unit back to the head of the queue."""
        with self.broker._cond:
            self._require()
            self._return_unit()

    def close(self) -> None:
        """Give an open unit of work back and detach. Never raises."""
        self._detach()

    def cut(self) -> None:
        """Simulate a lost connection: the broker gives the held messages back at once, and later
        calls raise `SourceConnectionError` until `connect` is called again."""
        self._detach()

    def _detach(self) -> None:
        with self.broker._cond:
            self._return_unit()
            self._connected = False
            self.broker._sources.discard(self)

    def _return_unit(self) -> None:
        unit, self._unit = self._unit, []
        if unit:
            self.broker._give_back(self.destination, unit)

    def _require(self) -> None:
        if not self._connected:
            raise SourceConnectionError(f"memory broker {self.broker.name}: connection for "
                                        f"{self.destination} is lost or closed")


DRIVER = Driver(kind="memory", source=MemorySource)
