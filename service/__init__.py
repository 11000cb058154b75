"""Running the bridge as a service: sd_notify (`service.notify`), the systemd unit
(`service.systemd`), the service-manager controller (`service.controller`) and its Windows layer
(`service.windows`, pywin32; imported on Windows only), and the `mqbridge service` command
(`service.cli`)."""

from __future__ import annotations

from mqbridge.service.controller import ServiceController
from mqbridge.service.notify import Notifier, attach_notifier
from mqbridge.service.systemd import UnitSpec, render_unit

__all__ = ["Notifier", "ServiceController", "UnitSpec", "attach_notifier", "render_unit"]
