"""Bookkeeping of a STOMP unit of work: the messages delivered since the last commit or rollback,
all unacknowledged until the commit."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from mqbridge.message import Message
from mqbridge.source import BackoutMove


@dataclass
class Unit:
    """The open unit of work, in the order the broker delivered its messages."""

    messages: list[Message] = field(default_factory=list)
    handed: int = 0  # messages that `receive` returned (the others are refused at the edge)
    refused: list[BackoutMove] = field(default_factory=list)  # refused at the edge: the commit moves them
    errors_at_start: int = 0  # ERROR frames seen when the unit began: a later one fails the unit
    #: RabbitMQ (ids per delivery): each message's frame headers as received, by msg_id, whence its
    #: content key when it is needed (`mapping.content_key`).
    received: dict[str, Mapping[str, str]] = field(default_factory=dict)
    #: Ids of redeliveries that may have landed before, unrecognisable (RabbitMQ with identity msg_id):
    #: landed now, each is a possible duplicate (`mqbridge_possible_duplicates_total`).
    doubtful: set[str] = field(default_factory=set)
