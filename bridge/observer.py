"""What the control thread tells the rest of the process: one observer protocol instead of hook lists.

The composition root (`mqbridge.app`) hands the bridge its observers: the plugin host (rescan),
the configuration reloader (SIGHUP), the memory guard, the monitoring rates, and those that other
packages contribute through the `mqbridge.observers` entry-point group (systemd's sd_notify, from
`mqbridge.service`). Every call comes from the control thread; an observer that raises is logged
and kept (see `Bridge._notify`).

Subclass `Observer` and override only what you need; every method is a no-op by default.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from mqbridge.config import BridgeConfig
    from mqbridge.control import Bridge

#: The entry-point group of observer factories: `name = "package.module:factory"`, where
#: `factory(config)` returns an Observer, or None when it has nothing to do in this process.
ENTRY_POINT_GROUP = "mqbridge.observers"

ObserverFactory = Callable[["BridgeConfig"], "Observer | None"]
#: The names of the Observer methods the control thread calls with the bridge.
Event = Literal["on_ready", "on_tick", "on_wake", "on_reload", "on_stopping"]


class Observer:
    """Receives the bridge's life-cycle events on the control thread. Calls must be quick."""

    def on_ready(self, bridge: Bridge) -> None:
        """Once, when every listener thread has connected (systemd: READY=1)."""

    def on_tick(self, bridge: Bridge) -> None:
        """Every `[bridge] control_interval` (plugin rescan, STATUS line, rates)."""

    def on_wake(self, bridge: Bridge) -> None:
        """On every control-loop wake-up, at most 0.25 s apart (watchdog, memory guard)."""

    def on_reload(self, bridge: Bridge) -> None:
        """A reload was requested (SIGHUP, a Windows parameter-change control)."""

    def on_stopping(self, bridge: Bridge) -> None:
        """Once, when shutdown begins (systemd: STOPPING=1)."""

    def status_fields(self) -> dict[str, Any]:
        """Extra top-level fields of the status page (`/status`), JSON-able."""
        return {}


def installed_observers(config: BridgeConfig) -> list[Observer]:
    """The observers that installed packages contribute for this process (entry points)."""
    found: list[Observer] = []
    for entry in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        factory: ObserverFactory = entry.load()
        observer = factory(config)
        if observer is not None:
            found.append(observer)
    return found
