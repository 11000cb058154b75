"""Bookkeeping of a STOMP unit of work: the messages delivered since the last commit or rollback,
all unacknowledged until the commit."""

from __future__ import annotations

from dataclasses import dataclass, field

from mqbridge.message import Message
from mqbridge.source import BackoutMove


@dataclass
class Unit:
    """The open unit of work, in the order the broker delivered its messages."""

    messages: list[Message] = field(default_factory=list)
    handed: int = 0  # messages that `receive` returned (the others are refused or wait for their stamp)
    refused: list[BackoutMove] = field(default_factory=list)  # refused at the edge: the commit moves them
    stamping: list[Message] = field(default_factory=list)  # unstamped: the commit sends their stamped copies
    errors_at_start: int = 0  # ERROR frames seen when the unit began: a later one fails the unit
