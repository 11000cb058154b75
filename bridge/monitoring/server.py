"""The monitoring endpoint (`[monitoring] listen`): a status page, /metrics, /status, /healthz.

    /          HTML: the status page (mqbridge.monitoring.page), refreshed from /status every few seconds

    /metrics   Prometheus text (mqbridge.monitoring.metrics.BridgeMetrics, rendered at scrape time)
    /status    JSON: BridgeView.status() with version, message totals, collector, spark (mode and master),
               plugins, guard, process (rss, uptime), health
    /healthz   200 "ok" while every listener thread is connected, every sink is available (no
               circuit breaker open) and Spark is reachable, else 503 with one problem per line.
               Answered from state: never waits on Spark for more than health.PING_WAIT
    POST /listeners/<name>/...  the control plane: pause, resume, stop, start a listener, or set its
               thread count (mqbridge.monitoring.control); only with a token
    POST /tables/delete  the control plane: delete landed rows by identity or SQL (`mqbridge tables
               delete`); only with a token
    /messages/<id>  JSON: where a message is (mqbridge.monitoring.lookup); needs the token, always

The server binds exactly the configured address (127.0.0.1:9464 by default, never all
interfaces unless configured); port 0 picks a free port, readable from `port` afterwards. With
`tls_cert` it speaks HTTPS only (the handshake runs on the request's own thread, so a slow client
never holds up the others); with `token` every request passes `mqbridge.monitoring.access` first.
`App.run` (mqbridge.app) starts it after the bridge has started and stops it on the way out.
"""

from __future__ import annotations

import json
import logging
import socket
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from mqbridge import __version__
from mqbridge.counters import RateMeter
from mqbridge.errors import BridgeError
from mqbridge.monitoring import lookup
from mqbridge.monitoring.access import Access, server_context
from mqbridge.monitoring.backlog_metrics import BacklogMetrics
from mqbridge.monitoring.control import (
    MAX_BODY,
    TABLES_DELETE,
    EntryDeleter,
    ListenerCommands,
    Reply,
    answer_post,
    answer_tables_delete,
)
from mqbridge.monitoring.health import SparkProbe, health_problems
from mqbridge.monitoring.metrics import BridgeMetrics, process_info
from mqbridge.monitoring.page import PAGE
from mqbridge.observer import BridgeView, Observer

if TYPE_CHECKING:
    from mqbridge.config import MonitoringSection

log = logging.getLogger(__name__)

# Per-listener message counts shown in /status, by counter name.
LISTENER_COUNTS = ("messages_received", "messages_committed", "messages_backed_out", "messages_moved_to_backout",
                   "results_sent", "results_failed", "results_rerouted", "results_not_allowed")


#: Seconds a client may take over its TLS handshake or between two reads of its request.
CLIENT_TIMEOUT = 10.0


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a slow scraper never delays shutdown
    monitor: MonitoringServer

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host name (socket.getfqdn), which can hang on a
        # machine with broken DNS; the name is only used in CGI variables.
        self.socket.bind(self.server_address)
        self.server_address = self.socket.getsockname()
        self.server_name, self.server_port = str(self.server_address[0]), int(self.server_address[1])

    def finish_request(self, request: Any, client_address: Any) -> None:
        # On the request's own thread: the TLS handshake (the accepting thread only accepts).
        if isinstance(request, ssl.SSLSocket):
            request.settimeout(CLIENT_TIMEOUT)
            try:
                request.do_handshake()
            except (OSError, ssl.SSLError) as exc:  # no client certificate, a client that does not trust us...
                log.info("monitoring: TLS handshake with %s failed: %s", client_address[0], exc)
                return
        super().finish_request(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = CLIENT_TIMEOUT

    def do_GET(self) -> None:  # noqa: N802 -- http.server's naming
        monitor = self.server.monitor
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        denial = monitor.access.check(path, self.headers.get("Authorization"))
        if denial is not None:
            log.info("monitoring: %s %s refused: %s", self.address_string(), path, denial.reason)
            self._send(401, "text/plain; charset=utf-8", b"authentication required: Authorization: Bearer <token>\n",
                       {"WWW-Authenticate": denial.challenge})
            return
        try:
            if path in ("/", "/index.html"):
                self._send(200, "text/html; charset=utf-8", PAGE.encode())
            elif path == "/metrics":
                self._send(200, CONTENT_TYPE_LATEST, generate_latest(monitor.registry))
            elif path == "/status":
                self._send(200, "application/json", json.dumps(monitor.status(), default=str).encode())
            elif path == "/healthz":
                problems = monitor.problems()
                body = "ok\n" if not problems else "".join(f"{p}\n" for p in problems)
                self._send(503 if problems else 200, "text/plain; charset=utf-8", body.encode())
            elif path.startswith(lookup.PREFIX):
                self._send(*lookup.answer(monitor, path))
            else:
                self._send(404, "text/plain; charset=utf-8", b"not found: try /, /metrics, /status or /healthz\n")
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up before the answer (a poll that timed out): nothing to answer, no fault.
            log.debug("monitoring: %s %s: the client closed the connection first", self.address_string(), path)
        except Exception as exc:
            log.exception("monitoring: %s failed", path)
            self._send(500, "text/plain; charset=utf-8", f"{type(exc).__name__}: {exc}\n".encode())

    def do_POST(self) -> None:  # noqa: N802 -- the control plane (mqbridge.monitoring.control)
        monitor = self.server.monitor
        if self.path.split("?", 1)[0].rstrip("/") == TABLES_DELETE:
            reply = self._tables_delete(monitor)
        else:
            reply = answer_post(monitor.access, monitor.control, self.path, self.headers.get("Authorization"),
                                self.address_string())
        try:
            self._send(reply.code, reply.content_type, reply.body, reply.headers)
        except (BrokenPipeError, ConnectionResetError):
            log.debug("monitoring: %s POST: the client closed the connection first", self.address_string())

    def _tables_delete(self, monitor: MonitoringServer) -> Reply:
        """`POST /tables/delete`: its body read (at most MAX_BODY bytes), then answered."""
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY:
            return Reply(400, "text/plain; charset=utf-8", f"Content-Length: 0 to {MAX_BODY} bytes\n".encode())
        return answer_tables_delete(monitor.access, monitor.delete_entries, self.path,
                                    self.headers.get("Authorization"), self.address_string(),
                                    self.rfile.read(length) if length else b"")

    def _send(self, code: int, content_type: str, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("monitoring: %s %s", self.address_string(), format % args)


class ListenerRates:
    """Committed messages per second of each listener over the last control interval."""

    def __init__(self) -> None:
        self._meters: dict[str, RateMeter] = {}
        self.rates: dict[str, float] = {}

    def update(self, bridge: BridgeView) -> None:
        """Once per control tick."""
        for cfg in bridge.config.listeners:
            label = f"{cfg.source}:{cfg.queue}"
            meter = self._meters.setdefault(label, RateMeter())
            self.rates[label] = round(meter.rate(bridge.counters.total("messages_committed", listener=label)), 2)


class MonitoringServer(Observer):
    """The HTTP endpoint of one bridge. `start()` binds and serves from a named thread.

    It is also one of the bridge's observers: per-listener rates every tick, and the "spark" and
    "process" fields of the status page. `session` returns the running SparkSession or None; the
    probe never starts one.
    """

    def __init__(self, bridge: BridgeView, host: str, port: int, *,
                 session: Callable[[], Any] = lambda: None, access: Access | None = None,
                 tls: ssl.SSLContext | None = None, control: ListenerCommands | None = None) -> None:
        self.bridge = bridge
        self.control = control  # the listeners' run-time control (POST /listeners/...), None: no control plane
        self.host = host
        self.requested_port = port
        self.access = access or Access()
        self.tls = tls
        self.probe = SparkProbe(session, max_age=bridge.config.bridge.control_interval)
        self.rates = ListenerRates()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(BridgeMetrics(bridge.counters, bridge.collector.stats, self._health_view))
        self.registry.register(BacklogMetrics(lambda: self.bridge.status().get("backlog") or {}))
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        #: Where a message is (`mqbridge.tracing.where.Locator.locate`, set by the composition root): /messages/<id>.
        self.locate: Callable[[str], dict[str, Any]] | None = None
        #: Deletes landed rows (`mqbridge.maintenance.entries.request_deleter`, set by the composition root):
        #: POST /tables/delete.
        self.delete_entries: EntryDeleter | None = None

    @classmethod
    def for_bridge(cls, bridge: BridgeView, section: MonitoringSection, *,
                   session: Callable[[], Any] = lambda: None,
                   control: ListenerCommands | None = None) -> MonitoringServer | None:
        """The server `[monitoring]` asks for, or None when it is disabled (`listen = ""`).
        ConfigError when its TLS files cannot be used."""
        if not section.enabled:
            return None
        assert section.host is not None and section.port is not None
        return cls(bridge, section.host, section.port, session=session, access=Access.from_section(section),
                   tls=server_context(section, bridge.config.resolve_path), control=control)

    def on_tick(self, bridge: BridgeView) -> None:
        self.rates.update(bridge)

    def status_fields(self) -> dict[str, Any]:
        return {"spark": self.probe.status(), "process": process_info()}

    @property
    def port(self) -> int:
        """The bound port (the real one when 0 was configured)."""
        return self._server.server_port if self._server is not None else self.requested_port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    def bind(self) -> None:
        """Bind the configured address (before the bridge starts, so a taken port fails fast).
        Raises BridgeError naming the address when it cannot be bound."""
        if self._server is not None:
            return
        try:
            family, _, _, _, address = socket.getaddrinfo(self.host, self.requested_port,
                                                          type=socket.SOCK_STREAM)[0]
            server_class = type("_BoundServer", (_Server,), {"address_family": family})
            self._server = server_class(address, _Handler)
            if self.tls is not None:
                self._server.socket = self.tls.wrap_socket(self._server.socket, server_side=True,
                                                           do_handshake_on_connect=False)
        except OSError as exc:
            raise BridgeError(f"monitoring: cannot listen on {self.url} ([monitoring] listen): {exc}") from exc
        self._server.monitor = self

    def start(self) -> None:
        """Serve from the thread "monitoring-http" (binding first if `bind` was not called)."""
        self.bind()
        assert self._server is not None
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.5},
                                        name="monitoring-http", daemon=True)
        self._thread.start()
        guarded = ("" if self.access.token is None else
                   "; /metrics and /healthz open, the rest needs the token" if self.access.public
                   else "; every path needs the token")
        log.info("monitoring: serving /metrics, /status and /healthz on %s%s%s", self.url,
                 " (client certificate required)" if self.tls is not None and self.tls.verify_mode == ssl.CERT_REQUIRED
                 else "", guarded)

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._server is None:
            return
        if self._thread is not None:  # shutdown() would wait forever for a loop never started
            self._server.shutdown()  # returns once serve_forever has left its loop
            self._thread.join(5)
            self._thread = None
        self._server.server_close()
        self._server = None
        log.info("monitoring: stopped")

    # -- documents -----------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """The /status document."""
        doc = self.bridge.status()
        counters = self.bridge.counters
        generations = (doc.get("plugins") or {}).get("listeners") or {}  # mqbridge.plugins.pinning
        for entry in doc["listeners"]:
            label = f"{entry['source']}:{entry['queue']}"
            entry["listener_committed_per_second"] = self.rates.rates.get(label)
            entry["listener_messages"] = {name: counters.total(name, listener=label) for name in LISTENER_COUNTS}
            if label in generations:
                entry["plugin_generation"] = generations[label]["generation"]
                entry["plugins"] = generations[label]["plugins"]  # follow, pinned, "up to N"
                entry["plugins_canary"] = generations[label]["canary"]
        doc["version"] = __version__
        doc["spark"]["master"] = self.bridge.config.spark.shown
        doc["spark"]["mode"] = self.bridge.config.spark.mode
        doc["collector_limits"] = {"memory": self.bridge.config.collector.memory}
        # Summed over every listener (a listener's threads share its counts, so the rows of
        # "listeners" must not be added up): the status page's chart derives committed/s from these.
        doc["totals"] = {name: counters.total(name) for name in LISTENER_COUNTS}
        doc["recent_backout_moves"] = counters.events("backout_moves")
        problems = health_problems(doc)
        doc["health"] = {"healthy": not problems, "problems": problems}
        return doc

    def problems(self) -> list[str]:
        """What /healthz reports; empty when healthy."""
        status = self.bridge.status()
        return health_problems(status)

    def _health_view(self) -> dict[str, Any]:
        status = self.bridge.status()
        return {"healthy": not health_problems(status), "spark_reachable": status["spark"]["reachable"],
                "sinks": {name: bool(s.get("available")) for name, s in (status.get("sinks") or {}).items()}}
