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
from mqbridge.message import Message, MessageResult


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
            calls = [(message, result, self._routes.take(message)) for message, result in pairs]
        errors = call_handlers(calls)
        with self._changed:
            self._stats.handler_errors += errors
            for message, _result in pairs:
                self._release_locked(message)
            self._changed.notify_all()
        return len(pairs)

    def _release_locked(self, message: Message) -> None:
        self._routes.released(message)  # released without a result (a no-op after `take`)
        self._stats.bytes -= message.size
        self._stats.messages -= 1
        self._held[message.msg_id] -= 1
        if self._held[message.msg_id] <= 0:
            del self._held[message.msg_id]
