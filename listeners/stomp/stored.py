"""Stored results on STOMP (`mqbridge.outbound.stored`): each SENT on a connection of the sender's own
(`publish.ConfirmedSender`, subscribed to nothing), persistent, and confirmed by its receipt. Never the
listener's connection: a destination that refuses (RabbitMQ closes the connection over a full queue)
cannot touch a unit of work there."""

from __future__ import annotations

import contextlib
from typing import Any

from mqbridge.config import StompSourceConfig
from mqbridge.listeners.stomp.publish import ConfirmedSender, Outgoing
from mqbridge.outbound.stored import StoredSend


class StompStoredSender:
    """A `mqbridge.outbound.stored.Sender` for STOMP source `name`."""

    def __init__(self, name: str, config: Any, client_name: str) -> None:
        if not isinstance(config, StompSourceConfig):
            raise TypeError(f"source {name!r} is not a STOMP source")
        self._sender = ConfirmedSender(name, config, "stored results", client_name=client_name)

    def send(self, item: StoredSend) -> str:
        """SEND `item`; "" once its receipt came, else why not."""
        sent = self._sender.send([Outgoing(item.destination, item.body, item.headers)], "send a stored result")
        return sent.problem if sent.confirmed < 1 else ""

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing a connection that is already gone
            self._sender.close()
