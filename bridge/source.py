"""The source adapter protocol, the small types the listener loop shares with adapters, and the
registry that finds an adapter by the configuration's `kind` string.

Core never imports an adapter module: `SOURCE_KINDS` names each one as "module:Class" (kombu's
transport aliases), and `open_source` imports it the first time a listener of that kind starts, so
a missing optional driver (pymqi, stomp.py) only matters where it is configured.
"""

from __future__ import annotations

import importlib
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from mqbridge.errors import ConfigError
from mqbridge.message import Message

if TYPE_CHECKING:
    from mqbridge.config import ListenerConfig, SourceConfig

#: Source kinds (`[sources.X] kind`) and the adapter class implementing each, imported when used.
SOURCE_KINDS: dict[str, str] = {
    "stomp": "mqbridge.listeners.stomp:StompSource",
    "mq": "mqbridge.listeners.mq:MqSource",
    "memory": "mqbridge.listeners.memory:MemorySource",
}


@dataclass(frozen=True, slots=True)
class BackoutMove:
    """A message to move to a backout (or error) queue, atomically with its removal."""

    message: Message
    reason: str
    queue: str | None = None  # None: the adapter's configured/inquired backout queue


@dataclass(frozen=True, slots=True)
class Landed:
    """A message of the unit of work that is in its table (just landed, or recognised in the
    ledger): what its producer is told when it asked to be (`Source.commit`)."""

    message: Message
    table: str = ""
    bulk_id: str = ""


@dataclass
class Confirmations:
    """An adapter's count of the results it sent to producers (reply-to, MQ report messages)."""

    sent: int = 0  # in a committed unit of work
    failed: int = 0  # could not be sent (the message was committed without it)
    rerouted: int = 0  # went to the dead-letter queue: the reply-to queue did not take it


@runtime_checkable
class Source(Protocol):
    """One connection to one queue, owned by one listener thread.

    A unit of work is every message `receive` returned since the last commit or rollback.
    Only the thread that received the messages may call commit or rollback.
    """

    name: str
    destination: str
    #: Errors after which dropping the connection and reconnecting may help.
    recoverable_errors: tuple[type[BaseException], ...]
    #: True if commit can remove some messages and return others (STOMP: per-message acks, or
    #: copies put back in the commit's transaction);
    #: False if a unit of work can only be committed or backed out whole (IBM MQ syncpoint).
    supports_partial_commit: bool
    #: The poison policy. True if the adapter itself moves a message whose delivery count reached
    #: its threshold, at get time (IBM MQ: BOTHRESH/BOQNAME, like the IBM MQ JMS classes); the
    #: listener loop's own threshold is then off, so it cannot cut a larger BOTHRESH short.
    #: False: the listener loop counts and moves (STOMP, memory).
    applies_backout_threshold: bool

    def connect(self) -> None:
        """Open the connection and start consuming."""

    def receive(self, timeout: float) -> Message | None:
        """The next message of the unit of work, or None if none came within `timeout` seconds."""

    def commit(self, moves: Sequence[BackoutMove] = (), returns: Sequence[Message] = (),
               landed: Sequence[Landed] = ()) -> Confirmations | None:
        """End the unit of work: remove its messages from the source, put each of `moves` to its
        backout queue in the same unit of work, and give `returns` back to the source
        (only when `supports_partial_commit`). A producer that asked to be told (STOMP `confirm`,
        MQ report options) gets its message's result, `landed` or moved, in the same unit of work;
        what was sent so is returned (None: this source sends no results)."""

    def rollback(self) -> None:
        """End the unit of work by returning every message of it to the source."""

    def close(self) -> None:
        """Return any open unit of work to the source, then disconnect. Never raises."""


class DeliveryTracker:
    """Counts deliveries per message id for sources that do not report a delivery count
    (ActiveMQ over STOMP), shared by every listener thread of one queue.

    Entries are dropped when a message is committed; the map is bounded so a stream of
    messages that never come back cannot grow it without limit. Counts live in memory: after a
    restart of the bridge a message starts counting again (the broker's `redelivered` flag
    still shows it was seen before).
    """

    def __init__(self, max_entries: int = 1_000_000) -> None:
        self._lock = threading.Lock()
        self._counts: OrderedDict[str, int] = OrderedDict()
        self._reasons: dict[str, str] = {}
        self._outages: dict[str, int] = {}
        self._max = max_entries

    def delivered(self, msg_id: str) -> int:
        """Record one delivery and return how many the bridge has seen, this one included."""
        with self._lock:
            count = self._counts.pop(msg_id, 0) + 1
            self._counts[msg_id] = count
            while len(self._counts) > self._max:
                old, _ = self._counts.popitem(last=False)
                self._reasons.pop(old, None)
                self._outages.pop(old, None)
            return count

    def gave_back_in_outage(self, msg_ids: Iterable[str]) -> None:
        """These messages go back to the source because their sink is unavailable (an outage):
        the delivery this causes must not count towards their backout threshold."""
        with self._lock:
            for msg_id in msg_ids:
                self._outages[msg_id] = self._outages.get(msg_id, 0) + 1
            while len(self._outages) > self._max:  # ids that never come back (per-delivery ids)
                del self._outages[next(iter(self._outages))]

    def outage_give_backs(self, msg_id: str) -> int:
        """How many of the message's deliveries were given back for an outage (not to be counted
        towards its backout threshold); in memory, like the counts."""
        with self._lock:
            return self._outages.get(msg_id, 0)

    def failed(self, msg_id: str, reason: str) -> None:
        """Remember why the last delivery failed, for the backout queue's reason header."""
        with self._lock:
            if msg_id in self._counts:
                self._reasons[msg_id] = reason

    def last_reason(self, msg_id: str) -> str | None:
        with self._lock:
            return self._reasons.get(msg_id)

    def forget(self, msg_ids: Sequence[str]) -> None:
        """The messages left the source: stop counting them."""
        with self._lock:
            for msg_id in msg_ids:
                self._counts.pop(msg_id, None)
                self._reasons.pop(msg_id, None)
                self._outages.pop(msg_id, None)


class InDoubtLog:
    """Message ids of units of work whose commit outcome is unknown (IBM MQ 2009 on MQCMIT, no
    STOMP receipt).

    One per queue, shared between listener threads and restarts, so that a redelivered copy of an
    in-doubt message can be recognised. Bounded: the oldest ids are forgotten first.
    """

    def __init__(self, max_ids: int = 100_000) -> None:
        self._lock = threading.Lock()
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._max = max_ids
        self.units = 0
        self.messages = 0

    def record(self, msg_ids: Iterable[str]) -> None:
        with self._lock:
            self.units += 1
            for msg_id in msg_ids:
                self.messages += 1
                self._ids[msg_id] = None
                self._ids.move_to_end(msg_id)
            while len(self._ids) > self._max:
                self._ids.popitem(last=False)

    def __contains__(self, msg_id: object) -> bool:
        with self._lock:
            return msg_id in self._ids


class PoisonLog:
    """Message failures of one queue: how often each message failed on its own account, and which
    messages are *suspects*. One per queue, shared by its listener threads and kept across their
    restarts (not across a restart of the process).

    Suspects. A unit of work that can only be backed out whole (IBM MQ) and was backed out because
    of a message failure holds a culprit among its messages: those are suspects. While a queue has
    suspects, its listeners read units of one message (as the IBM MQ JMS classes effectively do
    after a backout), so a culprit fails alone and only its delivery count rises. Isolation ends
    when every suspect has left the queue (committed or moved), or when `budget` messages were read
    alone without meeting a suspect (another consumer took it): a backed-out unit comes back within
    as many reads as it had messages.

    Failures. Message failures (a preprocessor raised, a write result that counts towards a
    backout threshold; never an outage) are counted per message across redeliveries, for the
    listener's halt policy when no backout threshold will ever move the message.
    """

    def __init__(self, max_entries: int = 100_000) -> None:
        self._lock = threading.Lock()
        self._suspects: OrderedDict[str, None] = OrderedDict()
        self._budget = 0
        self._failures: OrderedDict[str, int] = OrderedDict()
        self._max = max_entries
        self.isolated_reads = 0  # messages read alone while isolating (status, tests)

    # -- suspects (by message id) ----------------------------------------------------------------
    def suspect(self, msg_ids: Iterable[str], unit_size: int) -> None:
        """A unit of `unit_size` messages was backed out because of a message failure; `msg_ids`
        may have caused it."""
        with self._lock:
            for msg_id in msg_ids:
                self._suspects[msg_id] = None
                self._suspects.move_to_end(msg_id)
            while len(self._suspects) > self._max:
                self._suspects.popitem(last=False)
            if self._suspects:
                self._budget = max(self._budget, unit_size)

    @property
    def isolating(self) -> bool:
        """Read units of one message: the queue has suspects."""
        with self._lock:
            return bool(self._suspects)

    def is_suspect(self, msg_id: str) -> bool:
        with self._lock:
            return msg_id in self._suspects

    def read_alone(self, msg_id: str) -> None:
        """A message was read as a unit of one while isolating: a read that is not a suspect uses
        up one of the budget, and an exhausted budget ends isolation."""
        with self._lock:
            self.isolated_reads += 1
            if msg_id in self._suspects or not self._suspects:
                return
            self._budget -= 1
            if self._budget <= 0:
                self._suspects.clear()
                self._budget = 0

    def left_queue(self, msg_ids: Iterable[str]) -> None:
        """These messages left the queue (committed, moved): no longer suspects, no failures."""
        with self._lock:
            for msg_id in msg_ids:
                self._suspects.pop(msg_id, None)
            if not self._suspects:
                self._budget = 0

    # -- failure counts (by message key: the ledger identity, else the message id) ---------------
    def failed(self, key: str) -> int:
        """Count one message failure of `key`; returns its failures so far, this one included."""
        with self._lock:
            count = self._failures.pop(key, 0) + 1
            self._failures[key] = count
            while len(self._failures) > self._max:
                self._failures.popitem(last=False)
            return count

    def failures(self, key: str) -> int:
        with self._lock:
            return self._failures.get(key, 0)

    def forget(self, keys: Iterable[str]) -> None:
        """These messages left the queue: stop counting their failures."""
        with self._lock:
            for key in keys:
                self._failures.pop(key, None)


@dataclass
class QueueShared:
    """State shared by every listener thread of one (source, queue), across restarts."""

    tracker: DeliveryTracker = field(default_factory=DeliveryTracker)
    in_doubt: InDoubtLog = field(default_factory=InDoubtLog)
    poison: PoisonLog = field(default_factory=PoisonLog)
    #: Messages whose result the broker refused (a bad reply-to): their unit goes through without it.
    unconfirmable: InDoubtLog = field(default_factory=InDoubtLog)


@dataclass(frozen=True)
class SourceContext:
    """Everything an adapter gets to open one connection for one listener thread."""

    source_name: str  # the [sources.<name>] key
    source: SourceConfig  # that section, validated
    listener: ListenerConfig  # the [[listeners]] entry this thread serves
    bridge_name: str  # [bridge] name: MQ's PutApplName on moved messages, STOMP client ids
    thread_index: int  # 1.. within the listener entry
    shared: QueueShared

    @property
    def client_name(self) -> str:
        """"<bridge name>-<thread index>": unique per listener thread of one queue."""
        return f"{self.bridge_name}-{self.thread_index}"


class SourceAdapter(Protocol):
    """An adapter class: builds its Source from a context (the registry's contract)."""

    @classmethod
    def from_context(cls, context: SourceContext) -> Source:
        """A new, unconnected source for one listener thread."""


def adapter_for(kind: str) -> type[SourceAdapter]:
    """The adapter class of a source kind, imported now (ConfigError naming a missing driver)."""
    target = SOURCE_KINDS.get(kind)
    if target is None:
        raise ConfigError(f"unsupported source kind {kind!r} (known: {', '.join(sorted(SOURCE_KINDS))})")
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"source kind {kind!r} cannot be used: {exc}") from exc
    adapter: type[SourceAdapter] = getattr(module, attr)
    return adapter


def open_source(context: SourceContext) -> Source:
    """A new, unconnected source for one listener thread, from its configured kind."""
    return adapter_for(context.source.kind).from_context(context)
