"""The message model: what a listener reads, what a bulk carries, what an executor reports."""

from __future__ import annotations

import enum
import itertools
import math
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any


def utcnow() -> datetime:
    """The current time as an aware UTC datetime."""
    return datetime.now(timezone.utc)


#: What a message occupies in a bulk besides its body (`Message.size`): its other columns, roughly.
ROW_OVERHEAD = 256


@dataclass(slots=True)
class Message:
    """One message read from a source, carried unchanged (apart from preprocessing) to Spark.

    `token` is the source adapter's private handle (STOMP ack id, MQ unit-of-work slot);
    nothing outside the adapter looks at it.
    """

    msg_id: str
    body: bytes
    source: str
    destination: str
    message_type: str = ""
    correlation_id: str | None = None
    put_timestamp: datetime | None = None
    received_timestamp: datetime = field(default_factory=utcnow)
    redelivered: bool = False
    delivery_count: int = 1
    headers: dict[str, str] = field(default_factory=dict)
    token: Any = None
    #: What the landing ledger knows this message by (the listener's `identity` rule, computed on
    #: the original message before preprocessing); "" when exactly-once is off.
    identity: str = ""
    #: The durable subscription a topic listener read it through (`{subscription}` in table
    #: templates); "" for a queue.
    subscription: str = ""
    # Monotonic time the bridge got the message: for put-to-commit latency and bulk age.
    received_monotonic: float = field(default_factory=time.monotonic)

    @property
    def size(self) -> int:
        """Bytes the message occupies in a bulk (body plus a small fixed overhead per row)."""
        return len(self.body) + ROW_OVERHEAD


class Outcome(enum.Enum):
    """What became of one message in Spark."""

    SUCCESS = "success"
    RETRYABLE = "retryable"  # the write failed; delivering it again may succeed (see `outage`)
    PERMANENT = "permanent"  # this message can never land (e.g. its body does not parse)


@dataclass(frozen=True, slots=True)
class MessageResult:
    """The result of consumption of one message, reported by an executor.

    `outage` (only with RETRYABLE) says the failure is the sink's, not the message's: Spark is
    down or unreachable, its JVM died, the table path is unwritable, a write timed out
    (`mqbridge.bulks.triage` decides it with a probe write). The listener gives such a message back
    without counting the delivery towards its backout threshold. Code that does not know the flag
    sees an ordinary RETRYABLE result, which is the safe reading.

    `claimed` (with `outage`) says the message was given back because the landing ledger holds its
    identity in another bulk (`IdentityClaimedError`, `DuplicateIdentityError`) or this process's
    bulk was decided by another (`BulkFencedError`): nothing is wrong with the sink or the message,
    so the listener gives it back uncounted, and neither the triage nor the sink's breaker acts.
    """

    msg_id: str
    outcome: Outcome
    reason: str = ""
    bulk_id: str = ""
    outage: bool = False
    table: str = ""  # SUCCESS: the table it landed in
    claimed: bool = False

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.SUCCESS

    @classmethod
    def success(cls, msg_id: str, bulk_id: str = "", table: str = "") -> MessageResult:
        return cls(msg_id, Outcome.SUCCESS, "", bulk_id, False, table, False)  # positional: one per row landed

    @classmethod
    def retryable(cls, msg_id: str, reason: str, bulk_id: str = "") -> MessageResult:
        return cls(msg_id, Outcome.RETRYABLE, reason, bulk_id)

    @classmethod
    def sink_outage(cls, msg_id: str, reason: str, bulk_id: str = "") -> MessageResult:
        """RETRYABLE because the sink is unavailable: never counts towards a backout threshold."""
        return cls(msg_id, Outcome.RETRYABLE, reason, bulk_id, outage=True)

    @classmethod
    def given_back(cls, msg_id: str, reason: str, bulk_id: str = "") -> MessageResult:
        """RETRYABLE because the ledger holds the message's identity elsewhere (see `claimed`):
        never counts towards a backout threshold, never trips the sink's breaker."""
        return cls(msg_id, Outcome.RETRYABLE, reason, bulk_id, outage=True, claimed=True)

    @classmethod
    def permanent(cls, msg_id: str, reason: str, bulk_id: str = "") -> MessageResult:
        return cls(msg_id, Outcome.PERMANENT, reason, bulk_id)


class RollbackKind(str, enum.Enum):
    """Why a preprocessed message did not leave its queue as landed (`Rollback.kind`)."""

    PREPROCESSOR = "preprocessor"  # a preprocessor (or classify) raised on this message
    WRITE_FAILED = "write_failed"  # its bulk write failed for this message (a retryable or permanent result)
    OUTAGE = "outage"  # its sink was unavailable: given back, the delivery not counted
    UNIT_BACKOUT = "unit_backout"  # it was fine, but its whole unit of work went back to the queue
    IN_DOUBT = "in_doubt"  # the source commit of its unit was sent, and its outcome is unknown

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class Rollback:
    """What a preprocessor's `on_submit_error(message, reason)` is told: why this delivery of the
    message does not leave the queue as landed (docs/plugins.md, "Undo: on_submit_error").

    `error` is the exception behind it (a `PreprocessorError`, `WriteFailedError`,
    `SinkOutageError`, `UnitBackedOutError`, the source's own error when its commit failed, or an
    `InDoubtError`): what a hook whose second parameter is not named `reason` is passed instead.
    `landed`: this delivery's message is in its table (its bulk was published). `moved`: the unit's
    commit moves it to the backout queue, so it is not delivered from its queue again.
    """

    kind: RollbackKind
    error: BaseException
    landed: bool = False
    moved: bool = False

    def __str__(self) -> str:
        return f"{self.kind}: {self.error}"


_bulk_seq = itertools.count(1)
_bulk_seq_lock = threading.Lock()
_process_tag = uuid.uuid4().hex[:8]


def new_bulk_id(message_type: str) -> str:
    """A bulk id unique across processes: type, a per-process tag and a sequence number."""
    with _bulk_seq_lock:
        seq = next(_bulk_seq)
    return f"{message_type}-{_process_tag}-{seq:08d}"


@dataclass(slots=True)
class Bulk:
    """Messages of one type collected to be written to Spark together."""

    message_type: str
    bulk_id: str = ""
    messages: list[Message] = field(default_factory=list)
    nbytes: int = 0
    created: float = field(default_factory=time.monotonic)
    flush_reason: str = ""
    _oldest: float = math.inf  # the smallest received_monotonic added
    #: Set by the collector while the bulk is on a worker: see `files_written`.
    on_files_written: Callable[[], None] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.bulk_id:
            self.bulk_id = new_bulk_id(self.message_type)
        self._oldest = min((m.received_monotonic for m in self.messages), default=math.inf)

    def add(self, message: Message) -> None:
        self.messages.append(message)
        self.nbytes += message.size
        if message.received_monotonic < self._oldest:
            self._oldest = message.received_monotonic

    def __len__(self) -> int:
        return len(self.messages)

    @property
    def oldest(self) -> float:
        """Monotonic receive time of the oldest message (flush condition 3)."""
        return self._oldest if self.messages else self.created

    def files_written(self) -> None:
        """Said by a writer once the bulk's Spark job has written its files and only its commit, in its
        table's turn, is left (a Delta table's, `mqbridge.landing.writes.delta`; an Iceberg table's
        publish of the staged append, `mqbridge.landing.writes.iceberg`): the collector then
        counts the bulk out of its type's `writes_per_type`, so that the next bulk's Spark job runs
        while this one commits. Once; nothing for a bulk no collector handed out (a triage's part)."""
        tell, self.on_files_written = self.on_files_written, None
        if tell is not None:
            tell()


def put_date_of(message: Message) -> str:
    """The `put_date` partition a message lands in: the UTC date of its put (else receive) time."""
    when = message.put_timestamp or message.received_timestamp
    return (when if when.tzinfo is None else when.astimezone(timezone.utc)).date().isoformat()
