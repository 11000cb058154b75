"""End to end on the real parts: ActiveMQ (STOMP) → bridge → local Spark → commit/rollback."""

from __future__ import annotations

import collections
import json
import os
from pathlib import Path

import pytest

from mqbridge.app import build_app
from tests.support.amq import AmqClient, unique_queue
from tests.support.bridge import (
    RunningBridge,
    listener_toml,
    make_config,
    read_table,
    run_until_idle,
)
from tests.support.tcpproxy import TcpProxy
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


def listener(queue: str, type_: str, *, threads: int = 1, batch: int = 200, threshold: int = 3) -> str:
    return listener_toml(queue, type_, threads=threads, batch=batch, threshold=threshold)


RAW_TYPE = """
[types.{name}]
bulk_size = "2MB"
bulk_timeout = "2s"
"""


def test_two_types_over_two_queues_land_exactly_once(tmp_path: Path, spark, amq: AmqClient) -> None:
    # Given two queues with messages of two types, including non-UTF-8 bytes and a 1 MB body
    q_orders, q_blobs = unique_queue("orders"), unique_queue("blobs")
    orders = [json.dumps({"n": i}).encode() for i in range(1500)]
    blobs = [bytes([i % 256, 0xFF, 0xFE, 0x00]) * (i % 50 + 1) for i in range(700)]
    blobs.append(os.urandom(1024 * 1024))
    amq.put_many(q_orders, orders, headers={"x-app": "shop", "correlation-id": "corr-1", "type": "Order"})
    amq.put_many(q_blobs, blobs)
    cfg = make_config(tmp_path, RAW_TYPE.format(name="orders") + RAW_TYPE.format(name="blobs")
                      + listener(q_orders, "orders", threads=2) + listener(q_blobs, "blobs"))

    # When the bridge runs until idle
    assert run_until_idle(build_app(cfg, spark=spark).bridge) == 0

    # Then every message landed once, byte-identical, with its headers, and the queues are empty
    landing = tmp_path / "landing"
    order_rows = read_table(spark, landing / "orders")
    blob_rows = read_table(spark, landing / "blobs")
    assert sorted(bytes(r.body) for r in order_rows) == sorted(orders)
    assert sorted(bytes(r.body) for r in blob_rows) == sorted(blobs)
    for rows in (order_rows, blob_rows):
        ids = [r.msg_id for r in rows]
        assert len(ids) == len(set(ids)), "a message landed twice"
    row = order_rows[0]
    assert row.message_type == "orders" and row.source == "amq" and row.destination == q_orders
    assert row.correlation_id == "corr-1"
    assert row.headers["x-app"] == "shop" and row.headers["type"] == "Order"
    assert row.put_timestamp is not None and row.delivery_count == 1 and row.redelivered is False
    assert amq.depth(q_orders) == 0 and amq.depth(q_blobs) == 0


def test_spark_failure_returns_messages_and_they_land_after_the_fault_clears(
        tmp_path: Path, spark, amq: AmqClient) -> None:
    # Given the orders table's path is a regular file, so every Spark write fails, and the default
    # backout threshold (3)
    q = unique_queue("sparkfail")
    bodies = [f"m{i}".encode() for i in range(300)]
    amq.put_many(q, bodies)
    (tmp_path / "landing").mkdir()
    blocker = tmp_path / "landing" / "orders"
    blocker.write_text("not a directory")
    # (probes at most 2 s apart, not the default minute: the fault is cleared after the third failed
    # probe, and the fourth, which succeeds, would otherwise come 8 s later)
    cfg = make_config(tmp_path, RAW_TYPE.format(name="orders") + listener_toml(q, "orders", threshold=None),
                      tables={"spark": {"probe_interval_max": "2s"}})
    bridge = build_app(cfg, spark=spark).bridge
    running = RunningBridge(bridge, until_idle=2.0)

    # When the write has failed: an outage, the sink's breaker opens, the messages go back and the
    # listener pauses intake; probes keep failing (more often than the threshold)
    assert bridge.breakers is not None
    wait_until(lambda: bridge.breakers["orders"].probe_failures >= 3
               and bridge.counters.total("messages_backed_out") > 0,
               120, "the breaker of sink orders to fail three probes")
    assert bridge.counters.total("messages_committed") == 0
    assert amq.depth(q + ".backout") == 0
    assert [entry["phase"] for entry in bridge.status()["listeners"]] == ["paused"]
    # ... and once the fault is cleared they land
    blocker.unlink()
    assert running.wait() == 0

    rows = read_table(spark, tmp_path / "landing" / "orders")
    assert sorted(bytes(r.body) for r in rows) == sorted(bodies)
    assert len({r.msg_id for r in rows}) == len(rows)
    assert any(r.redelivered for r in rows)
    assert amq.depth(q) == 0 and amq.depth(q + ".backout") == 0
    assert bridge.counters.total("messages_moved_to_backout") == 0


def test_message_failing_every_time_reaches_backout_queue_after_threshold(tmp_path: Path, spark, amq: AmqClient,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a message whose Spark write always fails (the failpoint makes Spark's own write fail for
    # a bulk holding it, while probe writes succeed), and a healthy type on another queue
    monkeypatch.setenv("MQBRIDGE_FAILPOINT", "spark_poison_body:poison ")
    q_bad, q_good = unique_queue("poison"), unique_queue("good")
    amq.put(q_bad, b"poison \xff body", headers={"x-k": "v"})
    amq.put_many(q_good, [f"g{i}".encode() for i in range(50)])
    cfg = make_config(tmp_path, RAW_TYPE.format(name="broken") + RAW_TYPE.format(name="good")
                      + listener(q_bad, "broken", threshold=3) + listener(q_good, "good"))

    # When the bridge runs until idle
    assert run_until_idle(build_app(cfg, spark=spark).bridge) == 0

    # Then the poison message is on the backout queue after exactly 3 deliveries, with the reason
    moved = amq.drain(q_bad + ".backout")
    assert len(moved) == 1
    frame = moved[0]
    assert frame.body == b"poison \xff body"
    assert frame.headers["mqbridge-delivery-count"] == "3"
    assert "backout threshold is 3" in frame.headers["mqbridge-reason"]
    assert "failed on its own while the sink takes writes" in frame.headers["mqbridge-reason"]
    assert frame.headers["x-k"] == "v" and frame.headers["persistent"] == "true"
    assert frame.headers["mqbridge-original-destination"] == q_bad
    assert amq.depth(q_bad) == 0
    assert len(read_table(spark, tmp_path / "landing" / "good")) == 50


def test_malformed_json_goes_to_backout_queue_at_once(tmp_path: Path, spark, amq: AmqClient) -> None:
    q = unique_queue("json")
    good = [json.dumps({"order_id": f"o{i}", "amount": i * 1.5}).encode() for i in range(40)]
    amq.put_many(q, good[:20] + [b"{broken json"] + good[20:])
    cfg = make_config(tmp_path, """
[types.orders]
bulk_size = "2MB"
bulk_timeout = "2s"
format = "json"
schema = "order_id STRING, amount DOUBLE"
""" + listener(q, "orders", threshold=5))

    assert run_until_idle(build_app(cfg, spark=spark).bridge) == 0

    rows = read_table(spark, tmp_path / "landing" / "orders")
    assert sorted(r.order_id for r in rows) == sorted(f"o{i}" for i in range(40))
    moved = amq.drain(q + ".backout")
    assert [f.body for f in moved] == [b"{broken json"]
    assert moved[0].headers["mqbridge-delivery-count"] == "1"  # permanent: no retries
    assert "json" in moved[0].headers["mqbridge-reason"].lower()


def test_cut_connection_is_restarted_by_the_control_thread_and_nothing_is_lost(
        tmp_path: Path, spark, amq: AmqClient) -> None:
    # Given the bridge reaches the broker through a proxy whose connections we can cut
    proxy = TcpProxy(("127.0.0.1", 61613))
    q = unique_queue("cut")
    bodies = [f"c{i}".encode() for i in range(3000)]
    amq.put_many(q, bodies)
    cfg = make_config(tmp_path, RAW_TYPE.format(name="orders") + listener(q, "orders", threads=2, batch=100),
                      port=proxy.port)
    bridge = build_app(cfg, spark=spark).bridge
    try:
        running = RunningBridge(bridge, until_idle=3.0)
        wait_until(lambda: bridge.counters.total("messages_committed") > 0, 120, "first commit")
        # When every connection is cut mid-stream
        assert proxy.cut() >= 1
        # Then the control thread restarts the listeners and everything lands
        wait_until(lambda: bridge.counters.total("listener_restarts") >= 1, 30, "a listener restart")
        assert running.wait() == 0
    finally:
        proxy.close()
    rows = read_table(spark, tmp_path / "landing" / "orders")
    landed = collections.Counter(bytes(r.body) for r in rows)
    assert set(landed) == set(bodies), "a message was lost"
    duplicates = sum(n - 1 for n in landed.values())
    print(f"duplicates after a connection cut: {duplicates}")
    assert amq.depth(q) == 0
    assert bridge.counters.total("listener_threads_created") >= 3
