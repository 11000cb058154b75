"""Result delivery: each result of a written bulk handed to its producer and its type's observers
(`mqbridge.bulks.result_routes`), then the message released from the collector (its bytes, its place
in the message-id list), which is what lets a listener blocked on memory go on.

Run by the bulk worker threads (`mqbridge.bulks.workers`) once a bulk's results are settled, never
by a listener: the handlers are called without the lock, so a slow handler delays only its worker.
Separate from the workers because it is the one place a message leaves the collector; it shares
the collector's one lock and condition (`BulkCollector` sets them up).
"""

from __future__ import annotations

import threading
from collections import Counter

from mqbridge.bulks.collector_limits import CollectorStats
from mqbridge.bulks.result_routes import ResultRoutes, call_handlers
from mqbridge.message import ROW_OVERHEAD, Message, MessageResult


class ResultDelivery:
    """The delivery part of `BulkCollector`. Its state is created by `BulkCollector.__init__`."""

    _lock: threading.Lock
    _changed: threading.Condition
    _routes: ResultRoutes
    _held: Counter[str]
    _stats: CollectorStats

    def _deliver(self, pairs: list[tuple[Message, MessageResult]]) -> int:
        """Hand each result to its producer handlers and the type's observers, then release
        the messages, all in one go (one lock round and one wake-up per bulk, not per message).
        Returns how many were delivered."""
        with self._lock:
            calls = self._routes.take_all(pairs)
        errors = call_handlers(calls)
        with self._changed:
            self._stats.handler_errors += errors
            self._release_all_locked([message for message, _result in pairs])
            self._changed.notify_all()
        return len(pairs)

    def _release_all_locked(self, messages: list[Message]) -> None:
        """`_release_locked` of each of a bulk's messages after `take` (their delivery handlers gone),
        in one loop: it runs under the lock the listeners wait for to hand messages in."""
        held = self._held
        body_bytes = 0
        for message in messages:
            body_bytes += len(message.body)
            left = held[message.msg_id] - 1
            if left > 0:
                held[message.msg_id] = left
            else:
                held.pop(message.msg_id, None)
        self._stats.bytes -= body_bytes + ROW_OVERHEAD * len(messages)  # `Message.size` of each
        self._stats.messages -= len(messages)

    def _release_locked(self, message: Message) -> None:
        self._routes.released(message)  # released without a result (a no-op after `take`)
        self._stats.bytes -= message.size
        self._stats.messages -= 1
        self._held[message.msg_id] -= 1
        if self._held[message.msg_id] <= 0:
            del self._held[message.msg_id]
