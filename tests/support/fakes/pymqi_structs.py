"""The MQI structures of the fake pymqi driver (`pymqi_fake`, which re-exports them): attribute
bags with MQI defaults whose character fields must be ``bytes`` (pymqi raises TypeError for
``str`` there), settable as attributes, items or keywords."""

from __future__ import annotations

from typing import Any, ClassVar

from tests.support.fakes import mq_cmqc as CMQC

_BLANK = b""


class _Struct:
    """An MQI structure: attributes with MQI defaults, settable as attributes, items or keywords."""

    _fields: ClassVar[tuple[tuple[str, Any], ...]] = ()

    def __init__(self, **kw: Any) -> None:
        for name, default in self._fields:
            setattr(self, name, list(default) if isinstance(default, list) else default)
        self.set(**kw)

    def __getattr__(self, name: str) -> Any:  # members are set in __init__; this is for type checkers
        raise AttributeError(f"{type(self).__name__} has no member {name!r}")

    def set(self, **kw: Any) -> None:
        for key, value in kw.items():
            getattr(self, key)  # AttributeError for a member the structure does not have
            setattr(self, key, value)

    def __setitem__(self, key: str, value: Any) -> None:
        getattr(self, key)
        setattr(self, key, value)

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)

    def get(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name, _ in self._fields}

    def set_vs(self, name: str, value: str | bytes | None = None, *_: Any) -> None:
        """Set a variable-length string (MQCHARV: ObjectString, SubName, ...), as pymqi's set_vs."""
        getattr(self, name)
        setattr(self, name, value.encode() if isinstance(value, str) else (value or b""))

    def get_vs(self, name: str) -> bytes:
        return bytes(getattr(self, name))

    def check(self) -> None:
        """What pymqi's pack() enforces: character fields hold bytes (Python 3 str is refused)."""
        for name, default in self._fields:
            value = getattr(self, name)
            if isinstance(default, bytes) and not isinstance(value, bytes):
                raise TypeError(f"Python 3 style string found but not allowed here: {name}={value!r}")


class MD(_Struct):
    """MQMD."""

    _fields = (
        ("StrucId", CMQC.MQMD_STRUC_ID), ("Version", CMQC.MQMD_VERSION_1), ("Report", CMQC.MQRO_NONE),
        ("MsgType", CMQC.MQMT_DATAGRAM), ("Expiry", CMQC.MQEI_UNLIMITED), ("Feedback", CMQC.MQFB_NONE),
        ("Encoding", CMQC.MQENC_NATIVE), ("CodedCharSetId", CMQC.MQCCSI_Q_MGR), ("Format", _BLANK),
        ("Priority", CMQC.MQPRI_PRIORITY_AS_Q_DEF), ("Persistence", CMQC.MQPER_PERSISTENCE_AS_Q_DEF),
        ("MsgId", _BLANK), ("CorrelId", _BLANK), ("BackoutCount", 0), ("ReplyToQ", _BLANK),
        ("ReplyToQMgr", _BLANK), ("UserIdentifier", _BLANK), ("AccountingToken", _BLANK),
        ("ApplIdentityData", _BLANK), ("PutApplType", CMQC.MQAT_NO_CONTEXT), ("PutApplName", _BLANK),
        ("PutDate", _BLANK), ("PutTime", _BLANK), ("ApplOriginData", _BLANK), ("GroupId", _BLANK),
        ("MsgSeqNumber", 1), ("Offset", 0), ("MsgFlags", CMQC.MQMF_NONE), ("OriginalLength", CMQC.MQOL_UNDEFINED),
    )


class GMO(_Struct):
    """MQGMO. pymqi's default is MQGMO_NO_WAIT without syncpoint."""

    _fields = (
        ("StrucId", CMQC.MQGMO_STRUC_ID), ("Version", CMQC.MQGMO_VERSION_1), ("Options", CMQC.MQGMO_NO_WAIT),
        ("WaitInterval", 0), ("Signal1", 0), ("Signal2", 0), ("ResolvedQName", _BLANK),
        ("MatchOptions", CMQC.MQMO_MATCH_MSG_ID | CMQC.MQMO_MATCH_CORREL_ID), ("GroupStatus", 32),
        ("SegmentStatus", 32), ("Segmentation", 32), ("MsgToken", _BLANK), ("ReturnedLength", CMQC.MQRL_UNDEFINED),
        ("MsgHandle", 0),
    )


class PMO(_Struct):
    """MQPMO."""

    _fields = (
        ("StrucId", CMQC.MQPMO_STRUC_ID), ("Version", CMQC.MQPMO_VERSION_1), ("Options", CMQC.MQPMO_NONE),
        ("Timeout", -1), ("Context", 0), ("ResolvedQName", _BLANK), ("ResolvedQMgrName", _BLANK),
        ("OriginalMsgHandle", 0), ("NewMsgHandle", 0), ("Action", 0), ("PubLevel", 9),
    )


class OD(_Struct):
    """MQOD."""

    _fields = (("ObjectType", CMQC.MQOT_Q), ("ObjectName", _BLANK), ("ObjectQMgrName", _BLANK),
               ("Version", CMQC.MQOD_VERSION_1), ("SelectionString", b""), ("ObjectString", b""))


class SD(_Struct):
    """MQSD (the variable-length strings as plain fields: set them with `set_vs`, as in pymqi)."""

    _fields = (("StrucId", CMQC.MQSD_STRUC_ID), ("Version", CMQC.MQSD_VERSION_1), ("Options", CMQC.MQSO_NON_DURABLE),
               ("ObjectName", _BLANK), ("AlternateUserId", _BLANK), ("SubExpiry", CMQC.MQEI_UNLIMITED),
               ("ObjectString", b""), ("SubName", b""), ("SubUserData", b""), ("SelectionString", b""),
               ("SubLevel", 1), ("ResObjectString", b""))


class CD(_Struct):
    """MQCD, client-connection fields."""

    _fields = (
        ("ChannelName", _BLANK), ("Version", CMQC.MQCD_VERSION_6), ("ChannelType", CMQC.MQCHT_CLNTCONN),
        ("TransportType", CMQC.MQXPT_TCP), ("ConnectionName", _BLANK), ("SSLCipherSpec", _BLANK),
        ("SSLPeerNamePtr", 0), ("HeartbeatInterval", 300), ("MaxMsgLength", 4194304), ("CertificateLabel", _BLANK),
        ("UserIdentifier", _BLANK), ("Password", _BLANK),
    )


class SCO(_Struct):
    """MQSCO."""

    _fields = (("Version", CMQC.MQSCO_VERSION_5), ("KeyRepository", _BLANK), ("CertificateLabel", _BLANK),
               ("FipsRequired", 0))


class CSP(_Struct):
    """MQCSP (ibmmq 2)."""

    _fields = (("AuthenticationType", 0), ("CSPUserId", None), ("CSPPassword", None))


class CMHO(_Struct):
    _fields = (("Version", CMQC.MQCMHO_VERSION_1), ("Options", CMQC.MQCMHO_DEFAULT_VALIDATION))


class IMPO(_Struct):
    _fields = (("Options", CMQC.MQIMPO_INQ_FIRST),)


class PD(_Struct):
    _fields = (("Options", CMQC.MQPD_NONE),)


class SMPO(_Struct):
    _fields = (("Options", 0),)
