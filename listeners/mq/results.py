"""Results for intermediate stations on IBM MQ (`[types.X] results_to`, `mqbridge.outbound.stations`): a
message of one input queue that landed or was moved gets its result put to its type's `results_to`
queue on the connected queue manager, under syncpoint, in the unit of work that removes it.

The result is the action notification's format (`mqbridge.listeners.mq.reports`): the same JSON
body (MQSTR, UTF-8) and `mqbridge_*` message properties, plus `message_type` and `source`; but a
datagram (MQMT_DATAGRAM, not a report: the station did not send the message), persistent, never
expiring, with a new MsgId and the message's MsgId as CorrelId (how a station matches results).
A `results_to` queue that does not take it (unknown, put-inhibited, full) makes it a dead-letter
message with an MQDLH naming that queue, as a queue manager does; if the dead-letter queue does not
take it either, the unit of work is backed out and the listener halts (BackoutFailedError), as for
a message that no backout queue takes: a station's result is never dropped.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from mqbridge.errors import BackoutFailedError
from mqbridge.listeners.mq.driver import quietly, reason_of
from mqbridge.listeners.mq.mapping import pack_dlh
from mqbridge.listeners.mq.reports import ReportSender
from mqbridge.listeners.mq.unit import UnitSlot
from mqbridge.message import Message, utcnow
from mqbridge.outbound.stations import Stations
from mqbridge.source import Confirmations

log = logging.getLogger(__name__)

# MQ's own values (cmqc.h), named here so that any driver, and the fake one, works.
MQMT_DATAGRAM = 8
MQPER_PERSISTENT = 1
MQEI_UNLIMITED = -1
_MQMI_NONE = b"\0" * 24


class StationSender(ReportSender):
    """Puts the results of one input queue's messages to their types' `results_to` queues."""

    def __init__(self, driver: Any, errors: tuple[type[BaseException], ...], *, queue: str, qmgr_name: str,
                 appl_name: str, stations: Stations, source: str) -> None:
        super().__init__(driver, errors, queue=queue, qmgr_name=qmgr_name, appl_name=appl_name)
        self.stations = stations
        self.source = source

    def put(self, qmgr: Any, slot: UnitSlot, message: Message | None, details: dict[str, str],
             dead_letter_queue: str, confirmed: Confirmations, bulk_id: str = "") -> int:
        """Put the result of `slot`'s message (`details`: where it landed or why it moved;
        `message`: as the listener knew it, None if it was moved at get time) to its type's
        `results_to`, else the dead-letter queue, in the open unit of work; the number of messages
        put (0: its type has none). Neither taking it backs the unit out: BackoutFailedError."""
        route = self.stations.route(message, bulk_id)
        if route is None:
            return 0
        message_type, destination = route
        if destination.startswith("/"):
            self.stations.unreachable(message_type, destination, "an IBM MQ source puts results to a queue")
            confirmed.failed += 1
            return 0
        body = {"result": "backout" if "reason" in details else "landed", "message_id": slot.msg_id,
                "queue": self.queue, "queue_manager": self.qmgr_name, **details, "message_type": message_type,
                "source": self.source}
        data, md = json.dumps(body).encode(), self._result_md(slot.md)
        handle = self._properties(qmgr, {f"mqbridge_{k}": v for k, v in body.items()})
        what = f"the result of message {slot.msg_id} of {self.queue} to results_to {destination}"
        try:
            refused = self._put1(qmgr, destination, data, md, handle, what, new_msg_id=True)
            if refused is None:
                confirmed.to_stations += 1
                return 1
            self._dead_letter(qmgr, destination, data, md, handle, what, dead_letter_queue, refused)
            confirmed.rerouted += 1
            return 1
        finally:
            if handle is not None:
                quietly(getattr(handle, "dlt", None))

    def _dead_letter(self, qmgr: Any, destination: str, data: bytes, md: Any, handle: Any, what: str,
                     dead_letter_queue: str, refused: BaseException) -> None:
        """Put the refused result to the dead-letter queue behind an MQDLH; if that fails too, back
        the unit out and raise BackoutFailedError (the listener halts; nothing is dropped)."""
        problem = reason_of(refused) or -1
        dlh = pack_dlh(self._cmqc, reason=problem, dest_queue=destination, dest_qmgr=self.qmgr_name, original=md,
                       put_appl_name=self.appl_name, now=utcnow())
        if dead_letter_queue and self._put1(qmgr, dead_letter_queue, dlh + data, self._dead_letter_md(md), handle,
                                            what, new_msg_id=True) is None:
            log.warning("%s: the queue refused it (MQRC %d); put to the dead-letter queue %s", what, problem,
                        dead_letter_queue)
            return
        try:
            qmgr.backout()
        except self._errors as exc:
            log.error("MQBACK on %s after a refused result: %s", self.queue, exc)
        message = (f"cannot put {what} (MQRC {problem}) nor to a dead-letter queue ({dead_letter_queue or 'none'}): "
                   "its unit of work is backed out and the listener stops")
        log.critical("%s", message)
        raise BackoutFailedError(message)

    def _result_md(self, original: Any) -> Any:
        """A persistent datagram correlated with the message of MQMD `original` (its MsgId)."""
        c = self._cmqc
        md = self._driver.MD()
        md.MsgType, md.Report, md.Feedback = MQMT_DATAGRAM, 0, 0
        md.Format, md.Encoding, md.CodedCharSetId = c.MQFMT_STRING, c.MQENC_NATIVE, 1208
        md.Persistence, md.Priority, md.Expiry = MQPER_PERSISTENT, original.Priority, MQEI_UNLIMITED
        md.MsgId, md.CorrelId = _MQMI_NONE, original.MsgId
        return md
