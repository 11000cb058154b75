"""`GET /messages/<id>` on the monitoring endpoint: where a message is, asked of the running bridge
(the answer is `mqbridge.tracing.where.Locator.locate`'s, which the composition root gives the server), and
the request `mqbridge where` makes of it.

    GET /messages/ID%3Aabc-1%3A1   200 {"id": ..., "state": "in_flight" | "landed" | "moved" | "unknown",
                                        "in_flight": [...], "landed": {...}, "moved": {...},
                                        "searched": [...], "notes": [...], "bridge": NAME}

The id is percent-encoded as one path segment (a `/` in it as %2F). Never open: with a `[monitoring]
token` the path needs it whatever `metrics_public` opens (`mqbridge.monitoring.access` refuses a
request without it, 401); without a token the endpoint answers 403, since anyone who can reach the
endpoint could then ask. 400: an empty or overlong id; 404: a server without a lookup.
"""

from __future__ import annotations

import json
import logging
import urllib.parse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from mqbridge.monitoring.access import Access
from mqbridge.observer import BridgeView

if TYPE_CHECKING:
    from mqbridge.monitoring.status_client import Credentials

log = logging.getLogger(__name__)

PREFIX = "/messages/"
JSON = "application/json"
#: Why /messages/<id> is refused by an endpoint without a token (403).
NEEDS_TOKEN = ("/messages/ needs a [monitoring] token: where a message is is never answered to whoever can reach "
               "the endpoint (set token, e.g. token = \"${FILE:/etc/mqbridge/monitoring.token}\"; or ask with "
               "`mqbridge where --config FILE ID`, which reads the ledger and the backout log itself)")


class Endpoint(Protocol):
    """What the answer needs of the server (`mqbridge.monitoring.server.MonitoringServer`)."""

    bridge: BridgeView
    access: Access
    locate: Callable[[str], dict[str, Any]] | None


def answer(monitor: Endpoint, path: str) -> tuple[int, str, bytes]:
    """(HTTP status, content type, body) of `GET path` (a path under PREFIX, without its query), after
    the access check has let the request through."""
    if monitor.access.token is None:
        return 403, JSON, _error(NEEDS_TOKEN)
    if monitor.locate is None:
        return 404, JSON, _error("this endpoint cannot look messages up")
    key = urllib.parse.unquote(path[len(PREFIX):])
    try:
        doc = monitor.locate(key)
    except ValueError as exc:  # an empty or overlong id
        return 400, JSON, _error(f"{exc}: GET /messages/<message id or identity, percent-encoded>")
    doc["bridge"] = monitor.bridge.config.bridge.name
    log.debug("monitoring: where %r: %s", key, doc["state"])
    return 200, JSON, json.dumps(doc, default=str).encode()


def _error(text: str) -> bytes:
    return json.dumps({"error": text}).encode()


def ask(url: str, key: str, timeout: float, credentials: Credentials) -> tuple[int, dict[str, Any]]:
    """Ask the endpoint at `url` where `key` is: (HTTP status, the JSON answer or {"error": ...}).
    StatusUnreachableError when nothing answers or it refuses the token (401)."""
    from mqbridge.monitoring.status_client import _get  # the one GET of the endpoint: TLS, token, 401

    code, body = _get(f"{url.rstrip('/')}{PREFIX}{urllib.parse.quote(key, safe='')}", timeout, credentials)
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        text = body.decode("utf-8", "replace").strip()
        doc = {"error": text[:300] or f"HTTP {code} without a body"}
    return code, doc
