"""Derived messages (`mqbridge.outbound.outbox`) on IBM MQ: what a listener's preprocessors emitted for the
landed messages of a unit of work, put under syncpoint to queues of the connected queue manager,
so that MQCMIT removes the messages and makes their derived messages visible at once.

A derived message is a datagram (MQMT_DATAGRAM, a new MsgId, persistent, MQSTR when its body is
UTF-8 text, else no format); its headers become string message properties. A queue that refuses
one (unknown, put-inhibited, full, MAXUMSGS) fails the commit: the unit is backed out and comes
back, so a derived message is never dropped, nor put twice.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from mqbridge.errors import SourceError
from mqbridge.listeners.mq.driver import is_connection_loss, quietly, wrap
from mqbridge.listeners.mq.poison import SyncpointPutter
from mqbridge.outbound.outbox import Derived
from mqbridge.source import Landed

log = logging.getLogger(__name__)

MQMT_DATAGRAM = 8
MQPER_PERSISTENT = 1


class DerivedPutter(SyncpointPutter):
    """Puts the derived messages of one input queue's landed messages under syncpoint."""

    def put(self, qmgr: Any, landed: Sequence[Landed]) -> int:
        """Put every derived message of `landed` in the open unit of work; the number put. A lost
        connection raises SourceConnectionError; a refusal raises SourceError (the unit goes back)."""
        count = 0
        for item in landed:
            for derived in item.derived:
                self._put_one(qmgr, derived, item.message.msg_id)
                count += 1
        return count

    def _put_one(self, qmgr: Any, derived: Derived, about: str) -> None:
        what = f"a derived message of message {about} of {self.queue}"
        handle = self._properties(qmgr, derived.headers, what)
        try:
            refused = self._put1(qmgr, derived.destination, derived.body, self._md(derived.body), handle, what,
                                 new_msg_id=True)
        finally:
            if handle is not None:
                quietly(getattr(handle, "dlt", None))
        if refused is not None:
            raise SourceError(f"{self.queue}: MQPUT1 of {what} to {derived.destination} was refused ({refused}); "
                              "the unit of work is backed out and comes back with it")

    def _md(self, body: bytes) -> Any:
        c = self._cmqc
        md = self._driver.MD()
        md.MsgType, md.Persistence = MQMT_DATAGRAM, MQPER_PERSISTENT
        try:
            body.decode("utf-8")
            md.Format, md.CodedCharSetId = c.MQFMT_STRING, 1208
        except UnicodeDecodeError:
            md.Format = c.MQFMT_NONE
        return md

    def _properties(self, qmgr: Any, headers: Any, what: str) -> Any:
        """A message handle holding `headers` as string properties (None: no headers)."""
        if not headers:
            return None
        try:
            handle = self._driver.MessageHandle(qmgr)
            for name, value in headers.items():
                handle.properties.set(name.encode(), str(value))
        except self._errors as exc:
            if is_connection_loss(exc):
                raise wrap(exc, f"MQCRTMH/MQSETMP for {what}") from exc
            raise SourceError(f"{self.queue}: the headers of {what} cannot be set as message properties ({exc}); "
                              "the unit of work is backed out") from exc
        return handle

