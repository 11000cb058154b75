"""Running the bridge as a service: sd_notify (`mqbridge.service.notify`), the systemd unit
(`.systemd`), the service-manager controller (`.controller`) and its Windows layer (`.windows`,
pywin32; imported on Windows only), and the `mqbridge service` command (`.cli`).

This package depends on core, never the reverse: the `mqbridge` command and the composition root
find its command and its sd_notify observer through entry points (`mqbridge.commands`,
`mqbridge.observers` in pyproject.toml)."""

from __future__ import annotations

from mqbridge.service.controller import ServiceController
from mqbridge.service.notify import BridgeNotifier, Notifier, observer_from_environment
from mqbridge.service.systemd import UnitSpec, render_unit

__all__ = ["BridgeNotifier", "Notifier", "ServiceController", "UnitSpec", "observer_from_environment", "render_unit"]
