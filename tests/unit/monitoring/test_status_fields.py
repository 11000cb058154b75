"""The /status fields the status page reads for its header, its Spark and memory table and its
chart (version, Spark mode and where, message totals), and the page's own promises that need no
browser: no external asset, the links, the chart's elements. The page drawn in a real browser is
tests/integration/test_status_page.py."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import mqbridge
from mqbridge.app import build_app
from mqbridge.config import parse_config
from mqbridge.monitoring.page import HISTORY_SECONDS, PAGE
from mqbridge.monitoring.server import MonitoringServer
from tests.support.configs import orders

LABEL = "amq:/queue/orders"


def monitor(tmp_path: Path, spark: dict[str, Any] | None = None) -> MonitoringServer:
    toml = orders().set("monitoring", listen="127.0.0.1:0")
    if spark:
        toml = toml.set("spark", **spark)
    server = build_app(parse_config(toml.text(), str(tmp_path / "b.toml")), executors={}).monitor
    assert server is not None
    return server


def test_status_names_the_version_the_process_uptime_and_its_memory(tmp_path: Path) -> None:
    status = monitor(tmp_path).status()
    assert status["version"] == mqbridge.__version__
    assert status["process"]["uptime_seconds"] >= 0 and status["process"]["rss_bytes"] > 1_000_000
    assert status["collector"]["bytes"] == 0 and status["collector_limits"]["memory"] == 256 * 1024 * 1024


@pytest.mark.parametrize(("spark", "mode", "shown"), [
    ({}, "local", "local[*]"),
    ({"master": "local[2]"}, "local", "local[2]"),
    ({"master": "spark://spark-master:7077"}, "cluster", "spark://spark-master:7077"),
    ({"master": "yarn"}, "cluster", "yarn"),
    ({"remote": "sc://spark.example:15002/;user_id=bridge;token=s3cret"}, "connect",
     "sc://spark.example:15002/;user_id=bridge;token=***"),
])
def test_status_says_how_spark_is_reached_and_never_shows_the_connect_token(
        tmp_path: Path, spark: dict[str, Any], mode: str, shown: str) -> None:
    status = monitor(tmp_path, spark).status()
    assert (status["spark"]["mode"], status["spark"]["master"]) == (mode, shown)
    assert "s3cret" not in str(status)


def test_status_totals_add_up_every_listener_once(tmp_path: Path) -> None:
    # Given a bridge whose one listener committed 7 and moved 1 to its backout queue, and another
    # listener's 5 commits
    server = monitor(tmp_path)
    counters = server.bridge.counters
    counters.inc("messages_committed", 7, listener=LABEL, queue="/queue/orders")
    counters.inc("messages_moved_to_backout", 1, listener=LABEL, queue="/queue/orders")
    counters.inc("messages_committed", 5, listener="amq:/queue/other", queue="/queue/other")
    # Then /status has the sums the page's chart reads: not one per listener thread
    totals = server.status()["totals"]
    assert totals["messages_committed"] == 12 and totals["messages_moved_to_backout"] == 1
    assert totals["messages_received"] == 0


def test_the_page_loads_nothing_from_elsewhere_and_links_the_raw_endpoints() -> None:
    markup = PAGE.split("<script>")[0]
    assert "http" not in markup.lower() and "src=" not in markup
    # relative links: they work behind a reverse proxy's path prefix too
    assert re.findall(r'<a href="([a-z]+)">', markup) == ["status", "metrics", "healthz"]
    for element in ('id="version"', 'id="uptime"', 'id="chart-rate"', 'id="chart-backlog"', '<table id="spark">'):
        assert element in markup
    assert f"const HISTORY = {HISTORY_SECONDS};" in PAGE and "__" not in PAGE  # every placeholder filled
