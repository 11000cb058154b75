"""The in-process runner shared by the CLI and the service wrappers (systemd, Windows)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from mqbridge import __version__
from mqbridge.control import Bridge
from mqbridge.monitoring import MonitoringServer
from mqbridge.plugins import build_bridge

log = logging.getLogger("mqbridge")


def run_bridge(config: object, *, until_idle: float | None = None,
               stop_event: threading.Event | None = None,
               reload_event: threading.Event | None = None,
               configure: Callable[[Bridge], None] | None = None) -> int:
    """Build, start and supervise a bridge until it is stopped or idle; return an exit code.

    `stop_event`, when given, is linked to the bridge's own stop event (a signal handler or a
    service control handler sets it); so is `reload_event` (SIGHUP: reload plugins and the
    configuration file). `configure` may add hooks before the bridge starts. With `$NOTIFY_SOCKET`
    set (systemd), the bridge reports READY, STATUS, WATCHDOG and STOPPING.
    """
    from mqbridge.reload import ConfigReloader
    from mqbridge.service.notify import attach_notifier

    # Loads the plugins and builds every listener's preprocessor chain (ConfigError if one
    # names an unknown preprocessor or gives bad options); reloads them every control tick.
    bridge, plugins = build_bridge(config)
    if stop_event is not None:
        bridge.stop_event = stop_event
    if reload_event is not None:
        bridge.reload_event = reload_event
    ConfigReloader(plugins).attach(bridge)
    attach_notifier(bridge)
    if configure is not None:
        configure(bridge)
    cfg = bridge.config
    log.info("mqbridge %s starting: %s (%d listener threads)", __version__, getattr(cfg, "path", None),
             sum(listener.threads for listener in cfg.listeners))
    monitor = MonitoringServer.for_bridge(bridge)  # None when [monitoring] listen = ""
    try:
        if monitor is not None:
            monitor.bind()  # a taken port fails here, before anything has started
        bridge.start()
        if monitor is not None:
            monitor.start()
        return bridge.run(until_idle=until_idle)
    finally:
        if monitor is not None:
            monitor.stop()
        plugins.close()
