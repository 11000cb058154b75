"""Monitoring without a broker: Prometheus rendering, health rules, the Spark probe's cache,
the HTTP server's binding and routes, and `mqbridge status` rendering."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from mqbridge.app import build_app
from mqbridge.bulks.collector import CollectorStats
from mqbridge.config import parse_config
from mqbridge.counters import Counters
from mqbridge.monitoring.health import SparkProbe, health_problems
from mqbridge.monitoring.metrics import BridgeMetrics
from mqbridge.monitoring.server import MonitoringServer
from mqbridge.monitoring.status_client import run_status, url_from_config
from tests.support.configs import orders_config
from tests.support.http import fetch

CONFIG = orders_config('[monitoring]\nlisten = "{listen}"', "backout_threshold = 0")


def scrape(collector: BridgeMetrics) -> dict[str, Any]:
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {"text": text, "samples": {(s.name, tuple(sorted(s.labels.items()))): s.value
                                      for f in text_string_to_metric_families(text) for s in f.samples}}


def test_counters_render_with_prefix_total_labels_and_cumulative_buckets() -> None:
    # Given counters as the listener threads and the control thread write them
    c = Counters()
    c.inc("messages_committed", 10, listener="amq:/queue/a", queue="/queue/a")
    c.inc("messages_committed", 5, listener="amq:/queue/b", queue="/queue/b")
    c.inc("plugin_reloads")
    c.set("listener_threads_configured", 3)
    c.set("memory_guard_paused", 1)
    for value in (0.01, 0.05, 0.3, 1000.0):
        c.observe("put_to_commit_seconds", value, listener="amq:/queue/a", queue="/queue/a")

    # When scraped
    out = scrape(BridgeMetrics(c))
    samples, a = out["samples"], (("listener", "amq:/queue/a"), ("queue", "/queue/a"))

    def le(bound: str) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((*a, ("le", bound))))

    # Then counters carry _total and their labels, gauges their value
    assert samples[("mqbridge_messages_committed_total", a)] == 10
    assert samples[("mqbridge_messages_committed_total", (("listener", "amq:/queue/b"), ("queue", "/queue/b")))] == 5
    assert samples[("mqbridge_plugin_reloads_total", ())] == 1
    assert samples[("mqbridge_listener_threads_configured", ())] == 3
    assert samples[("mqbridge_memory_guard_paused", ())] == 1
    assert "# TYPE mqbridge_messages_committed_total counter" in out["text"]
    assert "# HELP mqbridge_messages_committed_total Messages removed from the source" in out["text"]
    # and the histogram has cumulative buckets: 0.05 is in le=0.05 (upper bound inclusive)
    assert "# TYPE mqbridge_put_to_commit_seconds histogram" in out["text"]
    assert samples[("mqbridge_put_to_commit_seconds_bucket", le("0.05"))] == 2
    assert samples[("mqbridge_put_to_commit_seconds_bucket", le("0.5"))] == 3
    assert samples[("mqbridge_put_to_commit_seconds_bucket", le("300.0"))] == 3
    assert samples[("mqbridge_put_to_commit_seconds_bucket", le("+Inf"))] == 4
    assert samples[("mqbridge_put_to_commit_seconds_count", a)] == 4
    assert samples[("mqbridge_put_to_commit_seconds_sum", a)] == pytest.approx(1000.36)


def test_observe_many_records_every_sample_once_and_nothing_for_none() -> None:
    c = Counters()
    c.observe_many("lat", [], queue="/queue/a")
    assert c.histogram("lat") is None  # no empty series
    c.observe_many("lat", [0.07, 0.3, 2.0], queue="/queue/a")
    c.observe("lat", 0.3, queue="/queue/b")
    both, one = c.histogram("lat"), c.histogram("lat", queue="/queue/a")
    assert both is not None and one is not None
    assert (both.count, one.count, one.total) == (4, 3, pytest.approx(2.37))
    bounds = one.buckets
    assert [one.counts[bounds.index(b)] for b in (0.1, 0.5, 2.0)] == [1, 1, 1]  # 2.0 is in the bucket le=2.0
    assert both.quantile(0.5) == 0.3


def test_series_with_different_label_sets_share_one_family() -> None:
    c = Counters()
    c.inc("plugin_load_errors", plugin="redact")
    c.inc("plugin_load_errors")
    samples = scrape(BridgeMetrics(c))["samples"]
    assert samples[("mqbridge_plugin_load_errors_total", (("plugin", "redact"),))] == 1
    assert samples[("mqbridge_plugin_load_errors_total", (("plugin", ""),))] == 1


def test_collector_stats_health_and_process_metrics() -> None:
    stats = CollectorStats(bytes=2048, messages=3, active_bulks=2, flushed={"size": 4, "timeout": 1},
                           executed_bulks=5, executed_messages=900, execute_seconds_total=2.5)
    metrics = BridgeMetrics(Counters(), lambda: stats, lambda: {"healthy": False, "spark_reachable": True})
    samples = scrape(metrics)["samples"]
    assert samples[("mqbridge_bulks_flushed_total", (("reason", "size"),))] == 4
    assert samples[("mqbridge_bulks_flushed_total", (("reason", "memory"),))] == 0  # every reason, always
    assert samples[("mqbridge_bulk_rows_total", ())] == 900
    assert samples[("mqbridge_bulks_written_total", ())] == 5
    assert samples[("mqbridge_spark_write_seconds_total", ())] == 2.5
    assert samples[("mqbridge_collector_bytes", ())] == 2048
    assert samples[("mqbridge_collector_active_bulks", ())] == 2
    assert samples[("mqbridge_healthy", ())] == 0 and samples[("mqbridge_spark_reachable", ())] == 1
    assert samples[("mqbridge_process_resident_memory_bytes", ())] > 1e6
    assert samples[("mqbridge_process_threads", ())] >= 1
    assert samples[("mqbridge_process_cpu_seconds_total", ())] > 0
    assert ("mqbridge_process_open_files", ()) in samples and ("mqbridge_process_connections", ()) in samples


def _listener(name: str, *, alive: bool = True, phase: str = "receiving", error: str = "") -> dict[str, Any]:
    return {"name": name, "alive": alive, "phase": phase, "last_error": error}


def test_health_needs_every_listener_connected_and_spark_reachable() -> None:
    ok = {"listeners": [_listener("amq:/q#1"), _listener("amq:/q#2", phase="processing"),
                        _listener("amq:/q#3", phase="paused")], "spark": {"reachable": True}}
    assert health_problems(ok) == []
    assert health_problems({**ok, "spark": {"reachable": None}}) == []  # no Spark session to check
    bad = {"listeners": [_listener("amq:/q#1", alive=False, phase="restarting", error="SourceConnectionError: cut"),
                         _listener("amq:/q#2", phase="connecting")],
           "spark": {"reachable": False, "error": "Py4JNetworkError: gone"}}
    assert health_problems(bad) == [
        "listener amq:/q#1: not running, restarting (last error: SourceConnectionError: cut)",
        "listener amq:/q#2: not connected, connecting",
        "spark: not reachable: Py4JNetworkError: gone",
    ]
    assert health_problems({"listeners": []}) == ["no listener threads started"]
    assert health_problems({**ok, "stopping": True, "fatal": "bad type"}) == ["fatal: bad type", "bridge is stopping"]


def test_spark_probe_caches_for_max_age() -> None:
    now, pings, fail = [0.0], [], [False]

    def ping(session: object) -> None:
        pings.append(session)
        if fail[0]:
            raise ConnectionRefusedError("gateway gone\nmore lines")

    probe = SparkProbe(lambda: "session", 5.0, ping=ping, clock=lambda: now[0])
    assert probe.check() is True and probe.check() is True and len(pings) == 1
    fail[0] = True
    now[0] = 4.9
    assert probe.check() is True and len(pings) == 1  # cached
    now[0] = 5.0
    assert probe.check() is False and len(pings) == 2
    assert probe.status()["error"] == "ConnectionRefusedError: gateway gone"
    assert SparkProbe(lambda: None, 5.0, ping=ping).check() is None


def test_spark_probe_pings_a_session_the_moment_it_exists() -> None:
    # Given a probe asked while the bridge's Spark session is still starting
    now, sessions = [0.0], [None]
    probe = SparkProbe(lambda: sessions[0], 30.0, ping=lambda _session: None, clock=lambda: now[0])
    assert probe.check() is None
    # When the session exists a moment later (well within max_age)
    sessions[0] = "session"
    now[0] = 1.0
    # Then the next look pings it instead of reporting the cached "not checked"
    assert probe.check() is True


@pytest.fixture
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MonitoringServer]:
    listen = getattr(request, "param", "127.0.0.1:0")
    cfg = parse_config(CONFIG.replace("{listen}", listen), str(tmp_path / "b.toml"))
    monitor = build_app(cfg, executors={}).monitor
    assert monitor is not None
    monitor.start()
    yield monitor
    monitor.stop()


def test_server_serves_metrics_status_and_an_unhealthy_healthz_before_listeners_start(server: MonitoringServer) -> None:
    assert server.port != 0 and server.url == f"http://127.0.0.1:{server.port}"
    code, content_type, text = fetch(server.url + "/metrics")
    assert code == 200 and content_type.startswith("text/plain; version=")
    assert "mqbridge_listener_threads_configured" not in text and "mqbridge_memory_guard_paused 0.0" in text
    code, content_type, text = fetch(server.url + "/status")
    status = json.loads(text)
    assert code == 200 and content_type == "application/json"
    assert {"listeners", "collector", "spark", "guard", "process", "health"} <= set(status)
    assert status["health"] == {"healthy": False, "problems": ["no listener threads started"]}
    assert fetch(server.url + "/healthz")[:3:2] == (503, "no listener threads started\n")
    assert fetch(server.url + "/nothing")[0] == 404


@pytest.mark.parametrize("server", ["[::1]:0"], indirect=True)
def test_server_binds_ipv6_loopback(server: MonitoringServer) -> None:
    assert server.url.startswith("http://[::1]:")
    assert fetch(server.url + "/healthz")[0] == 503


def test_stop_closes_the_socket_and_a_taken_port_fails_clearly(server: MonitoringServer, tmp_path: Path) -> None:
    cfg = parse_config(CONFIG.replace("{listen}", f"127.0.0.1:{server.port}"), str(tmp_path / "c.toml"))
    other = build_app(cfg, executors={}).monitor
    assert other is not None
    with pytest.raises(Exception, match=rf"monitoring: cannot listen on http://127.0.0.1:{server.port}"):
        other.bind()
    other.stop()  # never served: returns at once
    port = server.port
    server.stop()
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0


def test_disabled_monitoring_gives_no_server(tmp_path: Path) -> None:
    cfg = parse_config(CONFIG.replace("{listen}", ""), str(tmp_path / "b.toml"))
    assert build_app(cfg, executors={}).monitor is None


def test_status_command_url_from_config_and_unreachable_message(tmp_path: Path) -> None:
    def url(listen: str) -> str:
        return url_from_config(parse_config(CONFIG.replace("{listen}", listen), str(tmp_path / "b.toml")))

    assert url("127.0.0.1:9464") == "http://127.0.0.1:9464"
    assert url("0.0.0.0:9000") == "http://127.0.0.1:9000"
    assert url("[::]:9000") == "http://[::1]:9000"
    with pytest.raises(Exception, match="monitoring is disabled"):
        url("")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    code, text = run_status(f"http://127.0.0.1:{free}")
    assert code == 3
    assert text.startswith(f"mqbridge status: no bridge answers at http://127.0.0.1:{free}/status:")
    assert "\n" not in text


def test_status_command_renders_an_unhealthy_bridge(server: MonitoringServer) -> None:
    code, text = run_status(server.url)
    assert code == 1
    assert text.splitlines()[0] == f"mqbridge mqbridge at {server.url}: UNHEALTHY"
    assert "  ! no listener threads started" in text
    for heading in ("LISTENER THREAD", "collector ", "spark ", "memory     guard off", "process    pid"):
        assert heading in text


def test_every_counter_name_the_code_uses_has_a_help_text() -> None:
    # Each name passed to Counters.inc/set/observe/observe_many anywhere in the package renders
    # with its own help text on /metrics (a missing one would fall back to the bare name)
    import re
    from pathlib import Path

    import mqbridge
    from mqbridge.monitoring.metrics import HELP

    root = Path(mqbridge.__file__).parent
    used = {name for path in root.rglob("*.py")
            for name in re.findall(r"(?:counters|\bc)\.(?:inc|set|observe|observe_many)\(\s*\"([a-z_]+)\"",
                                     path.read_text())}
    assert len(used) > 30, used
    assert sorted(used - set(HELP)) == []


def test_status_command_shows_the_results_sent_to_producers_per_queue() -> None:
    from mqbridge.monitoring.status_client import render

    listener = {"name": "amq:/queue/orders#1", "source": "amq", "queue": "/queue/orders", "alive": True,
                "listener_messages": {"messages_committed": 10, "results_sent": 7, "results_failed": 1}}
    status = {"name": "b", "listeners": [listener, {**listener, "name": "amq:/queue/orders#2"},
                                         {**listener, "queue": "/queue/quiet", "listener_messages": {}}]}
    text = render("http://127.0.0.1:1", status, True, "")
    assert [line for line in text.splitlines() if line.startswith("results")] == [
        "results to producers, amq:/queue/orders: 7 sent, 1 failed, 0 rerouted"]


def test_a_client_that_hangs_up_before_the_answer_is_no_error(server: MonitoringServer,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    # Given a /status that takes a moment, and a client that asks and hangs up at once (a reset)
    answered = threading.Event()
    status = server.status

    def slow_status() -> dict[str, Any]:
        time.sleep(0.3)
        try:
            return status()
        finally:
            answered.set()

    monkeypatch.setattr(server, "status", slow_status)
    with socket.create_connection(("127.0.0.1", server.port)) as client:
        client.sendall(b"GET /status HTTP/1.1\r\nHost: x\r\n\r\n")
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    # When the server answers into the closed connection
    assert answered.wait(5)
    time.sleep(0.3)
    # Then nothing is logged as an error, and the server still answers the next client
    assert [r for r in caplog.records if r.levelname == "ERROR"] == []
    assert fetch(server.url + "/healthz")[0] == 503
