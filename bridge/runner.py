"""The in-process runner shared by the CLI and the service wrappers (systemd, Windows)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mqbridge import __version__
from mqbridge.control import Bridge
from mqbridge.counters import Counters
from mqbridge.monitoring import MonitoringServer
from mqbridge.plugins import PluginHost
from mqbridge.reload import ConfigReloader

if TYPE_CHECKING:
    from mqbridge.config import BridgeConfig

log = logging.getLogger("mqbridge")


def build_bridge(config: BridgeConfig, **bridge_kwargs: Any) -> tuple[Bridge, PluginHost]:
    """A Bridge whose listeners run the preprocessor chains of `config`, with the plugin host as
    an observer (rescan on every control tick and on a reload request, result observers,
    status) and the configuration reloader after it. Raises ConfigError if a chain cannot be
    built. (Interim wiring until the composition root, bridge/app.py, takes it over.)"""
    counters = bridge_kwargs.pop("counters", None) or Counters()
    host = PluginHost.from_config(config, counters=counters)
    host.start()
    bridge = Bridge(config, chain_factory=lambda cfg: host.chain_provider(config.listeners.index(cfg)),
                    counters=counters, **bridge_kwargs)
    for name in config.types:
        bridge.collector.register_result_handler(host.observe_result, message_type=name)
    bridge.tick_hooks.append(host.on_tick)
    bridge.status_hooks[host.status_key] = host.status
    # Plugins first, then the configuration file: the order a reload request has always had.
    bridge.reload_hooks += [host.on_reload, ConfigReloader().reload]
    return bridge, host


def run_bridge(config: BridgeConfig, *, until_idle: float | None = None,
               stop_event: threading.Event | None = None,
               reload_event: threading.Event | None = None,
               configure: Callable[[Bridge], None] | None = None) -> int:
    """Build, start and supervise a bridge until it is stopped or idle; return an exit code.

    `stop_event`, when given, is linked to the bridge's own stop event (a signal handler or a
    service control handler sets it); so is `reload_event` (SIGHUP: reload plugins and the
    configuration file). `configure` may add hooks before the bridge starts. With `$NOTIFY_SOCKET`
    set (systemd), the bridge reports READY, STATUS, WATCHDOG and STOPPING.
    """
    from mqbridge.service.notify import attach_notifier

    # Loads the plugins and builds every listener's preprocessor chain (ConfigError if one
    # names an unknown preprocessor or gives bad options); reloads them every control tick.
    bridge, plugins = build_bridge(config)
    if stop_event is not None:
        bridge.stop_event = stop_event
    if reload_event is not None:
        bridge.reload_event = reload_event
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
