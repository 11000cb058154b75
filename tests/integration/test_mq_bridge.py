"""End to end with an IBM MQ source: fake queue manager → bridge → real local Spark.

The bridge is built from TOML like any other (`[sources.qm] kind = "mq"`); only the driver
module is the fake one, passed through `source_factory`.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from mqbridge.app import build_app
from mqbridge.errors import ConfigError
from mqbridge.listeners.mq import MqSource
from mqbridge.listeners.mq.backlog import QueueDepths
from mqbridge.records import InDoubtLog
from mqbridge.source import SourceContext
from mqbridge.supervision.supervisor import Bridge
from tests.support.bridge import (
    RunningBridge,
    listener_toml,
    make_config,
    read_table,
    run_until_idle,
)
from tests.support.configs import fake_mq_source
from tests.support.exactly_once import account
from tests.support.fakes import pymqi_fake
from tests.support.fakes.mq_server import FakeQueueManagerServer
from tests.support.fakes.mq_testing import make_source
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration
C = pymqi_fake.CMQC


@pytest.fixture
def qm() -> Iterator[FakeQueueManagerServer]:
    server = FakeQueueManagerServer(dead_letter_queue="SYSTEM.DEAD.LETTER.QUEUE")
    yield server
    assert server.disconnects_with_open_uow == [], "a disconnect committed an open unit of work"
    assert server.live_connections() == [], "a listener left its connection open"
    server.close()


def mq_config(tmp_path: Path, qm: FakeQueueManagerServer, listeners: str, types: str = "orders",
              type_extra: str = "", spark: dict[str, str] | None = None) -> Any:
    body = ""
    for name in types.split():
        body += f"""
[types.{name}]
bulk_size = "2MB"
bulk_timeout = "1s"
""" + type_extra
    return make_config(tmp_path, body + listeners, tables={"sources.qm": fake_mq_source(qm.name), "spark": spark or {}})


def listener(queue: str, type_: str = "orders", *, threads: int = 1, batch: int = 100, extra: str = "") -> str:
    return listener_toml(queue, type_, source="qm", threads=threads, batch=batch, threshold=None,
                         backout=None, extra=extra)


def mq_bridge(cfg: Any, spark: Any, in_doubt: InDoubtLog | None = None) -> Bridge:
    log = in_doubt or InDoubtLog()

    def factory(context: SourceContext) -> MqSource:
        listener_cfg = context.listener
        return MqSource(listener_cfg.source, cfg.sources[listener_cfg.source], listener_cfg.queue,
                        listener=listener_cfg, driver=pymqi_fake, in_doubt=log)

    return build_app(cfg, spark=spark, source_factory=factory).bridge


def test_every_message_lands_exactly_once_with_its_mqmd_and_properties(tmp_path: Path, spark, qm) -> None:
    # Given 1,500 messages (binary bodies, properties, correlation ids) on a queue
    qm.define_queue("ORDERS")
    when = datetime(2024, 5, 17, 8, 30, 15, 250000, tzinfo=timezone.utc)
    bodies = [f"order {i}".encode() + bytes([i % 256, 0xFF, 0x00]) for i in range(1500)]
    ids = [qm.put("ORDERS", body, correl_id=f"c{i}".encode(), properties={"region": "eu", "seq": i},
                  put_time=when, put_appl_name="shop.exe") for i, body in enumerate(bodies)]
    cfg = mq_config(tmp_path, qm, listener("ORDERS", threads=2))

    # When the bridge runs until idle
    assert run_until_idle(mq_bridge(cfg, spark)) == 0

    # Then each message landed once, byte-exact, keyed by its MsgId, with its MQMD and properties
    rows = read_table(spark, tmp_path / "landing" / "orders")
    assert sorted(bytes(r.body) for r in rows) == sorted(bodies)
    assert sorted(r.msg_id for r in rows) == sorted(i.hex() for i in ids)
    row = next(r for r in rows if bytes(r.body) == bodies[7])
    assert row.correlation_id == b"c7".ljust(24, b"\0").hex()
    assert row.put_timestamp.astimezone(timezone.utc) == when  # naive local time from collect()
    assert row.headers["MQMD.PutApplName"] == "shop.exe" and row.headers["region"] == "eu"
    assert row.headers["seq"] == "7"
    assert row.source == "qm" and row.destination == "ORDERS" and row.message_type == "orders"
    assert row.delivery_count == 1 and row.redelivered is False
    assert qm.queue("ORDERS").depth == 0


def test_spark_failure_backs_every_message_out_and_they_land_once_the_fault_clears(tmp_path: Path, spark, qm) -> None:
    # Given the orders table's path is a regular file, so every Spark write fails
    qm.define_queue("ORDERS")
    bodies = [f"m{i}".encode() for i in range(300)]
    qm.put_many("ORDERS", bodies)
    (tmp_path / "landing").mkdir()
    blocker = tmp_path / "landing" / "orders"
    blocker.write_text("not a directory")
    # (one unit holds them all: a backed-out message returns to the head of the queue, so smaller
    # units would get the same first messages again and again)
    # (probes at most 2 s apart, not the default minute: the fault is cleared after the third failed
    # probe, and the fourth, which succeeds, would otherwise come 8 s later)
    cfg = mq_config(tmp_path, qm, listener("ORDERS", batch=500, extra="backout_threshold = 1000"),
                    spark={"probe_interval_max": "2s"})
    bridge = mq_bridge(cfg, spark)
    running = RunningBridge(bridge, until_idle=2.0)

    # When the write has failed: an outage, the unit is backed out and the sink's breaker opens
    # (the listener pauses intake), and its probes keep failing
    assert bridge.breakers is not None
    wait_until(lambda: bridge.breakers["orders"].probe_failures >= 3
               and bridge.counters.total("messages_backed_out") >= 300,
               120, "a backout and three failed probes")

    # Then nothing was removed from the queue and every message came back with BackoutCount + 1
    assert bridge.counters.total("messages_committed") == 0
    assert qm.queue("ORDERS").depth == 300
    assert all(m.backout_count >= 1 for m in qm.queue("ORDERS").messages)

    # ... and once the fault is cleared every message lands, once
    blocker.unlink()
    assert running.wait() == 0
    rows = read_table(spark, tmp_path / "landing" / "orders")
    assert sorted(bytes(r.body) for r in rows) == sorted(bodies)
    assert all(r.redelivered and r.delivery_count >= 2 for r in rows)
    assert qm.queue("ORDERS").depth == 0


def test_a_message_that_always_fails_moves_to_boqname_at_bothresh(tmp_path: Path, spark, qm,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a queue with BOTHRESH 3 / BOQNAME holding a message whose Spark write always fails (the
    # failpoint makes Spark's own write fail for a bulk holding it; probe writes succeed), and a
    # healthy queue
    monkeypatch.setenv("MQBRIDGE_FAILPOINT", "spark_poison_body:poison ")
    qm.define_queue("BROKEN.IN", backout_threshold=3, backout_queue="BROKEN.BOQ")
    qm.define_queue("BROKEN.BOQ")
    qm.define_queue("GOOD.IN")
    poison_id = qm.put("BROKEN.IN", b"poison \xff body", properties={"app": "shop"})
    qm.put_many("GOOD.IN", [f"g{i}".encode() for i in range(50)])
    cfg = mq_config(tmp_path, qm, listener("BROKEN.IN", "broken") + listener("GOOD.IN", "good"), types="broken good")

    # When the bridge runs until idle
    assert run_until_idle(mq_bridge(cfg, spark)) == 0

    # Then the poison message is on BOQNAME after 3 failed deliveries, with its properties and reason
    [moved] = qm.queue("BROKEN.BOQ").visible()
    assert moved.data == b"poison \xff body" and moved.msg_id == poison_id
    assert moved.prop("app") == "shop" and moved.prop("mqbridge_original_queue") == "BROKEN.IN"
    assert "threshold" in moved.prop("mqbridge_reason") and "3" in moved.prop("mqbridge_reason")
    assert moved.prop("mqbridge_delivery_count") == "4"  # got a 4th time with BackoutCount 3, and moved
    assert qm.queue("BROKEN.IN").depth == 0
    assert len(read_table(spark, tmp_path / "landing" / "good")) == 50


def test_neighbours_that_landed_before_their_unit_reached_bothresh_are_committed_not_moved(
        tmp_path: Path, spark, qm, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given BOTHRESH 1 and one unit of 20 good messages and one whose Spark write always fails: MQ
    # commits a unit whole, so it is backed out after the good ones landed and all 21 come back
    # with BackoutCount 1, at the threshold
    monkeypatch.setenv("MQBRIDGE_FAILPOINT", "spark_poison_body:poison ")
    qm.define_queue("MIXED.IN", backout_threshold=1, backout_queue="MIXED.BOQ")
    qm.define_queue("MIXED.BOQ")
    good = [f"mixed-{i}".encode() for i in range(20)]
    qm.put_many("MIXED.IN", [*good[:10], b"poison body", *good[10:]])
    cfg = mq_config(tmp_path, qm, listener("MIXED.IN", batch=50))

    # When the bridge runs until idle
    assert run_until_idle(mq_bridge(cfg, spark)) == 0

    # Then only the failing message is on BOQNAME: the others, recognised in the ledger, were
    # committed as landed (never both in the table and moved), and each is in the table once
    assert [m.data for m in qm.queue("MIXED.BOQ").visible()] == [b"poison body"]
    assert qm.queue("MIXED.IN").depth == 0
    landed = collections.Counter(bytes(r.body) for r in read_table(spark, tmp_path / "landing" / "orders"))
    accounting = account(good, landed)
    assert accounting.clean, accounting


def test_a_broken_connection_mid_batch_is_reconnected_and_nothing_is_lost(tmp_path: Path, spark, qm) -> None:
    # Given 2009 on an MQGET in the middle of the second unit of work, and on one MQCMIT later
    qm.define_queue("ORDERS")
    bodies = [f"c{i}".encode() for i in range(800)]
    qm.put_many("ORDERS", bodies)
    qm.inject("get", C.MQRC_CONNECTION_BROKEN, after=150)
    qm.inject("commit", C.MQRC_CONNECTION_BROKEN, after=3)
    in_doubt = InDoubtLog()
    cfg = mq_config(tmp_path, qm, listener("ORDERS", batch=100))
    bridge = mq_bridge(cfg, spark, in_doubt)

    # When the bridge runs until idle
    assert run_until_idle(bridge) == 0

    # Then the control thread reconnected and every message landed exactly once: the in-doubt
    # unit's messages, delivered again, were recognised in the landing ledger and not landed twice
    assert bridge.counters.total("listener_restarts") >= 2
    rows = read_table(spark, tmp_path / "landing" / "orders")
    landed = collections.Counter(bytes(r.body) for r in rows)
    assert set(landed) == set(bodies), "a message was lost"
    assert [b for b, n in landed.items() if n > 1] == [], "a message landed twice"
    assert in_doubt.units == 1
    # (the fake's commit fault may have committed first, then nothing comes back)
    assert bridge.counters.total("messages_deduplicated") in (0, in_doubt.messages)
    assert qm.queue("ORDERS").depth == 0


def test_until_idle_ends_with_an_error_when_a_listener_halted(tmp_path: Path, spark, qm,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a poison message (its Spark write always fails; probe writes succeed) whose backout
    # queue and dead-letter queue both refuse it, beside a healthy queue
    monkeypatch.setenv("MQBRIDGE_FAILPOINT", "spark_poison_body:poison")
    qm.define_queue("BROKEN.IN", backout_threshold=1, backout_queue="BROKEN.BOQ")
    qm.define_queue("BROKEN.BOQ").put_inhibited = True
    qm.define_queue("SYSTEM.DEAD.LETTER.QUEUE").put_inhibited = True
    qm.define_queue("GOOD.IN")
    qm.put("BROKEN.IN", b"poison")
    qm.put_many("GOOD.IN", [f"g{i}".encode() for i in range(20)])
    cfg = mq_config(tmp_path, qm, listener("BROKEN.IN", "broken") + listener("GOOD.IN", "good"), types="broken good")
    bridge = mq_bridge(cfg, spark)

    # When the bridge runs until idle
    code = run_until_idle(bridge, timeout=120)

    # Then it stops (the halted listener does not keep it waiting forever) with a non-zero exit,
    # the poison message is still on its queue, and the healthy queue was drained
    assert code == 1
    assert [s.name for s in bridge.slots if s.halted] == ["qm:BROKEN.IN#1"]
    assert qm.queue("BROKEN.IN").depth == 1
    assert len(read_table(spark, tmp_path / "landing" / "good")) == 20


def test_two_messages_with_one_msgid_in_a_unit_each_get_their_own_result(tmp_path: Path, spark, qm) -> None:
    # Given an application that put two messages with one MsgId into one unit of work, between
    # neighbours: a JSON type, the first twin's body not JSON (it can never land: a permanent
    # failure, moved to BOQNAME in this very unit), the second a good order. The ledger's identity
    # is the body's digest (under "msg_id" the two are one message to the ledger by definition)
    qm.define_queue("DUP.IN", backout_threshold=3, backout_queue="DUP.BOQ")
    qm.define_queue("DUP.BOQ")
    good = [f'{{"id": "n{i}"}}'.encode() for i in range(10)]
    bad_twin, good_twin = b"not json {", b'{"id": "good twin"}'
    qm.put_many("DUP.IN", good[:5])
    twin_id = qm.put("DUP.IN", bad_twin, msg_id=b"APP-CHOSEN-ID")
    assert qm.put("DUP.IN", good_twin, msg_id=b"APP-CHOSEN-ID") == twin_id
    qm.put_many("DUP.IN", good[5:])
    cfg = mq_config(tmp_path, qm, listener("DUP.IN", "dup", batch=100, extra='identity = "body-sha256"\n'),
                    types="dup", type_extra='format = "json"\nschema = "id STRING"\n')

    # When the bridge runs until idle
    assert run_until_idle(mq_bridge(cfg, spark)) == 0

    # Then the bad twin alone was moved (its own body, in the first unit: BackoutCount 0), and
    # the good twin landed with every neighbour, exactly once
    [moved] = qm.queue("DUP.BOQ").visible()
    assert moved.data == bad_twin and moved.msg_id == twin_id
    assert moved.prop("mqbridge_delivery_count") == "1", "the unit was backed out: a twin lost its result"
    landed = collections.Counter(row["id"] for row in read_table(spark, tmp_path / "landing" / "dup"))
    assert landed == collections.Counter([f"n{i}" for i in range(10)] + ["good twin"])
    assert qm.queue("DUP.IN").depth == 0


def test_two_listeners_with_complementary_selection_strings_each_land_their_share_once(
        tmp_path: Path, spark, qm) -> None:
    # Given one queue holding EU, US and unlabelled messages (properties), interleaved
    qm.define_queue("ORDERS")
    regions = ["EU", "US", None]
    sent: dict[str, list[bytes]] = {"eu": [], "rest": []}
    for i in range(300):
        region, body = regions[i % 3], f"order {i}".encode()
        qm.put("ORDERS", body, properties={"region": region} if region else {})
        sent["eu" if region == "EU" else "rest"].append(body)
    # and two listeners on it whose selection strings split it: one lands EU, the other the rest
    cfg = mq_config(tmp_path, qm, listener("ORDERS", "eu", extra="selector = \"region = 'EU'\"")
                    + listener("ORDERS", "rest", extra="selector = \"region <> 'EU' OR region IS NULL\""),
                    types="eu rest")

    # When the bridge runs until idle
    assert run_until_idle(mq_bridge(cfg, spark)) == 0

    # Then each table holds exactly its share, each message once: none lost, duplicated or misplaced
    for name in ("eu", "rest"):
        rows = collections.Counter(bytes(r.body) for r in read_table(spark, tmp_path / "landing" / name))
        accounting = account(sent[name], rows)
        assert accounting.clean, f"{name}: {accounting}"
    assert qm.queue("ORDERS").depth == 0


def test_a_selection_string_the_queue_manager_refuses_stops_the_listener_with_mqs_reason(qm) -> None:
    # Given a listener whose selection string IBM MQ cannot parse (MQRC_SELECTION_STRING_ERROR)
    qm.define_queue("ORDERS")
    source = make_source(qm, "ORDERS", selector="region = = 'EU'")
    # When it connects, Then MQOPEN's 2519 is a configuration error naming the string
    with pytest.raises(ConfigError, match=r"selection string \"region = = 'EU'\".*2519|2519.*selection"):
        source.connect()


def test_the_backlog_gauge_reads_curdepth_of_a_paused_listeners_queue(tmp_path: Path, spark, qm) -> None:
    # Given a bridge on ORDERS reading CURDEPTH every 200 ms, its listener paused
    qm.define_queue("ORDERS")
    cfg = mq_config(tmp_path, qm, listener("ORDERS"))
    cfg.bridge.backlog_interval = 0.2
    app = build_app(cfg, spark=spark, source_factory=lambda context: MqSource(
        context.source_name, cfg.sources["qm"], "ORDERS", listener=context.listener, driver=pymqi_fake),
        backlog_probe=lambda name, source: QueueDepths(name, source, pymqi_fake))
    bridge = app.bridge
    bridge.controls.command("qm:ORDERS", "pause")
    running = RunningBridge(bridge, until_idle=1.0)

    def backlog() -> Any:
        return (bridge.status().get("backlog") or {}).get("qm:ORDERS", {}).get("messages")

    try:
        # When 60 messages are put, Then the backlog is 60 and the run goes on
        sent = [f"waiting {i}".encode() for i in range(60)]
        qm.put_many("ORDERS", sent)
        wait_until(lambda: backlog() == 60, 30, "a backlog of 60 (CURDEPTH)")
        assert running.thread.is_alive()
        # When it is resumed, Then the run ends with the backlog read 0 and every message landed once
        bridge.controls.command("qm:ORDERS", "resume")
        assert running.wait(120) == 0
        assert backlog() == 0
        rows = collections.Counter(bytes(r.body) for r in read_table(spark, tmp_path / "landing" / "orders"))
        assert account(sent, rows).clean
    finally:
        if running.thread.is_alive():
            running.stop()
