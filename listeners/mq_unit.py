"""Bookkeeping of an IBM MQ unit of work: the messages got in it, and the message ids of units
whose commit ended in doubt."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
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


class InDoubtLog:
    """Message ids of units of work whose MQCMIT outcome is unknown (2009 on commit).

    Share one per queue between listener threads and restarts so that a redelivered copy of an
    in-doubt message can be recognised (it gets the header `mqbridge_in_doubt = true`).
    Bounded: the oldest ids are forgotten first.
    """

    def __init__(self, max_ids: int = 100_000) -> None:
        self._lock = threading.Lock()
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._max = max_ids
        self.units = 0
        self.messages = 0

    def record(self, msg_ids: Iterable[str]) -> None:
        with self._lock:
            self.units += 1
            for msg_id in msg_ids:
                self.messages += 1
                self._ids[msg_id] = None
                self._ids.move_to_end(msg_id)
            while len(self._ids) > self._max:
                self._ids.popitem(last=False)

    def __contains__(self, msg_id: object) -> bool:
        with self._lock:
            return msg_id in self._ids
