"""Per-listener plugin generations on the real parts: ActiveMQ (STOMP) → bridge with a plugin folder →
local Spark. A plugin folder reloaded with a new version while a pinned listener keeps tagging its
messages with the old version and a following one takes the new; a canary listener that gets a
broken release rolls it back (the other listener never runs it, no message lost or duplicated, none
moved aside), then takes a fixed release and promotes it to the other listener after its clean units;
the status document and `mqbridge status` show each listener's generation and mode. And a pinned
listener moved to the latest generation by `mqbridge listener plugins` while a producer keeps putting:
the messages put after the command carry the new version, every message lands once (counted)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mqbridge.app import App, build_app
from mqbridge.cli import main
from mqbridge.monitoring.status_client import render
from tests.support.amq import AmqClient, unique_queue
from tests.support.bridge import RunningBridge, listener_toml
from tests.support.exactly_once import free_port
from tests.support.plugin_bridge import STAMP, Producer, plugin_config, rows_of, types, write_plugin
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

BROKEN = '''
from mqbridge import hookimpl


class Stamp:
    def process(self, message):
        raise RuntimeError("a broken release")


@hookimpl
def mqbridge_register_preprocessors(registry):
    registry.add("stamp", lambda options: Stamp())
'''


def entry(queue: str, extra: str) -> str:
    return listener_toml(queue, "orders", batch=5, wait="100ms", preprocessors='["stamp"]', extra=extra)


#: The control plane's token (`mqbridge listener` reads it from the configuration file).
TOKEN = "0123456789abcdef-plugin-pinning"


def start(tmp_path: Path, spark: Any, body: str, *, token: bool = False) -> tuple[App, RunningBridge]:
    cfg = plugin_config(tmp_path, types("orders") + body, listen=f"127.0.0.1:{free_port()}",
                        tables={"monitoring": {"token": TOKEN}} if token else None)
    app = build_app(cfg, spark=spark)
    return app, RunningBridge(app.bridge)


def committed(app: App) -> float:
    return app.bridge.counters.total("messages_committed")


def put(amq: AmqClient, queue: str, prefix: str, count: int = 10) -> list[bytes]:
    bodies = [f"{prefix}{i:03d}".encode() for i in range(count)]
    amq.put_many(queue, bodies)
    return bodies


def stamps(rows: list[Any], queue: str) -> dict[bytes, tuple[str, str]]:
    """body -> (plugin version, generation) of the rows read from `queue`; each body once."""
    mine = [r for r in rows if r.destination == queue]
    out = {bytes(r.body): (r.headers["plugin_version"], r.headers["generation"]) for r in mine}
    assert len(out) == len(mine), f"a message of {queue} landed twice"
    return out


def test_a_pinned_listener_keeps_the_old_version_while_a_following_one_takes_the_new(
        tmp_path: Path, spark: Any, amq: AmqClient) -> None:
    # Given a bridge with a pinned and a following listener, both stamping with plugin v1
    pinned_q, follow_q = unique_queue("pinned"), unique_queue("follow")
    write_plugin(tmp_path, "stamp", STAMP.format(version="v1"))
    app, running = start(tmp_path, spark, entry(pinned_q, 'plugins = "pinned"') + entry(follow_q, ""))
    host = app.plugins
    sent = {pinned_q: put(amq, pinned_q, "a"), follow_q: put(amq, follow_q, "a")}
    try:
        wait_until(lambda: committed(app) >= 20, 120, "the first 20 messages committed")
        # When the plugin folder is reloaded with v2
        write_plugin(tmp_path, "stamp", STAMP.format(version="v2"))
        wait_until(lambda: host.generation == 2, 30, "plugin generation 2 swapped in")
        sent[pinned_q] += put(amq, pinned_q, "b")
        sent[follow_q] += put(amq, follow_q, "b")
        wait_until(lambda: committed(app) >= 40, 120, "all 40 messages committed")
        assert app.monitor is not None
        status = app.monitor.status()
    finally:
        running.stop()
        host.close()

    # Then the pinned listener tagged everything v1, the following one v2 after the reload
    rows = rows_of(spark, tmp_path, "orders")
    pinned, follow = stamps(rows, pinned_q), stamps(rows, follow_q)
    assert sorted(pinned) == sorted(sent[pinned_q]) and sorted(follow) == sorted(sent[follow_q])
    assert set(pinned.values()) == {("v1", "1")}
    assert {stamp for body, stamp in follow.items() if body.startswith(b"b")} == {("v2", "2")}
    assert amq.depth(pinned_q) == 0 and amq.depth(follow_q) == 0
    # And the status shows each listener's generation and mode, on /status and in `mqbridge status`
    by_queue = {e["queue"]: e for e in status["listeners"]}
    assert (by_queue[pinned_q]["plugin_generation"], by_queue[pinned_q]["plugins"]) == (1, "pinned")
    assert (by_queue[follow_q]["plugin_generation"], by_queue[follow_q]["plugins"]) == (2, "follow")
    text = render("http://x", status, True, "")
    assert f"plugins    amq:{pinned_q}: generation 1 (pinned)" in text
    assert f"plugins    amq:{follow_q}: generation 2 (follow)" in text


def test_the_command_moves_a_pinned_listener_to_the_latest_generation_while_messages_flow(
        tmp_path: Path, spark: Any, amq: AmqClient, capsys: pytest.CaptureFixture[str]) -> None:
    # Given a running bridge whose pinned listener (one thread) stamps with v1 though v2 is loaded
    queue = unique_queue("moved")
    write_plugin(tmp_path, "stamp", STAMP.format(version="v1"))
    app, running = start(tmp_path, spark, entry(queue, 'plugins = "pinned"'), token=True)
    host, monitor = app.plugins, app.monitor
    assert monitor is not None
    monitor.bind()
    monitor.start()  # as `App.run` does: the control plane `mqbridge listener` reaches
    producer = Producer(queue)
    try:
        write_plugin(tmp_path, "stamp", STAMP.format(version="v2"))
        wait_until(lambda: host.generation == 2, 30, "plugin generation 2 swapped in")
        producer.start()
        wait_until(lambda: committed(app) >= 30, 120, "30 of the producer's messages committed")
        # When an operator moves it to the latest generation while the producer keeps putting
        command = ["listener", "plugins", "--config", str(tmp_path / "bridge.toml"), queue, "latest"]
        assert main(command) == 0
        moved_at = len(producer.sent)  # every message from here on was put after the move
        wait_until(lambda: len(producer.sent) >= moved_at + 30, 30, "30 more messages put after the move")
        sent = producer.stop()
        wait_until(lambda: committed(app) >= len(sent), 120, f"all {len(sent)} messages committed")
        status = monitor.status()
    finally:
        producer.stop()
        monitor.stop()
        running.stop()
        host.close()

    out = capsys.readouterr().out
    assert f"amq:{queue}: plugins pinned, generation 2 (was 1)" in out
    assert f"amq:{queue}: in effect: plugin generation 2 (pinned) from its next unit of work" in out
    # Then every message landed once: none lost, none duplicated, none moved aside
    rows = rows_of(spark, tmp_path, "orders")
    landed = stamps(rows, queue)
    assert sorted(landed) == sorted(sent) and len(rows) == len(sent)
    assert amq.depth(queue) == 0 and amq.depth(queue + ".backout") == 0
    # v1 up to the move, v2 from it on, by unit of work: the units take their chain in the order the
    # host numbers them (two connections of the thread read at once, so put order interleaves them)
    by_unit: dict[int, set[tuple[str, str]]] = {}
    for row in rows:
        by_unit.setdefault(int(row.headers["unit"]), set()).add(landed[bytes(row.body)])
    assert all(len(stamps_of_unit) == 1 for stamps_of_unit in by_unit.values()), by_unit  # one generation each
    old = [unit for unit, got in by_unit.items() if got == {("v1", "1")}]
    new = [unit for unit, got in by_unit.items() if got == {("v2", "2")}]
    assert len(old) + len(new) == len(by_unit) and max(old) < min(new), sorted(by_unit.items())
    assert sum(landed[body] == ("v1", "1") for body in sent) >= 30  # those committed before the move
    assert {landed[body] for body in sent[moved_at:]} == {("v2", "2")}  # put after it: received after it
    entry_status = next(e for e in status["listeners"] if e["queue"] == queue)
    assert (entry_status["plugin_generation"], entry_status["plugins"]) == (2, "pinned")
    assert [c["last_command"] for c in status["listener_controls"]] == ["plugins latest"]


def test_a_canary_rolls_a_broken_release_back_and_promotes_a_fixed_one(tmp_path: Path, spark: Any,
                                                                      amq: AmqClient) -> None:
    # Given a canary listener and another one, both stamping with plugin v1
    canary_q, other_q = unique_queue("canary"), unique_queue("other")
    write_plugin(tmp_path, "stamp", STAMP.format(version="v1"))
    canary = 'plugins_canary = true\nplugins_canary_units = 2\nplugins_canary_time = "0s"'
    app, running = start(tmp_path, spark, entry(canary_q, canary) + entry(other_q, ""))
    host = app.plugins
    sent = {canary_q: put(amq, canary_q, "a"), other_q: put(amq, other_q, "a")}
    counts = app.bridge.counters
    try:
        wait_until(lambda: committed(app) >= 20, 120, "the first 20 messages committed")

        # When a release that raises on every message is dropped in, it runs on the canary only
        write_plugin(tmp_path, "stamp", BROKEN)
        wait_until(lambda: (host.status()["canary"] or {}).get("generation") == 2, 30, "generation 2 on the canary")
        sent[canary_q] += put(amq, canary_q, "b")
        sent[other_q] += put(amq, other_q, "b")
        # Then it is rolled back there, and every message lands once, preprocessed by v1
        wait_until(lambda: counts.total("plugin_canary_rollbacks") == 1, 60, "the canary's rollback")
        wait_until(lambda: committed(app) >= 40, 120, "all 40 messages committed")
        assert host.status()["canary"] is None and host.generation == 1

        # When a fixed release is dropped in: the other listener stays on v1 until the canary promotes it
        write_plugin(tmp_path, "stamp", STAMP.format(version="v3"))
        wait_until(lambda: (host.status()["canary"] or {}).get("generation") == 3, 30, "generation 3 on the canary")
        sent[other_q] += put(amq, other_q, "c")
        wait_until(lambda: committed(app) >= 50, 120, "the other listener's 10 messages during the trial")
        sent[canary_q] += put(amq, canary_q, "c")
        wait_until(lambda: counts.total("plugin_canary_promotions") == 1, 60, "generation 3 promoted")
        sent[other_q] += put(amq, other_q, "d")
        wait_until(lambda: committed(app) >= 70, 120, "all 70 messages committed")
        assert app.monitor is not None
        status = app.monitor.status()
    finally:
        running.stop()
        host.close()

    rows = rows_of(spark, tmp_path, "orders")
    on_canary, on_other = stamps(rows, canary_q), stamps(rows, other_q)
    # No message lost or duplicated, none moved to a backout queue
    assert sorted(on_canary) == sorted(sent[canary_q]) and sorted(on_other) == sorted(sent[other_q])
    assert len(rows) == 70
    assert amq.depth(canary_q) == 0 and amq.depth(other_q) == 0
    assert amq.depth(canary_q + ".backout") == 0 and amq.depth(other_q + ".backout") == 0
    # The broken release's messages were preprocessed by v1; the other listener never ran generation 2
    assert {on_canary[b] for b in sent[canary_q] if b.startswith(b"b")} == {("v1", "1")}
    assert {on_canary[b] for b in sent[canary_q] if b.startswith(b"c")} == {("v3", "3")}
    assert {g for _, g in on_other.values()} == {"1", "3"}
    assert {on_other[b] for b in sent[other_q] if b[:1] in b"abc"} == {("v1", "1")}
    assert {on_other[b] for b in sent[other_q] if b.startswith(b"d")} == {("v3", "3")}
    assert "promoted from the canary" in status["plugins"]["canary_note"]
    by_queue = {e["queue"]: e for e in status["listeners"]}
    assert by_queue[canary_q]["plugins_canary"] is True and by_queue[other_q]["plugin_generation"] == 3
