"""The opt-in "stored" result (`[types.<name>] stored_result = true`): a message of such a type is
confirmed as *stored, not yet landed* as soon as the collector accepts it into a bulk; its final
result (landed or moved) still follows, exactly once, with the source commit (`mqbridge.outbound.stations`,
STOMP `confirm = "reply-to"`).

Where it goes: where the message's final results go. Its reply-to, when the listener has
`confirm = "reply-to"` and its `reply_to_allow` allows that destination; and the type's
`results_to`. Same body and headers as a final result (`result`, `message_id`, `queue`,
`correlation_id`; a station's `message_type` and `source`; the result's `correlation-id` is the
message's id), with `result = "stored"` and `landed = "false"`.

How it is sent, so that it never delays or blocks the landing:

* The listener thread, right after the collector accepted a unit (`StoredResults.joined`), claims
  each message's stored result in the `StoredLog` (SQLite, `<state_dir>/stored_results.sqlite3`) by
  the message's identity (the listener's `identity` rule, in its scope) and destination, and puts
  the ones claimed for the first time on a bounded queue. That is all it does: no network, one
  small SQLite transaction per unit.
* A sender thread of its own (one per listener queue) SENDs them on a connection of its own
  (STOMP: each confirmed by its receipt, `mqbridge.listeners.stomp.stored`), never the listener's:
  a destination that refuses (RabbitMQ closes the connection over a full queue) cannot touch a
  unit of work. A stored result the queue has no room for (the sender is behind), that the broker
  refuses, or that cannot be sent (broker unreachable) is dropped: logged once per destination and
  counted (`stored_results_dropped`); the final result is unaffected.

The guarantee. Claim first, send after: across every kill, a producer sees **at most one** stored
result per message and destination, as long as the message's identity is the same on every
delivery: ActiveMQ's `message-id`, IBM MQ's MsgId, or a producer's header (`identity =
"header:NAME"`). RabbitMQ numbers `message-id` per delivery, so with `identity = "msg_id"` a
redelivery there (after a kill, a lost connection, a unit given back) is a new message to the log,
and gets a second stored result: use a producer's header there. The log keeps a claim for
`[bridge] dedupe_window` (pruned on start-up), so a message redelivered after that gets another.
A stored result is *not* sent, or lost, when the bridge dies between the claim and the SEND (at
most one, not exactly one), or is dropped as above. It travels on another connection than the
final result, so it is usually, not always, the first to arrive: a consumer must not rely on the
order (`result` says which is which). A message that fails before the collector accepts it (a
preprocessor error, an unknown type) gets no stored result.
"""

from __future__ import annotations

import json
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from mqbridge import failpoints
from mqbridge.counters import Counters
from mqbridge.errors import IdentityError
from mqbridge.identity import Scope, identity_of, listener_scope, scoped
from mqbridge.message import Message
from mqbridge.outbound.reply_to import FirstTimes, ReplyAllowList

log = logging.getLogger("mqbridge.stored")  # the name operators configure

#: The `result` of a stored result; a final result says "landed" or "backout".
STORED = "stored"
#: How many stored results may wait for the sender, per listener queue; beyond, they are dropped.
CAPACITY = 10_000
#: The message headers a stored result keeps, as a final result does (`mapping.result_of`).
_KEEPS = ("persistent", "priority", "expires")


@dataclass(frozen=True, slots=True)
class StoredSend:
    """One stored result to send."""

    destination: str
    body: bytes
    headers: dict[str, str]


class Sender(Protocol):
    """Sends stored results on a connection of its own (a driver's `results` part)."""

    def send(self, item: StoredSend) -> str:
        """SEND `item`; "" once the broker took it, else why not (never raises for the broker's refusal)."""

    def close(self) -> None:
        """Close the connection. Never raises."""


def stored_result_of(message: Message, extra: Mapping[str, str] | None = None) -> StoredSend:
    """The body and headers of the stored result of `message` (destination left empty): the shape of a
    final result (`mqbridge.listeners.stomp.mapping.result_of`), `result = "stored"`, `landed = "false"`."""
    result: dict[str, str] = {"result": STORED, "landed": "false", "message_id": message.msg_id,
                              "queue": message.destination}
    if message.correlation_id:
        result["correlation_id"] = message.correlation_id
    result.update(extra or {})
    headers = {k: message.headers[k] for k in _KEEPS if k in message.headers}
    headers.update({f"mqbridge_{key}": value for key, value in result.items()})
    headers.update({"correlation-id": message.msg_id, "content-type": "application/json"})
    return StoredSend("", json.dumps(result).encode(), headers)


class StoredLog:
    """Which stored results were claimed (about to be sent), by key, in SQLite: what keeps a redelivery
    from getting a second one (module docstring). Shared by the threads of one process."""

    def __init__(self, path: Path, keep: float, *, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self._clock = clock
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")  # a claim must survive a power cut, or a kill
            self._db.execute("CREATE TABLE IF NOT EXISTS stored (key TEXT PRIMARY KEY, at REAL NOT NULL)")
            self._db.execute("DELETE FROM stored WHERE at < ?", (self._clock() - keep,))

    def claim(self, keys: Sequence[str]) -> set[str]:
        """Record `keys` as claimed; those that were not claimed before (one transaction)."""
        if not keys:
            return set()
        now = self._clock()
        fresh: set[str] = set()
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for key in keys:
                    if self._db.execute("INSERT OR IGNORE INTO stored (key, at) VALUES (?, ?)", (key, now)).rowcount:
                        fresh.add(key)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return fresh

    def close(self) -> None:
        with self._lock:
            self._db.close()


class StoredResults:
    """The stored results of one listener queue's messages (module docstring): `joined` on the listener
    threads, sent by a thread of its own. `routes` maps each type with `stored_result` to its
    `results_to` (None: none); `reply_to` is the listener's allow list when it has `confirm =
    "reply-to"` (None: no producer results)."""

    def __init__(self, routes: Mapping[str, str | None], *, listener: str, source: str, identity: str,
                 scope: Scope, stored_log: StoredLog, sender: Callable[[], Sender],
                 reply_to: ReplyAllowList | None = None, counters: Counters | None = None,
                 capacity: int = CAPACITY) -> None:
        self.routes = dict(routes)
        self.listener = listener
        self.source = source
        self.identity = identity
        self.scope = scope
        self.stored_log = stored_log
        self.reply_to = reply_to
        self.counters = counters
        self._make_sender = sender
        self._queue: queue.Queue[StoredSend | None] = queue.Queue(capacity)
        self._dropped_for = FirstTimes()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self.sent = 0
        self.dropped = 0

    def wanted(self, message: Message) -> list[str]:
        """The destinations of `message`'s stored result (none when its type has no `stored_result`)."""
        if message.message_type not in self.routes:
            return []
        destinations = []
        reply = message.headers.get("reply-to")
        if self.reply_to is not None and reply and self.reply_to.allows(reply):
            destinations.append(reply)  # one not allowed is counted and logged with the final result
        station = self.routes[message.message_type]
        if station and station not in destinations:
            destinations.append(station)
        return destinations

    def key(self, message: Message, destination: str) -> str | None:
        """The claim key of `message`'s stored result to `destination`; None without an identity (its
        header is missing: the message fails on its own, it gets no stored result). The ledger's identity
        when it has one (computed on the message as received, scoped); else the same, computed here."""
        identity = message.identity
        if not identity:
            try:
                identity = scoped(identity_of(message, self.identity), self.scope.prefix)
            except IdentityError:
                return None
        return f"{identity}>{destination}"

    def joined(self, messages: Sequence[Message]) -> None:
        """The collector accepted `messages` into bulks: claim and queue their stored results. Runs on a
        listener thread; never blocks on the network (a full queue drops, module docstring)."""
        wanted: list[tuple[str, Message, str]] = []
        for message in messages:
            for destination in self.wanted(message):
                key = self.key(message, destination)
                if key is not None:
                    wanted.append((key, message, destination))
        if not wanted:
            return
        try:
            fresh = self.stored_log.claim([key for key, _, _ in wanted])
        except sqlite3.Error as exc:  # the landing goes on; no stored result is better than two
            self._drop(len(wanted), "", f"the stored-results log {self.stored_log.path} failed: {exc}")
            return
        self._ensure_started()
        for key, message, destination in wanted:
            if key not in fresh:
                continue  # claimed by an earlier delivery: at most one
            extra = {"message_type": message.message_type, "source": self.source}
            item = stored_result_of(message, extra)
            try:
                self._queue.put_nowait(StoredSend(destination, item.body, item.headers))
            except queue.Full:
                self._drop(1, destination, "the sender is behind (its queue is full)")

    def _ensure_started(self) -> None:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"stored-{self.listener}", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        sender: Sender | None = None
        while True:
            item = self._queue.get()
            if item is None:
                break
            try:
                if sender is None:
                    sender = self._make_sender()
                problem = sender.send(item)
            except Exception as exc:  # noqa: BLE001 - a stored result never stops the bridge
                problem = str(exc) or type(exc).__name__
                if sender is not None:
                    sender.close()
                sender = None
            if problem:
                self._drop(1, item.destination, problem)
                continue
            self.sent += 1
            if self.counters is not None:
                self.counters.inc("stored_results_sent", listener=self.listener)
            failpoints.hit("after_stored_result")
        if sender is not None:
            sender.close()

    def _drop(self, count: int, destination: str, why: str) -> None:
        self.dropped += count
        if self.counters is not None:
            self.counters.inc("stored_results_dropped", count, listener=self.listener)
        if self._dropped_for.first(destination):
            log.warning("%s: stored result to %s not sent: %s; the final result still follows (counted in "
                        "stored_results_dropped; logged once per destination)", self.listener,
                        destination or "any destination", why)

    def close(self, timeout: float = 5.0) -> None:
        """Send what is queued (for at most `timeout` seconds), then stop the sender thread."""
        thread = self._thread
        if thread is None:
            return
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            return
        thread.join(timeout)


class _ListenerConfig(Protocol):
    """What `stored_results_of` reads of a `[[listeners]]` entry (config.listener.ListenerConfig)."""

    @property
    def source(self) -> str: ...
    @property
    def queue(self) -> str: ...
    @property
    def subscription(self) -> str | None: ...
    @property
    def identity(self) -> str: ...
    @property
    def confirm(self) -> str: ...
    @property
    def reply_to_allow(self) -> list[str] | None: ...


class _TypeConfig(Protocol):
    @property
    def stored_result(self) -> bool: ...
    @property
    def results_to(self) -> str | None: ...


class _SourceConfig(Protocol):
    @property
    def kind(self) -> str: ...


def stored_results_of(types: Mapping[str, _TypeConfig], listener: _ListenerConfig, source: _SourceConfig,
                      stored_log: StoredLog, sender: Callable[[str, Any, str], Sender] | None,
                      bridge_name: str, counters: Counters | None = None) -> StoredResults | None:
    """The stored results of `listener`'s messages; None when no type has `stored_result`, or (logged)
    when its source's kind sends none (IBM MQ: not yet)."""
    routes = {name: t.results_to for name, t in types.items() if t.stored_result}
    name = f"{listener.source}:{listener.queue}"
    if not routes:
        return None
    if sender is None:
        log.warning("%s: stored results are not sent: a %s source sends none (only STOMP sources do); final "
                    "results are unaffected", name, source.kind)
        return None
    make = sender
    client = f"{bridge_name}-stored"
    reply_to = (ReplyAllowList(listener.reply_to_allow, listener=name) if listener.confirm == "reply-to" else None)
    return StoredResults(routes, listener=name, source=listener.source, identity=listener.identity,
                         scope=listener_scope(listener.source, listener.queue, listener.subscription,
                                              listener.identity),
                         stored_log=stored_log, sender=lambda: make(listener.source, source, client),
                         reply_to=reply_to, counters=counters)
