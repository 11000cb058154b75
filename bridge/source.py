"""The source adapter protocol and the small types the listener loop shares with adapters.

A listener thread's source is built by its kind's driver (`mqbridge.drivers.open_source`): core
never imports an adapter module.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from mqbridge.counters import Counters
from mqbridge.message import Message
from mqbridge.outbound.outbox import Derived
from mqbridge.outbound.reply_to import FirstTimes, ReplyAllowList
from mqbridge.outbound.stations import Stations
from mqbridge.outbound.stored import StoredResults
from mqbridge.records import DeliveryTracker, InDoubtLog, PoisonLog
from mqbridge.tracing.backout_log import BackoutLog

if TYPE_CHECKING:
    from mqbridge.config import ListenerConfig, SourceConfig

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
    #: What its preprocessors emitted (`mqbridge.outbound.outbox`): sent in the unit of work that removes it.
    derived: tuple[Derived, ...] = ()


def with_derived(landed: Sequence[Landed], derived: Mapping[int, tuple[Derived, ...]]) -> list[Landed]:
    """`landed` with each entry's derived messages (`mqbridge.outbound.outbox`), looked up by `id()` of its message."""
    if not derived:
        return list(landed)
    return [dataclasses.replace(item, derived=derived.get(id(item.message), ())) for item in landed]


@dataclass
class Confirmations:
    """An adapter's count of the results it sent to producers (reply-to, MQ report messages)."""

    sent: int = 0  # in a committed unit of work
    failed: int = 0  # could not be sent (the message was committed without it)
    rerouted: int = 0  # went to the dead-letter queue: the reply-to queue did not take it
    not_allowed: int = 0  # not sent: the reply-to is not in the listener's reply_to_allow (mqbridge.outbound.reply_to)
    to_stations: int = 0  # sent to a type's results_to (mqbridge.outbound.stations), in a committed unit of work

    def add(self, other: Confirmations) -> None:
        """Count `other`'s results in these."""
        self.sent += other.sent
        self.failed += other.failed
        self.rerouted += other.rerouted
        self.not_allowed += other.not_allowed
        self.to_stations += other.to_stations


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
    #: False: the listener loop counts and moves (STOMP, memory). An adapter that applies it asks
    #: `landed` (set by the listener loop when it has a landing ledger) before it moves a message:
    #: one that landed while its unit was backed out for another message is handed over and
    #: committed as landed, never also moved.
    applies_backout_threshold: bool
    #: Set by the listener loop (with a landing ledger) on an adapter that applies the backout
    #: threshold: whether a message landed already. None: not known (an adapter that does not apply
    #: the threshold never asks).
    landed: Callable[[Message], bool] | None

    @property
    def backout_threshold(self) -> int:
        """The delivery count at which the adapter itself moves a message (IBM MQ: BOTHRESH or the
        listener's override, known once connected); 0 where it moves none by itself."""

    @property
    def backout_queue(self) -> str | None:
        """Where the adapter's moves go that name no queue of their own (the listener's, or IBM MQ's
        BOQNAME once connected); None or "": none."""

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


@dataclass
class QueueShared:
    """State shared by every listener thread of one (source, queue), across restarts."""

    tracker: DeliveryTracker = field(default_factory=DeliveryTracker)
    in_doubt: InDoubtLog = field(default_factory=InDoubtLog)
    poison: PoisonLog = field(default_factory=PoisonLog)
    #: Messages whose result the broker refused (a bad reply-to): their unit goes through without it.
    unconfirmable: InDoubtLog = field(default_factory=InDoubtLog)
    #: Reply destinations a result was refused for, so that each is logged once (mqbridge.outbound.reply_to).
    refused_replies: FirstTimes = field(default_factory=FirstTimes)
    #: Where moves to a backout queue are recorded (`mqbridge.tracing.backout_log`), also those an adapter
    #: makes by itself (STOMP: refused at the edge; IBM MQ: BOTHRESH reached at get time). None: nowhere.
    backout_log: BackoutLog | None = None
    #: Where the results of this queue's messages also go, by type (`mqbridge.outbound.stations`). None: nowhere.
    stations: Stations | None = None
    #: The stored results of this queue's messages (`mqbridge.outbound.stored`). None: none wanted.
    stored: StoredResults | None = None
    #: The bridge's counters, for what only an adapter can count (STOMP on RabbitMQ: landed redeliveries
    #: that may be duplicates, `mqbridge_possible_duplicates_total`). None: not counted (tests).
    counters: Counters | None = None


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

    def reply_allow(self, queue_manager: str | None = None) -> ReplyAllowList:
        """The listener's `reply_to_allow` (IBM MQ: for the connected `queue_manager`)."""
        return ReplyAllowList(self.listener.reply_to_allow, listener=f"{self.source_name}:{self.listener.queue}",
                              queue_manager=queue_manager, refusals=self.shared.refused_replies)


class SourceAdapter(Protocol):
    """An adapter class: builds its Source from a context (`mqbridge.drivers.Driver.source`)."""

    @classmethod
    def from_context(cls, context: SourceContext) -> Source:
        """A new, unconnected source for one listener thread."""
