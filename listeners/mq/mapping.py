"""IBM MQ structures ↔ mqbridge: MQMD fields to headers and columns, message properties to
headers, and the MQDLH that prefixes a message put to the dead-letter queue."""

from __future__ import annotations

import logging
import struct
from datetime import datetime, timezone
from typing import Any

from mqbridge.listeners.mq.driver import MQRC_PROPERTY_NOT_AVAILABLE, MQRC_PROPERTY_VALUE_TOO_BIG, reason_of

log = logging.getLogger(__name__)

#: Header-key prefix of MQMD fields, so they never collide with message property names.
MQMD_PREFIX = "MQMD."
# MQMD character fields copied to headers (blank padding removed).
_TEXT_FIELDS = ("PutApplName", "UserIdentifier", "ReplyToQ", "ReplyToQMgr", "Format")
# MQMD numeric fields copied to headers as decimal strings.
_INT_FIELDS = ("Persistence", "Priority", "Expiry", "CodedCharSetId", "Encoding", "MsgType", "BackoutCount")
# MQMD fields a message keeps when it is moved to a backout or dead-letter queue. The identity and
# origin context (UserIdentifier, PutApplName, PutDate...) is set anew by the queue manager; the
# original values travel as mqbridge_original_* properties.
MOVED_MD_FIELDS = ("Report", "MsgType", "Expiry", "Feedback", "Encoding", "CodedCharSetId", "Format", "Priority",
                   "Persistence", "MsgId", "CorrelId", "ReplyToQ", "ReplyToQMgr")

#: Longest property value read in one MQINQMP; longer ones are read again at their full length.
PROPERTY_VALUE_LENGTH = 4096
_MAX_PROPERTIES = 10_000

# MQDLH version 1: StrucId, Version, Reason, DestQName, DestQMgrName, Encoding, CodedCharSetId,
# Format, PutApplType, PutApplName, PutDate, PutTime (172 bytes, integers in native encoding).
_DLH = struct.Struct("=4sii48s48sii8si28s8s8s")
assert _DLH.size == 172


def text(value: Any) -> str:
    """An MQ character field as text, without its blank (or NUL) padding."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return str(value or "").rstrip(" \0")


def hex_id(value: bytes) -> str:
    """A 24-byte MQ identifier (MsgId, CorrelId) as 48 hex digits."""
    return value.ljust(24, b"\0").hex()


def correlation_id(value: bytes) -> str | None:
    """The CorrelId as hex, or None when it is MQCI_NONE (all zero)."""
    return None if not value.strip(b"\0") else hex_id(value)


def put_timestamp(put_date: Any, put_time: Any) -> datetime | None:
    """MQMD PutDate (YYYYMMDD) and PutTime (HHMMSSTH, GMT) as an aware UTC datetime."""
    date, time = text(put_date), text(put_time)
    if len(date) != 8 or len(time) < 6 or not (date + time).isdigit():
        return None
    try:
        hundredths = int(time[6:8]) if len(time) >= 8 else 0
        return datetime(int(date[:4]), int(date[4:6]), int(date[6:8]), int(time[:2]), int(time[2:4]),
                        int(time[4:6]), hundredths * 10_000, tzinfo=timezone.utc)
    except ValueError:
        return None


def md_headers(md: Any) -> dict[str, str]:
    """The MQMD fields that become headers of the landed row."""
    headers = {MQMD_PREFIX + name: text(getattr(md, name)) for name in _TEXT_FIELDS}
    headers.update({MQMD_PREFIX + name: str(int(getattr(md, name))) for name in _INT_FIELDS})
    return headers


def property_text(value: Any) -> str:
    """A message property value as a header string (byte strings as hex)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    return str(value)


def read_properties(handle: Any, cmqc: Any, errors: tuple[type[BaseException], ...]) -> dict[str, str] | None:
    """Every property of the message in `handle` (MQINQMP with the `%` wildcard), or None if the
    driver does not return property names (pymqi 1.x returns only the values)."""
    found: dict[str, str] = {}
    options = cmqc.MQIMPO_INQ_FIRST
    length = PROPERTY_VALUE_LENGTH
    while len(found) < _MAX_PROPERTIES:
        try:
            result = handle.properties.get(b"%", max_value_length=length, impo_options=options)
        except errors as exc:
            reason = reason_of(exc)
            if reason == MQRC_PROPERTY_NOT_AVAILABLE:
                return found
            if reason == MQRC_PROPERTY_VALUE_TOO_BIG and options != cmqc.MQIMPO_INQ_PROP_UNDER_CURSOR:
                # Read the same property again with room for its whole value.
                wanted = getattr(exc, "data_length", None) or getattr(exc, "dataLength", None)
                length = max(int(wanted or 0), length * 4)
                options = cmqc.MQIMPO_INQ_PROP_UNDER_CURSOR
                continue
            raise
        if not isinstance(result, tuple):
            return None
        value, name = result
        found[text(name)] = property_text(value)
        options, length = cmqc.MQIMPO_INQ_NEXT, PROPERTY_VALUE_LENGTH
    log.warning("a message has more than %d properties; the rest are not copied to headers", _MAX_PROPERTIES)
    return found


def moved_md(driver: Any, original: Any) -> Any:
    """A new MQMD for putting a copy of a got message elsewhere (same MsgId, CorrelId, format,
    persistence, priority, expiry)."""
    md = driver.MD()
    for name in MOVED_MD_FIELDS:
        setattr(md, name, getattr(original, name))
    return md


def pack_dlh(cmqc: Any, *, reason: int, dest_queue: str, dest_qmgr: str, original: Any, put_appl_name: str,
             now: datetime) -> bytes:
    """An MQDLH for a message that could not be put to its backout queue."""
    return _DLH.pack(
        b"DLH ", 1, reason, dest_queue.encode()[:48].ljust(48), dest_qmgr.encode()[:48].ljust(48),
        int(original.Encoding), int(original.CodedCharSetId), bytes(original.Format)[:8].ljust(8),
        int(getattr(cmqc, "MQAT_DEFAULT", 6)), put_appl_name.encode()[:28].ljust(28),
        now.strftime("%Y%m%d").encode(), (now.strftime("%H%M%S") + f"{now.microsecond // 10_000:02d}").encode())


def unpack_dlh(data: bytes) -> tuple[dict[str, Any], bytes]:
    """The MQDLH fields and the original message data of a dead-letter message."""
    fields = _DLH.unpack(data[:_DLH.size])
    names = ("StrucId", "Version", "Reason", "DestQName", "DestQMgrName", "Encoding", "CodedCharSetId", "Format",
             "PutApplType", "PutApplName", "PutDate", "PutTime")
    header = {n: (text(v) if isinstance(v, bytes) else v) for n, v in zip(names, fields, strict=True)}
    return header, data[_DLH.size:]
