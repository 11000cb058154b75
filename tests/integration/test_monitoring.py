"""The monitoring endpoint, `mqbridge status`, the memory guard and the log, on the real parts:
ActiveMQ (STOMP) and a local Spark."""

from __future__ import annotations

import ipaddress
import json
import logging
import socket
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from mqbridge.app import build_app, run_bridge
from mqbridge.cli import main
from mqbridge.config import MonitoringSection
from mqbridge.logsetup import setup_from_config
from mqbridge.monitoring.server import MonitoringServer
from tests.support.amq import AmqClient, unique_queue
from tests.support.bridge import RunningBridge, listener_toml, make_config
from tests.support.exactly_once import free_port
from tests.support.http import get
from tests.support.tcpproxy import TcpProxy
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

TYPE = """
[types.orders]
bulk_size = "1MB"
bulk_timeout = "1s"
"""


def metrics(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    code, text = get(url + "/metrics")
    if code == 0:
        raise ConnectionRefusedError(f"nothing answers at {url}")  # not listening (yet)
    assert code == 200
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def total(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str) -> float:
    return sum(v for (n, _), v in samples.items() if n == name)


def test_run_bridge_serves_metrics_that_follow_the_work(tmp_path: Path, spark: Any, amq: AmqClient) -> None:
    # Given 300 messages and a bridge started the way the CLI and the services start it
    q = unique_queue("mon")
    amq.put_many(q, [f"m{i}".encode() for i in range(300)])
    port = free_port()
    # (Spark writes the bulks: a bridge whose bulks pyarrow writes starts no Spark, and shows none)
    cfg = make_config(tmp_path, TYPE + listener_toml(q, "orders", threads=2, batch=50),
                      listen=f"127.0.0.1:{port}", tables={"spark": {"writer": "spark"}})
    stop = threading.Event()
    result: list[int] = []
    runner = threading.Thread(target=lambda: result.append(run_bridge(cfg, stop_event=stop)), name="test-run-bridge")
    runner.start()
    url = f"http://127.0.0.1:{port}"
    try:
        # When the bridge has committed everything
        def committed() -> bool:
            try:
                return total(metrics(url), "mqbridge_messages_committed_total") == 300
            except OSError:
                return False  # not listening yet

        wait_until(committed, 180, "300 commits on /metrics")
        # Then /metrics shows the work: received == committed == sent, per listener and queue
        samples = metrics(url)
        labels = (("listener", f"amq:{q}"), ("queue", q))
        assert samples[("mqbridge_messages_received_total", labels)] == 300
        assert samples[("mqbridge_messages_committed_total", labels)] == 300
        assert samples[("mqbridge_listener_threads_configured", ())] == 2
        assert samples[("mqbridge_listener_threads_actual", ())] == 2
        assert samples[("mqbridge_listener_threads_created_total", (("listener", f"amq:{q}"),))] == 2
        assert total(samples, "mqbridge_bulk_rows_total") == 300
        assert total(samples, "mqbridge_bulks_flushed_total") >= 1
        assert samples[("mqbridge_spark_write_seconds_total", ())] > 0
        assert samples[("mqbridge_put_to_commit_seconds_count", labels)] == 300
        assert samples[("mqbridge_put_to_commit_seconds_bucket", tuple(sorted((*labels, ("le", "+Inf")))))] == 300
        # from the listener's receipt: every committed message, never longer than from its put
        assert samples[("mqbridge_receipt_to_commit_seconds_count", labels)] == 300
        assert (samples[("mqbridge_receipt_to_commit_seconds_sum", labels)]
                <= samples[("mqbridge_put_to_commit_seconds_sum", labels)])
        assert samples[("mqbridge_process_resident_memory_bytes", ())] > 10e6
        assert samples[("mqbridge_spark_reachable", ())] == 1
        wait_until(lambda: get(url + "/healthz")[0] == 200, 30, "healthy")
        status = json.loads(get(url + "/status")[1])
        assert status["spark"]["reachable"] is True and status["health"]["healthy"] is True
        assert [entry["listener_messages"]["messages_committed"] for entry in status["listeners"]] == [300, 300]
    finally:
        stop.set()
        runner.join(120)
    # And the server stops with the bridge
    assert result == [0]
    with pytest.raises(OSError):
        urllib.request.urlopen(url + "/healthz", timeout=2)


def test_healthz_is_503_while_a_listener_is_cut_off_and_200_after_the_restart(
        tmp_path: Path, monitored: Any, capsys: pytest.CaptureFixture[str]) -> None:
    # Given a healthy bridge that reaches the broker through a proxy
    proxy = TcpProxy(("127.0.0.1", 61613))
    try:
        cfg = make_config(tmp_path, TYPE + listener_toml(unique_queue("health"), "orders", threads=2),
                          port=proxy.port)
        bridge, monitor = monitored(cfg)
        wait_until(lambda: get(monitor.url + "/healthz") == (200, "ok\n"), 60, "healthy")
        # `mqbridge status` says so: exit 0 and a table
        assert main(["status", "--url", monitor.url]) == 0
        out = capsys.readouterr().out
        assert out.splitlines()[0] == f"mqbridge test at {monitor.url}: HEALTHY"
        assert "LISTENER THREAD" in out and "spark      reachable (local[2])" in out
        assert out.count("receiving") == 2 or "processing" in out

        # When the connections are cut and the broker cannot be reached for a while
        with socket.socket() as dead:
            dead.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
            proxy.target = dead.getsockname()
            assert proxy.cut() >= 1
            # Then /healthz answers 503 and names the listener
            wait_until(lambda: get(monitor.url + "/healthz")[0] == 503, 30, "unhealthy")
            code, body = get(monitor.url + "/healthz")
            assert code == 503 and "listener amq:" in body, body
            assert main(["status", "--url", monitor.url]) == 1
            out = capsys.readouterr().out
            assert ": UNHEALTHY" in out.splitlines()[0] and "  ! listener amq:" in out
        # And once the broker is reachable again, the restarted listeners make it 200 again
        proxy.target = ("127.0.0.1", 61613)
        wait_until(lambda: get(monitor.url + "/healthz") == (200, "ok\n"), 60, "healthy after the restart")
        assert bridge.counters.total("listener_restarts") >= 1
        assert total(metrics(monitor.url), "mqbridge_listener_restarts_total") >= 1
    finally:
        proxy.close()


def test_status_command_against_nothing_fails_with_one_clear_line(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    assert main(["status", "--url", f"http://127.0.0.1:{port}"]) == 3
    err = capsys.readouterr().err
    assert err.startswith(f"mqbridge status: no bridge answers at http://127.0.0.1:{port}/status:")
    assert err.count("\n") == 1
    # --config finds the address in [monitoring] listen
    make_config(tmp_path, TYPE + listener_toml("/queue/x", "orders"), listen=f"127.0.0.1:{port}")
    assert main(["status", "--config", str(tmp_path / "bridge.toml")]) == 3
    assert f"http://127.0.0.1:{port}/status" in capsys.readouterr().err


def _non_loopback_addresses() -> list[str]:
    found = []
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family in (socket.AF_INET, socket.AF_INET6):
                ip = ipaddress.ip_address(address.address.split("%")[0])
                if not ip.is_loopback and not ip.is_link_local:
                    found.append(str(ip))
    return found


def test_the_default_address_is_not_reachable_from_other_interfaces(tmp_path: Path) -> None:
    # Given the default listen address (on a free port, so it does not collide with a real bridge)
    default = MonitoringSection()
    assert default.listen == "127.0.0.1:9464"
    # Every address of this machine but the bound one: its other interfaces, and another loopback
    # address (127.0.0.2 is on `lo` on Linux), so the check never depends on the network set-up
    addresses = [*_non_loopback_addresses(), "127.0.0.2"]
    cfg = make_config(tmp_path, TYPE + listener_toml("/queue/x", "orders"))
    monitor = MonitoringServer(build_app(cfg, executors={}).bridge, str(default.host), 0)
    monitor.start()
    try:
        # Then it answers on loopback and nowhere else
        assert get(monitor.url + "/healthz")[0] == 503  # nothing started: an answer all the same
        for address in addresses:
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            with socket.socket(family) as probe:
                probe.settimeout(3)
                assert probe.connect_ex((address, monitor.port)) != 0, f"reachable on {address}"
    finally:
        monitor.stop()


def test_memory_guard_pauses_intake_and_resumes_when_the_limit_is_raised(
        tmp_path: Path, monitored: Any, amq: AmqClient) -> None:
    # Given a bridge whose max_rss is far below what any Python process with Spark needs
    q = unique_queue("guard")
    cfg = make_config(tmp_path, TYPE + listener_toml(q, "orders", threads=2, batch=20),
                      bridge={"max_rss": "1MB"})
    bridge, monitor = monitored(cfg)
    # Then the listeners pause, the gauge and the status say so, and the bridge stays healthy
    wait_until(lambda: metrics(monitor.url).get(("mqbridge_memory_guard_paused", ())) == 1, 30, "paused gauge")
    wait_until(lambda: [e["phase"] for e in json.loads(get(monitor.url + "/status")[1])["listeners"]]
               == ["paused", "paused"], 30, "paused listeners")
    status = json.loads(get(monitor.url + "/status")[1])
    assert status["guard"]["paused"] is True and status["guard"]["max_rss"] == 2**20
    assert status["guard"]["rss"] > 2**20
    assert get(monitor.url + "/healthz")[0] == 200
    # and messages put now are not taken while paused
    amq.put_many(q, [f"g{i}".encode() for i in range(50)])
    with pytest.raises(TimeoutError):
        wait_until(lambda: bridge.counters.total("messages_received") > 0, 2, "a receive while paused")

    # When the limit is raised
    bridge.guard.set_limit(1 << 40)
    # Then intake resumes and everything is committed
    wait_until(lambda: bridge.counters.total("messages_committed") == 50, 120, "50 commits after resume")
    samples = metrics(monitor.url)
    assert samples[("mqbridge_memory_guard_paused", ())] == 0
    assert samples[("mqbridge_memory_guard_pauses_total", ())] == 1


def test_source_password_never_appears_in_the_log(tmp_path: Path, spark: Any, amq: AmqClient,
                                                   restore_root_logger: None) -> None:
    # Given a source with a user and password and DEBUG logging in JSON to a file
    secret = "Pa55-never-log-me-7f3a"
    q = unique_queue("secret")
    amq.put_many(q, [b"s1", b"s2", b"s3"])
    log_file = tmp_path / "logs" / "bridge.log"
    cfg = make_config(tmp_path, TYPE + listener_toml(q, "orders") + f"""
[logging]
level = "DEBUG"
format = "json"
file = "{log_file}"
""", source={"user": "bridge", "password": secret, "allow_plaintext_password": True})
    setup_from_config(cfg, force=True)
    # When the bridge runs and also logs its configuration and status in every way it can
    bridge = build_app(cfg, spark=spark).bridge
    running = RunningBridge(bridge, until_idle=1.0)
    log = logging.getLogger("tests.secret")
    log.debug("configuration: %r", cfg)
    log.debug("sources: %s", cfg.sources)
    log.info("a careless plugin logs %s", cfg.sources["amq"].password.get_secret_value())
    assert running.wait() == 0
    log.debug("status: %s", bridge.status())
    for handler in logging.getLogger().handlers:
        handler.flush()
    # Then the log is JSON lines with the bridge's work in it, and the password is nowhere
    text = log_file.read_text()
    lines = [json.loads(line) for line in text.splitlines()]
    assert any("connected to 127.0.0.1:61613" in entry["message"] for entry in lines)
    assert any(entry["message"] == "a careless plugin logs ***" for entry in lines)
    assert secret not in text
    assert bridge.counters.total("messages_committed") == 3
