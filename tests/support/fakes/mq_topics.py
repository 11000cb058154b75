"""Publish/subscribe of the fake IBM MQ queue manager (mixed into `mq_server.FakeQueueManagerServer`).

What it simulates, as MQ documents it (MQSUB, MQSD, MQPUT to a topic):

- a topic is a topic string; a topic *object* (`define_topic`, DEFINE TOPIC) names one, and an
  MQOD/MQSD with both ObjectName and ObjectString means the object's string, "/", the string;
- MQSUB with MQSO_CREATE makes a subscription (SubName required for a durable one, else 2440
  MQRC_SUB_NAME_ERROR); with MQSO_MANAGED the queue manager makes its destination queue
  (``SYSTEM.MANAGED.DURABLE.<hex>`` or ``...NDURABLE...``) from the model queue
  ``SYSTEM.DURABLE.MODEL.QUEUE`` / ``SYSTEM.NDURABLE.MODEL.QUEUE`` when defined (its BOTHRESH,
  BOQNAME, ...), and returns a handle to it opened for input, browse and inquire: MQGET (under
  syncpoint, browse, ...) and MQINQ work on it as on a queue; MQSO_RESUME takes an existing
  subscription (2428 MQRC_NO_SUBSCRIPTION if none; without MQSO_RESUME an existing name is 2432
  MQRC_SUB_ALREADY_EXISTS); a subscription whose handle another live connection holds is 2429
  MQRC_SUBSCRIPTION_IN_USE; a subscription without MQSO_MANAGED needs a queue handle (2019 here:
  the fake has managed subscriptions only);
- MQPUT/MQPUT1 to a topic puts a copy of the publication into the destination of every
  subscription on that topic string (exact match, no wildcards) at that moment; under syncpoint
  each copy is part of the unit of work (visible at commit, gone at backout). No subscription: the
  publication is discarded, as MQ does. The copies share one MsgId (the publisher's, else a new one);
- a durable subscription outlives its handle, the connection (MQDISC, a broken connection, the
  process's SIGKILL) and, in persistent mode, the queue manager's restart; MQCLOSE with
  MQCO_REMOVE_SUB and `delete_subscription` (DELETE SUB) remove it with its managed queue; a
  non-durable one goes when its handle is closed or its connection ends.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tests.support.fakes import mq_cmqc as CMQC
from tests.support.fakes.mq_model import Connection, FakeQueue, fail

#: MQSUB with MQSO_MANAGED opens the managed queue with these (the MQSUB documentation), and the
#: handle may be inquired (BOTHRESH, BOQNAME: "the HOBJ returned can be inquired").
MANAGED_HANDLE_OPTIONS = CMQC.MQOO_INPUT_AS_Q_DEF | CMQC.MQOO_BROWSE | CMQC.MQOO_INQUIRE
DURABLE_MODEL = "SYSTEM.DURABLE.MODEL.QUEUE"
NON_DURABLE_MODEL = "SYSTEM.NDURABLE.MODEL.QUEUE"


@dataclass
class FakeSubscription:
    """A subscription: its name, topic string, destination queue and who holds its handle."""

    name: str
    topic: str
    queue: str
    durable: bool
    held_by: int | None = None  # hconn whose MQSUB handle is open
    hsub: int | None = None


class PubSub:
    """Topics and subscriptions (mixed into `FakeQueueManagerServer`, whose attributes these are)."""

    name: str
    queues: dict[str, FakeQueue]
    connections: list[Connection]
    cond: threading.Condition
    topics: dict[str, str]  # topic object name -> its topic string (DEFINE TOPIC ... TOPICSTR)
    subscriptions: dict[str, FakeSubscription]
    _topic_handles: dict[int, str]  # hobj of MQOPEN of a topic -> its topic string
    _hobjs: Iterator[int]

    # the server's own (annotations only: a definition here would stand in front of them)
    _check: Callable[[Connection], None]
    _persist: Callable[[], None]
    mqput: Callable[..., None]
    put: Callable[..., bytes]

    # -- test side ---------------------------------------------------------------------------
    def define_topic(self, name: str, topic_string: str) -> None:
        """DEFINE TOPIC(name) TOPICSTR(topic_string)."""
        with self.cond:
            self.topics[name] = topic_string
            self._persist()

    def subscription(self, name: str) -> FakeSubscription:
        return self.subscriptions[name]

    def subscription_queue(self, name: str) -> FakeQueue:
        """The destination queue of subscription `name` (its managed queue)."""
        return self.queues[self.subscriptions[name].queue]

    def delete_subscription(self, name: str) -> None:
        """DELETE SUB(name): the subscription and its managed queue with what is on it."""
        with self.cond:
            sub = self.subscriptions.pop(name)
            self.queues.pop(sub.queue, None)
            self._persist()

    # -- MQI verbs -------------------------------------------------------------------------------
    def resolve_topic(self, object_name: str, object_string: str) -> str:
        """The topic string an MQOD/MQSD names (2085 for an unknown topic object, 2425 for none)."""
        base = ""
        if object_name:
            if object_name not in self.topics:
                raise fail(CMQC.MQRC_UNKNOWN_OBJECT_NAME)
            base = self.topics[object_name]
        topic = "/".join(part for part in (base, object_string) if part)
        if not topic:
            raise fail(CMQC.MQRC_TOPIC_STRING_ERROR)
        return topic

    def mqsub(self, conn: Connection, options: int, sub_name: str, object_name: str,
              object_string: str) -> tuple[int, int, str]:
        """MQSUB: (managed queue handle, subscription handle, the subscription's topic string)."""
        with self.cond:
            self._check(conn)
            if options & CMQC.MQSO_FAIL_IF_QUIESCING and getattr(self, "quiescing", False):
                raise fail(CMQC.MQRC_Q_MGR_QUIESCING)
            if not options & CMQC.MQSO_MANAGED:
                raise fail(CMQC.MQRC_HOBJ_ERROR)  # the fake keeps publications in managed queues only
            durable = bool(options & CMQC.MQSO_DURABLE)
            if durable and not sub_name:
                raise fail(CMQC.MQRC_SUB_NAME_ERROR)
            sub = self.subscriptions.get(sub_name) if sub_name else None
            if sub is None:
                if not options & CMQC.MQSO_CREATE:
                    raise fail(CMQC.MQRC_NO_SUBSCRIPTION)
                topic = self.resolve_topic(object_name, object_string)
                sub = self._create(sub_name or f"ND.{uuid.uuid4().hex[:12]}", topic, durable)
            else:
                if not options & CMQC.MQSO_RESUME:
                    raise fail(CMQC.MQRC_SUB_ALREADY_EXISTS)
                if self._in_use(sub):
                    raise fail(CMQC.MQRC_SUBSCRIPTION_IN_USE)
            hobj, hsub = next(self._hobjs), next(self._hobjs)
            conn.objects[hobj] = (self.queues[sub.queue], MANAGED_HANDLE_OPTIONS)
            conn.objects[hsub] = (None, 0)
            sub.held_by, sub.hsub = conn.hconn, hsub
            return hobj, hsub, sub.topic

    def close_subscription(self, conn: Connection, hsub: int, options: int) -> bool:
        """MQCLOSE of a subscription handle (False: `hsub` is not one). A non-durable subscription
        ends; MQCO_REMOVE_SUB removes a durable one too."""
        sub = next((s for s in self.subscriptions.values() if s.hsub == hsub and s.held_by == conn.hconn), None)
        if sub is None:
            return False
        conn.objects.pop(hsub, None)
        sub.held_by = sub.hsub = None
        if not sub.durable or options & CMQC.MQCO_REMOVE_SUB:
            self.subscriptions.pop(sub.name, None)
            self.queues.pop(sub.queue, None)
            self._persist()
        return True

    def mqopen_topic(self, conn: Connection, object_name: str, object_string: str, options: int) -> int:
        """MQOPEN of a topic (MQOT_TOPIC) for output: a handle publications are put through."""
        with self.cond:
            self._check(conn)
            if not options & CMQC.MQOO_OUTPUT:
                raise fail(CMQC.MQRC_OPTIONS_ERROR)  # a topic is opened for output (subscribe with MQSUB)
            topic = self.resolve_topic(object_name, object_string)
            hobj = next(self._hobjs)
            conn.objects[hobj] = (None, options)
            self._topic_handles[hobj] = topic
            return hobj

    def mqput1_topic(self, conn: Connection, object_name: str, object_string: str, md: Any, pmo: Any,
                     data: bytes) -> None:
        """MQPUT1 to a topic (an MQOD of type MQOT_TOPIC)."""
        with self.cond:
            self._check(conn)
            self.publish_copies(conn, self.resolve_topic(object_name, object_string), md, pmo, data)

    def topic_of(self, hobj: int | None) -> str | None:
        return None if hobj is None else self._topic_handles.get(hobj)

    def publish_copies(self, conn: Connection, topic: str, md: Any, pmo: Any, data: bytes) -> None:
        """MQPUT to `topic`: a copy into each subscription's destination (held in the caller's lock)."""
        self._release_dead()
        pmo_options = pmo.Options
        try:
            for sub in [s for s in self.subscriptions.values() if s.topic == topic]:
                self.mqput(conn, None, sub.queue, md, pmo, data)
                pmo.Options &= ~CMQC.MQPMO_NEW_MSG_ID  # every copy carries the first one's MsgId
        finally:
            pmo.Options = pmo_options

    def publish(self, topic: str, body: bytes, **kw: Any) -> None:
        """Publish a committed message as another application would (amqspub): a copy on each
        subscription's queue (`put` with its keywords)."""
        with self.cond:
            self._release_dead()
            msg_id = kw.pop("msg_id", None) or b"PUB " + uuid.uuid4().bytes
            for sub in [s for s in self.subscriptions.values() if s.topic == topic]:
                self.put(sub.queue, body, msg_id=msg_id, **kw)

    # -- internals ---------------------------------------------------------------------------
    def _create(self, name: str, topic: str, durable: bool) -> FakeSubscription:
        model = self.queues.get(DURABLE_MODEL if durable else NON_DURABLE_MODEL)
        queue_name = f"SYSTEM.MANAGED.{'DURABLE' if durable else 'NDURABLE'}.{uuid.uuid4().hex[:16].upper()}"
        queue = FakeQueue(queue_name)
        if model is not None:
            for key in ("backout_threshold", "backout_queue", "max_depth", "max_msg_length", "default_persistence"):
                setattr(queue, key, getattr(model, key))
        self.queues[queue_name] = queue
        sub = self.subscriptions[name] = FakeSubscription(name, topic, queue_name, durable)
        self._persist()
        return sub

    def _in_use(self, sub: FakeSubscription) -> bool:
        return sub.held_by is not None and any(
            c.alive and c.hconn == sub.held_by and sub.hsub in c.objects for c in self.connections)

    def _release_dead(self) -> None:
        """Non-durable subscriptions of connections that ended go (called before a snapshot)."""
        for sub in list(self.subscriptions.values()):
            if not sub.durable and not self._in_use(sub):
                self.subscriptions.pop(sub.name, None)
                self.queues.pop(sub.queue, None)

    def pubsub_state(self) -> dict[str, Any]:
        """What a snapshot keeps: the topic objects and the durable subscriptions."""
        return {"topics": dict(self.topics),
                "subscriptions": [(s.name, s.topic, s.queue) for s in self.subscriptions.values() if s.durable]}

    def load_pubsub(self, state: dict[str, Any]) -> None:
        self.topics = dict(state.get("topics", {}))
        self.subscriptions = {name: FakeSubscription(name, topic, queue, True)
                              for name, topic, queue in state.get("subscriptions", [])}
