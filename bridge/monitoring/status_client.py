"""`mqbridge status`: ask a running bridge's monitoring endpoint how it is doing.

Fetches /status and /healthz and prints a table. Exit codes: 0 healthy, 1 unhealthy,
3 unreachable (nothing answers, not a bridge, or it refuses us). With `--config`, it speaks HTTPS
as `[monitoring]` says (`mqbridge.monitoring.access.client_context`) and sends its token; with a
bare `--url`, `--cacert` and `--token-file` give the CA and the token.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mqbridge.config import BridgeConfig, is_loopback
from mqbridge.errors import ConfigError, StatusUnreachableError
from mqbridge.monitoring.access import client_context

DEFAULT_URL = "http://127.0.0.1:9464"
EXIT_HEALTHY, EXIT_UNHEALTHY, EXIT_UNREACHABLE = 0, 1, 3
# A wildcard listen address is reached through the loopback address of its family.
_WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def url_from_config(config: BridgeConfig) -> str:
    """The endpoint URL of a configuration's `[monitoring] listen`. Raises StatusUnreachableError when the
    configuration disables monitoring or lets the port be chosen at run time."""
    section = config.monitoring
    where = config.path or "the configuration"
    if not section.enabled:
        raise StatusUnreachableError(f'monitoring is disabled in {where} ([monitoring] listen = ""); give --url')
    assert section.host is not None  # enabled: listen = "host:port"
    if section.port == 0:
        raise StatusUnreachableError(f"{where} listens on port 0 (any free port); give --url")
    host = _WILDCARDS.get(section.host, section.host)
    return f"{'https' if section.tls else 'http'}://{f'[{host}]' if ':' in host else host}:{section.port}"


@dataclass(frozen=True)
class Credentials:
    """What `mqbridge status` shows the endpoint: a bearer token, and the TLS context that verifies
    the server (and presents a client certificate)."""

    token: str | None = None
    context: ssl.SSLContext | None = None

    @classmethod
    def from_config(cls, config: BridgeConfig) -> Credentials:
        """The token and TLS of a configuration's `[monitoring]` (ConfigError for unusable files)."""
        section = config.monitoring
        token = section.token.get_secret_value() if section.token is not None else None
        return cls(token, client_context(section, config.resolve_path))

    @classmethod
    def from_files(cls, cacert: Path | None = None, token_file: Path | None = None) -> Credentials:
        """The CA and token of `--url` without a configuration: the server verified against `cacert`
        (else the system's CAs) and its host name; the token read from `token_file`, never taken from
        the command line, where `ps` and shell histories show it. ConfigError for unusable files."""
        context = None
        if cacert is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies the certificate and the host name
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            try:
                context.load_verify_locations(cacert)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(f"--cacert {cacert}: cannot use it: {_why(exc)}") from exc
        return cls(_read_token(token_file) if token_file is not None else None, context)


def _read_token(path: Path) -> str:
    """The token alone on the first line of `path` (a trailing newline allowed)."""
    try:
        token = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--token-file {path}: cannot read it: {_why(exc)}") from exc
    if not token or any(char.isspace() for char in token):
        raise ConfigError(f"--token-file {path}: expected the token alone on one line")
    return token


def _why(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror and not isinstance(exc, ssl.SSLError) \
        else str(exc)


def _get(url: str, timeout: float, credentials: Credentials, method: str = "GET") -> tuple[int, bytes]:
    """(HTTP status, body) of `method url` (a POST sends no body: `mqbridge listener`)."""
    request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    if credentials.token is not None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "https" and not is_loopback(parts.hostname or ""):
            raise StatusUnreachableError(f"{url}: the token would travel in clear to {parts.hostname}; use https")
        request.add_header("Authorization", f"Bearer {credentials.token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout,  # noqa: S310 -- an http(s) URL the user gave
                                    context=credentials.context) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:  # 503 from /healthz is an answer, not a failure
        if exc.code == 401:
            raise StatusUnreachableError(
                f"{url} answered 401: the endpoint needs its token (--token-file, or --config with its "
                "[monitoring] token)" if credentials.token is None else f"{url} answered 401: the token was refused"
            ) from exc
        return exc.code, exc.read()
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise StatusUnreachableError(f"no bridge answers at {url}: {reason}") from exc


def fetch(url: str, timeout: float = 5.0,
          credentials: Credentials | None = None) -> tuple[dict[str, Any], int, str]:
    """(status document, /healthz code, /healthz body) of the bridge at `url`."""
    base = url.rstrip("/")
    credentials = credentials or Credentials()
    code, body = _get(base + "/status", timeout, credentials)
    try:
        status = json.loads(body)
    except ValueError:
        status = None
    if code != 200 or not isinstance(status, dict) or "listeners" not in status:
        raise StatusUnreachableError(f"{base}/status answered HTTP {code} without a bridge status; "
                                     "is this an mqbridge endpoint?")
    health_code, health_body = _get(base + "/healthz", timeout, credentials)
    return status, health_code, health_body.decode("utf-8", "replace")


def _mb(value: Any) -> str:
    return f"{value / 2**20:.1f} MB" if isinstance(value, (int, float)) else "-"


def render(url: str, status: dict[str, Any], healthy: bool, health_text: str) -> str:
    """The readable report."""
    out = [f"mqbridge {status.get('name', '?')} at {url}: {'HEALTHY' if healthy else 'UNHEALTHY'}"]
    if not healthy:
        out += [f"  ! {line}" for line in health_text.splitlines() if line.strip()]
    out.append("")
    out += _listener_lines(status)
    out.append("")
    out += _collector_lines(status)
    out += _sink_lines(status)
    out += _plugin_lines(status)
    out += _process_lines(status)
    return "\n".join(out)


def _listener_lines(status: dict[str, Any]) -> list[str]:
    """One line per listener thread, then each queue's results sent back to producers."""
    out = [f"{'LISTENER THREAD':<40} {'STATE':<11} {'UNITS':>6} {'MSG/S':>8} {'COMMITTED':>10} "
           f"{'RESTARTS':>8}  LAST ERROR"]
    for entry in status.get("listeners", []):
        state = (entry.get("phase", "?") if entry.get("alive") else "stopped" if entry.get("retiring")
                 else f"down:{entry.get('phase', '?')}")
        rate = entry.get("listener_committed_per_second")
        committed = (entry.get("listener_messages") or {}).get("messages_committed")
        out.append(f"{entry.get('name', '?'):<40} {state:<11} {entry.get('units', 0):>6} "
                   f"{'-' if rate is None else f'{rate:.1f}':>8} "
                   f"{'-' if committed is None else f'{committed:.0f}':>10} {entry.get('restarts', 0):>8}  "
                   f"{entry.get('last_error') or '-'}")
    out.append("(MSG/S and COMMITTED are per queue, shared by its threads)")
    for label, backlog in (status.get("backlog") or {}).items():
        waiting, age = backlog.get("messages"), backlog.get("oldest_age_seconds")
        out.append(f"backlog {label}: " + ("unknown" if waiting is None else f"{waiting} waiting")
                   + ("" if age is None else f", oldest {age:.0f}s")
                   + f" (read {backlog.get('seconds_since_read')}s ago)")
    for control in status.get("listener_controls") or []:  # what an operator changed (mqbridge listener)
        if control.get("threads_mode") == "adaptive":  # the bridge chooses its thread count
            out.append(f"listener {control.get('name')}: {control.get('threads')} threads (adaptive, up to "
                       f"{control.get('threads_max')}), {control.get('threads_alive')} alive"
                       + (f"; last change at {control.get('tuned_at')}: {control.get('tuning')}"
                          if control.get("tuning") else ""))
        elif control.get("state") == "running" and control.get("threads") == control.get("configured_threads"):
            continue
        if control.get("state") != "running" or control.get("threads_mode") != "adaptive":
            pending = "" if control.get("in_effect") else f"; not in effect yet: {control.get('pending')}"
            out.append(f"listener {control.get('name')}: {str(control.get('state')).upper()}, "
                       f"{control.get('threads')} threads (configured {control.get('configured_threads')}), "
                       f"{control.get('threads_alive')} alive; {control.get('last_command')} at "
                       f"{control.get('changed_at')}{pending}")
    for entry in {f"{e.get('source')}:{e.get('queue')}": e for e in status.get("listeners", [])}.values():
        counts = entry.get("listener_messages") or {}
        sent, failed, rerouted, refused = (counts.get(f"results_{k}") or 0
                                           for k in ("sent", "failed", "rerouted", "not_allowed"))
        if sent or failed or rerouted or refused:
            out.append(f"results to producers, {entry.get('source')}:{entry.get('queue')}: {sent:.0f} sent, "
                       f"{failed:.0f} failed, {rerouted:.0f} rerouted"
                       + (f", {refused:.0f} not allowed (reply_to_allow)" if refused else ""))
    return out


def _collector_lines(status: dict[str, Any]) -> list[str]:
    """The collector's bulks and the Spark writes they became."""
    c = status.get("collector", {})
    flushed = ", ".join(f"{k}={v}" for k, v in sorted((c.get("flushed") or {}).items())) or "none"
    spark = status.get("spark") or {}
    states = {True: "reachable", False: f"NOT reachable: {spark.get('error')}", None: "not checked"}
    state = states[spark.get("reachable")]
    return [f"collector  {c.get('messages', 0)} messages, {_mb(c.get('bytes'))}, {c.get('active_bulks', 0)} active "
            f"/ {c.get('queued_bulks', 0)} queued / {c.get('in_flight_bulks', 0)} writing bulks; "
            f"flushed: {flushed}",
            f"spark      {state} ({spark.get('master', '?')}); {c.get('executed_bulks', 0)} bulk writes, "
            f"{c.get('execute_seconds_total', 0):.1f}s in total"]


def _sink_lines(status: dict[str, Any]) -> list[str]:
    """Each sink's breaker: available, or since when not and when it is probed next."""
    out = []
    for name, sink in sorted((status.get("sinks") or {}).items()):
        if sink.get("available", True):
            line = f"available ({sink.get('opens', 0)} outages, {sink.get('probes', 0)} probes so far)"
        else:
            wait = sink.get("next_probe_seconds")
            line = (f"UNAVAILABLE since {sink.get('unavailable_since')}, next probe in "
                    f"{'?' if wait is None else f'{wait:.0f}'}s: {sink.get('reason')}")
            if sink.get("last_probe_error"):
                line += f"; last probe: {sink['last_probe_error']}"
        out.append(f"sink       {name}: {line}")
    return out


def _plugin_lines(status: dict[str, Any]) -> list[str]:
    """The plugin generation in use, when the status has one."""
    plugins = status.get("plugins")
    if not plugins:
        return []
    names = ", ".join(p.get("name", "?") for p in plugins.get("plugins", [])) or "none"
    errors = len(plugins.get("errors", []))
    out = [f"plugins    generation {plugins.get('generation')}: {names}; {errors} load errors"
           + (f"; reload rejected: {plugins['reload_error']}" if plugins.get("reload_error") else "")]
    # Which generation each listener runs (mqbridge.plugins.pinning): follow, pinned, up to N, canary.
    for name, entry in sorted((plugins.get("listeners") or {}).items()):
        mode = str(entry.get("plugins")) + (", canary" if entry.get("canary") else "")
        out.append(f"plugins    {name}: generation {entry.get('generation')} ({mode})")
    canary = plugins.get("canary")
    if canary:
        out.append(f"plugins    canary on trial: generation {canary.get('generation')} on "
                   f"{', '.join(canary.get('listeners') or [])}, {canary.get('clean_units')}/"
                   f"{canary.get('units_needed')} clean units, {canary.get('seconds')}/{canary.get('seconds_needed')}s")
    if plugins.get("canary_note"):
        out.append(f"plugins    last canary decision: {plugins['canary_note']}")
    return out


def _process_lines(status: dict[str, Any]) -> list[str]:
    """The memory guard and the process's resources."""
    guard = status.get("guard") or {}
    if guard.get("enabled"):
        since = guard.get("paused_since")
        paused = (f"PAUSED intake for {time.time() - since:.0f}s" if guard.get("paused") and since
                  else "intake running")
        out = [f"memory     rss {_mb(guard.get('rss'))} / max_rss {_mb(guard.get('max_rss'))}: {paused} "
               f"({guard.get('pauses', 0)} pauses)"]
    else:
        out = ["memory     guard off (no [bridge] max_rss)"]
    proc = status.get("process") or {}
    if proc:
        out.append(f"process    pid {proc.get('pid')}, rss {_mb(proc.get('rss_bytes'))}, "
                   f"cpu {proc.get('cpu_seconds')}s, {proc.get('threads')} threads, "
                   f"{proc.get('open_files')} open files, {proc.get('connections')} connections, "
                   f"up {proc.get('uptime_seconds')}s")
    return out


def run_status(url: str, timeout: float = 5.0, credentials: Credentials | None = None) -> tuple[int, str]:
    """(exit code, text to print) for `mqbridge status`."""
    try:
        status, code, body = fetch(url, timeout, credentials)
    except StatusUnreachableError as exc:
        return EXIT_UNREACHABLE, f"mqbridge status: {exc}"
    # /status and /healthz are two moments: healthy only if both say so, with both's problems.
    problems = list((status.get("health") or {}).get("problems", []))
    if code != 200:
        problems += [line for line in body.splitlines() if line.strip() and line not in problems]
    healthy = code == 200 and not problems
    return (EXIT_HEALTHY if healthy else EXIT_UNHEALTHY), render(url, status, healthy, "\n".join(problems))
