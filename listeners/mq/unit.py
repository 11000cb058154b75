"""Bookkeeping of an IBM MQ unit of work: the messages got in it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class UnitSlot:
    """One message got in the current unit of work, as the queue manager delivered it."""

    msg_id: str
    md: Any
    body: bytes  # the original bytes: a move puts these, not what preprocessors made of them
    handle: Any  # message handle with its properties (None if handles are unavailable)
    backout_count: int
    warning: int = 0  # reason code of an MQGET warning (the message was got all the same)
    handed: bool = False  # returned to the listener by receive()
    moved: bool = False  # already put to a backout or dead-letter queue in this unit
    moved_to: str = ""  # that queue
    reason: str = ""  # why it was moved
