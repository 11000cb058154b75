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
from typing import Any

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
from tests.support.fakes.pymqi_structs import CD, CMHO, CSP, GMO, IMPO, MD, OD, PD, PMO, SCO, SD, SMPO

CMQXC = CMQC  # channel constants live in CMQXC in ibmmq, in CMQC in pymqi 1.x: both work here

__all__ = ["CD", "CMHO", "CMQC", "CMQXC", "CSP", "GMO", "IMPO", "MD", "OD", "PD", "PMO", "SCO", "SD", "SMPO", "Error",
           "FakeQueueManagerServer", "MQMIError", "MessageHandle", "PYIFError", "Queue", "QueueManager",
           "Subscription", "Topic"]

def _put_args(msg: bytes, opts: tuple[Any, ...]) -> tuple[MD, PMO]:
    """The MD and PMO of a put (`put`, `put1`, `pub`: pymqi's optional positional arguments), checked
    as pymqi checks them before any MQI call."""
    md = opts[0] if opts and opts[0] is not None else MD()
    pmo = opts[1] if len(opts) > 1 and opts[1] is not None else PMO()
    if not isinstance(msg, bytes):
        raise TypeError(f"Message type is {type(msg)}. Convert to bytes.")
    md.check()
    pmo.check()
    return md, pmo


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
        md, pmo = _put_args(msg, opts)
        name = _text(q_desc.ObjectName if isinstance(q_desc, OD) else q_desc)
        qmgr_name = _text(q_desc.ObjectQMgrName) if isinstance(q_desc, OD) else ""
        server, conn = self._live()
        if isinstance(q_desc, OD) and q_desc.ObjectType == CMQC.MQOT_TOPIC:  # MQPUT1 to a topic: publish
            server.mqput1_topic(conn, name, _text(q_desc.ObjectString), md, pmo, msg)
            return
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
        md, pmo = _put_args(msg, opts)
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
            server.mqclose(conn, self._hobj, options)
        finally:
            self._hobj = None

    def get_handle(self) -> int | None:
        return self._hobj

    def set_handle(self, hobj: int) -> None:
        """An object handle opened elsewhere (MQSUB's managed queue), as pymqi's Queue.set_handle."""
        self._hobj = hobj


class Subscription:
    """MQSUB and its subscription handle (pymqi.Subscription / ibmmq.Subscription): after `sub`,
    `get` reads the destination (managed) queue through the handle MQSUB returned."""

    def __init__(self, queue_manager: QueueManager, sub_desc: SD | None = None, sub_name: str | bytes | None = None,
                 sub_queue: Any = None, sub_opts: int | None = None, topic_name: str | bytes | None = None,
                 topic_string: str | bytes | None = None) -> None:
        self._qmgr = queue_manager
        self.sub_queue: Queue | None = None
        self.sub_name, self.sub_opts = sub_name, sub_opts
        self.topic_name, self.topic_string = topic_name, topic_string
        self._hsub: int | None = None
        if sub_desc is not None:
            self.sub(sub_desc=sub_desc)

    def sub(self, sub_desc: SD | None = None, sub_queue: Any = None, sub_name: str | bytes | None = None,
            sub_opts: int | None = None, topic_name: str | bytes | None = None,
            topic_string: str | bytes | None = None) -> None:
        if sub_desc is None:
            sub_desc = SD(Options=sub_opts or self.sub_opts or
                          CMQC.MQSO_CREATE | CMQC.MQSO_NON_DURABLE | CMQC.MQSO_MANAGED)
            for field, value in (("SubName", sub_name or self.sub_name), ("ObjectString", topic_string or
                                                                          self.topic_string)):
                if value:
                    sub_desc.set_vs(field, value)
            if topic_name or self.topic_name:
                sub_desc["ObjectName"] = _bytes(topic_name or self.topic_name)
        elif not isinstance(sub_desc, SD):
            raise TypeError("sub_desc must be a SD(sub descriptor) object.")
        if sub_queue is not None:
            raise PYIFError("the fake queue manager has managed subscriptions only")
        server, conn = self._qmgr._live()
        hobj, self._hsub, topic = server.mqsub(conn, sub_desc.Options, _text(sub_desc.SubName),
                                               _text(sub_desc.ObjectName), _text(sub_desc.ObjectString))
        sub_desc["ResObjectString"] = topic.encode()
        self.sub_queue = Queue(self._qmgr)
        self.sub_queue.set_handle(hobj)

    def get_sub_queue(self) -> Queue | None:
        return self.sub_queue

    def get(self, max_length: int | None = None, *opts: Any) -> bytes:
        if self.sub_queue is None:
            raise PYIFError("Subscription not open.")
        return self.sub_queue.get(max_length, *opts)

    def get_handle(self) -> int | None:
        return self._hsub

    def close(self, sub_close_options: int = CMQC.MQCO_NONE, close_sub_queue: bool = False,
              close_sub_queue_options: int = CMQC.MQCO_NONE) -> None:
        if not self._hsub:
            raise PYIFError("Subscription not open.")
        server, conn = self._qmgr._live()
        try:
            server.mqclose(conn, self._hsub, sub_close_options)
        finally:
            self._hsub = None
        if close_sub_queue and self.sub_queue is not None:
            self.sub_queue.close(close_sub_queue_options)

    def __del__(self) -> None:
        # pymqi closes an open subscription handle on garbage collection (a durable one stays).
        if self._hsub:
            with contextlib.suppress(Error):
                self.close()


class Topic:
    """A topic opened for publishing (pymqi.Topic / ibmmq.Topic): `pub` (alias `put`) is MQPUT."""

    def __init__(self, queue_manager: QueueManager, topic_name: str | bytes | None = None,
                 topic_string: str | bytes | None = None, topic_desc: OD | None = None,
                 open_opts: int | None = None) -> None:
        self._qmgr = queue_manager
        self._hobj: int | None = None
        self._desc = topic_desc or OD(ObjectType=CMQC.MQOT_TOPIC, Version=CMQC.MQOD_VERSION_4,
                                      ObjectName=_bytes(topic_name), ObjectString=_bytes(topic_string))
        if self._desc.ObjectType != CMQC.MQOT_TOPIC:
            raise PYIFError("The Topic Descriptor ObjectType is not MQOT_TOPIC.")
        if open_opts:
            self._open(open_opts)

    def _open(self, options: int) -> None:
        server, conn = self._qmgr._live()
        self._hobj = server.mqopen_topic(conn, _text(self._desc.ObjectName), _text(self._desc.ObjectString), options)

    def open(self, topic_name: str | bytes | None = None, topic_string: str | bytes | None = None,
             topic_desc: OD | None = None, open_opts: int | None = None) -> None:
        if self._hobj:
            raise PYIFError("The Topic is already open.")
        if topic_desc is not None or topic_name or topic_string:
            self._desc = topic_desc or OD(ObjectType=CMQC.MQOT_TOPIC, Version=CMQC.MQOD_VERSION_4,
                                          ObjectName=_bytes(topic_name), ObjectString=_bytes(topic_string))
        if open_opts:
            self._open(open_opts)

    def pub(self, msg: bytes, *opts: Any) -> None:
        md, pmo = _put_args(msg, opts)
        if not self._hobj:
            self._open(CMQC.MQOO_OUTPUT)
        server, conn = self._qmgr._live()
        server.mqput(conn, self._hobj, None, md, pmo, msg)

    put = pub

    def close(self, options: int = CMQC.MQCO_NONE) -> None:
        if not self._hobj:
            raise PYIFError("Topic not open.")
        server, conn = self._qmgr._live()
        try:
            server.mqclose(conn, self._hobj, options)
        finally:
            self._hobj = None


def _bytes(value: str | bytes | None) -> bytes:
    return value.encode() if isinstance(value, str) else (value or b"")


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
