"""One poison message among 499 good ones, and a plugin version that raises at run time, on the real
parts: ActiveMQ (STOMP, both ack modes) or the IBM MQ adapter on the fake queue manager → bridge with
its plugin host and landing ledger → local Spark. Default thresholds throughout."""

from __future__ import annotations

import collections
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mqbridge.app import build_app
from mqbridge.config import parse_config
from mqbridge.listeners.mq import MqSource
from mqbridge.monitoring.server import MonitoringServer
from mqbridge.plugins.fallback import FALLBACK_AFTER
from mqbridge.source import SourceContext
from mqbridge.supervision.supervisor import Bridge
from tests.support.amq import AmqClient, unique_queue
from tests.support.bridge import RunningBridge, listener_toml, run_until_idle
from tests.support.configs import fake_mq_source
from tests.support.fakes import pymqi_fake
from tests.support.fakes.mq_server import FakeQueueManagerServer
from tests.support.http import get
from tests.support.plugin_bridge import STAMP, Producer, plugin_config, rows_of, types, write_plugin
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

POISON = b"poison"
GOOD = [f"good{i:03d}".encode() for i in range(499)]
BODIES = GOOD[:250] + [POISON] + GOOD[250:]  # the poison message in the middle of one unit of 500

EXPLODE = '''
from mqbridge import hookimpl

__version__ = "1.0"


class Explode:
    def process(self, message):
        if message.body == b"poison":
            raise ValueError("cannot parse this one")
        return message


@hookimpl
def mqbridge_register_preprocessors(registry):
    registry.add("explode", lambda options: Explode())
'''


def assert_neighbours_landed_once(rows: list[Any]) -> None:
    landed = collections.Counter(bytes(r.body) for r in rows)
    assert set(landed) == set(GOOD), f"lost {len(set(GOOD) - set(landed))}, unexpected {set(landed) - set(GOOD)}"
    assert [b for b, n in landed.items() if n > 1] == [], "a neighbour landed twice"
    assert max(r.delivery_count for r in rows) <= 2


# -- STOMP (commits in part): only the culprit goes back ---------------------------------------
@pytest.mark.parametrize("ack_mode", ["cumulative", "individual"])
def test_stomp_one_poison_message_in_a_unit_of_500_reaches_the_backout_queue_alone(
        tmp_path: Path, spark: Any, amq: AmqClient, ack_mode: str) -> None:
    # Given 500 messages, one of which a preprocessor cannot take, read in one unit of 500, with
    # the default backout threshold (3)
    q = unique_queue(f"poison-{ack_mode}")
    amq.put_many(q, BODIES)
    write_plugin(tmp_path, "explode", EXPLODE)
    cfg = plugin_config(tmp_path, types("orders") + listener_toml(q, "orders", batch=500, threshold=None,
                                                                   preprocessors='["explode"]'))
    text = cfg.path.read_text().replace('kind = "stomp"', f'kind = "stomp"\nack_mode = "{ack_mode}"', 1)
    cfg.path.write_text(text)
    cfg = parse_config(text, str(cfg.path))
    app = build_app(cfg, spark=spark)

    # When the bridge runs until idle
    assert run_until_idle(app.bridge) == 0
    app.plugins.close()

    # Then the 499 neighbours landed once, on their first delivery or second at most, and the poison
    # message alone reached the backout queue after 3 deliveries
    assert_neighbours_landed_once(rows_of(spark, tmp_path, "orders"))
    moved = amq.drain(q + ".backout")
    assert [f.body for f in moved] == [POISON]
    assert moved[0].headers["mqbridge-delivery-count"] == "3"
    assert "cannot parse this one" in moved[0].headers["mqbridge-reason"]
    assert amq.depth(q) == 0


# -- IBM MQ (backs out whole units): suspects read one by one -----------------------------------
@pytest.fixture
def qm() -> Iterator[FakeQueueManagerServer]:
    server = FakeQueueManagerServer(dead_letter_queue="SYSTEM.DEAD.LETTER.QUEUE")
    yield server
    assert server.disconnects_with_open_uow == [], "a disconnect committed an open unit of work"
    server.close()


def mq_bridge(tmp_path: Path, spark: Any, qm: FakeQueueManagerServer, listen: str = "",
              preprocessors: str = '["explode"]') -> tuple[Bridge, Any]:
    write_plugin(tmp_path, "explode", EXPLODE)
    body = types("orders") + listener_toml("ORDERS", "orders", source="qm", batch=500, threshold=None,
                                           backout=None, preprocessors=preprocessors)
    cfg = plugin_config(tmp_path, body, tables={"sources.qm": fake_mq_source(qm.name)})

    def factory(context: SourceContext) -> MqSource:
        return MqSource(context.source_name, cfg.sources["qm"], context.listener.queue, listener=context.listener,
                        driver=pymqi_fake, in_doubt=context.shared.in_doubt, poison=context.shared.poison)

    app = build_app(cfg, spark=spark, source_factory=factory)
    return app.bridge, app.plugins


@pytest.mark.parametrize("cause", ["preprocessor", "spark write"])
def test_mq_bothresh_3_one_poison_message_in_a_unit_of_500_reaches_boqname_alone(
        tmp_path: Path, spark: Any, qm: FakeQueueManagerServer, monkeypatch: pytest.MonkeyPatch, cause: str) -> None:
    # Given BOTHRESH 3 / BOQNAME and 500 messages got in one unit of work, one of them poison: a
    # preprocessor raises on it, or it fails Spark's own write (failpoint: assert_true inside the
    # write) while probe writes succeed
    if cause == "spark write":
        monkeypatch.setenv("MQBRIDGE_FAILPOINT", "spark_poison_body:poison")
    qm.define_queue("ORDERS", backout_threshold=3, backout_queue="ORDERS.BOQ")
    qm.define_queue("ORDERS.BOQ")
    qm.put_many("ORDERS", BODIES)
    bridge, plugins = mq_bridge(tmp_path, spark, qm, preprocessors='["explode"]' if cause == "preprocessor" else "[]")

    # When the bridge runs until idle
    assert run_until_idle(bridge) == 0
    plugins.close()

    # Then the 499 landed once (in the first unit, before it was backed out; a failed write was
    # bisected down to the culprit first; their second delivery, one by one, was recognised in the
    # ledger and committed without landing) ...
    assert_neighbours_landed_once(rows_of(spark, tmp_path, "orders"))
    assert bridge.counters.total("messages_deduplicated") == 499
    # ... and only the culprit's BackoutCount reached BOTHRESH: it alone is on BOQNAME
    [moved] = qm.queue("ORDERS.BOQ").visible()
    assert moved.data == POISON and moved.prop("mqbridge_delivery_count") == "4"
    assert qm.queue("ORDERS").depth == 0


def test_mq_bothresh_0_one_poison_message_halts_its_listener_after_the_stated_attempts(
        tmp_path: Path, spark: Any, qm: FakeQueueManagerServer) -> None:
    # Given BOTHRESH 0 (nothing will ever move a message) and the same 500 messages
    qm.define_queue("ORDERS", backout_threshold=0, backout_queue="ORDERS.BOQ")
    qm.define_queue("ORDERS.BOQ")
    qm.put_many("ORDERS", BODIES)
    bridge, plugins = mq_bridge(tmp_path, spark, qm)
    monitor = MonitoringServer(bridge, "127.0.0.1", 0, session=lambda: spark)
    bridge.observers.append(monitor)
    running = RunningBridge(bridge)
    monitor.start()
    try:
        # When the poison message has failed halt_after_failures (default 10) times
        wait_until(lambda: any(s.halted for s in bridge.slots), 120, "the listener to halt")

        # Then /healthz says 503 naming the listener and why, and /status carries the reason
        code, body = get(monitor.url + "/healthz")
        assert code == 503 and "qm:ORDERS#1: not running, halted" in body and "failed 10 times" in body
        code, body = get(monitor.url + "/status")
        [listener] = json.loads(body)["listeners"]
        assert listener["phase"] == "halted" and listener["alive"] is False
        assert "BOTHRESH is 0" in listener["last_error"] and "halt_after_failures = 10" in listener["last_error"]
        assert "cannot parse this one" in listener["last_error"]
    finally:
        monitor.stop()
        running.stop()
        plugins.close()

    # And the 499 landed once (in the first unit), the poison message is still on its queue (not
    # moved, not lost), and the listener stopped rather than looping or restarting
    assert_neighbours_landed_once(rows_of(spark, tmp_path, "orders"))
    assert POISON in qm.queue("ORDERS").bodies() and qm.queue("ORDERS.BOQ").depth == 0
    assert bridge.counters.total("listener_restarts") == 0
    assert bridge.counters.total("preprocessor_errors") == 10


# -- a plugin version that raises at run time, swapped in mid-stream ------------------------------
RAISING = '''
from mqbridge import hookimpl

VERSION = "v2"
__version__ = "v2"


class Stamp:
    def process(self, message):
        raise KeyError("field 'customer' is missing")


@hookimpl
def mqbridge_register_preprocessors(registry):
    registry.add("stamp", lambda options: Stamp())
'''


def test_a_plugin_version_raising_at_run_time_swapped_in_mid_stream_falls_back_and_nothing_is_moved(
        tmp_path: Path, spark: Any, amq: AmqClient) -> None:
    # Given a bridge stamping a stream of messages with plugin v1 (default backout threshold)
    q = unique_queue("fallback")
    write_plugin(tmp_path, "stamp", STAMP.format(version="v1"))
    cfg = plugin_config(tmp_path, types("orders") + listener_toml(q, "orders", batch=10, wait="100ms", threshold=None,
                                                                   preprocessors='["stamp"]'))
    app = build_app(cfg, spark=spark)
    bridge, host = app.bridge, app.plugins
    producer = Producer(q)
    producer.start()
    running = RunningBridge(bridge)
    try:
        committed = lambda: bridge.counters.total("messages_committed")  # noqa: E731
        wait_until(lambda: committed() >= 20, 120, "v1 messages committed")

        # When v2, which loads but raises on every message, replaces it while messages keep coming
        write_plugin(tmp_path, "stamp", RAISING)
        wait_until(lambda: host.counters.total("plugin_reloads") >= 1, 30, "v2 swapped in")
        wait_until(lambda: host.counters.total("plugin_fallbacks") >= 1, 120, "the fallback")
        at_fallback = committed()
        wait_until(lambda: committed() >= at_fallback + 20, 120, "messages after the fallback")
        sent = producer.stop()
        wait_until(lambda: committed() >= len(sent), 120, "every message committed")
    finally:
        producer.stop()
        running.stop()
        host.close()

    # Then every message landed once, preprocessed by v1, and nothing reached the backout queue
    rows = rows_of(spark, tmp_path, "orders")
    landed = collections.Counter(bytes(r.body) for r in rows)
    assert set(landed) == set(sent) and set(landed.values()) == {1}
    assert {r.headers["plugin_version"] for r in rows} == {"v1"}
    assert amq.depth(q + ".backout") == 0 and amq.depth(q) == 0
    # And the host is back on generation 1, and says so, naming the plugin and its version
    status = bridge.status()["plugins"]
    assert status["generation"] == 1
    assert "stamp version v2" in status["fallback"] and "fell back to generation 1" in status["fallback"]
    assert host.counters.total("plugin_fallbacks") == 1 and FALLBACK_AFTER == 10
