"""systemd's service notification protocol (sd_notify), without a dependency.

`Notifier` sends `KEY=VALUE` lines as one datagram to the AF_UNIX socket named by `$NOTIFY_SOCKET`
(a leading "@" is Linux's abstract namespace); it does nothing when the variable is unset, so the
bridge can always call it. `BridgeNotifier` is the bridge's observer that speaks it; the
`mqbridge.observers` entry point `systemd` (pyproject.toml) names `observer_from_environment`, so the
composition root adds it to every bridge that runs under systemd without core importing this package:

- `READY=1` once every listener thread has connected (`on_ready`),
- `STATUS=<one line>` every control interval (`on_tick`),
- `WATCHDOG=1` at least every `$WATCHDOG_USEC / 3` while the control loop makes progress: it is
  sent from the control thread's own wake-ups (at most 0.25 s apart), so a hung control loop stops
  it and systemd restarts the service. A halted or restarting listener, a stuck driver call or an
  unavailable sink does *not* stop it: killing the process would interrupt the healthy sources'
  writes too and cure none of these. They show in `/healthz` (503), `/status` and the STATUS line.
- `STOPPING=1` when shutdown begins (`on_stopping`).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mqbridge.observer import BridgeView, Observer

if TYPE_CHECKING:
    from mqbridge.config import BridgeConfig

log = logging.getLogger(__name__)

#: The control thread wakes at least this often (Bridge.run); watchdog pings ride on it.
CONTROL_WAKEUP = 0.25


class Notifier:
    """Sends sd_notify messages to `socket_path`; a no-op when it is None."""

    def __init__(self, socket_path: str | None, watchdog_usec: int | None = None) -> None:
        self.socket_path = socket_path or None
        self.watchdog_usec = watchdog_usec if watchdog_usec and watchdog_usec > 0 else None
        self._failed = False

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None) -> Notifier:
        """The notifier systemd asked for through `$NOTIFY_SOCKET`, `$WATCHDOG_USEC` and
        `$WATCHDOG_PID` (a watchdog meant for another process is ignored, as sd_watchdog_enabled does)."""
        env = os.environ if env is None else env
        usec: int | None = None
        pid = env.get("WATCHDOG_PID", "")
        if not pid or pid == str(os.getpid()):
            try:
                usec = int(env.get("WATCHDOG_USEC", ""))
            except ValueError:
                usec = None
        return cls(env.get("NOTIFY_SOCKET"), usec)

    @property
    def enabled(self) -> bool:
        """True when systemd listens for notifications."""
        return self.socket_path is not None

    @property
    def watchdog_interval(self) -> float | None:
        """Seconds between WATCHDOG=1 pings (a third of the timeout), or None without a watchdog."""
        return self.watchdog_usec / 3e6 if self.watchdog_usec else None

    def notify(self, **fields: str | int) -> bool:
        """Send `KEY=VALUE` lines, e.g. `notify(READY=1, STATUS="ok")`. Returns False if nothing
        was sent. A failure is logged once and never raised: systemd's absence must not stop the bridge."""
        if self.socket_path is None:
            return False
        text = "\n".join(f"{key}={_one_line(str(value))}" for key, value in fields.items())
        address = self.socket_path
        if address.startswith("@"):
            address = "\0" + address[1:]
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.sendto(text.encode("utf-8"), address)
        except OSError as exc:
            if not self._failed:
                log.warning("sd_notify to %s failed (reported once): %s", self.socket_path, exc)
            self._failed = True
            return False
        return True


def _one_line(text: str) -> str:
    return " ".join(text.split())


class BridgeNotifier(Observer):
    """The bridge's observer that speaks to systemd through a `Notifier` (see the module docstring)."""

    def __init__(self, notifier: Notifier, clock: Any = time.monotonic) -> None:
        self.notifier = notifier
        self._clock = clock
        self._ready = False
        self._last_ping: float | None = None

    def on_ready(self, bridge: BridgeView) -> None:
        self._ready = True
        self.notifier.notify(READY=1, STATUS=bridge.summary())
        self.on_wake(bridge)

    def on_tick(self, bridge: BridgeView) -> None:
        self.notifier.notify(STATUS=bridge.summary())

    def on_wake(self, bridge: BridgeView) -> None:
        """WATCHDOG=1 when due and healthy. systemd arms the watchdog at READY=1: no ping before."""
        interval = self.notifier.watchdog_interval
        if interval is None or not self._ready or bridge.stop_event.is_set():
            return
        now = self._clock()
        if self._last_ping is not None and now - self._last_ping < interval:
            return
        # Being called at all is the progress WATCHDOG=1 vouches for (see the module docstring).
        self._last_ping = now
        self.notifier.notify(WATCHDOG=1)

    def on_stopping(self, bridge: BridgeView) -> None:
        timeout = bridge.config.bridge.shutdown_timeout
        self.notifier.notify(STOPPING=1, STATUS=f"draining (up to {timeout:.0f}s): {bridge.summary()}")


def observer_from_environment(config: BridgeConfig | None = None,
                              env: Mapping[str, str] | None = None) -> BridgeNotifier | None:
    """The sd_notify observer if `$NOTIFY_SOCKET` is set (systemd is listening), else None."""
    hooks = BridgeNotifier(Notifier.from_environment(env))
    if not hooks.notifier.enabled:
        return None
    interval = hooks.notifier.watchdog_interval
    if interval is not None and interval / 2 < CONTROL_WAKEUP:  # a ping may come one wake-up late
        log.warning("sd_notify: WatchdogSec=%.2fs is too short for the control thread, which wakes every "
                    "%.2fs; use at least 2s", 3 * interval, CONTROL_WAKEUP)
    log.info("sd_notify: %s%s", hooks.notifier.socket_path,
             f", watchdog every {interval:.1f}s" if interval else "")
    return hooks
