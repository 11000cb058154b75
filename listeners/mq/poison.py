"""Moving a poison message out of the way, like the IBM MQ JMS classes: put it to the backout
queue in the same unit of work; if that fails, to the dead-letter queue behind an MQDLH. The
reason and the message's origin travel as message properties (`mqbridge_reason`, ...)."""

from __future__ import annotations

import logging
from typing import Any

from mqbridge.listeners.mq.driver import is_connection_loss, is_warning, wrap
from mqbridge.listeners.mq.mapping import moved_md, pack_dlh, put_timestamp, text
from mqbridge.listeners.mq.unit import UnitSlot
from mqbridge.message import utcnow

log = logging.getLogger(__name__)

REASON_PROPERTY = "mqbridge_reason"
_REASON_LIMIT = 1000

BACKOUT = "backout"
DEAD_LETTER = "dead-letter"


def threshold_reason(backout_count: int, counted: int, threshold: int, queue: str) -> str:
    """Why a message got with `backout_count` (`counted` of them outside sink outages) is moved."""
    uncounted = backout_count - counted
    return (f"BackoutCount {backout_count} reached the backout threshold {threshold} of {queue}"
            + (f" ({uncounted} backouts during sink outages not counted)" if uncounted else ""))


class SyncpointPutter:
    """Puts messages about one input queue's messages (moves, reports) under syncpoint."""

    def __init__(self, driver: Any, errors: tuple[type[BaseException], ...], *, queue: str, qmgr_name: str,
                 appl_name: str) -> None:
        self._driver = driver
        self._cmqc = driver.CMQC
        self._errors = errors
        self.queue = queue
        self.qmgr_name = qmgr_name
        self.appl_name = appl_name

    def _put1(self, qmgr: Any, queue: str, data: bytes, md: Any, handle: Any, what: str, *,
              queue_manager: str = "", new_msg_id: bool = False) -> BaseException | None:
        """MQPUT1 of `what` to `queue` (at `queue_manager`) in the open unit of work, with the
        properties of message handle `handle` (if any); None if it was put, else the MQ error. A
        warning (e.g. priority above the maximum) still put it; a lost connection raises
        SourceConnectionError. No FAIL_IF_QUIESCING: a unit of work may still be finished while
        the queue manager quiesces."""
        c = self._cmqc
        od = self._driver.OD()
        od.ObjectName = queue.encode()
        if queue_manager:
            od.ObjectQMgrName = queue_manager.encode()
        pmo = self._driver.PMO(Version=c.MQPMO_VERSION_3)
        pmo.Options = c.MQPMO_SYNCPOINT | (c.MQPMO_NEW_MSG_ID if new_msg_id else 0)
        if handle is not None:
            pmo.OriginalMsgHandle = handle.msg_handle
        try:
            qmgr.put1(od, data, md, pmo)
        except self._errors as exc:
            if is_connection_loss(exc):
                raise wrap(exc, f"MQPUT1 of {what} to {queue}") from exc
            if not is_warning(exc):
                return exc
            log.warning("MQPUT1 of %s to %s: %s", what, queue, exc)
        return None


class PoisonRoute(SyncpointPutter):
    """Puts messages of one input queue to a backout or dead-letter queue under syncpoint."""

    def move(self, qmgr: Any, slot: UnitSlot, reason: str, *, backout_queue: str, dead_letter_queue: str,
             dlh_reason: int) -> tuple[str | None, list[str]]:
        """Put `slot`'s message to `backout_queue`, else to `dead_letter_queue`, in the open unit of
        work. Returns where it went (BACKOUT, DEAD_LETTER, or None if nowhere) and the problems
        met on the way. A lost connection raises SourceConnectionError."""
        c = self._cmqc
        problems: list[str] = []
        self._mark(slot, reason)
        if backout_queue:
            if self._put_moved(qmgr, backout_queue, slot.body, moved_md(self._driver, slot.md), slot, problems):
                return BACKOUT, problems
        else:
            problems.append("no backout queue (BOQNAME is blank and the listener sets no backout_queue)")
        if not dead_letter_queue:
            problems.append("no dead-letter queue (the queue manager's DEADQ is blank)")
            return None, problems
        md = moved_md(self._driver, slot.md)
        md.Format = c.MQFMT_DEAD_LETTER_HEADER
        md.Encoding = c.MQENC_NATIVE
        md.CodedCharSetId = c.MQCCSI_Q_MGR
        dlh = pack_dlh(c, reason=dlh_reason, dest_queue=self.queue, dest_qmgr=self.qmgr_name, original=slot.md,
                       put_appl_name=self.appl_name, now=utcnow())
        if self._put_moved(qmgr, dead_letter_queue, dlh + slot.body, md, slot, problems):
            return DEAD_LETTER, problems
        return None, problems

    def _put_moved(self, qmgr: Any, queue: str, data: bytes, md: Any, slot: UnitSlot, problems: list[str]) -> bool:
        """Put `slot`'s message (`data`, `md`, its properties) to `queue`; the failure goes to `problems`."""
        problem = self._put1(qmgr, queue, data, md, slot.handle, f"message {slot.msg_id}")
        if problem is not None:
            problems.append(f"{queue}: {problem}")
            log.error("MQPUT1 of message %s to %s failed: %s", slot.msg_id, queue, problem)
            return False
        slot.moved = True
        return True

    def _mark(self, slot: UnitSlot, reason: str) -> None:
        """Record why and from where the message was moved, as message properties."""
        if slot.handle is None:
            return
        md = slot.md
        stamp = put_timestamp(md.PutDate, md.PutTime)
        values = {
            REASON_PROPERTY: " ".join(reason.split())[:_REASON_LIMIT],
            "mqbridge_original_queue": self.queue,
            "mqbridge_original_qmgr": self.qmgr_name,
            "mqbridge_delivery_count": str(slot.backout_count + 1),
            "mqbridge_original_put_timestamp": stamp.isoformat() if stamp else "",
            "mqbridge_original_put_appl_name": text(md.PutApplName),
            "mqbridge_original_user": text(md.UserIdentifier),
            "mqbridge_moved_at": utcnow().isoformat(),
        }
        for name, value in values.items():
            try:
                slot.handle.properties.set(name.encode(), value)
            except self._errors as exc:
                if is_connection_loss(exc):
                    raise wrap(exc, f"MQSETMP on a message of {self.queue}") from exc
                log.warning("cannot set property %s on message %s of %s: %s", name, slot.msg_id, self.queue, exc)
