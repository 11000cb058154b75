"""A bridge on the in-memory source with a recording executor: the listener loop and the
supervisor, tested in milliseconds without a broker or Spark."""

from __future__ import annotations

import itertools
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mqbridge.app import App, build_app
from mqbridge.config import BridgeConfig
from mqbridge.drivers import open_source
from mqbridge.listeners.memory import MemoryBroker
from mqbridge.message import Bulk, Message, MessageResult
from mqbridge.supervision.supervisor import ChainFactory, SourceFactory
from tests.support.configs import LISTENER, BridgeToml

_brokers = itertools.count(1)

#: A per-message decision of the RecordingExecutor: None lands it, else a MessageResult for it.
Decide = Callable[[Message], MessageResult | None]


class RecordingExecutor:
    """An `Executor` that "lands" a bulk in a list; `decide` can fail chosen messages."""

    def __init__(self, decide: Decide | None = None) -> None:
        self.decide = decide
        self.landed: list[Message] = []
        self.bulks = 0
        self._lock = threading.Lock()

    def execute(self, bulk: Bulk) -> list[MessageResult]:
        results: list[MessageResult] = []
        with self._lock:
            self.bulks += 1
            for message in bulk.messages:
                result = self.decide(message) if self.decide is not None else None
                if result is None:
                    self.landed.append(message)
                    result = MessageResult.success(message.msg_id, bulk.bulk_id)
                results.append(result)
        return results

    def bodies(self) -> list[bytes]:
        with self._lock:
            return [m.body for m in self.landed]


def memory_config(*, threads: int = 1, batch: int = 10, threshold: int | None = 3, extra: str = "",
                  wait: str = "50ms", backout_queue: str | None = "orders.backout",
                  path: Path | None = None) -> tuple[BridgeConfig, MemoryBroker]:
    """One type `orders` read from queue `orders` of a fresh in-memory broker; backout queue
    `orders.backout` (None: no backout queue); fast control loop and flushes. With `path`, the
    file is written there and loaded from it (a reload reads it again)."""
    name = f"unit-{next(_brokers)}"
    toml = (BridgeToml({
        "bridge": {"name": "unit", "state_dir": tempfile.mkdtemp(prefix="mqbridge-state-"),
                   "control_interval": "200ms", "shutdown_timeout": "5s"},
        "monitoring": {"listen": ""},
        "types.orders": {"bulk_timeout": "100ms"},
        "sources.mem": {"kind": "memory", "broker": name},
    }).listener(source="mem", queue="orders", message_type="orders", threads=threads, batch=batch,
                wait=wait, backout_queue=backout_queue, backout_threshold=threshold)
            .add(LISTENER, extra))
    cfg = toml.parse(toml.write(path)) if path is not None else toml.parse()
    return cfg, MemoryBroker.named(name)


def memory_app(cfg: BridgeConfig, executor: RecordingExecutor, *, source_factory: SourceFactory = open_source,
               chain_factory: ChainFactory | None = None, observers: Sequence[Any] = ()) -> App:
    """The bridge of `cfg` as the composition root builds it, landing into `executor`."""
    return build_app(cfg, executors={"orders": executor}, source_factory=source_factory,
                     chain_factory=chain_factory, observers=observers)


class FailingSource:
    """A `Source` that raises `error` on connect (or, with `on="receive"`, on every receive)."""

    supports_partial_commit = True
    applies_backout_threshold = False
    backout_threshold = 0
    backout_queue: str | None = None
    landed: Callable[[Message], bool] | None = None
    recoverable_errors: tuple[type[BaseException], ...] = ()

    def __init__(self, error: BaseException, on: str = "connect", name: str = "mem",
                 destination: str = "orders") -> None:
        self.error, self.on = error, on
        self.name, self.destination = name, destination
        self.closed = 0

    def connect(self) -> None:
        if self.on == "connect":
            raise self.error

    def receive(self, timeout: float) -> Message | None:
        raise self.error

    def commit(self, moves: Sequence[Any] = (), returns: Sequence[Message] = (), landed: Sequence[Any] = ()) -> None:
        raise AssertionError("nothing to commit")

    def rollback(self) -> None:
        raise AssertionError("nothing to roll back")

    def close(self) -> None:
        self.closed += 1
