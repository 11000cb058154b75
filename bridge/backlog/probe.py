"""What a backlog probe is: one per source, reading the depth (and the oldest message's age, where
the broker tells it) of that source's queues on a connection of its own.

Core never imports an adapter: a kind's probe factory is a part of its driver, imported when a source
of that kind is configured (`mqbridge.drivers.probe_for`).
"""

from __future__ import annotations

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
