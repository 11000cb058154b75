"""The state of a fake IBM MQ queue manager: queues, messages, connections, units of work.

This is a simulation of MQ's documented behaviour, not a recorder of calls:

- a get under syncpoint hides the message from every other connection until the unit of work
  ends: commit deletes it, backout puts it back *in its original position* with
  ``BackoutCount + 1``; a put under syncpoint is invisible until commit and vanishes on backout;
- ``MQDISC`` with an open unit of work **commits** it (and is recorded as an event, because
  for a consumer that is how messages get lost); a broken connection backs it out;
- a get waits up to ``WaitInterval`` ms (on a condition variable) and fails with 2033;
- ``MaxUncommittedMsgs`` gets and puts per unit of work, then 2024;
- a message longer than the buffer fails with 2080 and stays on the queue;
- warnings are raised as ``MQMIError`` too (2119 not converted: the message *is* got);
- faults can be injected per verb (2009 breaks the connection and backs the unit out; a commit
  fault may or may not have committed first), and the queue manager can quiesce (2161).

`pymqi_fake` is the pymqi-shaped API over this state; tests use this module's helpers to put
messages, look at queues and inject faults. Queue managers are found by name in `REGISTRY`.

**Persistent mode** (``state_file=...``, or `FakeQueueManagerServer.persistent()` which takes the
path from ``MQBRIDGE_FAKE_QM_STATE``): the queue manager's committed state survives the death of
the process using it, as a real queue manager's log does, so a bridge can run as a real process and
be SIGKILLed. The snapshot (queues, their attributes, committed messages and the events, e.g.
`disconnects_with_open_uow`) is written atomically
(temp file, fsync, os.replace, fsync of the directory) at every commit, backout and non-syncpoint
put/get, and by the test-side helpers; each get under syncpoint appends the message's sequence
number to a journal beside it (``<state>.uow``, one line per get, written through to the OS so a
SIGKILL does not lose it). Loading is what MQ does when a client process dies with a unit of work
open: the gets under syncpoint that were not committed are backed out (the messages are visible
again, in place, with ``BackoutCount + 1``); puts under syncpoint that were not committed were
never in the snapshot, so they are gone. Only one process may use a state file at a time. The
environment is read only when a persistent fake is created, never at import time.
"""

from __future__ import annotations

import itertools
import os
import threading
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from tests.support.fakes import mq_cmqc as CMQC
from tests.support.fakes.mq_faults import Faults
from tests.support.fakes.mq_gets import Gets
from tests.support.fakes.mq_handles import MessageHandles
from tests.support.fakes.mq_model import (
    BYTE_FIELDS,
    CHAR_FIELDS,
    Connection,
    Error,
    FakeQueue,
    Fault,
    MQMIError,
    PYIFError,
    StoredMessage,
    default_md,
    fail,
    infer_type,
    pad_bytes,
    pad_char,
)
from tests.support.fakes.mq_persistence import STATE_ENVIRONMENT_VARIABLE, PersistentState
from tests.support.fakes.mq_selection import compile_selection
from tests.support.fakes.mq_topics import FakeSubscription, PubSub

__all__ = ["REGISTRY", "Connection", "Error", "FakeQueue", "FakeQueueManagerServer", "Fault", "MQMIError",
           "PYIFError", "StoredMessage", "fail"]

#: Where `FakeQueueManagerServer.persistent()` finds its state file.
# FakeQueue attributes kept in the state file (its messages are kept separately).

REGISTRY: dict[str, FakeQueueManagerServer] = {}
_REGISTRY_LOCK = threading.Lock()




class FakeQueueManagerServer(Faults, Gets, MessageHandles, PersistentState, PubSub):
    """A queue manager shared by every connection (and thread) that names it."""

    def __init__(self, name: str | None = None, *, dead_letter_queue: str = "", max_uncommitted: int = 10000,
                 ccsid: int = 1208, users: dict[str, str] | None = None, wildcard_names: bool = True,
                 register: bool = True, state_file: str | os.PathLike[str] | None = None) -> None:
        self.name = name or f"QM{uuid.uuid4().hex[:8].upper()}"
        self.dead_letter_queue = dead_letter_queue
        self.max_uncommitted = max_uncommitted
        self.ccsid = ccsid
        self.users = users  # None: no authentication; else user -> password
        #: ibmmq 2 returns (value, name) for wildcard MQINQMP; pymqi 1.x only the value.
        self.wildcard_names = wildcard_names
        self.queues: dict[str, FakeQueue] = {}
        self.topics: dict[str, str] = {}  # publish/subscribe: `mq_topics`
        self.subscriptions: dict[str, FakeSubscription] = {}
        self._topic_handles: dict[int, str] = {}
        self.faults: list[Fault] = []
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.connections: list[Connection] = []
        self.quiescing = False
        self.down = False  # host not reachable: connects fail with 2538
        self.cond = threading.Condition()
        self._hconns = itertools.count(1000)
        self._hobjs = itertools.count(1)
        self._hmsgs = itertools.count(1)
        self._seq = itertools.count(1)
        self._msg_ids = itertools.count(1)
        #: persistent mode: the snapshot file, its generation, the journal of gets under syncpoint
        self.state_file: Path | None = None
        self._generation = 0
        self._journal: IO[str] | None = None
        self._persist_paused = 0
        #: persistent mode: what the last load found (units of work backed out, messages)
        self.recovered: dict[str, int] = {}
        if state_file is not None:
            self.state_file = Path(state_file)
            if self.state_file.exists():
                self._load(name)
            self.save()
        if dead_letter_queue:
            self.define_queue(dead_letter_queue)
        if register:
            with _REGISTRY_LOCK:
                REGISTRY[self.name] = self

    @classmethod
    def persistent(cls, state_file: str | os.PathLike[str] | None = None, **kw: Any) -> FakeQueueManagerServer:
        """A persistent queue manager on `state_file` (default: ``$MQBRIDGE_FAKE_QM_STATE``),
        loaded from it when it exists (backing out units of work a dead process left open)."""
        path = state_file if state_file is not None else os.environ.get(STATE_ENVIRONMENT_VARIABLE)
        if not path:
            raise RuntimeError(f"a persistent fake queue manager needs a state file: set {STATE_ENVIRONMENT_VARIABLE}")
        return cls(state_file=path, **kw)

    def crash(self) -> None:
        """The process using this queue manager dies here (SIGKILL): nothing more is written, no
        unit of work is ended; the state file is as the dead process left it (persistent mode)."""
        with self.cond:
            if self._journal is not None:
                self._journal.close()
                self._journal = None
            self.state_file = None
            for conn in self.connections:
                conn.alive, conn.reason = False, CMQC.MQRC_CONNECTION_BROKEN
                conn.gets, conn.puts = [], []
        with _REGISTRY_LOCK:
            if REGISTRY.get(self.name) is self:
                REGISTRY.pop(self.name, None)

    # -- test side ---------------------------------------------------------------------------
    def close(self) -> None:
        """Forget this queue manager (connections to it fail from now on)."""
        with _REGISTRY_LOCK:
            if REGISTRY.get(self.name) is self:
                REGISTRY.pop(self.name, None)
        self.break_connections()
        with self.cond:
            if self._journal is not None:
                self._journal.close()
                self._journal = None
            self.state_file = None  # a closed persistent queue manager writes no more

    def define_queue(self, name: str, **attributes: Any) -> FakeQueue:
        with self.cond:
            queue = self.queues.get(name)
            if queue is None:
                queue = self.queues[name] = FakeQueue(name)
            for key, value in attributes.items():
                getattr(queue, key)  # unknown attribute: AttributeError
                setattr(queue, key, value)
            self._persist()
            return queue

    def queue(self, name: str) -> FakeQueue:
        return self.queues[name]

    def put(self, queue: str, body: bytes, *, msg_id: bytes | None = None, correl_id: bytes = b"",
            backout_count: int = 0, properties: dict[str, Any] | None = None, format: bytes = CMQC.MQFMT_STRING,
            ccsid: int = 1208, priority: int = 0, persistence: int = CMQC.MQPER_PERSISTENT,
            expiry: int = CMQC.MQEI_UNLIMITED, put_appl_name: str = "amqsput", user: str = "app",
            reply_to_q: str = "", reply_to_qmgr: str = "", put_time: datetime | None = None,
            report: int = CMQC.MQRO_NONE) -> bytes:
        """Put a committed message as another application would (amqsput). Returns its MsgId."""
        when = put_time or datetime.now(timezone.utc)
        md = default_md()
        md.update(Format=pad_char(format, 8), CodedCharSetId=ccsid, Priority=priority, Persistence=persistence,
                  Expiry=expiry, BackoutCount=backout_count, CorrelId=pad_bytes(correl_id, 24),
                  ReplyToQ=pad_char(reply_to_q, 48), ReplyToQMgr=pad_char(reply_to_qmgr or "", 48),
                  UserIdentifier=pad_char(user, 12), PutApplName=pad_char(put_appl_name, 28),
                  PutDate=when.strftime("%Y%m%d").encode(),
                  PutTime=(when.strftime("%H%M%S") + f"{when.microsecond // 10000:02d}").encode(),
                  PutApplType=CMQC.MQAT_DEFAULT, Report=report)
        with self.cond:
            md["MsgId"] = pad_bytes(msg_id, 24) if msg_id else self._new_msg_id()
            props = {name: (infer_type(value), value) for name, value in (properties or {}).items()}
            self._queue_for(queue)._insert(StoredMessage(body, md, props, next(self._seq)))
            self._persist()
            self.cond.notify_all()
            return bytes(md["MsgId"])

    def put_many(self, queue: str, bodies: list[bytes], **kw: Any) -> list[bytes]:
        with self.deferred_persistence():
            return [self.put(queue, body, **kw) for body in bodies]

    def break_connections(self, reason: int = CMQC.MQRC_CONNECTION_BROKEN) -> int:
        """Every live connection breaks now (network loss): units of work are backed out."""
        with self.cond:
            live = [c for c in self.connections if c.alive]
            for conn in live:
                self._break(conn, reason)
            return len(live)

    def quiesce(self) -> None:
        """endmqm -c: calls with *_FAIL_IF_QUIESCING fail with 2161 from now on."""
        with self.cond:
            self.quiescing = True
            self.cond.notify_all()

    @property
    def disconnects_with_open_uow(self) -> list[dict[str, Any]]:
        """Every MQDISC that committed an open unit of work: for a consumer, lost messages."""
        return [details for kind, details in self.events if kind == "disconnect_with_open_uow"]

    def live_connections(self) -> list[Connection]:
        with self.cond:
            return [c for c in self.connections if c.alive]

    def uncommitted(self) -> int:
        with self.cond:
            return sum(c.uow_size for c in self.connections if c.alive)

    # -- MQI verbs (called by pymqi_fake) ------------------------------------------------------
    def mqconnx(self, user: str | None, password: str | None, options: int, info: dict[str, Any]) -> Connection:
        with self.cond:
            self._maybe_fault(None, "connect", None)
            if self.down:
                raise fail(CMQC.MQRC_HOST_NOT_AVAILABLE)
            if self.quiescing:
                raise fail(CMQC.MQRC_Q_MGR_QUIESCING)
            if self.users is not None and (user is None or self.users.get(user) != password):
                raise fail(CMQC.MQRC_NOT_AUTHORIZED)
            share = bool(options & (CMQC.MQCNO_HANDLE_SHARE_BLOCK | CMQC.MQCNO_HANDLE_SHARE_NO_BLOCK))
            conn = Connection(next(self._hconns), threading.get_ident(), share, dict(info, user=user))
            self.connections.append(conn)
            return conn

    def mqdisc(self, conn: Connection, *, via: str = "MQDISC") -> None:
        with self.cond:
            if not conn.alive:
                raise fail(conn.reason or CMQC.MQRC_CONNECTION_BROKEN)
            self._check_thread(conn)
            self._maybe_fault(conn, "disconnect", None)
            if conn.uow_size:
                # MQ's documented behaviour: a normal disconnect commits the unit of work.
                self.events.append(("disconnect_with_open_uow", {
                    "hconn": conn.hconn, "gets": len(conn.gets), "puts": len(conn.puts), "via": via,
                    "msg_ids": [m.msg_id.hex() for _, m in conn.gets]}))
                self._commit(conn)
            conn.alive = False
            conn.reason = CMQC.MQRC_HCONN_ERROR
            conn.handles.clear()
            self.cond.notify_all()

    def mqopen(self, conn: Connection, name: str, options: int, object_type: int = 1, *, selection: str = "") -> int:
        with self.cond:
            self._check(conn)
            self._maybe_fault(conn, "open", name)
            if object_type == 5:  # MQOT_Q_MGR
                conn.objects[hobj := next(self._hobjs)] = (None, options)
                return hobj
            if options & CMQC.MQOO_FAIL_IF_QUIESCING and self.quiescing:
                raise fail(CMQC.MQRC_Q_MGR_QUIESCING)
            queue = self.queues.get(name)
            if queue is None:
                raise fail(CMQC.MQRC_UNKNOWN_OBJECT_NAME)
            wanted = {"get": options & (CMQC.MQOO_INPUT_AS_Q_DEF | CMQC.MQOO_INPUT_SHARED | CMQC.MQOO_INPUT_EXCLUSIVE),
                      "put": options & CMQC.MQOO_OUTPUT, "inq": options & CMQC.MQOO_INQUIRE,
                      "browse": options & CMQC.MQOO_BROWSE}
            if any(wanted[k] for k in queue.denied if k in wanted):
                raise fail(CMQC.MQRC_NOT_AUTHORIZED)
            try:
                selects = compile_selection(selection) if selection else None
            except ValueError:
                raise fail(CMQC.MQRC_SELECTION_STRING_ERROR) from None
            conn.objects[hobj := next(self._hobjs)] = (queue, options)
            if selects is not None:
                conn.selections[hobj] = selects
            return hobj

    def mqclose(self, conn: Connection, hobj: int, options: int = CMQC.MQCO_NONE) -> None:
        with self.cond:
            self._check(conn)
            if self.close_subscription(conn, hobj, options):
                return
            self._topic_handles.pop(hobj, None)
            conn.selections.pop(hobj, None)
            if conn.objects.pop(hobj, None) is None:
                raise fail(CMQC.MQRC_HOBJ_ERROR)

    def mqinq(self, conn: Connection, hobj: int, selector: int) -> Any:
        with self.cond:
            self._check(conn)
            queue, options = self._object(conn, hobj)
            self._maybe_fault(conn, "inquire", queue.name if queue else None)
            if queue is None:
                values = {CMQC.MQCA_DEAD_LETTER_Q_NAME: pad_char(self.dead_letter_queue, 48),
                          CMQC.MQIA_MAX_UNCOMMITTED_MSGS: self.max_uncommitted,
                          CMQC.MQCA_Q_MGR_NAME: pad_char(self.name, 48)}
            else:
                if not options & CMQC.MQOO_INQUIRE:
                    raise fail(CMQC.MQRC_NOT_OPEN_FOR_INQUIRE)
                values = {CMQC.MQIA_BACKOUT_THRESHOLD: queue.backout_threshold,
                          CMQC.MQCA_BACKOUT_REQ_Q_NAME: pad_char(queue.backout_queue, 48),
                          CMQC.MQIA_CURRENT_Q_DEPTH: queue.depth}
            if selector not in values:
                raise fail(2067)  # MQRC_SELECTOR_ERROR
            return values[selector]

    def mqput(self, conn: Connection, hobj: int | None, name: str | None, md: Any, pmo: Any, data: bytes,
              qmgr_name: str = "") -> None:
        """MQPUT (`hobj`) or MQPUT1 (`name`, at `qmgr_name`: blank or this queue manager's name is
        local; another name resolves, as MQ's name resolution does without clusters or aliases, to
        a transmission queue of that name, which takes the message as it is (no MQXQH here), else
        fails with 2087 MQRC_UNKNOWN_REMOTE_Q_MGR)."""
        if qmgr_name and qmgr_name != self.name:
            if qmgr_name not in self.queues:
                with self.cond:
                    self._check(conn)
                raise fail(CMQC.MQRC_UNKNOWN_REMOTE_Q_MGR)
            name = qmgr_name
        with self.cond:
            self._check(conn)
            topic = self.topic_of(hobj)
            if topic is not None:  # a publication (`mq_topics`)
                self.publish_copies(conn, topic, md, pmo, data)
                return
            if hobj is not None:
                queue, options = self._object(conn, hobj)
                if queue is None or not options & CMQC.MQOO_OUTPUT:
                    raise fail(CMQC.MQRC_NOT_OPEN_FOR_OUTPUT)
            else:  # MQPUT1
                assert name is not None
                queue = self.queues.get(name)
                if queue is not None and "put" in queue.denied:
                    raise fail(CMQC.MQRC_NOT_AUTHORIZED)
            self._maybe_fault(conn, "put", queue.name if queue else name)
            if queue is None:
                raise fail(CMQC.MQRC_UNKNOWN_OBJECT_NAME)
            syncpoint = bool(pmo.Options & CMQC.MQPMO_SYNCPOINT)
            if pmo.Options & CMQC.MQPMO_FAIL_IF_QUIESCING and self.quiescing:
                raise fail(CMQC.MQRC_Q_MGR_QUIESCING)
            if queue.put_inhibited:
                raise fail(CMQC.MQRC_PUT_INHIBITED)
            if len(data) > queue.max_msg_length:
                raise fail(CMQC.MQRC_MSG_TOO_BIG_FOR_Q)
            if queue.depth >= queue.max_depth:
                raise fail(CMQC.MQRC_Q_FULL)
            if syncpoint and conn.uow_size >= self.max_uncommitted:
                raise fail(CMQC.MQRC_SYNCPOINT_LIMIT_REACHED)
            stored = default_md()
            for key in stored:
                stored[key] = getattr(md, key)
            if pmo.Options & CMQC.MQPMO_NEW_MSG_ID or stored["MsgId"].strip(b"\0") == b"":
                stored["MsgId"] = self._new_msg_id()
            if stored["Persistence"] == CMQC.MQPER_PERSISTENCE_AS_Q_DEF:
                stored["Persistence"] = queue.default_persistence
            if stored["Priority"] == CMQC.MQPRI_PRIORITY_AS_Q_DEF:
                stored["Priority"] = 0
            if not pmo.Options & CMQC.MQPMO_SET_ALL_CONTEXT:  # default context: the QM sets it
                now = datetime.now(timezone.utc)
                stored.update(UserIdentifier=pad_char(conn.info.get("user") or "mqbridge", 12),
                              PutApplName=pad_char(conn.info.get("appl_name", "python"), 28),
                              PutApplType=CMQC.MQAT_DEFAULT, PutDate=now.strftime("%Y%m%d").encode(),
                              PutTime=(now.strftime("%H%M%S") + f"{now.microsecond // 10000:02d}").encode())
            stored["BackoutCount"] = 0
            for key, length in CHAR_FIELDS.items():
                stored[key] = pad_char(stored[key], length)
            for key, length in BYTE_FIELDS.items():
                stored[key] = pad_bytes(stored[key], length)
            props: dict[str, tuple[int, Any]] = {}
            handle_id = getattr(pmo, "OriginalMsgHandle", 0)
            if handle_id:
                props = dict(self._handle(conn, handle_id)["props"])
            message = StoredMessage(bytes(data), stored, props, next(self._seq))
            if syncpoint:
                message.pending_put_by = conn.hconn
                conn.puts.append((queue, message))
            queue._insert(message)
            if not syncpoint:
                self._persist()
            for key in ("MsgId", "PutDate", "PutTime", "UserIdentifier", "PutApplName", "Persistence"):
                setattr(md, key, stored[key])
            self.cond.notify_all()

    def mqcmit(self, conn: Connection) -> None:
        with self.cond:
            self._check(conn)
            fault = self._match_fault(conn, "commit", None)
            if fault is not None:
                if fault.applied:
                    self._commit(conn)
                self._raise_fault(conn, fault)
            self._commit(conn)

    def mqback(self, conn: Connection) -> None:
        with self.cond:
            self._check(conn)
            self._maybe_fault(conn, "backout", None)
            self._backout(conn)

    # -- message handles and properties ------------------------------------------------------

    # -- internals ---------------------------------------------------------------------------
    def _check(self, conn: Connection) -> None:
        if not conn.alive:
            raise fail(conn.reason or CMQC.MQRC_CONNECTION_BROKEN)
        self._check_thread(conn)

    @staticmethod
    def _check_thread(conn: Connection) -> None:
        # Without MQCNO_HANDLE_SHARE_*, a connection handle belongs to the thread that made it.
        if not conn.share_handles and threading.get_ident() != conn.thread:
            raise fail(CMQC.MQRC_HCONN_ERROR)

    @staticmethod
    def _object(conn: Connection, hobj: int) -> tuple[FakeQueue | None, int]:
        try:
            return conn.objects[hobj]
        except KeyError:
            raise fail(CMQC.MQRC_HOBJ_ERROR) from None

    def _queue_for(self, name: str) -> FakeQueue:
        queue = self.queues.get(name)
        if queue is None:
            raise KeyError(f"fake queue manager {self.name} has no queue {name!r}; define_queue it first")
        return queue

    def _new_msg_id(self) -> bytes:
        return pad_bytes(b"AMQ " + self.name.encode()[:12] + next(self._msg_ids).to_bytes(8, "big"), 24)

    def _break(self, conn: Connection, reason: int) -> None:
        """The connection is gone: the queue manager backs its unit of work out."""
        self._backout(conn)
        conn.alive = False
        conn.reason = reason
        conn.handles.clear()
        self.cond.notify_all()

    def _commit(self, conn: Connection) -> None:
        changed = bool(conn.gets or conn.puts)
        for queue, message in conn.gets:
            queue.messages.remove(message)
        for _queue, message in conn.puts:
            message.pending_put_by = None
        conn.gets, conn.puts = [], []
        if changed:
            self._persist()
        self.cond.notify_all()

    def _backout(self, conn: Connection) -> None:
        changed = bool(conn.gets or conn.puts)
        for _queue, message in conn.gets:
            message.locked_by = None
            message.md["BackoutCount"] += 1
        for queue, message in conn.puts:
            queue.messages.remove(message)
        conn.gets, conn.puts = [], []
        if changed:
            self._persist()
        self.cond.notify_all()


