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
from tests.integration.test_monitoring import config, free_port
from tests.support.amq import AmqClient, unique_queue
from tests.support.bridge import listener_toml, wait_for
from tests.support.prometheus import ALERTS, DASHBOARD, prometheus, tool

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
    exprs = [target["expr"] for panel in doc["panels"] for target in panel["targets"]]
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
    cfg = config(tmp_path, JSON_TYPE + listener_toml(q, "orders", batch=50), listen=f"127.0.0.1:{port}",
                 bridge='max_rss = "8GB"')
    stop = threading.Event()
    runner = threading.Thread(target=run_bridge, args=(cfg,), kwargs={"stop_event": stop}, name="test-prom-bridge")
    runner.start()
    try:
        # When a real Prometheus scrapes it with the shipped rules
        with prometheus(tmp_path / "prometheus", [f"127.0.0.1:{port}"], [ALERTS]) as prom:
            wait_for(lambda: [r["value"][1] for r in prom.query('sum(mqbridge_messages_committed_total{job="mqbridge"})')]
                     == ["100"], 180, "100 commits seen by Prometheus")
            # Then every metric the dashboard queries is there
            missing = [name for name in sorted(dashboard_metrics() - NOT_YET) if not prom.query(f"count({name})")]
            assert missing == [], f"the dashboard queries metrics the bridge does not export: {missing}"
            # and every rule is loaded and evaluates without error
            groups = prom.api("rules")["groups"]
            rules = [rule for group in groups for rule in group["rules"]]
            assert len(rules) == 9 and all(rule["health"] == "ok" for rule in rules), rules
            # and a message moved to the backout queue fires the alert that watches for it
            amq.put_many(q, [b"{broken"])
            wait_for(lambda: any(a["labels"]["alertname"] == "MqbridgeBackoutQueueGrowing"
                                 for a in prom.api("alerts")["alerts"]), 60, "the backout alert")
    finally:
        stop.set()
        runner.join(120)
