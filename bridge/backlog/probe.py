"""What a backlog probe is: one per source, reading the depth (and the oldest message's age, where
the broker tells it) of that source's queues on a connection of its own.

Core never imports an adapter: `BACKLOG_KINDS` names each probe as "module:factory", imported
when a source of that kind is configured (like `mqbridge.source.SOURCE_KINDS`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from mqbridge.config import SourceConfig


@dataclass(frozen=True, slots=True)
class Reading:
    """One queue's backlog: `depth` messages waiting (None: unknown), the oldest `age` in seconds
    (None: the broker does not say), read at `at` (time.monotonic())."""

    depth: int | None
    age: float | None
    at: float


class BacklogUnavailable(Exception):
    """The broker cannot tell a backlog (a plugin is not enabled...): the message says how to
    enable it. The poller logs it once and shows "unknown"."""


class BacklogProbe(Protocol):
    """Reads the backlog of a source's queues. `read` must end within `timeout` seconds; it raises
    BacklogUnavailable when the broker cannot tell, any other exception when this attempt failed."""

    def read(self, queues: Sequence[str], timeout: float) -> dict[str, Reading]: ...

    def close(self) -> None: ...


ProbeFactory = Callable[[str, "SourceConfig"], "BacklogProbe | None"]

#: Source kinds and the factory of their backlog probe: factory(source name, config) returns a probe,
#: or None when the source cannot tell one (a kind missing here: the memory broker has no outside queue).
BACKLOG_KINDS: dict[str, str] = {
    "stomp": "mqbridge.listeners.stomp.backlog:probe_for",
    "mq": "mqbridge.listeners.mq.backlog:probe_for",
}


def probe_for(name: str, config: SourceConfig) -> BacklogProbe | None:
    """The probe of source `name`, its adapter module imported now; None if it has none."""
    target = BACKLOG_KINDS.get(config.kind)
    if target is None:
        return None
    module, _, attribute = target.partition(":")
    factory: ProbeFactory | None = getattr(importlib.import_module(module), attribute, None)
    return factory(name, config) if factory is not None else None
