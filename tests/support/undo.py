"""What the undo tests share: a chain that records what it processed and what it was told
(`on_submit_error`), a stand-in for Spark that records landings in a stand-in ledger, and one
listener thread with its collector on given source connections, run until a condition holds."""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from mqbridge.bulks.collector import BulkCollector, CollectorLimits, TypeLimits
from mqbridge.counters import Counters
from mqbridge.errors import PreprocessorError
from mqbridge.loop.listener import ListenerSpec, ListenerThread, PlainChain
from mqbridge.message import Bulk, Message, MessageResult, Rollback, RollbackKind
from mqbridge.records import DeliveryTracker
from mqbridge.source import Source
from tests.support.listener_run import RunningListener


@dataclass(frozen=True)
class Told:
    """One `on_submit_error` call: which delivery of which message, and the `Rollback`."""

    body: bytes
    delivery: int
    reason: Rollback

    @property
    def kind(self) -> RollbackKind:
        return self.reason.kind


class RecordingChain(PlainChain):
    """A chain that records each delivery it processes and each it is told about. `fail(message)`
    makes it raise a PreprocessorError on that message, `consume(message)` consume it; `classify`
    is the type it chooses (None: the listener's). Each processed message is a new copy, as the
    plugin host's chains make."""

    def __init__(self, fail: Callable[[Message], bool] | None = None,
                 consume: Callable[[Message], bool] | None = None, classify: str | None = None) -> None:
        super().__init__()
        self._fail, self._consume, self._type = fail, consume, classify
        self.processed: list[tuple[bytes, int]] = []
        self.told: list[Told] = []
        self._lock = threading.Lock()

    def classify(self, message: Message) -> str | None:
        return self._type

    def process(self, message: Message) -> Message | None:
        with self._lock:
            self.processed.append((message.body, message.delivery_count))
        if self._fail is not None and self._fail(message):
            raise PreprocessorError(f"preprocessor 'p' failed on message {message.msg_id}", "p")
        if self._consume is not None and self._consume(message):
            return None
        return dataclasses.replace(message, headers={**message.headers, "seen": "1"})

    def on_submit_error(self, message: Message, reason: Rollback) -> None:
        with self._lock:
            self.told.append(Told(message.body, message.delivery_count, reason))

    def kinds(self) -> Counter[tuple[bytes, RollbackKind]]:
        with self._lock:
            return Counter((t.body, t.kind) for t in self.told)

    def of(self, body: bytes) -> list[Told]:
        with self._lock:
            return [t for t in self.told if t.body == body]

    def deliveries_told(self) -> list[tuple[bytes, int]]:
        with self._lock:
            return [(t.body, t.delivery) for t in self.told]


class StubLedger:
    """The landing ledger as the listener sees it (`mqbridge.loop.dedupe.Deduplicator`), filled by
    `StubExecutor` with the identity of every message it lands."""

    def __init__(self) -> None:
        self.identities: set[str] = set()
        self._lock = threading.Lock()

    def add(self, identities: Sequence[str]) -> None:
        with self._lock:
            self.identities.update(identities)

    def published(self, identities: Sequence[str]) -> set[str]:
        with self._lock:
            return {i for i in identities if i in self.identities}

    def landed_in(self, identities: Sequence[str]) -> dict[str, tuple[str, str]]:
        with self._lock:
            return {i: ("bulk", "orders") for i in identities if i in self.identities}


@dataclass
class StubExecutor:
    """Stands in for Spark: `outcome` decides each message's result; records what landed (and in
    `ledger`, if given)."""

    outcome: Callable[[Message], MessageResult] = lambda m: MessageResult.success(m.msg_id)
    ledger: StubLedger | None = None
    landed: list[bytes] = field(default_factory=list)

    def execute(self, bulk: Bulk) -> list[MessageResult]:
        results = [self.outcome(m) for m in bulk.messages]
        ok = [m for m, r in zip(bulk.messages, results, strict=True) if r.ok]
        self.landed += [m.body for m in ok]
        if self.ledger is not None:
            self.ledger.add([m.identity for m in ok if m.identity])
        return results


class Listening(RunningListener):
    """One listener thread on `sources` (its in-flight connections) with its own collector."""

    def __init__(self, sources: Sequence[Source], executor: StubExecutor, chain: PlainChain, *,
                 batch: int = 10, threshold: int = 0, backout_queue: str | None = None,
                 ledger: StubLedger | None = None, outbox_allow: tuple[str, ...] | None = None,
                 identity: str = "msg_id") -> None:
        self.executor = executor
        self.collector = BulkCollector(CollectorLimits(memory=64 << 20, max_bulks=10, workers=2),
                                       {"orders": TypeLimits(bulk_size=1 << 20, bulk_timeout=0.05)})
        self.collector.register_executor("orders", executor)
        self.collector.start()
        first = sources[0]
        spec = ListenerSpec(name=f"{first.name}:{first.destination}#1", source_name=first.name,
                            queue=first.destination, batch=batch, wait=0.05, message_type="orders",
                            backout_threshold=threshold, backout_queue=backout_queue, outbox_allow=outbox_allow,
                            identity=identity)
        self.counters = Counters()
        self.thread = ListenerThread(spec, list(sources), self.collector, lambda: chain, self.counters,
                                     DeliveryTracker(), dedupe=ledger)
        self.thread.start()
