"""MQGET on the fake queue manager: waiting, matching by MsgId/CorrelId and selection string,
conversion, truncation, browse, properties into a message handle, and the get under syncpoint that
hides a message until its unit of work ends. Mixed into `FakeQueueManagerServer`, whose attributes
these are."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from tests.support.fakes import mq_cmqc as CMQC
from tests.support.fakes.mq_model import Connection, FakeQueue, MQMIError, StoredMessage, fail, pad_bytes, pad_char
from tests.support.fakes.mq_selection import Predicate

_CCSID_CODECS = {1208: "utf-8", 819: "latin-1", 1252: "cp1252", 437: "cp437", 850: "cp850", 37: "cp037",
                 500: "cp500", 1200: "utf-16-be", 367: "ascii"}


class Gets:
    """MQGET."""

    cond: threading.Condition
    max_uncommitted: int
    quiescing: bool
    ccsid: int

    # the server's own (annotations only: a definition here would stand in front of them)
    _check: Callable[[Connection], None]
    _object: Callable[[Connection, int], tuple[FakeQueue | None, int]]
    _maybe_fault: Callable[[Connection | None, str, str | None], None]
    _handle: Callable[[Connection, int], dict[str, Any]]
    _journal_get: Callable[[StoredMessage], None]
    _persist: Callable[[], None]

    def mqget(self, conn: Connection, hobj: int, md: Any, gmo: Any, max_length: int | None) -> bytes:
        with self.cond:
            self._check(conn)
            queue, options = self._object(conn, hobj)
            if queue is None or not options & (CMQC.MQOO_INPUT_AS_Q_DEF | CMQC.MQOO_INPUT_SHARED
                                               | CMQC.MQOO_INPUT_EXCLUSIVE):
                raise fail(CMQC.MQRC_NOT_OPEN_FOR_INPUT)
            self._maybe_fault(conn, "get", queue.name)
            opts = gmo.Options
            syncpoint = bool(opts & CMQC.MQGMO_SYNCPOINT)
            if queue.get_inhibited:
                raise fail(CMQC.MQRC_GET_INHIBITED)
            if syncpoint and conn.uow_size >= self.max_uncommitted:
                raise fail(CMQC.MQRC_SYNCPOINT_LIMIT_REACHED)
            wait = opts & CMQC.MQGMO_WAIT
            deadline = None if gmo.WaitInterval < 0 else time.monotonic() + gmo.WaitInterval / 1000
            while True:
                self._check(conn)
                if opts & CMQC.MQGMO_FAIL_IF_QUIESCING and self.quiescing:
                    raise fail(CMQC.MQRC_Q_MGR_QUIESCING)
                message = self._match(queue, md, gmo, conn.selections.get(hobj))
                if message is not None:
                    break
                remaining = None if deadline is None else deadline - time.monotonic()
                if not wait or (remaining is not None and remaining <= 0):
                    raise fail(CMQC.MQRC_NO_MSG_AVAILABLE)
                self.cond.wait(0.5 if remaining is None else min(remaining, 0.5))
            return self._take(conn, queue, message, md, gmo, max_length, syncpoint)

    @staticmethod
    def _match(queue: FakeQueue, md: Any, gmo: Any, selects: Predicate | None = None) -> StoredMessage | None:
        want_msg = gmo.MatchOptions & CMQC.MQMO_MATCH_MSG_ID and md.MsgId.strip(b"\0")
        want_correl = gmo.MatchOptions & CMQC.MQMO_MATCH_CORREL_ID and md.CorrelId.strip(b"\0")
        for message in queue.messages:
            if not message.visible:
                continue
            if want_msg and message.md["MsgId"] != pad_bytes(md.MsgId, 24):
                continue
            if want_correl and message.md["CorrelId"] != pad_bytes(md.CorrelId, 24):
                continue
            # A selection string sees the properties; unknown (a missing property) does not select.
            if selects is not None and not selects({n: v for n, (_, v) in message.properties.items()}):
                continue
            return message
        return None

    def _take(self, conn: Connection, queue: FakeQueue, message: StoredMessage, md: Any, gmo: Any,
              max_length: int | None, syncpoint: bool) -> bytes:
        opts = gmo.Options
        data, ccsid, warning = message.data, message.md["CodedCharSetId"], 0
        if opts & CMQC.MQGMO_CONVERT and message.md["Format"] == CMQC.MQFMT_STRING:
            target = md.CodedCharSetId or self.ccsid
            if target != ccsid:
                source_codec, target_codec = _CCSID_CODECS.get(ccsid), _CCSID_CODECS.get(target)
                try:
                    if source_codec is None or target_codec is None:
                        raise LookupError(ccsid)
                    data, ccsid = data.decode(source_codec).encode(target_codec), target
                except (LookupError, UnicodeError):
                    warning = CMQC.MQRC_NOT_CONVERTED
        handle_id = gmo.MsgHandle if opts & CMQC.MQGMO_PROPERTIES_IN_HANDLE else 0
        if handle_id:
            handle = self._handle(conn, handle_id)
        elif message.properties and not opts & CMQC.MQGMO_NO_PROPERTIES:
            raise NotImplementedError("the fake does not build MQRFH2 headers: get with "
                                      "MQGMO_PROPERTIES_IN_HANDLE and a message handle")
        if max_length is not None and len(data) > max_length and not opts & CMQC.MQGMO_ACCEPT_TRUNCATED_MSG:
            # The message stays on the queue; the caller learns its length and may get it again.
            raise fail(CMQC.MQRC_TRUNCATED_MSG_FAILED, message=data[:max_length], original_length=len(message.data))
        if max_length is not None and len(data) > max_length:
            data, warning = data[:max_length], CMQC.MQRC_TRUNCATED_MSG_ACCEPTED
        browse = opts & (CMQC.MQGMO_BROWSE_FIRST | CMQC.MQGMO_BROWSE_NEXT)  # a copy: stays on the queue, unlocked
        if syncpoint and not browse:
            message.locked_by = conn.hconn
            conn.gets.append((queue, message))
            self._journal_get(message)
        elif not browse:
            queue.messages.remove(message)
            self._persist()
        for key, value in message.md.items():
            setattr(md, key, value)
        md.CodedCharSetId = ccsid
        gmo.ResolvedQName = pad_char(queue.name, 48)
        gmo.ReturnedLength = len(data)
        if handle_id:
            handle["props"] = dict(message.properties)
            handle["cursor"] = -1
        if warning:
            raise MQMIError(CMQC.MQCC_WARNING, warning, message=data, original_length=len(message.data))
        return data
