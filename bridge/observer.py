"""What the control thread tells the rest of the process: one observer protocol instead of hook lists.

The composition root (`mqbridge.app`) hands the bridge its observers: the plugin host (rescan),
the configuration reloader (SIGHUP), the memory guard, the monitoring rates, and those that other
packages contribute through the `mqbridge.observers` entry-point group (systemd's sd_notify, from
`mqbridge.service`). Every call comes from the control thread; an observer that raises is logged
and kept (see `Bridge._notify`).

Subclass `Observer` and override only what you need; every method is a no-op by default.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from mqbridge.bulks.collector_limits import CollectorStats
    from mqbridge.config import BridgeConfig
    from mqbridge.counters import Counters

#: The entry-point group of observer factories: `name = "package.module:factory"`, where
#: `factory(config)` returns an Observer, or None when it has nothing to do in this process.
ENTRY_POINT_GROUP = "mqbridge.observers"

ObserverFactory = Callable[["BridgeConfig"], "Observer | None"]
#: The names of the Observer methods the control thread calls with the bridge.
Event = Literal["on_ready", "on_tick", "on_wake", "on_reload", "on_stopping"]


class StatsView(Protocol):
    """The bulk collector as observers see it: its counters."""

    def stats(self) -> CollectorStats: ...


class BreakersView(Protocol):
    """The sinks' circuit breakers as observers see them."""

    def summary(self) -> str: ...


class LimitView(Protocol):
    """The memory guard as observers see it: its limit can change while running (reload)."""

    def set_limit(self, max_rss: int | None) -> None: ...


class BridgeView(Protocol):
    """What an observer sees of the running bridge (`mqbridge.supervision.supervisor.Bridge` is one): the
    configuration in force, the counters, the collector's and breakers' summaries, the status page
    and the one-line summary, and whether it is stopping. Nothing here starts or stops threads."""

    @property
    def config(self) -> BridgeConfig: ...
    @property
    def counters(self) -> Counters: ...
    @property
    def collector(self) -> StatsView: ...
    @property
    def breakers(self) -> BreakersView | None: ...
    @property
    def guard(self) -> LimitView: ...
    @property
    def stop_event(self) -> threading.Event: ...

    def status(self) -> dict[str, Any]: ...

    def summary(self) -> str: ...


class Observer:
    """Receives the bridge's life-cycle events on the control thread. Calls must be quick."""

    def on_ready(self, bridge: BridgeView) -> None:
        """Once, when every listener thread has connected (systemd: READY=1)."""

    def on_tick(self, bridge: BridgeView) -> None:
        """Every `[bridge] control_interval` (plugin rescan, STATUS line, rates)."""

    def on_wake(self, bridge: BridgeView) -> None:
        """On every control-loop wake-up, at most 0.25 s apart (watchdog, memory guard)."""

    def on_reload(self, bridge: BridgeView) -> None:
        """A reload was requested (SIGHUP, a Windows parameter-change control)."""

    def on_stopping(self, bridge: BridgeView) -> None:
        """Once, when shutdown begins (systemd: STOPPING=1)."""

    def status_fields(self) -> dict[str, Any]:
        """Extra top-level fields of the status page (`/status`), JSON-able."""
        return {}

    def holds_back_idle(self, since: float, listeners: frozenset[str] | None = None) -> bool:
        """`run --until-idle`: True while this observer knows of messages the idle `listeners` (labels
        source:queue; None: all) have not seen (a queue's backlog read after `since`, their last activity)."""
        return False


def installed_observers(config: BridgeConfig) -> list[Observer]:
    """The observers that installed packages contribute for this process (entry points)."""
    found: list[Observer] = []
    for entry in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        factory: ObserverFactory = entry.load()
        observer = factory(config)
        if observer is not None:
            found.append(observer)
    return found
