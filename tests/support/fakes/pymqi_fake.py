"""A pymqi-shaped driver over the fake queue manager in `mq_server`, for tests.

It models the parts of the pymqi / ibmmq API that mqbridge uses, with their real shapes:
structures are attribute bags with MQI defaults whose character fields must be ``bytes``
(pymqi raises TypeError for ``str`` there); `Queue.get(max_length, md, gmo)` raises
`MQMIError` for every non-OK completion, warnings included, with ``message`` and
``original_length`` attributes; `QueueManager(None, disconnect_on_exit=...)` disconnects from
``__del__`` by default, and MQDISC commits an open unit of work; a connection handle belongs to
the thread that made it unless a MQCNO_HANDLE_SHARE_* option was given (2018 otherwise).

Pass this module where mqbridge expects the driver module (`MqSource(..., driver=pymqi_fake)`);
queue managers are `mq_server.FakeQueueManagerServer` objects registered under their names.
"""

from __future__ import annotations

import contextlib
from typing import Any, ClassVar

from tests.support.fakes import mq_cmqc as CMQC
from tests.support.fakes.mq_server import (
    REGISTRY,
    Connection,
    Error,
    FakeQueueManagerServer,
    MQMIError,
    PYIFError,
    fail,
)

CMQXC = CMQC  # channel constants live in CMQXC in ibmmq, in CMQC in pymqi 1.x: both work here

__all__ = ["CD", "CMHO", "CMQC", "CMQXC", "CSP", "GMO", "IMPO", "MD", "OD", "PD", "PMO", "SCO", "SMPO", "Error",
           "FakeQueueManagerServer", "MQMIError", "MessageHandle", "PYIFError", "Queue", "QueueManager"]

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

    _fields = (("ObjectType", 1), ("ObjectName", _BLANK), ("ObjectQMgrName", _BLANK),
               ("Version", CMQC.MQOD_VERSION_1), ("SelectionString", b""))


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


def _text(value: str | bytes) -> str:
    return (value.decode() if isinstance(value, bytes) else value).strip(" \0")


class QueueManager:
    """A connection to a fake queue manager (pymqi.QueueManager)."""

    def __init__(self, name: str | bytes | None = "", disconnect_on_exit: bool = True,
                 bytes_encoding: str = "utf8", default_ccsid: int = 1208) -> None:
        self._conn: Connection | None = None
        self._server: FakeQueueManagerServer | None = None
        self._disconnect_on_exit = disconnect_on_exit
        self._qmobj: int | None = None
        self.bytes_encoding = bytes_encoding
        self.default_ccsid = default_ccsid
        if name is not None:
            self.connect(name)

    def __del__(self) -> None:
        # pymqi disconnects on garbage collection by default, and MQDISC commits.
        if self._conn is not None and self._conn.alive and self._disconnect_on_exit and self._server is not None:
            with contextlib.suppress(Error):
                self._server.mqdisc(self._conn, via="__del__")

    def connect(self, name: str | bytes) -> None:
        self.connect_with_options(name)

    def connect_with_options(self, name: str | bytes, *args: Any, **kwargs: Any) -> None:
        if args:
            kwargs["cd"] = args[0]
            if len(args) > 1:
                kwargs["sco"] = args[1]
        for key in ("cd", "sco", "csp"):
            if kwargs.get(key) is not None:
                kwargs[key].check()
        user, password = kwargs.get("user"), kwargs.get("password")
        csp = kwargs.get("csp")
        if csp is not None and csp.CSPUserId:
            user, password = csp.CSPUserId, csp.CSPPassword
        if user and password is None:
            raise ValueError("Password must not be None if user is provided")
        server = REGISTRY.get(_text(name))
        if server is None:
            raise fail(CMQC.MQRC_Q_MGR_NAME_ERROR)
        cd, sco = kwargs.get("cd"), kwargs.get("sco")
        info = {
            "channel": _text(cd.ChannelName) if cd else "", "conn_name": _text(cd.ConnectionName) if cd else "",
            "cipher_spec": _text(cd.SSLCipherSpec) if cd else "", "cd_version": cd.Version if cd else 0,
            "key_repository": _text(sco.KeyRepository) if sco else "",
            "certificate_label": _text(sco.CertificateLabel) if sco else "",
            "password": password, "options": kwargs.get("opts", CMQC.MQCNO_NONE),
        }
        if cd is not None and cd.SSLCipherSpec and cd.Version < CMQC.MQCD_VERSION_7:
            cd.Version = CMQC.MQCD_VERSION_7  # as pymqi does for TLS
            info["cd_version"] = cd.Version
        self._conn = server.mqconnx(_text(user) if user else None,
                                    _text(password) if password is not None else None,
                                    info["options"], info)
        self._server = server

    def connect_tcp_client(self, name: str, cd: Any, channel: str, conn_name: str, user: str | None = None,
                           password: str | None = None) -> None:
        cd.ChannelName = channel.encode()
        cd.ConnectionName = conn_name.encode()
        self.connect_with_options(name, cd=cd, user=user, password=password)

    def _live(self) -> tuple[FakeQueueManagerServer, Connection]:
        if self._conn is None or self._server is None:
            raise PYIFError("not connected")
        return self._server, self._conn

    def get_handle(self) -> int:
        return self._live()[1].hconn

    def disconnect(self) -> None:
        server, conn = self._live()
        try:
            server.mqdisc(conn)
        finally:
            self._conn = None

    def commit(self) -> None:
        server, conn = self._live()
        server.mqcmit(conn)

    def backout(self) -> None:
        server, conn = self._live()
        server.mqback(conn)

    def put1(self, q_desc: str | bytes | OD, msg: bytes, *opts: Any) -> None:
        md = opts[0] if opts and opts[0] is not None else MD()
        pmo = opts[1] if len(opts) > 1 and opts[1] is not None else PMO()
        if not isinstance(msg, bytes):
            raise TypeError(f"Message type is {type(msg)}. Convert to bytes.")
        md.check()
        pmo.check()
        name = _text(q_desc.ObjectName if isinstance(q_desc, OD) else q_desc)
        qmgr_name = _text(q_desc.ObjectQMgrName) if isinstance(q_desc, OD) else ""
        server, conn = self._live()
        server.mqput(conn, None, name, md, pmo, msg, qmgr_name=qmgr_name)

    def inquire(self, attribute: int) -> Any:
        server, conn = self._live()
        if self._qmobj is None:
            self._qmobj = server.mqopen(conn, "", CMQC.MQOO_INQUIRE, object_type=5)
        return server.mqinq(conn, self._qmobj, attribute)

    @property
    def is_connected(self) -> bool:
        return self._conn is not None and self._conn.alive


class Queue:
    """An open queue (pymqi.Queue): opened at once when options are given, else on first use."""

    def __init__(self, qmgr: QueueManager, *opts: Any) -> None:
        self._qmgr = qmgr
        self._hobj: int | None = None
        self._name: str | None = None
        self._options: int | None = None
        self._selection = ""
        if opts:
            self._describe(opts[0])
        if len(opts) == 2:
            self._options = opts[1]
            self._open()

    def _open(self) -> None:
        if self._name is None:
            raise PYIFError("The Queue Descriptor has not been set.")
        server, conn = self._qmgr._live()
        self._hobj = server.mqopen(conn, self._name, self._options or 0, selection=self._selection)

    def _describe(self, q_desc: Any) -> None:
        """The queue name, and the selection string of an MQOD (MQ reads it from version 4 on)."""
        self._name = _text(q_desc.ObjectName if isinstance(q_desc, OD) else q_desc)
        if isinstance(q_desc, OD) and q_desc.Version >= CMQC.MQOD_VERSION_4:
            self._selection = _text(q_desc.SelectionString).strip()

    def open(self, q_desc: Any, *opts: Any) -> None:
        if self._hobj:
            raise PYIFError("The Queue is already open")
        self._describe(q_desc)
        if opts:
            self._options = opts[0]
            self._open()

    def put(self, msg: bytes, *opts: Any) -> None:
        md = opts[0] if opts and opts[0] is not None else MD()
        pmo = opts[1] if len(opts) > 1 and opts[1] is not None else PMO()
        if not isinstance(msg, bytes):
            raise TypeError(f"Message type is {type(msg)}. Convert to bytes.")
        md.check()
        pmo.check()
        if not self._hobj:
            self._options = CMQC.MQOO_OUTPUT
            self._open()
        server, conn = self._qmgr._live()
        server.mqput(conn, self._hobj, None, md, pmo, msg)

    def get(self, max_length: int | None = None, *opts: Any) -> bytes:
        md = opts[0] if opts and opts[0] is not None else MD()
        gmo = opts[1] if len(opts) > 1 and opts[1] is not None else GMO()
        md.check()
        gmo.check()
        if not self._hobj:
            self._options = CMQC.MQOO_INPUT_AS_Q_DEF
            self._open()
        server, conn = self._qmgr._live()
        # max_length None: pymqi gets the whole message however long (re-getting internally).
        return server.mqget(conn, self._hobj, md, gmo, max_length)  # type: ignore[arg-type]

    def inquire(self, attribute: int) -> Any:
        if not self._hobj:
            self._options = CMQC.MQOO_INQUIRE
            self._open()
        server, conn = self._qmgr._live()
        return server.mqinq(conn, self._hobj, attribute)  # type: ignore[arg-type]

    def close(self, options: int = CMQC.MQCO_NONE) -> None:
        if not self._hobj:
            raise PYIFError("not open")
        server, conn = self._qmgr._live()
        try:
            server.mqclose(conn, self._hobj)
        finally:
            self._hobj = None

    def get_handle(self) -> int | None:
        return self._hobj


class MessageHandle:
    """MQCRTMH: a handle holding message properties (pymqi.MessageHandle, ibmmq 2 shape:
    a wildcard `properties.get` returns ``(value, name)``)."""

    class _Properties:
        def __init__(self, qmgr: QueueManager, handle: int) -> None:
            self._qmgr, self._handle = qmgr, handle

        def get(self, name: str | bytes, default: Any = None, max_value_length: int | None = None,
                impo_options: int = CMQC.MQIMPO_INQ_FIRST, pd: Any = None,
                property_type: int = CMQC.MQTYPE_AS_SET) -> Any:
            server, conn = self._qmgr._live()
            text = name.decode() if isinstance(name, bytes) else name
            return server.mqinqmp(conn, self._handle, text, impo_options, max_value_length or 64)

        def set(self, name: str | bytes, value: Any, property_type: int = CMQC.MQTYPE_STRING,
                value_length: int = CMQC.MQVL_NULL_TERMINATED, pd: Any = None, smpo: Any = None) -> None:
            server, conn = self._qmgr._live()
            text = name.decode() if isinstance(name, bytes) else name
            server.mqsetmp(conn, self._handle, text, value, property_type)

        def __getitem__(self, name: str) -> Any:
            return self.get(name)

        def __setitem__(self, name: str, value: Any) -> None:
            self.set(name, value)

    def __init__(self, qmgr: QueueManager | None = None, cmho: CMHO | None = None) -> None:
        if qmgr is None:
            raise PYIFError("the fake supports connection-scoped message handles only")
        self._qmgr = qmgr
        server, conn = qmgr._live()
        self.conn_handle = conn.hconn
        self.msg_handle = server.mqcrtmh(conn)
        self.properties = self._Properties(qmgr, self.msg_handle)

    def dlt(self) -> None:
        server, conn = self._qmgr._live()
        server.mqdltmh(conn, self.msg_handle)
