"""Action notifications, as the IBM MQ documentation defines them for the application that processes
a message: a message whose MQMD `Report` holds MQRO_PAN gets a positive action notification (a
report message, MsgType MQMT_REPORT, Feedback MQFB_PAN) once it is published in its table; one
holding MQRO_NAN gets a negative one (MQFB_NAN) when it is moved to a backout or dead-letter queue.

The report goes to the message's ReplyToQ at ReplyToQMgr, under syncpoint: in the unit of work that
removes the message, so a report exists if and only if the message left its queue. Its MsgId and
CorrelId follow the message's MQRO_PASS_MSG_ID / MQRO_NEW_MSG_ID and MQRO_PASS_CORREL_ID /
MQRO_COPY_MSG_ID_TO_CORREL_ID options; its persistence, priority and expiry are the message's.
Where the message landed (table, bulk id, put_date) or why it was moved is in message properties
(`mqbridge_result`, `mqbridge_table`, ...) and, as JSON, in the body (MQSTR, UTF-8). A reply-to
queue that does not take the report (unknown, put-inhibited, full) makes it a dead-letter message
with an MQDLH naming the reply-to queue, as a queue manager does; if that fails too, the report is
dropped with an error log: a report never blocks its unit of work. A reply-to the listener's
`reply_to_allow` does not allow (default: any queue on the connected queue manager) gets no report:
counted and logged once (`mqbridge.outbound.reply_to`), the message committed as if it had asked for none.
Confirm on arrival and on delivery (MQRO_COA, MQRO_COD) are the queue manager's own reports, not the
bridge's.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from mqbridge.listeners.mq.driver import is_connection_loss, quietly, reason_of, wrap
from mqbridge.listeners.mq.mapping import hex_id, pack_dlh, text
from mqbridge.listeners.mq.poison import SyncpointPutter
from mqbridge.listeners.mq.unit import UnitSlot
from mqbridge.message import utcnow
from mqbridge.outbound.reply_to import ReplyAllowList
from mqbridge.source import Confirmations

log = logging.getLogger(__name__)

# MQ's own values (cmqc.h); named here so that any driver, and the fake one, works.
MQRO_PAN = 0x00000001
MQRO_NAN = 0x00000002
MQRO_PASS_CORREL_ID = 0x00000040
MQRO_PASS_MSG_ID = 0x00000080
MQMT_REPORT = 4
MQFB_PAN = 275
MQFB_NAN = 276
_MQMI_NONE = b"\0" * 24


class ReportSender(SyncpointPutter):
    """Puts PAN and NAN report messages for the messages of one input queue under syncpoint, to
    the reply-to queues `allow` allows (`mqbridge.outbound.reply_to`; None: the connected queue manager's)."""

    def __init__(self, driver: Any, errors: tuple[type[BaseException], ...], *, queue: str, qmgr_name: str,
                 appl_name: str, allow: ReplyAllowList | None = None) -> None:
        super().__init__(driver, errors, queue=queue, qmgr_name=qmgr_name, appl_name=appl_name)
        self.allow = allow if allow is not None else ReplyAllowList(None, listener=queue, queue_manager=qmgr_name)

    @staticmethod
    def wanted(slot: UnitSlot, option: int) -> bool:
        """The message asked for this report (MQRO_PAN or MQRO_NAN)."""
        return bool(int(slot.md.Report) & option)

    def send(self, qmgr: Any, slot: UnitSlot, option: int, details: dict[str, str], dead_letter_queue: str,
             confirmed: Confirmations) -> int:
        """Put the report `option` asks for about `slot`'s message to its reply-to queue (else the
        dead-letter queue) in the open unit of work; the number of messages put (0 or 1). A lost
        connection raises SourceConnectionError; any other failure is counted and logged."""
        c = self._cmqc
        original = slot.md
        reply_to, reply_qmgr = text(original.ReplyToQ), text(original.ReplyToQMgr)
        kind = "PAN" if option == MQRO_PAN else "NAN"
        what = f"{kind} report for message {slot.msg_id} of {self.queue}"
        if not reply_to:
            confirmed.failed += 1
            log.error("%s: the message has no ReplyToQ; no report is sent", what)
            return 0
        if not self.allow.allows_mq(reply_to, reply_qmgr):
            confirmed.not_allowed += 1  # as if the message had asked for none: it is committed all the same
            self.allow.refused(f"{reply_qmgr or self.qmgr_name}/{reply_to}", f"{kind} reports of {self.queue}")
            return 0
        md = self._report_md(original, option)
        body = {"result": "landed" if option == MQRO_PAN else "backout", "message_id": slot.msg_id,
                "queue": self.queue, "queue_manager": self.qmgr_name, **details}
        data = json.dumps(body).encode()
        handle = self._properties(qmgr, {f"mqbridge_{k}": v for k, v in body.items()})
        new_id = md.MsgId == _MQMI_NONE
        try:
            refused = self._put1(qmgr, reply_to, data, md, handle, f"the {what}", queue_manager=reply_qmgr,
                                 new_msg_id=new_id)
            if refused is None:
                log.debug("%s put to %s (MsgId %s)", what, reply_to, hex_id(md.MsgId))
                confirmed.sent += 1
                return 1
            problem = reason_of(refused) or -1
            dlh = pack_dlh(c, reason=problem, dest_queue=reply_to, dest_qmgr=reply_qmgr or self.qmgr_name,
                           original=md, put_appl_name=self.appl_name, now=utcnow())
            dead = self._dead_letter_md(md)
            if dead_letter_queue and self._put1(qmgr, dead_letter_queue, dlh + data, dead, handle, f"the {what}",
                                                new_msg_id=new_id) is None:
                confirmed.rerouted += 1
                log.warning("%s: reply-to queue %s refused it (MQRC %d); put to the dead-letter queue %s", what,
                            reply_to, problem, dead_letter_queue)
                return 1
            confirmed.failed += 1
            log.error("%s: neither the reply-to queue %s (MQRC %d) nor a dead-letter queue (%s) took it; the "
                      "message is committed without its report", what, reply_to, problem, dead_letter_queue or "none")
            return 0
        finally:
            if handle is not None:
                quietly(getattr(handle, "dlt", None))

    def _report_md(self, original: Any, option: int) -> Any:
        """The MQMD of the report `option` asks for about the message of MQMD `original`: its
        MsgId and CorrelId as the message's report options say; its persistence, priority and
        expiry the message's."""
        c = self._cmqc
        report = int(original.Report)
        md = self._driver.MD()
        md.MsgType, md.Feedback, md.Report = MQMT_REPORT, MQFB_PAN if option == MQRO_PAN else MQFB_NAN, 0
        md.Format, md.Encoding, md.CodedCharSetId = c.MQFMT_STRING, c.MQENC_NATIVE, 1208
        md.Persistence, md.Priority, md.Expiry = original.Persistence, original.Priority, original.Expiry
        md.MsgId = original.MsgId if report & MQRO_PASS_MSG_ID else _MQMI_NONE
        md.CorrelId = original.CorrelId if report & MQRO_PASS_CORREL_ID else original.MsgId
        return md

    def _dead_letter_md(self, md: Any) -> Any:
        """The MQMD of a report put to the dead-letter queue behind an MQDLH: the report's own
        fields, the MQDLH's format."""
        c = self._cmqc
        dead = self._driver.MD()
        for name in ("MsgType", "Feedback", "Persistence", "Priority", "Expiry", "MsgId", "CorrelId"):
            setattr(dead, name, getattr(md, name))
        dead.Format, dead.Encoding, dead.CodedCharSetId = c.MQFMT_DEAD_LETTER_HEADER, c.MQENC_NATIVE, c.MQCCSI_Q_MGR
        return dead

    def _properties(self, qmgr: Any, values: dict[str, str]) -> Any:
        """A message handle holding `values` as string properties; None if handles are unavailable
        (the details are in the body either way)."""
        try:
            handle = self._driver.MessageHandle(qmgr)
            for name, value in values.items():
                handle.properties.set(name.encode(), str(value))
        except self._errors as exc:
            if is_connection_loss(exc):
                raise wrap(exc, f"MQCRTMH/MQSETMP for a report of {self.queue}") from exc
            log.warning("report properties unavailable on %s (%s): the details are in the body only", self.queue, exc)
            return None
        return handle

