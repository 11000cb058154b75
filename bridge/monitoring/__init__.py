"""Monitoring: what a running bridge shows of itself, and the client that reads it.

The modules: `server` (the HTTP endpoint: `/metrics`, `/status`, `/health` and the status page),
`access` (its bearer token and TLS),
`metrics` (the Prometheus series), `health` (what makes the bridge unhealthy, and the Spark probe),
`page` (the status page's HTML), `control` (the control plane: `POST /listeners/...`),
`status_client` (`mqbridge status`: fetch and render `/status`), `control_client` (`mqbridge
listener`: send a command and wait until it is in effect), `lookup` (`/messages/<id>`: where a
message is, and `mqbridge where`'s request of it) and `progress` (the progress line on a
terminal). Monitoring observes the bridge; it imports no
module of the listener loop.

The surface below is imported lazily, on first use: `mqbridge status` does not load the Prometheus
client or psutil.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mqbridge.monitoring.health import SparkProbe, health_problems
    from mqbridge.monitoring.metrics import BridgeMetrics, initialize_series, process_info
    from mqbridge.monitoring.progress import ProgressLine
    from mqbridge.monitoring.server import MonitoringServer
    from mqbridge.monitoring.status_client import (
        DEFAULT_URL,
        EXIT_HEALTHY,
        EXIT_UNHEALTHY,
        EXIT_UNREACHABLE,
        Credentials,
        run_status,
        url_from_config,
    )

_SURFACE = {
    "SparkProbe": "mqbridge.monitoring.health",
    "health_problems": "mqbridge.monitoring.health",
    "BridgeMetrics": "mqbridge.monitoring.metrics",
    "initialize_series": "mqbridge.monitoring.metrics",
    "process_info": "mqbridge.monitoring.metrics",
    "ProgressLine": "mqbridge.monitoring.progress",
    "MonitoringServer": "mqbridge.monitoring.server",
    "DEFAULT_URL": "mqbridge.monitoring.status_client",
    "Credentials": "mqbridge.monitoring.status_client",
    "EXIT_HEALTHY": "mqbridge.monitoring.status_client",
    "EXIT_UNHEALTHY": "mqbridge.monitoring.status_client",
    "EXIT_UNREACHABLE": "mqbridge.monitoring.status_client",
    "run_status": "mqbridge.monitoring.status_client",
    "url_from_config": "mqbridge.monitoring.status_client",
}

__all__ = ["DEFAULT_URL", "EXIT_HEALTHY", "EXIT_UNHEALTHY", "EXIT_UNREACHABLE", "BridgeMetrics", "Credentials",
           "MonitoringServer", "ProgressLine", "SparkProbe", "health_problems", "initialize_series",
           "process_info", "run_status", "url_from_config"]


def __getattr__(name: str) -> Any:
    module = _SURFACE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
