"""Reload the configuration file on request (SIGHUP, a Windows parameter-change control).

The request only sets `Bridge.reload_event`; the control thread tells its observers (`on_reload`,
this reloader among them) on its next wake-up (at most 0.25 s later), so nothing runs inside a
signal handler. Plugins are not reloaded here: the plugin host rescans its folders on every tick
and on the same request (`PluginHost.on_reload`), through the same code path.

The configuration file is read and validated again. Keys in `APPLIED` take effect at once; every
other changed key is listed in one warning as needing a restart (names only, never values: they
may be secrets). A file that no longer loads is reported and changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from mqbridge.config import BridgeConfig, load_config
from mqbridge.errors import ConfigError
from mqbridge.observer import BridgeView, Observer

log = logging.getLogger("mqbridge.reload")  # the name operators configure


def _apply_level(_bridge: BridgeView, new: BridgeConfig) -> None:
    logging.getLogger().setLevel(getattr(logging, new.logging.level))


def _apply_max_rss(bridge: BridgeView, new: BridgeConfig) -> None:
    bridge.guard.set_limit(new.bridge.max_rss)


#: Key paths that can change while running, and how to apply them to the running bridge.
APPLIED: dict[str, Callable[[BridgeView, BridgeConfig], None]] = {"logging.level": _apply_level,
                                                     "bridge.max_rss": _apply_max_rss}


def flatten(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(key.path, leaf value) pairs of a dumped configuration; list items as `key[i]`."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from flatten(item, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from flatten(item, f"{prefix}[{index}]")
        if not value:
            yield prefix, []
    else:
        yield prefix, value


def _dump(config: BridgeConfig) -> dict[str, Any]:
    # Secret fields dump as "**********" whatever their value, so a changed password would be
    # missed; compare their plain values instead (they never leave this function).
    data: dict[str, Any] = dict(flatten(config.model_dump(mode="json", by_alias=True)))
    data.update(config.secrets())
    return data


def changed_keys(old: BridgeConfig, new: BridgeConfig) -> list[str]:
    """Key paths whose values differ between two configurations (added and removed included)."""
    before, after = _dump(old), _dump(new)
    return sorted(key for key in before.keys() | after.keys() if before.get(key) != after.get(key))


class ConfigReloader(Observer):
    """The bridge's observer that re-reads the configuration file (see the module docstring)."""

    def __init__(self, load: Callable[[str], BridgeConfig] = load_config) -> None:
        self._load = load
        self.pending_restart: list[str] = []  # changed keys that wait for a restart

    def on_reload(self, bridge: BridgeView) -> None:
        """Re-read the configuration file of `bridge` and apply it (control thread)."""
        path = bridge.config.path
        if path is None:
            log.warning("reload: the configuration was not read from a file; nothing to re-read")
            return
        try:
            new = self._load(str(path))
        except ConfigError as exc:
            log.error("reload: configuration not reloaded, the running one stays in force: %s", exc)
            return
        self.apply(bridge, new)

    def apply(self, bridge: BridgeView, new: BridgeConfig) -> None:
        """Apply the changes of `new` that are safe while running; report the others."""
        old = bridge.config
        changed = changed_keys(old, new)
        applied = [key for key in changed if key in APPLIED]
        for key in applied:
            APPLIED[key](bridge, new)
            section, _, name = key.partition(".")
            setattr(getattr(old, section), name, getattr(getattr(new, section), name))
        if applied:
            log.warning("reload: applied %s", ", ".join(applied))
        self.pending_restart = [key for key in changed if key not in APPLIED]
        if self.pending_restart:
            log.warning("reload: changed keys that need a restart to take effect (still running with the "
                        "old values): %s", ", ".join(self.pending_restart))
        elif not applied:
            log.info("reload: configuration unchanged")
