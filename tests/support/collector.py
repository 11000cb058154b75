"""What the BulkCollector's unit tests share: messages of a given size, a fake clock, a recording
executor standing in for Spark, a result recorder, and the `make` fixture that builds started
collectors and always closes them."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator

import pytest

from mqbridge.bulks.collector import BulkCollector, CollectorLimits, TypeLimits
from mqbridge.message import Bulk, Message, MessageResult
from tests.support.waiting import wait_until

DEADLINE = 3.0


def msg(msg_id: str, mtype: str = "a", size: int = 1000, received: float | None = None) -> Message:
    """A message whose `Message.size` is exactly `size` (body plus 256 bytes of overhead)."""
    message = Message(msg_id=msg_id, body=b"x" * (size - 256), source="test", destination="/queue/t",
                      message_type=mtype)
    if received is not None:
        message.received_monotonic = received
    return message


class FakeClock:
    """A clock that moves only when told to; counts its readers so a test can tell that the
    timer thread has looked at it."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now
        self.calls = 0

    def __call__(self) -> float:
        self.calls += 1
        return self.now


class Concurrency:
    """Counts bulks executing at once, overall and per type."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: dict[str, int] = defaultdict(int)
        self.max_type: dict[str, int] = defaultdict(int)
        self.max_total = 0

    def enter(self, mtype: str) -> None:
        with self.lock:
            self.running[mtype] += 1
            self.max_type[mtype] = max(self.max_type[mtype], self.running[mtype])
            self.max_total = max(self.max_total, sum(self.running.values()))

    def leave(self, mtype: str) -> None:
        with self.lock:
            self.running[mtype] -= 1


def all_success(bulk: Bulk) -> list[MessageResult]:
    return [MessageResult.success(m.msg_id, bulk.bulk_id) for m in bulk.messages]


class RecordingExecutor:
    """Records every bulk; blocks in execute until `gate` is set; answers with `respond`."""

    def __init__(self, respond: Callable[[Bulk], list[MessageResult]] = all_success, *,
                 gated: bool = False, concurrency: Concurrency | None = None) -> None:
        self.respond = respond
        self.gate = threading.Event()
        if not gated:
            self.gate.set()
        self.concurrency = concurrency or Concurrency()
        self.bulks: list[tuple[str, list[str], str]] = []  # (bulk_id, msg_ids, flush_reason)
        self.entered = threading.Event()

    def execute(self, bulk: Bulk) -> list[MessageResult]:
        self.concurrency.enter(bulk.message_type)
        try:
            self.bulks.append((bulk.bulk_id, [m.msg_id for m in bulk.messages], bulk.flush_reason))
            self.entered.set()
            assert self.gate.wait(DEADLINE), "test never opened the gate"
            return self.respond(bulk)
        finally:
            self.concurrency.leave(bulk.message_type)

    @property
    def batches(self) -> list[list[str]]:
        return [ids for _, ids, _ in self.bulks]


class Results:
    """A result handler that records what it is given."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.got: dict[str, list[MessageResult]] = defaultdict(list)

    def __call__(self, message: Message, result: MessageResult) -> None:
        assert message.msg_id == result.msg_id
        with self.lock:
            self.got[message.msg_id].append(result)

    def count(self) -> int:
        with self.lock:
            return sum(len(r) for r in self.got.values())

    def one(self, msg_id: str) -> MessageResult:
        wait_until(lambda: self.got.get(msg_id), DEADLINE, f"the result of {msg_id}")
        with self.lock:
            (result,) = self.got[msg_id]
            return result


Factory = Callable[..., tuple[BulkCollector, dict[str, RecordingExecutor]]]


@pytest.fixture
def make() -> Iterator[Factory]:
    """Builds started collectors with one recording executor per type; always closes them,
    opening every gate first so nothing hangs."""
    made: list[tuple[BulkCollector, dict[str, RecordingExecutor]]] = []

    def factory(types: tuple[str, ...] = ("a", "b"), *, memory: int = 10**6, max_bulks: int = 10,
                workers: int = 2, writes_per_type: int = 1,
                bulk_size: int = 10**6, bulk_timeout: float = 60.0, latency: float | None = None,
                clock: Callable[[], float] = time.monotonic, executors: dict[str, RecordingExecutor] | None = None,
                start: bool = True) -> tuple[BulkCollector, dict[str, RecordingExecutor]]:
        collector = BulkCollector(CollectorLimits(memory=memory, max_bulks=max_bulks, workers=workers,
                                                  writes_per_type=writes_per_type),
                                  {t: TypeLimits(bulk_size=bulk_size, bulk_timeout=bulk_timeout, latency=latency)
                                   for t in types},
                                  clock=clock, tick=0.005)
        if executors is None:
            executors = {t: RecordingExecutor() for t in types}
        for mtype, executor in executors.items():
            collector.register_executor(mtype, executor)
        if start:
            collector.start()
        made.append((collector, executors))
        return collector, executors

    yield factory
    for collector, executors in made:
        for executor in executors.values():
            executor.gate.set()
        collector.close(timeout=DEADLINE)
