"""IBM MQ source adapter, on IBM's `ibmmq` package or its predecessor `pymqi` (same API family).

Unit of work = MQ syncpoint. Every MQGET uses MQGMO_SYNCPOINT, so a got message stays hidden from
other consumers until MQCMIT deletes it or MQBACK returns it with BackoutCount + 1. MQ can only
commit or back out a unit of work whole (`supports_partial_commit = False`).

Poison messages are handled like the IBM MQ JMS classes do: the queue's BOTHRESH and BOQNAME are
inquired at connect (a listener's `backout_threshold` / `backout_queue` override them); a message
got with BackoutCount >= threshold is put to the backout queue in the same unit of work and never
handed to the listener — unless the listener's ledger shows it landed (`landed`: its unit was backed
out for a neighbour), then it is handed over and committed as landed. If the put fails it goes to
the queue manager's dead-letter queue with an MQDLH; if that fails too the unit is backed out and
`BackoutFailedError` stops the listener: a message is never dropped. Messages the listener moves
(permanent failures) take the same route, with the reason in the `mqbridge_reason` property.

MQMD `Report` asking for MQRO_PAN/NAN: the report is put in the same unit of work (`.reports`).

A topic listener (`topic` + `subscription`) reads the managed queue of its durable subscription
through the handle MQSUB returns (`.subscribe`), in every other respect as a queue: its messages
keep the topic as their destination and name their subscription (`{subscription}`, the ledger's
scoped identities).

MQDISC commits an open unit of work, so `close` always backs out first, and the connection is made
with `disconnect_on_exit=False`: garbage collection never disconnects (a connection that goes away
is backed out by the queue manager).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from mqbridge import failpoints
from mqbridge.config import ListenerConfig, MqSourceConfig
from mqbridge.errors import (
    ConfigError,
    InDoubtError,
    SourceConnectionError,
    SourceError,
    SourceQuiescingError,
)
from mqbridge.listeners.mq.connect import (
    DEFAULT_MAX_UNCOMMITTED,
    QueueSettings,
    connect_options,
    connect_qmgr,
    inquire_settings,
    open_input,
)
from mqbridge.listeners.mq.derived import DerivedPutter
from mqbridge.listeners.mq.driver import (
    driver_errors,
    is_connection_loss,
    load_driver,
    quietly,
    wrap,
)
from mqbridge.listeners.mq.ending import UnitEnding
from mqbridge.listeners.mq.get import SyncpointGetter, UnitFull
from mqbridge.listeners.mq.mapping import correlation_id, md_headers, put_timestamp, read_properties
from mqbridge.listeners.mq.poison import PoisonRoute, threshold_reason
from mqbridge.listeners.mq.reports import MQRO_NAN, MQRO_PAN, ReportSender
from mqbridge.listeners.mq.results import StationSender
from mqbridge.listeners.mq.subscribe import close_subscription, open_subscription
from mqbridge.listeners.mq.unit import UnitSlot
from mqbridge.message import Message, put_date_of, utcnow
from mqbridge.outbound.reply_to import ReplyAllowList
from mqbridge.outbound.stations import Stations
from mqbridge.records import DeliveryTracker, InDoubtLog, PoisonLog
from mqbridge.source import BackoutMove, Confirmations, Landed, SourceContext
from mqbridge.tracing.backout_log import BackoutLog

log = logging.getLogger(__name__)

__all__ = ["MqSource"]

MQRC_BACKOUT_THRESHOLD_REACHED = 2362
MQFB_APPL_FIRST = 65536


class MqSource(UnitEnding):
    """One IBM MQ client connection consuming one queue (or one durable subscription's managed queue)
    under syncpoint (see the module docstring)."""

    supports_partial_commit = False
    applies_backout_threshold = True  # BOTHRESH/BOQNAME (or the listener's override), at get time
    landed: Callable[[Message], bool] | None = None  # see Source.applies_backout_threshold

    @classmethod
    def from_context(cls, context: SourceContext) -> MqSource:
        """The constructor of the kind's driver (`mqbridge.drivers.Driver.source`)."""
        source = context.source
        assert isinstance(source, MqSourceConfig)
        return cls(context.source_name, source, context.listener.queue, listener=context.listener,
                   in_doubt=context.shared.in_doubt, appl_name=context.bridge_name, poison=context.shared.poison,
                   tracker=context.shared.tracker, reply_allow=context.reply_allow(source.queue_manager),
                   backout_log=context.shared.backout_log, stations=context.shared.stations)

    def __init__(self, name: str, config: MqSourceConfig, destination: str, *,
                 listener: ListenerConfig | None = None, driver: ModuleType | Any = None,
                 in_doubt: InDoubtLog | None = None, appl_name: str = "mqbridge",
                 poison: PoisonLog | None = None, tracker: DeliveryTracker | None = None,
                 reply_allow: ReplyAllowList | None = None, backout_log: BackoutLog | None = None,
                 stations: Stations | None = None) -> None:
        self.name = name
        self.destination = destination
        self.config = config
        #: Errors after which reconnecting may help (a commit in doubt is a lost connection too).
        self.recoverable_errors: tuple[type[BaseException], ...] = (SourceConnectionError, InDoubtError)
        self._driver = driver if driver is not None else load_driver()
        self._cmqc = self._driver.CMQC
        self._errors = driver_errors(self._driver)
        self._listener = listener  # its batch, and its overrides of the queue's BOTHRESH/BOQNAME
        # A topic listener's topic string and durable subscription (`subscribe`, docs/topics.md);
        # `destination` is then its name, TOPIC@SUBSCRIPTION.
        self.topic = listener.topic if listener is not None else None
        self.subscription = (listener.subscription or "") if listener is not None else ""
        self._subscription: Any = None  # the MQSUB handle of a topic listener
        # The settings were validated by MqSourceConfig (and the queue name by BridgeConfig).
        self._options = connect_options(self._cmqc, config.reconnect)
        self._route = PoisonRoute(self._driver, self._errors, queue=destination,
                                  qmgr_name=config.queue_manager, appl_name=appl_name)
        self._reports = ReportSender(self._driver, self._errors, queue=destination, qmgr_name=config.queue_manager,
                                     appl_name=appl_name, allow=reply_allow or ReplyAllowList(
                                         listener.reply_to_allow if listener is not None else None,
                                         listener=name, queue_manager=config.queue_manager))
        self._stations = None if stations is None else StationSender(  # `[types.X] results_to`: listeners.mq.results
            self._driver, self._errors, queue=destination, qmgr_name=config.queue_manager, appl_name=appl_name,
            stations=stations, source=name)
        self._derived = DerivedPutter(self._driver, self._errors, queue=destination, qmgr_name=config.queue_manager,
                                      appl_name=appl_name)  # the preprocessors' outbox (`mqbridge.outbound.outbox`)
        self._unit_reports = Confirmations()  # reports put in the open unit of work
        self._committed_reports = Confirmations()  # reports of committed units, not yet returned by commit
        self._nan_seen = False  # a message of this queue asked for MQRO_NAN: units keep room for its report
        self.in_doubt = in_doubt if in_doubt is not None else InDoubtLog()
        # The queue's suspects (see PoisonLog): a message this adapter moves at BOTHRESH leaves them.
        self.poison = poison if poison is not None else PoisonLog()
        # The queue's record of units backed out because a sink was down: those rollbacks raised
        # BackoutCount but must not count towards BOTHRESH (an outage is not poison).
        self.tracker = tracker if tracker is not None else DeliveryTracker()
        # Where the moves this adapter makes by itself (BOTHRESH at get time) are recorded once committed.
        self.backout_log = backout_log
        # Inquired at connect; the listener's configuration overrides BOTHRESH/BOQNAME.
        self.backout_threshold = 0
        self.backout_queue = ""
        self.dead_letter_queue = ""
        self.max_uncommitted = DEFAULT_MAX_UNCOMMITTED
        # Counters, for the status page and tests.
        self.moved_to_backout = 0
        self.moved_to_dead_letter = 0
        self.in_doubt_units = 0
        self.in_doubt_redelivered = 0
        self._qmgr: Any = None
        self._input: Any = None
        self._getter = SyncpointGetter(self._driver, self._errors, config, self._where)
        self._names_unavailable_logged = False
        self._unit: list[UnitSlot] = []
        self._uncommitted = 0  # gets and puts in the unit of work (MAXUMSGS counts both)
        self._full = False
        self._quiescing = False
        self._idle = threading.Event()  # never set: an interruptible pause

    # -- connection ----------------------------------------------------------------------------
    def connect(self) -> None:
        if self._qmgr is not None:
            self.close()
        self._qmgr = connect_qmgr(self._driver, self._errors, self.config, self._options)
        try:
            if self.topic is not None:  # the durable subscription's managed queue, read like a queue
                self._subscription, self._input = open_subscription(
                    self._driver, self._errors, self._qmgr, self._where, self.topic, self.subscription)
                inquirable = True
            else:
                self._input, inquirable = open_input(self._driver, self._errors, self._qmgr, self._where,
                                                     self.destination,
                                                     self._listener.selector if self._listener else None)
            settings = inquire_settings(self._cmqc, self._errors, self._qmgr, self._input, inquirable,
                                        self._where, self.config.queue_manager)
            self._apply(settings)
        except BaseException:
            self.close()
            raise
        log.info("connected to %s via %s at %s (BOTHRESH %d, backout queue %s, dead-letter queue %s, MAXUMSGS %d)",
                 self._where, self.config.channel, self.config.conn_name, self.backout_threshold,
                 self.backout_queue or "-", self.dead_letter_queue or "-", self.max_uncommitted)

    def _apply(self, settings: QueueSettings) -> None:
        """Take the queue's settings, with the listener's explicit `backout_threshold` and
        `backout_queue` (None: not configured) instead of BOTHRESH and BOQNAME; check the
        listener's batch against MAXUMSGS."""
        listener = self._listener
        override = listener.backout_threshold if listener is not None else None
        queue_override = listener.backout_queue if listener is not None else None
        batch = listener.batch if listener is not None else 1
        max_uncommitted = settings.max_uncommitted
        self.backout_threshold = int(override) if override is not None else settings.backout_threshold
        self.backout_queue = str(queue_override) if queue_override else settings.backout_queue
        self.dead_letter_queue = settings.dead_letter_queue
        self.max_uncommitted = max_uncommitted
        if batch > max_uncommitted:
            raise ConfigError(
                f"listeners ({self.name}:{self.destination}).batch = {batch} is above queue manager "
                f"{self.config.queue_manager}'s MaxUncommittedMsgs (MAXUMSGS) = {max_uncommitted}: lower "
                "batch, or ALTER QMGR MAXUMSGS")
        if 2 * batch > max_uncommitted:
            log.warning("%s: batch %d with MAXUMSGS %d: a unit of work is capped at %d messages, because each "
                        "message moved to a backout queue adds an uncommitted put (a third of MAXUMSGS for "
                        "messages asking for NAN reports: the move and the report)", self._where, batch,
                        max_uncommitted, max_uncommitted // 2)

    def close(self) -> None:
        qmgr, self._qmgr = self._qmgr, None
        queue, self._input = self._input, None
        subscription, self._subscription = self._subscription, None
        handles = self._getter.take_handles()
        self._end_unit()
        self._quiescing = False
        if qmgr is None:
            return
        try:
            qmgr.backout()  # before anything else: MQDISC would commit an open unit of work
        except Exception as exc:
            if not (isinstance(exc, self._errors) and is_connection_loss(exc)):
                log.critical("MQBACK on %s failed (%s); NOT disconnecting, because MQDISC would commit the "
                             "unit of work. The connection is abandoned; the queue manager backs the unit "
                             "out when the connection ends.", self._where, exc)
                return
            log.debug("MQBACK on %s: connection already gone (%s)", self._where, exc)
        for handle in handles:
            quietly(getattr(handle, "dlt", None))
        if subscription is not None:
            close_subscription(self._driver, subscription)  # the durable subscription stays
        elif queue is not None:
            quietly(queue.close)
        quietly(qmgr.disconnect)

    # -- unit of work ----------------------------------------------------------------------
    def receive(self, timeout: float) -> Message | None:
        self._require()
        if self._quiescing:
            return self._while_quiescing(timeout)
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            if not self._room_for_one_more():
                self._idle.wait(max(0.0, deadline - time.monotonic()))
                return None
            try:
                slot = self._get(deadline)
            except SourceQuiescingError:
                self._quiescing = True
                log.warning("%s: queue manager is quiescing; finishing the unit of work, then stopping",
                            self._where)
                return self._while_quiescing(0.0)
            if slot is None:
                self._commit_if_only_moves()
                return None
            counted = slot.backout_count - self.tracker.outage_give_backs(slot.msg_id)
            over = self.backout_threshold > 0 and counted >= self.backout_threshold
            landed = self._landed_over_threshold(slot) if over else None
            if over and landed is None:
                reason = threshold_reason(slot.backout_count, counted, self.backout_threshold, self.destination)
                self._move(slot, reason, None, MQRC_BACKOUT_THRESHOLD_REACHED)
                self._commit_if_only_moves()
                self.poison.left_queue([slot.msg_id])  # (if the commit fails, it is got and moved again)
                self.poison.forget([slot.msg_id])
                continue
            slot.handed = True
            return landed if landed is not None else self._to_message(slot)

    def _landed_over_threshold(self, slot: UnitSlot) -> Message | None:
        """`slot`'s message, over its threshold, if it landed (its unit was backed out for another: MQ
        commits whole) or the ledger cannot say (the listener gives the unit back uncounted); else None."""
        if self.landed is None:
            return None
        message = self._to_message(slot)
        try:
            return message if self.landed(message) else None
        except Exception as exc:
            log.warning("%s: message %s: whether it landed cannot be known (%s): not moved", self._where,
                        slot.msg_id, exc)
            return message

    def _while_quiescing(self, timeout: float) -> Message | None:
        if any(s.handed for s in self._unit):
            self._idle.wait(timeout)  # the listener is finishing its unit of work
            return None
        self._commit_if_only_moves()
        raise SourceQuiescingError(f"queue manager {self.config.queue_manager} is quiescing: "
                                   f"stopped consuming {self.destination}")

    def _room_for_one_more(self) -> bool:
        # Every message handed out may still be moved at commit (one more uncommitted put each), or
        # get its PAN report instead; one asking for MQRO_NAN may need both its move and its report.
        # The next message needs its get and as much again (one more once this queue has had
        # messages asking for NAN: a report never fails for MAXUMSGS that a message asked for).
        # A results_to adds one more put to each (listeners.mq.results).
        nan, station = self._reports.wanted, int(self._stations is not None)
        reserve = sum(2 if nan(s, MQRO_NAN) else 1 for s in self._unit if s.handed)
        if not self._nan_seen and reserve > sum(1 for s in self._unit if s.handed):
            self._nan_seen = True
        reserve += station * sum(1 for s in self._unit if s.handed)
        return not self._full and self._uncommitted + reserve + 2 + self._nan_seen + station <= self.max_uncommitted

    def _get(self, deadline: float) -> UnitSlot | None:
        """The next message, got in the unit of work; None if none came by `deadline` or the unit
        of work is full."""
        try:
            slot = self._getter.get(self._qmgr, self._input, len(self._unit), deadline)
        except UnitFull:
            self._full = True
            return None
        if slot is not None:
            self._unit.append(slot)
            self._uncommitted += 1
        return slot

    def _to_message(self, slot: UnitSlot) -> Message:
        md = slot.md
        headers = md_headers(md)
        if slot.handle is not None:
            properties = self._call(lambda: read_properties(slot.handle, self._cmqc, self._errors),
                                    "MQINQMP")
            if properties is None:
                if not self._names_unavailable_logged:
                    self._names_unavailable_logged = True
                    log.warning("%s: this driver does not return property names (pymqi 1.x); message "
                                "properties are kept (and moved with a message) but not copied to headers; "
                                "install ibmmq to get them", self._where)
            else:
                headers.update(properties)
        if slot.warning:
            headers["mqbridge_get_warning"] = str(slot.warning)
        if slot.msg_id in self.in_doubt:
            headers["mqbridge_in_doubt"] = "true"
            self.in_doubt_redelivered += 1
            log.info("%s: message %s was in a unit of work whose commit was in doubt; it came back",
                     self._where, slot.msg_id)
        return Message(
            msg_id=slot.msg_id,
            body=slot.body,
            source=self.name,
            destination=self.topic if self.topic is not None else self.destination,
            subscription=self.subscription,
            correlation_id=correlation_id(md.CorrelId),
            put_timestamp=put_timestamp(md.PutDate, md.PutTime),
            received_timestamp=utcnow(),
            redelivered=slot.backout_count > 0,
            delivery_count=slot.backout_count + 1,
            headers=headers,
            token=slot,
        )

    def commit(self, moves: Sequence[BackoutMove] = (), returns: Sequence[Message] = (),
               landed: Sequence[Landed] = ()) -> Confirmations | None:
        if returns:
            raise SourceError(f"{self._where}: IBM MQ commits or backs out a unit of work whole; "
                              "returning some of its messages is not possible (supports_partial_commit is False)")
        self._require()
        for move in moves:
            slot = self._slot_of(move.message)
            if slot is None:
                raise SourceError(f"{self._where}: message {move.message.msg_id} is not in the unit of work")
            if slot.moved:
                continue
            threshold = self.backout_threshold
            code = MQRC_BACKOUT_THRESHOLD_REACHED if threshold and slot.backout_count >= threshold else MQFB_APPL_FIRST
            self._move(slot, move.reason, move.queue, code, move.message)
        for item in landed:
            slot = self._slot_of(item.message)
            if slot is None or slot.moved:
                continue
            where = {"table": item.table, "bulk_id": item.bulk_id, "put_date": put_date_of(item.message)}
            if self._reports.wanted(slot, MQRO_PAN):
                self._uncommitted += self._reports.send(self._qmgr, slot, MQRO_PAN, where, self.dead_letter_queue,
                                                        self._unit_reports)
            self._to_station(slot, item.message, where, item.bulk_id)
        derived = self._derived.put(self._qmgr, landed)  # the preprocessors' outbox (`mqbridge.outbound.outbox`)
        self._uncommitted += derived
        if self._unit_reports.sent or self._unit_reports.rerouted or self._unit_reports.to_stations or derived:
            failpoints.hit("after_results_put")
        self._commit_unit()
        done, self._committed_reports = self._committed_reports, Confirmations()
        return done

    def _slot_of(self, message: Message) -> UnitSlot | None:
        """The unit's slot of this delivery: its token (which preprocessed copies keep), not its
        MsgId, since an application may put two messages with one MsgId and both can be in a unit."""
        token: object = message.token
        return (next((slot for slot in self._unit if slot is token), None)
                or next((slot for slot in self._unit if slot.msg_id == message.msg_id), None))

    def rollback(self) -> None:
        qmgr = self._require()
        count = len(self._unit)
        try:
            qmgr.backout()
        except self._errors as exc:
            self._end_unit()
            raise wrap(exc, f"MQBACK of {count} messages on {self._where}") from exc
        self._end_unit()

    # -- internals --------------------------------------------------------------------------
    def _call(self, call: Any, what: str) -> Any:
        try:
            return call()
        except self._errors as exc:
            raise wrap(exc, f"{what} on {self._where}") from exc
