"""Who receives the result of a message in the collector (`mqbridge.bulks.collector`): its producer (the
handler given with the delivery, or one registered for its msg_id) and the observers of its type.

`ResultRoutes` is not thread-safe on its own: the collector calls every method with its lock held.
`call_handlers` runs without it, on the collector's worker threads.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Sequence

from mqbridge.message import Message, MessageResult

log = logging.getLogger("mqbridge.collector")

#: Receives the result of one message. Called on a collector worker thread: it must be quick
#: (record the result, set an event) and must not call back into the collector's `close`.
ResultHandler = Callable[[Message, MessageResult], None]


class ResultRoutes:
    """The result handlers of the messages held, by delivery, by msg_id and by type."""

    def __init__(self) -> None:
        self._by_type: dict[str, list[ResultHandler]] = defaultdict(list)
        self._by_msg_id: dict[str, list[ResultHandler]] = defaultdict(list)
        # The producer of each delivery in the collector, by id() of the Message submitted: two
        # deliveries may share a msg_id (an MQ unit holding one MsgId twice, a redelivery taken by
        # another listener while the first copy is still in a bulk) and each must get its own result.
        self._by_delivery: dict[int, ResultHandler] = {}

    def add(self, handler: ResultHandler, message_type: str | None, msg_id: str | None) -> None:
        """Register `handler` for a type (an observer) or a msg_id (once); twice has no effect."""
        handlers = self._list(message_type, msg_id)
        if handler not in handlers:
            handlers.append(handler)

    def remove(self, handler: ResultHandler, message_type: str | None, msg_id: str | None) -> None:
        """Remove a handler registered with the same key; an unknown one is ignored."""
        handlers = self._list(message_type, msg_id)
        if handler in handlers:
            handlers.remove(handler)
        if msg_id is not None and not handlers:
            self._by_msg_id.pop(msg_id, None)

    def _list(self, message_type: str | None, msg_id: str | None) -> list[ResultHandler]:
        if message_type is not None:
            return self._by_type[message_type]
        assert msg_id is not None
        return self._by_msg_id[msg_id]

    def submitted(self, message: Message, handler: ResultHandler) -> None:
        """`handler` receives the result of this delivery of `message`."""
        self._by_delivery[id(message)] = handler

    def take(self, message: Message) -> list[ResultHandler]:
        """Every handler of `message`'s result; its producer's are removed (a result is told once)."""
        handlers = self._by_msg_id.pop(message.msg_id, []) if message.msg_id in self._by_msg_id else []
        own = self._by_delivery.pop(id(message), None)
        if own is not None:
            handlers.append(own)
        return handlers + self._by_type.get(message.message_type, [])

    def take_all(self, pairs: Sequence[tuple[Message, MessageResult]]
                 ) -> list[tuple[Message, MessageResult, list[ResultHandler]]]:
        """`take` of each message of a bulk's results, with its result: in one loop, since it runs for
        every message under the collector's lock, which the listeners wait for to hand messages in. The
        usual bulk has no handler by msg_id: each message's producer, then its type's observers."""
        if self._by_msg_id:
            return [(message, result, self.take(message)) for message, result in pairs]
        pop, observers = self._by_delivery.pop, self._by_type.get
        calls = []
        for message, result in pairs:
            own = pop(id(message), None)
            handlers = [own] if own is not None else []
            handlers += observers(message.message_type, ())
            calls.append((message, result, handlers))
        return calls

    def released(self, message: Message) -> None:
        """`message` left the collector without a result: its delivery handler goes."""
        self._by_delivery.pop(id(message), None)


def call_handlers(calls: Sequence[tuple[Message, MessageResult, list[ResultHandler]]]) -> int:
    """Hand each result to its handlers (`ResultRoutes.take`): each handler's results in one call
    where it takes them so (`UnitResults.many`: a unit's results in one lock round and one wake-up),
    in the bulk's order. A handler that raises is logged and skipped. Returns how many calls raised."""
    grouped: dict[int, tuple[ResultHandler, list[tuple[Message, MessageResult]]]] = {}
    for message, result, handlers in calls:
        for handler in handlers:
            entry = grouped.get(id(handler))
            if entry is None:
                entry = grouped[id(handler)] = (handler, [])
            entry[1].append((message, result))
    errors = 0
    for handler, results in grouped.values():
        many = getattr(handler, "many", None)
        try:
            if many is not None:
                many(results)
                continue
        except Exception:
            errors += 1
            log.exception("result handler %r failed for %d messages", handler, len(results))
            continue
        for message, result in results:
            try:
                handler(message, result)
            except Exception:
                errors += 1
                log.exception("result handler %r failed for message %s", handler, message.msg_id)
    return errors
