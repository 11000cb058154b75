"""Ending an IBM MQ unit of work (mixed into `MqSource`): MQCMIT with its outcomes (committed,
backed out by the queue manager, in doubt), the moves to a backout or dead-letter queue put in the
unit, the results put to a type's `results_to`, and the record of the moves the adapter made by
itself. Kept apart from the adapter's connect/get loop (`source`) so each stays readable."""

from __future__ import annotations

import logging
import time
from typing import Any

from mqbridge.config import ListenerConfig, MqSourceConfig
from mqbridge.errors import BackoutFailedError, InDoubtError, SourceConnectionError
from mqbridge.listeners.mq.driver import MQRC_BACKED_OUT, is_connection_loss, is_warning, reason_of, wrap
from mqbridge.listeners.mq.poison import BACKOUT, PoisonRoute
from mqbridge.listeners.mq.reports import MQRO_NAN, ReportSender
from mqbridge.listeners.mq.results import StationSender
from mqbridge.listeners.mq.unit import UnitSlot
from mqbridge.message import Message
from mqbridge.records import InDoubtLog
from mqbridge.source import Confirmations
from mqbridge.tracing.backout_log import BackoutLog, MovedMessage

log = logging.getLogger("mqbridge.listeners.mq.source")  # the adapter's logger: one name for its lines


class UnitEnding:
    """Committing and moving within the open unit of work (mixed into `MqSource`, whose
    attributes these are)."""

    name: str
    destination: str
    config: MqSourceConfig
    in_doubt: InDoubtLog
    backout_log: BackoutLog | None
    backout_queue: str
    dead_letter_queue: str
    moved_to_backout: int
    moved_to_dead_letter: int
    in_doubt_units: int
    _qmgr: Any
    _errors: tuple[type[BaseException], ...]
    _listener: ListenerConfig | None
    _route: PoisonRoute
    _reports: ReportSender
    _stations: StationSender | None
    _unit_reports: Confirmations
    _committed_reports: Confirmations
    _unit: list[UnitSlot]
    _uncommitted: int
    _full: bool

    @property
    def _where(self) -> str:
        return f"{self.config.queue_manager}/{self.destination}"

    def _require(self) -> Any:
        if self._qmgr is None:
            raise SourceConnectionError(f"not connected to {self._where}")
        return self._qmgr

    def _end_unit(self) -> None:
        self._unit_reports = Confirmations()  # committed (counted by _commit_unit) or backed out
        self._unit = []
        self._uncommitted = 0
        self._full = False

    def _to_station(self, slot: UnitSlot, message: Message | None, details: dict[str, str], bulk_id: str = "") -> None:
        """Put `slot`'s result to its type's `results_to` in this unit of work (listeners.mq.results)."""
        if self._stations is None:
            return
        try:
            self._uncommitted += self._stations.put(self._qmgr, slot, message, details, self.dead_letter_queue,
                                                     self._unit_reports, bulk_id)
        except BackoutFailedError:
            self._end_unit()  # backed out by the sender
            raise

    def _commit_if_only_moves(self) -> None:
        """A unit holding only messages this source moved (nothing handed out) is finished at once."""
        if self._unit and not any(s.handed for s in self._unit):
            self._commit_unit()

    def _commit_unit(self) -> None:
        qmgr = self._require()
        msg_ids = [slot.msg_id for slot in self._unit]
        if not msg_ids and not self._uncommitted:
            return
        try:
            qmgr.commit()
        except self._errors as exc:
            reason = reason_of(exc)
            if is_warning(exc):
                log.warning("MQCMIT on %s: %s", self._where, exc)
            elif reason == MQRC_BACKED_OUT:
                self._end_unit()
                raise SourceConnectionError(f"MQCMIT on {self._where}: the queue manager backed out the unit "
                                            f"of work of {len(msg_ids)} messages (2003); they will be delivered "
                                            "again") from exc
            elif is_connection_loss(exc):
                self._end_unit()
                self.in_doubt.record(msg_ids)
                self.in_doubt_units += 1
                log.error("MQCMIT on %s failed with %s: the commit of %d messages is IN DOUBT; they may be "
                          "delivered again. Message ids: %s", self._where, reason, len(msg_ids), ", ".join(msg_ids))
                raise InDoubtError(f"MQCMIT on {self._where} failed ({exc}): the commit of {len(msg_ids)} "
                                   "messages is in doubt", msg_ids) from exc
            else:
                raise wrap(exc, f"MQCMIT on {self._where}") from exc
        self._committed_reports.add(self._unit_reports)
        self._record_own_moves()
        self._end_unit()

    def _record_own_moves(self) -> None:
        """The moves of the committed unit that this adapter made at get time (the listener records
        those it asked for), in the backout log."""
        if self.backout_log is None:
            return
        listener = self._listener
        for slot in self._unit:
            if slot.moved and not slot.handed:
                self.backout_log.record(MovedMessage(
                    time.time(), f"{self.name}:{self.destination}", self.destination, slot.moved_to, slot.msg_id,
                    "", slot.reason, listener.message_type if listener is not None else "", slot.backout_count + 1))

    def _move(self, slot: UnitSlot, reason: str, queue: str | None, dlh_reason: int,
              about: Message | None = None) -> None:
        """Put the message to its backout queue (else the dead-letter queue) in this unit of work;
        if neither takes it, back the whole unit out and raise BackoutFailedError."""
        where, problems = self._route.move(self._qmgr, slot, reason, backout_queue=queue or self.backout_queue,
                                           dead_letter_queue=self.dead_letter_queue, dlh_reason=dlh_reason)
        if where is not None:
            self._uncommitted += 1
            slot.reason = reason
            slot.moved_to = (queue or self.backout_queue) if where == BACKOUT else self.dead_letter_queue
            if where == BACKOUT:
                self.moved_to_backout += 1
                log.warning("%s: moved message %s to backout queue %s: %s", self._where, slot.msg_id,
                            queue or self.backout_queue, reason)
            else:
                self.moved_to_dead_letter += 1
                log.error("%s: moved message %s to dead-letter queue %s (%s): %s", self._where, slot.msg_id,
                          self.dead_letter_queue, "; ".join(problems), reason)
            why = {"reason": " ".join(reason.split())[:1000], "moved_to": slot.moved_to}
            if self._reports.wanted(slot, MQRO_NAN):
                self._uncommitted += self._reports.send(self._qmgr, slot, MQRO_NAN, why, self.dead_letter_queue,
                                                        self._unit_reports)
            self._to_station(slot, about, why)
            return
        try:
            self._qmgr.backout()
        except self._errors as exc:
            log.error("MQBACK on %s after a failed move: %s", self._where, exc)
        self._end_unit()
        message = (f"cannot move message {slot.msg_id} from {self._where} to a backout or dead-letter queue "
                   f"({'; '.join(problems)}); its unit of work is backed out and the listener stops")
        log.critical("%s", message)
        raise BackoutFailedError(message)

