"""`mqbridge listener pause|resume|stop|start|threads|plugins`: send a command to a running bridge's
control plane (`mqbridge.monitoring.control`) and wait until it is in effect.

It reaches the endpoint as `mqbridge status` does (`mqbridge.monitoring.status_client`: the URL, TLS
and token of `--config`, or `--url` with `--cacert` and `--token-file`), sends
`POST /listeners/<name>/<action>`, then reads `/status` until the listener's `listener_controls`
entry says the command is in effect (its threads paused, ended, started or as many as asked), for
at most `wait` seconds. `plugins` is in effect when the bridge answers (the plugin host moves the
listener under its lock): one read of `/status` shows the generation its next unit of work takes.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from typing import Any

from mqbridge.errors import StatusUnreachableError
from mqbridge.monitoring.status_client import EXIT_UNREACHABLE, Credentials, _get

EXIT_DONE, EXIT_REFUSED, EXIT_NOT_IN_EFFECT = 0, 1, 4
#: Seconds between two reads of /status while waiting.
POLL = 0.25


def command_path(name: str, action: str, argument: int | str | None = None) -> str:
    """The control path of a command: the name URL-encoded as one path segment, then the action and
    its argument (the count of `threads`, the generation of `plugins`)."""
    path = f"/listeners/{urllib.parse.quote(name, safe='')}/{action}"
    return f"{path}/{urllib.parse.quote(str(argument), safe='')}" if action in ("threads", "plugins") else path


def _entry(status: dict[str, Any], listener: str) -> dict[str, Any] | None:
    for entry in status.get("listener_controls") or []:
        if entry.get("name") == listener:
            return dict(entry)
    return None


def describe(entry: dict[str, Any]) -> str:
    """One line of a listener's run-time state, as /status gives it."""
    threads = f"{entry.get('threads')} threads"
    if entry.get("threads_mode") == "adaptive":
        threads += f" (adaptive, up to {entry.get('threads_max')})"
    elif entry.get("threads") != entry.get("configured_threads"):
        threads += f" (configured: {entry.get('configured_threads')})"
    return f"{entry.get('state')}, {threads}, {entry.get('threads_alive')} alive"


def wait_in_effect(base: str, listener: str, wait: float, timeout: float,
                   credentials: Credentials) -> tuple[bool, dict[str, Any]]:
    """(in effect, the last `listener_controls` entry read) of `listener`, once it is in effect or
    after `wait` seconds."""
    deadline = time.monotonic() + wait
    entry: dict[str, Any] = {}
    while True:
        code, body = _get(base + "/status", timeout, credentials)
        try:
            found = _entry(json.loads(body), listener) if code == 200 else None
        except ValueError:
            found = None
        if found is None:
            raise StatusUnreachableError(f"{base}/status answered HTTP {code} without listener {listener}")
        entry = found
        if entry.get("in_effect"):
            return True, entry
        if time.monotonic() >= deadline:
            return False, entry
        time.sleep(POLL)


def plugin_generation(base: str, listener: str, timeout: float, credentials: Credentials) -> str:
    """One line of the plugin generation `listener`'s next unit of work takes, as /status gives it."""
    code, body = _get(base + "/status", timeout, credentials)
    try:
        entry = (json.loads(body).get("plugins") or {}).get("listeners", {}).get(listener) if code == 200 else None
    except (ValueError, AttributeError):
        entry = None
    if not isinstance(entry, dict):
        raise StatusUnreachableError(f"{base}/status answered HTTP {code} without the plugins of listener {listener}")
    return (f"{listener}: in effect: plugin generation {entry.get('generation')} ({entry.get('plugins')}) from its "
            "next unit of work; units of work in flight finish on the generation they started with")


def run_command(url: str, name: str, action: str, argument: int | str | None = None, *, wait: float = 60.0,
                timeout: float = 5.0, credentials: Credentials | None = None) -> tuple[int, str]:
    """(exit code, text to print) of `mqbridge listener ACTION NAME [N]`: 0 in effect (or accepted,
    with `wait` 0), 1 refused by the bridge, 3 unreachable or not allowed, 4 not in effect in time.
    `argument`: the count of `threads`, the generation of `plugins` (a number, latest or follow)."""
    base, credentials = url.rstrip("/"), credentials or Credentials()
    try:
        code, body = _get(base + command_path(name, action, argument), timeout, credentials, method="POST")
        text = body.decode("utf-8", "replace").strip()
        if code in (400, 404, 409) and not text.startswith("not found:"):
            return EXIT_REFUSED, f"mqbridge listener {action}: {text}"
        if code != 200:
            return EXIT_UNREACHABLE, f"mqbridge listener {action}: {base} answered HTTP {code}: {text[:300]}"
        try:
            outcome = json.loads(body)
            listener, message = outcome["listener"], outcome["message"]
        except (ValueError, KeyError, TypeError):
            return EXIT_UNREACHABLE, f"mqbridge listener {action}: {base} answered without a command's outcome"
        lines = [f"{listener}: {message}"]
        if wait <= 0:
            return EXIT_DONE, "\n".join(lines)
        if action == "plugins":
            return EXIT_DONE, "\n".join([*lines, plugin_generation(base, listener, timeout, credentials)])
        done, entry = wait_in_effect(base, listener, wait, timeout, credentials)
    except StatusUnreachableError as exc:
        return EXIT_UNREACHABLE, f"mqbridge listener {action}: {exc}"
    if not done:
        lines.append(f"{listener}: not in effect after {wait:g}s: {entry.get('pending')} (now {describe(entry)})")
        return EXIT_NOT_IN_EFFECT, "\n".join(lines)
    lines.append(f"{listener}: in effect: {describe(entry)}")
    return EXIT_DONE, "\n".join(lines)
