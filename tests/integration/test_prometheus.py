"""The shipped alert rules and Grafana dashboard against the real Prometheus (Debian's `prometheus`
and `promtool`): the rules pass `promtool check rules` and their unit tests, and a Prometheus
scraping a running bridge loads them and finds every metric the dashboard queries."""

from __future__ import annotations

import json
import re
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from mqbridge.app import run_bridge
from mqbridge.config import parse_config
from tests.support.amq import AmqClient, unique_queue
from tests.support.bridge import listener_toml, make_config
from tests.support.exactly_once import free_port
from tests.support.prometheus import ALERTS, DASHBOARD, prometheus, tool
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

#: Dashboard metrics of a feature being merged (the sink circuit breaker); emptied when it lands.
NOT_YET: set[str] = set()

JSON_TYPE = """
[types.orders]
format = "json"
schema = "order_id STRING"
bulk_size = "1MB"
bulk_timeout = "500ms"
"""


def dashboard_metrics() -> set[str]:
    """Every metric name a panel of the dashboard queries."""
    doc = json.loads(DASHBOARD.read_text())
    exprs = [target["expr"] for panel in doc["panels"] for target in panel.get("targets", [])]  # rows have none
    names = {name for expr in exprs for name in re.findall(r"\bmqbridge_[a-z_]+", expr)}
    assert len(names) >= 15, names
    return names


def test_alert_rules_pass_promtool_and_their_unit_tests() -> None:
    check = subprocess.run([tool("promtool"), "check", "rules", str(ALERTS)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    tests = subprocess.run([tool("promtool"), "test", "rules", str(ALERTS.with_name("alerts_test.yml"))],
                           capture_output=True, text=True)
    assert tests.returncode == 0 and "SUCCESS" in tests.stdout, tests.stdout + tests.stderr


def test_a_real_prometheus_scrapes_a_bridge_and_finds_every_dashboard_metric(tmp_path: Path, spark: Any,
                                                                            amq: AmqClient) -> None:
    # Given a running bridge (a memory guard and the ledger on) that landed messages
    q = unique_queue("prom")
    amq.put_many(q, [json.dumps({"order_id": f"o{i}"}).encode() for i in range(100)])
    port = free_port()
    cfg = make_config(tmp_path, JSON_TYPE + listener_toml(q, "orders", batch=50), listen=f"127.0.0.1:{port}",
                      bridge={"max_rss": "8GB"})
    stop = threading.Event()
    runner = threading.Thread(target=run_bridge, args=(cfg,), kwargs={"stop_event": stop}, name="test-prom-bridge")
    runner.start()
    try:
        # When a real Prometheus scrapes it with the shipped rules
        with prometheus(tmp_path / "prometheus", [f"127.0.0.1:{port}"], [ALERTS]) as prom:
            committed = 'sum(mqbridge_messages_committed_total{job="mqbridge"})'
            wait_until(lambda: [r["value"][1] for r in prom.query(committed)] == ["100"],
                       180, "100 commits seen by Prometheus")
            # Then every metric the dashboard queries is there
            missing = [name for name in sorted(dashboard_metrics() - NOT_YET) if not prom.query(f"count({name})")]
            assert missing == [], f"the dashboard queries metrics the bridge does not export: {missing}"
            # and every rule is loaded and evaluates without error
            groups = prom.api("rules")["groups"]
            rules = [rule for group in groups for rule in group["rules"]]
            assert len(rules) == 16 and all(rule["health"] == "ok" for rule in rules), rules
            # and a message moved to the backout queue fires the alert that watches for it
            amq.put_many(q, [b"{broken"])
            wait_until(lambda: any(a["labels"]["alertname"] == "MqbridgeBackoutQueueGrowing"
                                   for a in prom.api("alerts")["alerts"]), 60, "the backout alert")
    finally:
        stop.set()
        runner.join(120)


def test_a_sink_outage_fires_the_breaker_alert_and_it_resolves(tmp_path: Path, spark: Any, amq: AmqClient) -> None:
    # Given the shipped rules with one change in a test copy: the breaker alert's `for: 1m` is 5s,
    # so that the test does not wait a minute (the expression itself is the shipped one)
    rules = ALERTS.read_text()
    shipped = re.search(r"- alert: MqbridgeSinkUnavailable\n(.*?\n)\s*- alert:", rules, re.S)
    assert shipped is not None and "for: 1m" in shipped.group(1)
    fast = tmp_path / "alerts.yml"
    fast.write_text(rules.replace(shipped.group(1), shipped.group(1).replace("for: 1m", "for: 5s")))
    # ... and a bridge whose table path is blocked (a file where the directory goes)
    q = unique_queue("prom-outage")
    amq.put_many(q, [json.dumps({"order_id": f"o{i}"}).encode() for i in range(20)])
    port = free_port()
    make_config(tmp_path, JSON_TYPE + listener_toml(q, "orders", batch=50), listen=f"127.0.0.1:{port}")
    path = tmp_path / "bridge.toml"
    text = path.read_text().replace("[spark]\n", '[spark]\nprobe_interval_max = "2s"\n', 1)
    path.write_text(text)
    cfg = parse_config(text, str(path))
    (tmp_path / "landing").mkdir(exist_ok=True)
    blocker = tmp_path / "landing" / "orders"
    blocker.write_text("not a directory")
    stop = threading.Event()
    runner = threading.Thread(target=run_bridge, args=(cfg,), kwargs={"stop_event": stop}, name="test-prom-outage")
    runner.start()
    try:
        with prometheus(tmp_path / "prometheus", [f"127.0.0.1:{port}"], [fast]) as prom:
            # When the sink is unavailable: the breaker alert fires, naming the sink
            def breaker_alert() -> list[dict[str, Any]]:
                return [a for a in prom.api("alerts")["alerts"]
                        if a["labels"]["alertname"] == "MqbridgeSinkUnavailable"]

            wait_until(lambda: any(a["state"] == "firing" for a in breaker_alert()), 120, "the breaker alert to fire")
            [alert] = breaker_alert()
            assert alert["labels"]["type"] == "orders"
            # Then, the path fixed, the sink is available again and the alert resolves
            blocker.unlink()
            wait_until(lambda: [r["value"][1] for r in prom.query('mqbridge_sink_available{type="orders"}')] == ["1"],
                       120, "mqbridge_sink_available back to 1")
            wait_until(lambda: breaker_alert() == [], 60, "the breaker alert to resolve")
            committed = 'sum(mqbridge_messages_committed_total{job="mqbridge"})'
            wait_until(lambda: [r["value"][1] for r in prom.query(committed)] == ["20"],
                       120, "the 20 messages committed")
    finally:
        stop.set()
        runner.join(120)
    assert amq.depth(q) == 0 and amq.depth(q + ".backout") == 0
