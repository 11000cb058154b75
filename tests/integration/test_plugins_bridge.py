"""Preprocessor plugins on the real parts: ActiveMQ (STOMP) → bridge with a plugin host → local
Spark. Hot reload mid-stream, a broken version over a working one, consuming and raising
preprocessors, classification into several tables, the envelope, result observers."""

from __future__ import annotations

import collections
import os
import socket
from pathlib import Path

import pytest

from mqbridge.app import build_app
from mqbridge.errors import ConfigError
from mqbridge.plugins import PluginHost
from mqbridge.preprocessors.envelope import parse_envelope
from tests.support.amq import AmqClient, unique_queue
from tests.support.bridge import (
    RunningBridge,
    listener_toml,
    run_until_idle,
)
from tests.support.plugin_bridge import STAMP, Producer, plugin_config, rows_of, types, write_plugin
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

DROP = '''
from mqbridge import hookimpl


@hookimpl
def mqbridge_register_preprocessors(registry):
    registry.add("drop", lambda options: (lambda m: None if m.body.startswith(b"drop") else m))
'''

EXPLODE = '''
from pathlib import Path

from mqbridge import PreprocessorOptions, hookimpl


class Options(PreprocessorOptions):
    log: Path


class Explode:
    def __init__(self, options):
        self.log = options.log

    def process(self, message):
        if message.body == b"bad":
            raise ValueError("cannot take this one")
        return message

    def on_submit_error(self, message, error):
        with open(self.log, "a") as f:
            f.write(f"{message.msg_id} {message.body.decode()} {type(error).__name__}\\n")


@hookimpl
def mqbridge_register_preprocessors(registry):
    registry.add("explode", Explode, options=Options)
'''

ROUTER = '''
from mqbridge import hookimpl

LOG = {log!r}


@hookimpl
def mqbridge_classify(message, listener):
    return "memos" if message.body.startswith(b"<memo") else None


@hookimpl
def mqbridge_result(message, result):
    with open(LOG, "a") as f:
        f.write(f"{{message.msg_id}} {{message.message_type}} {{result.outcome.value}} {{result.bulk_id}}\\n")
'''


def listener(queue: str, type_: str, preprocessors: str, *, threads: int = 1, batch: int = 20,
             threshold: int = 3) -> str:
    return listener_toml(queue, type_, threads=threads, batch=batch, wait="100ms", threshold=threshold,
                         preprocessors=preprocessors)


def test_plugin_changed_mid_stream_each_unit_of_work_runs_one_version(tmp_path: Path, spark, amq: AmqClient) -> None:
    # Given a bridge stamping a stream of messages with plugin v1, two listener threads
    q = unique_queue("reload")
    write_plugin(tmp_path, "stamp", STAMP.format(version="v1"))
    cfg = plugin_config(tmp_path, types("orders") + listener(q, "orders", '["stamp"]', threads=2, batch=10))
    app = build_app(cfg, spark=spark)
    bridge, host = app.bridge, app.plugins
    producer = Producer(q)
    producer.start()
    running = RunningBridge(bridge)
    try:
        committed = lambda: bridge.counters.total("messages_committed")  # noqa: E731
        wait_until(lambda: committed() >= 30, 120, "v1 messages committed")

        # When the plugin file is replaced by v2 while messages keep coming
        write_plugin(tmp_path, "stamp", STAMP.format(version="v2"))
        wait_until(lambda: host.generation == 2, 30, "the new plugin generation")
        at_swap = committed()
        wait_until(lambda: committed() >= at_swap + 30, 120, "v2 messages committed")
        sent = producer.stop()
        wait_until(lambda: committed() >= len(sent), 120, "every message committed")
    finally:
        producer.stop()
        running.stop()
        host.close()

    # Then every message landed once
    rows = rows_of(spark, tmp_path, "orders")
    assert sorted(bytes(r.body) for r in rows) == sorted(sent)
    assert len({r.msg_id for r in rows}) == len(rows)
    # And no unit of work mixed versions; units that took their snapshot before the swap ran v1,
    # every later one v2 (unit numbers are handed out in snapshot order, under the swap lock)
    units: dict[int, set[str]] = collections.defaultdict(set)
    for r in rows:
        units[int(r.headers["unit"])].add(r.headers["plugin_version"])
        assert r.headers["generation"] == {"v1": "1", "v2": "2"}[r.headers["plugin_version"]]
    assert all(len(v) == 1 for v in units.values()), "a unit of work mixed plugin versions"
    v1 = [u for u, v in units.items() if v == {"v1"}]
    v2 = [u for u, v in units.items() if v == {"v2"}]
    assert v1 and v2 and max(v1) < min(v2)
    assert amq.depth(q) == 0
    assert bridge.status()["plugins"]["generation"] == 2


def test_syntax_error_over_a_working_plugin_keeps_the_old_version_until_fixed(tmp_path: Path, spark,
                                                                            amq: AmqClient) -> None:
    q = unique_queue("broken")
    write_plugin(tmp_path, "stamp", STAMP.format(version="v1"))
    cfg = plugin_config(tmp_path, types("orders") + listener(q, "orders", '["stamp"]'))
    app = build_app(cfg, spark=spark)
    bridge, host = app.bridge, app.plugins
    running = RunningBridge(bridge)
    committed = lambda: bridge.counters.total("messages_committed")  # noqa: E731
    try:
        amq.put_many(q, [f"a{i}".encode() for i in range(10)])
        wait_until(lambda: committed() >= 10, 120, "first messages")

        # When a syntax error is written over the working plugin
        path = write_plugin(tmp_path, "stamp", STAMP.format(version="v2") + "\ndef half_written(:\n")
        wait_until(lambda: bridge.status()["plugins"]["errors"], 30, "the error in the status")
        error = bridge.status()["plugins"]["errors"][0]
        assert error["path"] == str(path) and error["line"] == STAMP.count("\n") + 2
        assert "SyntaxError" in error["error"]
        # Then the old version keeps processing
        amq.put_many(q, [f"b{i}".encode() for i in range(10)])
        wait_until(lambda: committed() >= 20, 120, "messages during the error")
        assert host.generation == 1 and bridge.status()["plugins"]["errors"]

        # When the file is fixed, the fix is picked up and the error clears
        write_plugin(tmp_path, "stamp", STAMP.format(version="v3"))
        wait_until(lambda: host.generation == 2, 30, "the fixed version")
        assert bridge.status()["plugins"]["errors"] == []
        amq.put_many(q, [f"c{i}".encode() for i in range(10)])
        wait_until(lambda: committed() >= 30, 120, "messages after the fix")
    finally:
        running.stop()
        host.close()

    versions = {bytes(r.body).decode(): r.headers["plugin_version"] for r in rows_of(spark, tmp_path, "orders")}
    assert len(versions) == 30
    assert {v for b, v in versions.items() if b[0] in "ab"} == {"v1"}
    assert {v for b, v in versions.items() if b[0] == "c"} == {"v3"}
    assert bridge.counters.total("plugin_load_errors") == 1


def test_consuming_preprocessor_removes_messages_that_never_land(tmp_path: Path, spark, amq: AmqClient) -> None:
    q = unique_queue("consume")
    write_plugin(tmp_path, "drop", DROP)
    keep = [f"keep{i}".encode() for i in range(15)]
    drop = [f"drop{i}".encode() for i in range(15)]
    amq.put_many(q, [b for pair in zip(keep, drop, strict=True) for b in pair])
    cfg = plugin_config(tmp_path, types("orders") + listener(q, "orders", '["drop"]'))
    app = build_app(cfg, spark=spark)
    bridge, host = app.bridge, app.plugins
    assert run_until_idle(bridge) == 0
    host.close()

    assert sorted(bytes(r.body) for r in rows_of(spark, tmp_path, "orders")) == sorted(keep)
    assert amq.depth(q) == 0 and amq.depth(q + ".backout") == 0
    assert bridge.counters.total("messages_consumed_by_preprocessors") == 15


def test_raising_preprocessor_rolls_back_calls_on_submit_error_and_backs_out(tmp_path: Path, spark,
                                                                            amq: AmqClient) -> None:
    # Given a preprocessor that raises on one message (batch 1: a unit of work per message)
    q = unique_queue("raise")
    log = tmp_path / "undo.log"
    write_plugin(tmp_path, "explode", EXPLODE)
    amq.put_many(q, [b"good1", b"bad", b"good2"])
    cfg = plugin_config(tmp_path, types("orders") + listener(
        q, "orders", f'[{{name = "explode", log = "{log}"}}]', batch=1, threshold=2))
    app = build_app(cfg, spark=spark)
    bridge, host = app.bridge, app.plugins

    # When the bridge runs until idle
    assert run_until_idle(bridge) == 0
    host.close()

    # Then the good messages land, the bad one was rolled back twice (on_submit_error each time, with
    # the PreprocessorError: the hook is written as before `Rollback`, `on_submit_error(message, error)`)
    # and moved to the backout queue on its third delivery, and the listener never died
    assert sorted(bytes(r.body) for r in rows_of(spark, tmp_path, "orders")) == [b"good1", b"good2"]
    undone = log.read_text().splitlines()
    assert len(undone) == 2 and all(line.endswith(" bad PreprocessorError") for line in undone)
    moved = amq.drain(q + ".backout")
    assert [f.body for f in moved] == [b"bad"]
    assert "preprocessor 'explode'" in moved[0].headers["mqbridge-reason"]
    assert "cannot take this one" in moved[0].headers["mqbridge-reason"]
    assert amq.depth(q) == 0
    assert bridge.counters.total("preprocessor_errors", plugin="explode") == 2
    assert bridge.counters.total("listener_restarts") == 0


def test_a_poison_message_inside_a_unit_is_returned_alone_and_its_neighbours_land_once(
        tmp_path: Path, spark, amq: AmqClient) -> None:
    # Given a preprocessor that raises on one message in the middle of units of 20, with
    # cumulative acks (the default): only a copy of that message goes back, in the commit
    q = unique_queue("raise-in-unit")
    write_plugin(tmp_path, "explode", EXPLODE)
    goods = [f"good{i}".encode() for i in range(40)]
    amq.put_many(q, goods[:15] + [b"bad"] + goods[15:], headers={"x-k": "v"})
    cfg = plugin_config(tmp_path, types("orders") + listener(
        q, "orders", f'[{{name = "explode", log = "{tmp_path / "undo.log"}"}}]', batch=20, threshold=3))
    app = build_app(cfg, spark=spark)
    bridge, host = app.bridge, app.plugins

    # When the bridge runs until idle
    assert run_until_idle(bridge) == 0
    host.close()

    # Then every good message landed exactly once, and the bad one reached the backout queue
    # after exactly 3 deliveries, keeping its identity through the copies that carried it back
    rows = rows_of(spark, tmp_path, "orders")
    assert sorted(bytes(r.body) for r in rows) == sorted(goods)
    assert len({r.msg_id for r in rows}) == len(rows) == 40
    moved = amq.drain(q + ".backout")
    assert [f.body for f in moved] == [b"bad"]
    assert moved[0].headers["mqbridge-delivery-count"] == "3"
    assert "backout threshold is 3" in moved[0].headers["mqbridge-reason"]
    assert moved[0].headers["x-k"] == "v"
    assert not any(k.startswith("mqbridge-requeue") for k in moved[0].headers)
    assert amq.depth(q) == 0
    assert bridge.counters.total("preprocessor_errors", plugin="explode") == 3
    assert bridge.counters.total("messages_committed") == 40


def test_classify_routes_one_queue_into_several_tables_and_observers_see_results(tmp_path: Path, spark,
                                                                              amq: AmqClient) -> None:
    # Given one queue with orders and invoices (JSON, routed by the built-in jsonpath), memos (XML,
    # routed by a drop-in mqbridge_classify hook) and anything else; the body is enveloped after
    # classification, which always sees the original content
    q = unique_queue("route")
    results = tmp_path / "results.log"
    write_plugin(tmp_path, "router", ROUTER.format(log=str(results)))
    orders = [f'{{"kind": "order", "n": {i}}}'.encode() for i in range(8)]
    invoices = [f'{{"kind": "invoice", "n": {i}}}'.encode() for i in range(6)]
    memos = [f"<memo n='{i}'/>".encode() for i in range(4)]
    others = [b"plain text", b'{"kind": "receipt"}']
    amq.put_many(q, orders + invoices + memos + others)
    chain = ('[{name = "jsonpath", path = "$.kind", types = {order = "orders", invoice = "invoices"}}, '
             '"envelope"]')
    cfg = plugin_config(tmp_path, types("orders", "invoices", "memos", "other") + listener(q, "other", chain))
    app = build_app(cfg, spark=spark)
    bridge, host = app.bridge, app.plugins

    assert run_until_idle(bridge) == 0
    host.close()

    landed = {}
    for table, expected in (("orders", orders), ("invoices", invoices), ("memos", memos), ("other", others)):
        rows = rows_of(spark, tmp_path, table)
        assert sorted(parse_envelope(bytes(r.body)).body for r in rows) == sorted(expected), table
        assert {r.message_type for r in rows} == {table}
        landed.update({r.msg_id: (table, r.bulk_id) for r in rows})
    # And the result observer saw every message, with its type and bulk
    seen = {}
    for line in results.read_text().splitlines():
        msg_id, type_, outcome, bulk_id = line.split(" ")
        assert outcome == "success"
        seen[msg_id] = (type_, bulk_id)
    assert seen == landed


@pytest.mark.parametrize("fmt", ["xml", "json"])
def test_envelope_lands_parseable_with_every_field_and_exact_bodies(tmp_path: Path, spark, amq: AmqClient,
                                                                    fmt: str) -> None:
    q = unique_queue(f"env{fmt}")
    bodies = [b"<order id='1'>caf\xc3\xa9</order>", b"line\r\nbreak", os.urandom(300), b"\x00\xff\xfe", b""]
    amq.put_many(q, bodies, headers={"correlation-id": "corr-7", "reply-to": "/queue/replies",
                                     "ReplyToQMgr": "QM2", "put-application": "shop", "user-id": "alice"})
    chain = '["envelope"]' if fmt == "xml" else '[{name = "envelope", format = "json"}]'
    cfg = plugin_config(tmp_path, types("docs") + listener(q, "docs", chain, threads=2, batch=2))
    app = build_app(cfg, spark=spark)
    bridge, host = app.bridge, app.plugins
    assert run_until_idle(bridge) == 0
    host.close()

    rows = rows_of(spark, tmp_path, "docs")
    envelopes = [parse_envelope(bytes(r.body)) for r in rows]
    assert sorted(e.body for e in envelopes) == sorted(bodies)
    for row, envelope in zip(rows, envelopes, strict=True):
        header = envelope.header
        assert envelope.format == fmt and row.headers["mqbridge-envelope"] == fmt
        assert header["messageId"] == row.msg_id and header["correlationId"] == "corr-7"
        assert header["source"] == "amq" and header["queue"] == q
        assert (header["replyToQueue"], header["replyToQueueManager"]) == ("/queue/replies", "QM2")
        assert (header["putApplication"], header["userId"]) == ("shop", "alice")
        put = row.put_timestamp
        assert header["putDate"] == put.strftime("%Y-%m-%d") and header["putTime"][:8] == put.strftime("%H:%M:%S")
        assert header["receivedTime"] and header["server"] == socket.gethostname()
        assert header["listenerThread"].startswith(f"listener-amq:{q}#")
    assert amq.depth(q) == 0


def test_unsafe_plugin_file_named_by_a_listener_stops_the_start(tmp_path: Path) -> None:
    path = write_plugin(tmp_path, "stamp", STAMP.format(version="v1"), mode=0o666)
    cfg = plugin_config(tmp_path, types("orders") + listener("/queue/never", "orders", '["stamp"]'))
    with pytest.raises(ConfigError) as info:
        PluginHost.from_config(cfg).start()
    assert f"refusing to load plugins from {path}: {path} is world-writable (mode 0666)" in str(info.value)
    assert "listeners[0] (amq:/queue/never): unknown preprocessor 'stamp'" in str(info.value)
