"""Re-drive on IBM MQ: move messages from a listener's backout queue (its `backout_queue`, else the
queue's BOQNAME) back to the queue, under syncpoint (`mqbridge redrive`).

Each batch is one unit of work: MQGET under syncpoint from the backout queue (properties into a
message handle), MQPUT1 under syncpoint to the queue with the same MQMD identity fields (MsgId,
CorrelId, format, persistence, priority, expiry: `mapping.moved_md`) and the same properties, then
MQCMIT. The MsgId is the identity the ledger knows (`identity = "msg_id"`), so a message that had
in fact landed is recognised and not landed twice. The put starts a new BackoutCount. The move's
properties stay (`mqbridge_reason`, `mqbridge_moved_at`, ...: the fake queue manager, like MQ
before MQDLTMP, keeps what a handle holds); the reason is also kept as `mqbridge_redriven_reason`
(earlier re-drives' reasons after it, separated by " | ") with `mqbridge_redriven_at`. Killed
before MQCMIT, the queue manager backs the unit out: nothing moved. A failure backs out before the
connection closes (MQDISC would commit).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from mqbridge import failpoints
from mqbridge.config import ListenerConfig, MqSourceConfig, SourceConfig
from mqbridge.errors import ConfigError, SourceError
from mqbridge.listeners.mq.connect import connect_options, connect_qmgr, inquire_settings, open_input
from mqbridge.listeners.mq.driver import driver_errors, load_driver
from mqbridge.listeners.mq.get import SyncpointGetter
from mqbridge.listeners.mq.mapping import moved_md, read_properties
from mqbridge.listeners.mq.poison import REASON_PROPERTY, SyncpointPutter
from mqbridge.listeners.mq.unit import UnitSlot
from mqbridge.message import utcnow
from mqbridge.resend.redrive import RedriveReport, RedriveRequest

log = logging.getLogger(__name__)

REDRIVEN_REASON = "mqbridge_redriven_reason"
REDRIVEN_AT = "mqbridge_redriven_at"


def redrive(source_name: str, config: SourceConfig, listener: ListenerConfig, request: RedriveRequest,
            say: Callable[[str], None]) -> RedriveReport:
    """Move up to `request.limit` messages from the listener's backout queue to its queue (module
    docstring); with `request.dry_run`, list the first `request.batch` and back them out."""
    assert isinstance(config, MqSourceConfig), "the mq driver's re-drive"
    if listener.topic is not None:
        # A put to the topic would reach every subscription; a managed queue is not opened by name.
        raise ConfigError(f"listener {source_name}:{listener.queue} reads an IBM MQ topic: re-drive puts to the "
                          "queue a listener reads, and a durable subscription's managed queue takes no puts; "
                          "publish the backout queue's messages to the topic again with MQ's tools (every "
                          "subscription gets them)")
    driver = load_driver()
    errors = driver_errors(driver)
    qmgr = connect_qmgr(driver, errors, config, connect_options(driver.CMQC, config.reconnect))
    getter = SyncpointGetter(driver, errors, config, f"the backout queue of {listener.queue}")
    try:
        backout = listener.backout_queue or _boqname(driver, errors, qmgr, config, listener.queue)
        queue, _ = open_input(driver, errors, qmgr, backout, backout)
        putter = SyncpointPutter(driver, errors, queue=listener.queue, qmgr_name=config.queue_manager,
                                 appl_name="mqbridge-redrive")
        report = RedriveReport(backout=backout, target=listener.queue)
        try:
            _loop(qmgr, queue, getter, putter, driver, errors, request, report, say)
        except BaseException:
            qmgr.backout()  # before any disconnect: MQDISC with an open unit of work commits it
            raise
        finally:
            queue.close()
        return report
    finally:
        for handle in getter.take_handles():
            handle.dlt()
        qmgr.disconnect()


def _boqname(driver: Any, errors: tuple[type[BaseException], ...], qmgr: Any, config: MqSourceConfig,
             queue_name: str) -> str:
    queue, inquirable = open_input(driver, errors, qmgr, queue_name, queue_name)
    try:
        settings = inquire_settings(driver.CMQC, errors, qmgr, queue, inquirable, queue_name, config.queue_manager)
    finally:
        queue.close()
    if not settings.backout_queue:
        raise ConfigError(f"--listener {queue_name}: no backout_queue configured and the queue's BOQNAME is blank")
    return settings.backout_queue


def _loop(qmgr: Any, queue: Any, getter: SyncpointGetter, putter: SyncpointPutter, driver: Any,
          errors: tuple[type[BaseException], ...], request: RedriveRequest, report: RedriveReport,
          say: Callable[[str], None]) -> None:
    while report.moved < request.limit:
        slots = _take(qmgr, queue, getter, min(request.batch, request.limit - report.moved), request.wait)
        if not slots:
            return
        if request.dry_run:
            for slot in slots:
                say(_describe(slot, driver, errors))
            report.listed = len(slots)
            qmgr.backout()  # every message stays where it was
            return
        for slot in slots:
            _keep_history(slot, driver, errors)
            problem = putter._put1(qmgr, putter.queue, slot.body, moved_md(driver, slot.md), slot.handle,
                                   f"message {slot.msg_id}")
            if problem is not None:
                raise SourceError(f"MQPUT1 of message {slot.msg_id} to {putter.queue} failed: {problem}; "
                                  "the batch is backed out (nothing of it moved)")
        failpoints.hit("redrive_before_commit")
        qmgr.commit()
        report.moved += len(slots)
        failpoints.hit("redrive_after_commit")
        say(f"moved {report.moved} so far")


def _take(qmgr: Any, queue: Any, getter: SyncpointGetter, most: int, wait: float) -> list[UnitSlot]:
    slots: list[UnitSlot] = []
    while len(slots) < most:
        deadline = time.monotonic() + (wait if not slots else 0.0)
        slot = getter.get(qmgr, queue, len(slots), deadline)
        if slot is None:
            break
        slots.append(slot)
    return slots


def _keep_history(slot: UnitSlot, driver: Any, errors: tuple[type[BaseException], ...]) -> None:
    if slot.handle is None:
        return
    found = read_properties(slot.handle, driver.CMQC, errors) or {}
    reason, earlier = found.get(REASON_PROPERTY, ""), found.get(REDRIVEN_REASON, "")
    if reason:
        slot.handle.properties.set(REDRIVEN_REASON.encode(), f"{reason} | {earlier}" if earlier else reason)
    slot.handle.properties.set(REDRIVEN_AT.encode(), utcnow().isoformat())


def _describe(slot: UnitSlot, driver: Any, errors: tuple[type[BaseException], ...]) -> str:
    found = read_properties(slot.handle, driver.CMQC, errors) or {} if slot.handle is not None else {}
    return (f"  {slot.msg_id}  moved {found.get('mqbridge_moved_at', '?')}  "
            f"reason: {found.get(REASON_PROPERTY, '')}")
