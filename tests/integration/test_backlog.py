"""The backlog gauge on a real ActiveMQ with its statistics plugin (a private broker started by
scripts/activemq.sh, which enables the plugin): a paused listener's queue shows the known number of
waiting messages in /status, /metrics and `mqbridge status`; resumed, it drains to 0 and `run
--until-idle` ends with every message landed once. A broker without the plugin shows "unknown"
(never 0) and says once how to enable it."""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mqbridge.app import build_app
from mqbridge.backlog import BacklogPoller, BacklogUnavailable
from mqbridge.backlog.poller import _SourceProbe
from mqbridge.config import StompSourceConfig
from mqbridge.listeners.stomp.backlog import ActiveMqStatistics
from mqbridge.monitoring.server import MonitoringServer
from mqbridge.monitoring.status_client import run_status
from tests.support.amq import AmqClient, unique_queue
from tests.support.bridge import RunningBridge, listener_toml, make_config
from tests.support.exactly_once import PrivateActiveMQ, account, bodies, free_port, private_activemq
from tests.support.http import get
from tests.support.processes import landed
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

N = 40


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateActiveMQ]:
    with private_activemq(tmp_path_factory.mktemp("amq-statistics")) as started:
        yield started


def backlog_of(url: str, label: str) -> Any:
    code, text = get(url + "/status")
    assert code == 200, text
    return (json.loads(text).get("backlog") or {}).get(label, {}).get("messages")


def metric(url: str, line_start: str) -> float | None:
    code, text = get(url + "/metrics")
    assert code == 200
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(line_start)]
    return values[0] if values else None


def test_a_paused_listeners_backlog_is_the_number_waiting_and_drains_to_zero(
        tmp_path: Path, spark: Any, broker: PrivateActiveMQ) -> None:
    queue = unique_queue("backlog")
    label = f"amq:{queue}"
    cfg = make_config(tmp_path, '\n[types.orders]\nbulk_size = "1MB"\nbulk_timeout = "500ms"\n'
                      + listener_toml(queue, "orders"), port=broker.port, bridge={"backlog_interval": "300ms"})
    bridge = build_app(cfg, spark=spark).bridge
    monitor = MonitoringServer(bridge, "127.0.0.1", 0, session=lambda: spark)
    bridge.observers.append(monitor)
    # Given a bridge run until idle, its listener paused as soon as it runs
    bridge.controls.command(label, "pause")
    running = RunningBridge(bridge, until_idle=1.0)
    monitor.start()
    try:
        wait_until(lambda: backlog_of(monitor.url, label) == 0, 60, "the first backlog reading of an empty queue")
        # When N messages are put while it is paused
        sent = bodies(N, "backlog")
        with AmqClient(port=broker.port) as client:
            client.put_many(queue, sent)
        # Then the backlog is N in /status, /metrics and `mqbridge status`, and the run does not end
        wait_until(lambda: backlog_of(monitor.url, label) == N, 30, f"a backlog of {N} in /status")
        assert metric(monitor.url, f'mqbridge_listener_backlog_messages{{listener="{label}"}}') == N
        assert metric(monitor.url, f'mqbridge_listener_backlog_known{{listener="{label}"}}') == 1
        code, text = run_status(monitor.url)
        assert f"backlog {label}: {N} waiting" in text, text
        assert running.thread.is_alive()
        # When it is resumed, Then it drains: the backlog reads 0 and the run ends, every message landed once
        bridge.controls.command(label, "resume")
        assert running.wait(120) == 0
        assert bridge.status()["backlog"][label]["messages"] == 0
        accounting = account(sent, landed(spark, tmp_path / "landing" / "orders"))
        assert accounting.clean, str(accounting)
    finally:
        monitor.stop()
        if running.thread.is_alive():
            running.stop()


def test_a_broker_without_the_statistics_plugin_shows_unknown_and_says_how_to_enable_it_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Given an ActiveMQ started without <statisticsBrokerPlugin/>
    plain = PrivateActiveMQ(tmp_path / "amq-plain", free_port())
    plain.env["MQBRIDGE_AMQ_STATISTICS"] = "off"
    plain.start()
    try:
        probe = ActiveMqStatistics("amq", StompSourceConfig(port=plain.port))
        with pytest.raises(BacklogUnavailable, match="statisticsBrokerPlugin"):
            probe.read(["/queue/anything"], 1.5)
        # When the poller reads it twice
        poller = BacklogPoller([_SourceProbe("amq", probe, {"/queue/anything": ["amq:/queue/anything"]})], 60,
                               timeout=1.5)
        with caplog.at_level(logging.INFO, logger="mqbridge.backlog.poller"):
            poller.poll()
            poller.poll()
        poller.close()
        # Then the backlog is unknown (not 0), and the log said how to enable it once
        assert poller.status_fields()["backlog"]["amq:/queue/anything"]["messages"] is None
        lines = [r.message for r in caplog.records if "backlog of source 'amq' is unknown" in r.message]
        assert len(lines) == 1 and "statisticsBrokerPlugin" in lines[0], caplog.text
    finally:
        plain.stop()
        shutil.rmtree(tmp_path / "amq-plain", ignore_errors=True)
