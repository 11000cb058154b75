"""Getting messages from the input queue under syncpoint: one MQGET per message with
MQGMO_SYNCPOINT, waiting until the caller's deadline (each wait capped by `wait_interval`),
converted if `convert` says so, into a buffer that grows to fit the largest message met, with the
message's properties in a message handle from a pool that every unit of work reuses."""

from __future__ import annotations

import logging
import time
from typing import Any

from mqbridge.config import MqSourceConfig
from mqbridge.errors import SourceError
from mqbridge.listeners.mq.driver import (
    MQRC_NO_MSG_AVAILABLE,
    MQRC_SYNCPOINT_LIMIT_REACHED,
    MQRC_TRUNCATED_MSG_FAILED,
    is_connection_loss,
    is_warning,
    reason_of,
    wrap,
)
from mqbridge.listeners.mq.mapping import hex_id
from mqbridge.listeners.mq.unit import UnitSlot

log = logging.getLogger(__name__)

INITIAL_BUFFER = 64 * 1024
MAX_BUFFER = 2 * 100 * 1024 * 1024  # MQ's largest message (100 MB), doubled for data conversion


class UnitFull(Exception):
    """MQGET found the unit of work full (MQRC_SYNCPOINT_LIMIT_REACHED): commit it first."""


class SyncpointGetter:
    """MQGETs the messages of one input queue under syncpoint, one at a time."""

    def __init__(self, driver: Any, errors: tuple[type[BaseException], ...], config: MqSourceConfig,
                 where: str) -> None:
        self._driver = driver
        self._cmqc = driver.CMQC
        self._errors = errors
        self._config = config
        self._where = where
        self._buffer = INITIAL_BUFFER
        self._handles: list[Any] = []
        self._handles_unavailable = False

    def get(self, qmgr: Any, queue: Any, index: int, deadline: float) -> UnitSlot | None:
        """The `index`-th message of the unit of work (0: the first), got from `queue` under
        syncpoint; None if none came by `deadline`. Raises UnitFull if the unit of work already
        holds messages and the queue manager takes no more in it."""
        convert = self._config.convert
        cap = self._config.wait_interval
        while True:
            wait = max(0.0, deadline - time.monotonic())
            if cap:
                wait = min(wait, float(cap))
            handle = self._handle(qmgr, index)
            md, gmo = self._descriptors(handle, wait)
            warning = 0
            try:
                body = queue.get(self._buffer, md, gmo)
            except self._errors as exc:
                reason = reason_of(exc)
                if reason == MQRC_NO_MSG_AVAILABLE:
                    return None
                if reason == MQRC_TRUNCATED_MSG_FAILED:
                    self._grow_buffer(exc, bool(convert))  # the message is still on the queue
                    continue
                if reason == MQRC_SYNCPOINT_LIMIT_REACHED and index:
                    raise UnitFull from exc
                if not is_warning(exc):
                    raise wrap(exc, f"MQGET from {self._where}") from exc
                # A warning (e.g. 2119 not converted) still got the message: it is in our unit.
                body, warning = bytes(getattr(exc, "message", b"") or b""), reason or 0
                log.warning("MQGET from %s: %s; the message is delivered as it was got", self._where, exc)
            return UnitSlot(hex_id(md.MsgId), md, bytes(body), handle, int(md.BackoutCount), warning)

    def _descriptors(self, handle: Any, wait: float) -> tuple[Any, Any]:
        """The MQMD and MQGMO of one get waiting `wait` seconds, its properties into `handle`."""
        c, d = self._cmqc, self._driver
        convert = self._config.convert
        md = d.MD()  # a fresh MQMD: reused MsgId/CorrelId would match only the previous message
        gmo = d.GMO(Version=c.MQGMO_VERSION_4)
        gmo.Options = c.MQGMO_SYNCPOINT | c.MQGMO_WAIT | c.MQGMO_FAIL_IF_QUIESCING
        gmo.WaitInterval = int(wait * 1000)
        if handle is not None:
            gmo.Options |= c.MQGMO_PROPERTIES_IN_HANDLE
            gmo.MsgHandle = handle.msg_handle
        if convert:
            gmo.Options |= c.MQGMO_CONVERT
            md.CodedCharSetId = 1208 if convert is True else int(convert)
            md.Encoding = c.MQENC_NATIVE
        return md, gmo

    def _grow_buffer(self, exc: BaseException, convert: bool) -> None:
        length = int(getattr(exc, "original_length", 0) or 0)
        wanted = max(length * (2 if convert else 1), self._buffer * 2)
        if self._buffer >= MAX_BUFFER:
            raise SourceError(f"MQGET from {self._where}: a message of {length} bytes does not fit "
                              f"{self._buffer} bytes") from exc
        self._buffer = min(wanted, MAX_BUFFER)
        log.info("MQGET from %s: message of %d bytes; buffer grown to %d bytes", self._where, length, self._buffer)

    def _handle(self, qmgr: Any, index: int) -> Any:
        """The message handle for the index-th message of the unit (a pool reused per unit)."""
        if self._handles_unavailable:
            return None
        while len(self._handles) <= index:
            try:
                self._handles.append(self._driver.MessageHandle(qmgr))
            except self._errors as exc:
                if is_connection_loss(exc):
                    raise wrap(exc, f"MQCRTMH on {self._where}") from exc
                self._handles_unavailable = True
                log.warning("%s: message handles are unavailable (%s): message properties stay in the "
                            "body as an MQRFH2 header, as the queue's PROPCTL decides", self._where, exc)
                return None
        return self._handles[index]

    def take_handles(self) -> list[Any]:
        """The pool's message handles, to delete while the connection is still open; the pool
        starts again empty."""
        handles, self._handles = self._handles, []
        return handles
