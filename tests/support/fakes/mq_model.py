"""The data of the fake IBM MQ queue manager: errors, stored messages, queues, connections."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.support.fakes import mq_cmqc as CMQC

# MQMD character fields and their lengths: blank-padded (char) or NUL-padded (byte) as MQ returns them.
CHAR_FIELDS = {"Format": 8, "ReplyToQ": 48, "ReplyToQMgr": 48, "UserIdentifier": 12, "PutApplName": 28,
               "PutDate": 8, "PutTime": 8, "ApplIdentityData": 32, "ApplOriginData": 4}
BYTE_FIELDS = {"MsgId": 24, "CorrelId": 24, "GroupId": 24, "AccountingToken": 32}


def _reason_name(reason: int) -> str:
    for name, value in vars(CMQC).items():
        if name.startswith("MQRC_") and value == reason:
            return name
    return f"reason {reason}"


class Error(Exception):
    """Base class of the fake driver's exceptions (pymqi.Error)."""


class MQMIError(Error):
    """An MQI call completed with a warning or failed (pymqi.MQMIError): `comp`, `reason`,
    and for gets `message` / `original_length`, for property inquiries `data_length`."""

    message: bytes
    original_length: int
    data_length: int

    def __init__(self, comp: int, reason: int, **kw: Any) -> None:
        super().__init__(comp, reason)
        self.comp, self.reason = comp, reason
        for key, value in kw.items():
            setattr(self, key, value)

    def errorAsString(self) -> str:  # noqa: N802 - pymqi's name
        prefix = "WARNING: " if self.comp == CMQC.MQCC_WARNING else "FAILED: "
        return prefix + _reason_name(self.reason)

    def __str__(self) -> str:
        return f"MQI Error. Comp: {self.comp}, Reason {self.reason}: {self.errorAsString()}"


class PYIFError(Error):
    """An error detected by the Python layer itself (pymqi.PYIFError), e.g. 'not connected'."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error

    def __str__(self) -> str:
        return f"PYMQI Error: {self.error}"


def fail(reason: int, **kw: Any) -> MQMIError:
    return MQMIError(CMQC.MQCC_FAILED, reason, **kw)


def pad_char(value: bytes | str, length: int) -> bytes:
    raw = value.encode() if isinstance(value, str) else value
    return raw[:length].ljust(length, b" ")


def pad_bytes(value: bytes, length: int) -> bytes:
    return value[:length].ljust(length, b"\0")


@dataclass(eq=False)
class StoredMessage:
    """One message on a queue: its data, its MQMD as the queue manager stores it, its properties."""

    data: bytes
    md: dict[str, Any]
    properties: dict[str, tuple[int, Any]]
    seq: int
    locked_by: int | None = None  # hconn that got it under syncpoint, not yet committed
    pending_put_by: int | None = None  # hconn that put it under syncpoint, not yet committed

    @property
    def visible(self) -> bool:
        return self.locked_by is None and self.pending_put_by is None

    @property
    def msg_id(self) -> bytes:
        return bytes(self.md["MsgId"])

    @property
    def backout_count(self) -> int:
        return int(self.md["BackoutCount"])

    def prop(self, name: str) -> Any:
        return self.properties[name][1]


@dataclass(eq=False)
class FakeQueue:
    """A local queue and the attributes mqbridge reads or trips over."""

    name: str
    backout_threshold: int = 0  # BOTHRESH
    backout_queue: str = ""  # BOQNAME
    max_depth: int = 5000  # MAXDEPTH
    max_msg_length: int = 4 * 1024 * 1024  # MAXMSGL
    default_persistence: int = CMQC.MQPER_NOT_PERSISTENT  # DEFPSIST
    get_inhibited: bool = False
    put_inhibited: bool = False
    denied: set[str] = field(default_factory=set)  # "get", "put", "inq", "browse": MQOPEN gets 2035
    messages: list[StoredMessage] = field(default_factory=list)

    def visible(self) -> list[StoredMessage]:
        """What a browse would show: committed, not held by a unit of work."""
        return [m for m in self.messages if m.visible]

    def bodies(self) -> list[bytes]:
        return [m.data for m in self.visible()]

    @property
    def depth(self) -> int:
        """CURDEPTH: like MQ, it includes uncommitted gets and puts."""
        return len(self.messages)

    def _insert(self, message: StoredMessage) -> None:
        # MSGDLVSQ(PRIORITY): higher priority first, FIFO within a priority.
        prio = message.md["Priority"]
        index = len(self.messages)
        for i, other in enumerate(self.messages):
            if other.md["Priority"] < prio:
                index = i
                break
        self.messages.insert(index, message)


@dataclass
class Fault:
    """An injected failure of one MQI verb: after `after` matching calls, the next `times`
    fail with `reason`. For commit faults, `applied` says whether the commit happened before the
    connection broke (the in-doubt case)."""

    op: str  # connect | open | get | put | commit | backout | inquire | disconnect | crtmh
    reason: int
    comp: int = CMQC.MQCC_FAILED
    queue: str | None = None
    after: int = 0
    times: int = 1
    applied: bool = False
    fired: int = 0


@dataclass(eq=False)
class Connection:
    """One MQCONNX: its unit of work, message handles and where it came from."""

    hconn: int
    thread: int
    share_handles: bool
    info: dict[str, Any]
    alive: bool = True
    reason: int = 0  # why it died (for the next call's reason code)
    gets: list[tuple[FakeQueue, StoredMessage]] = field(default_factory=list)
    puts: list[tuple[FakeQueue, StoredMessage]] = field(default_factory=list)
    handles: dict[int, dict[str, Any]] = field(default_factory=dict)
    objects: dict[int, tuple[FakeQueue | None, int]] = field(default_factory=dict)
    selections: dict[int, Callable[[Mapping[str, Any]], bool | None]] = field(default_factory=dict)  # by hobj

    @property
    def uow_size(self) -> int:
        return len(self.gets) + len(self.puts)


def default_md() -> dict[str, Any]:
    md: dict[str, Any] = {
        "Report": CMQC.MQRO_NONE, "MsgType": CMQC.MQMT_DATAGRAM, "Expiry": CMQC.MQEI_UNLIMITED,
        "Feedback": CMQC.MQFB_NONE, "Encoding": CMQC.MQENC_NATIVE, "CodedCharSetId": CMQC.MQCCSI_Q_MGR,
        "Priority": 0, "Persistence": CMQC.MQPER_NOT_PERSISTENT, "BackoutCount": 0,
        "PutApplType": CMQC.MQAT_NO_CONTEXT, "MsgSeqNumber": 1, "Offset": 0, "MsgFlags": CMQC.MQMF_NONE,
        "OriginalLength": CMQC.MQOL_UNDEFINED,
    }
    md.update({k: b" " * n for k, n in CHAR_FIELDS.items()})
    md.update({k: b"\0" * n for k, n in BYTE_FIELDS.items()})
    md["Format"] = CMQC.MQFMT_NONE
    return md


def infer_type(value: Any) -> int:
    if value is None:
        return CMQC.MQTYPE_NULL
    if isinstance(value, bool):
        return CMQC.MQTYPE_BOOLEAN
    if isinstance(value, int):
        return CMQC.MQTYPE_INT64
    if isinstance(value, float):
        return CMQC.MQTYPE_FLOAT64
    if isinstance(value, bytes):
        return CMQC.MQTYPE_BYTE_STRING
    return CMQC.MQTYPE_STRING
