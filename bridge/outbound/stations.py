"""Results for intermediate stations: `[types.<name>] results_to` (`mqbridge.config.results`).

Every final result of a message of such a type — landed (table, bulk id, put_date) or moved to a
backout queue (with the reason) — is also sent to the type's `results_to`, by the source adapter, in
the unit of work that removes the message: the same machinery as the results a producer asks for
(`confirm = "reply-to"` on STOMP, MQRO_PAN/MQRO_NAN on IBM MQ), so a result exists if and only if
its message left the queue. A crash before the commit gives the unit back, and its messages come
again: landed ones are recognised by the landing ledger and committed with their result then. So
each message gets exactly one result at `results_to`, across crashes.

A message's type is the one classify gave it; a message moved before it was classified (refused at
the edge, BOTHRESH reached at get time) is of the listener's `message_type`; a redelivery the ledger
recognises as landed is of the type its bulk was written for (every bulk id starts with its type,
`mqbridge.message.new_bulk_id`).

A station's result is the producer result's format of the source's kind (STOMP `mapping.result_of`,
IBM MQ `reports`), plus `message_type` and `source`, always persistent. A destination the broker
or queue manager refuses halts the listener (like a backout queue that takes nothing): results are
never dropped. A destination the source cannot reach (a classify hook routed a message to the type
from a listener of another kind) is counted in `results_failed` and logged once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from mqbridge.message import Message
from mqbridge.outbound.reply_to import FirstTimes

if TYPE_CHECKING:
    from mqbridge.config import ListenerConfig, TypeConfig

log = logging.getLogger("mqbridge.stations")  # the name operators configure


def type_of_bulk(bulk_id: str) -> str:
    """The message type a bulk id was made for ("orders-1a2b3c4d-00000042" -> "orders"); "" if it is
    not such an id."""
    parts = bulk_id.rsplit("-", 2)
    return parts[0] if len(parts) == 3 and parts[2].isdigit() else ""


class Stations:
    """Where the results of one listener's messages go, by message type (see the module docstring)."""

    def __init__(self, routes: Mapping[str, str], *, default_type: str, listener: str) -> None:
        self.routes = dict(routes)
        self.default_type = default_type
        self.listener = listener
        self._logged = FirstTimes()

    @classmethod
    def of(cls, types: Mapping[str, TypeConfig], listener: ListenerConfig) -> Stations | None:
        """The stations of `listener`'s messages; None when no type has `results_to`."""
        routes = {name: t.results_to for name, t in types.items() if t.results_to}
        if not routes:
            return None
        return cls(routes, default_type=listener.message_type, listener=f"{listener.source}:{listener.queue}")

    def type_of(self, message: Message | None, bulk_id: str = "") -> str:
        """The type whose result this is (module docstring; None: a message moved at get time)."""
        return (message.message_type if message is not None else "") or type_of_bulk(bulk_id) or self.default_type

    def route(self, message: Message | None, bulk_id: str = "") -> tuple[str, str] | None:
        """(message type, destination) of `message`'s result; None if its type has no `results_to`."""
        message_type = self.type_of(message, bulk_id)
        destination = self.routes.get(message_type)
        return (message_type, destination) if destination else None

    def unreachable(self, message_type: str, destination: str, why: str) -> None:
        """A result this source cannot send (`why`; the caller counts it as failed): logged once per type."""
        if self._logged.first(message_type):
            log.error("%s: results of type %s are not sent to results_to %r: %s (counted in results_failed; "
                      "logged once)", self.listener, message_type, destination, why)
