"""The adaptive thread count (`[[listeners]] threads` unset, `mqbridge.supervision.tuning`) on the real
parts: ActiveMQ (STOMP) → bridge → local Spark. Two queues with a backlog, each read through a
preprocessor that takes a known time per message (so that more threads do read more, whatever the
machine's speed): on the first the bridge doubles its threads while the committed rate rises (slow
start) up to its `threads_max`; on the second, whose type's latency target is far below what a unit
takes, it grows to its `threads_max` of two and then halves back to one (the latency guard, which waits
while a growth is judged), so that the threads the tuner retires finish their units of work while
messages flow. Every message lands once (counted like a
total-queue checker: none lost, none duplicated, none moved aside), and /status, `mqbridge status`,
/metrics and the log say each change and why; the threads it adds are not counted as threads created
(restarts: an alert watches that counter). A second test kills (`kill -9`) an `mqbridge run` just as it
doubles its threads, and a second run drains the queue: every message once; a third kills one whose
bulks Spark writes while it doubles its threads twice before its first commit (reading the backlog while
its driver JVM starts), and the same holds."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from mqbridge.app import build_app
from mqbridge.monitoring.status_client import render
from tests.support.amq import AmqClient, unique_queue
from tests.support.bridge import RunningBridge, listener_toml
from tests.support.exactly_once import account, bodies, free_port
from tests.support.plugin_bridge import plugin_config, rows_of, write_plugin
from tests.support.processes import landed, mqbridge, run_until_idle, stomp_config
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

#: A preprocessor that takes 2 ms per message (asleep: the GIL is free, as in an I/O-bound plugin).
SLOW = '''
import time

from mqbridge import hookimpl


class Slow:
    def process(self, message):
        time.sleep(0.002)
        return message


@hookimpl
def mqbridge_register_preprocessors(registry):
    registry.add("slow", lambda options: Slow())
'''

#: Enough for the first queue to be judged at 4 threads with a backlog, and the second at 2 (then halved).
MESSAGES = {"grow": 16_000, "halve": 12_000}


def test_the_bridge_doubles_threads_while_the_rate_rises_and_halves_them_above_the_latency_target(
        tmp_path: Path, spark: Any, amq: AmqClient, caplog: pytest.LogCaptureFixture) -> None:
    # Given two queues with a backlog, each listener's thread count unset (adaptive)
    grow_q, halve_q = unique_queue("adaptive-grow"), unique_queue("adaptive-halve")
    sent = {q: [f"{q[-8:]}-{i:05d}".encode() for i in range(MESSAGES[kind])]
            for q, kind in ((grow_q, "grow"), (halve_q, "halve"))}
    for queue, queued in sent.items():
        amq.put_many(queue, queued)
    write_plugin(tmp_path, "slow", SLOW)
    body = ('\n[types.grow]\nbulk_size = "2MB"\nbulk_timeout = "1s"\n'
            '\n[types.halve]\nbulk_size = "2MB"\nbulk_timeout = "1s"\nlatency = "50ms"\n'
            + listener_toml(grow_q, "grow", threads=None, batch=100, wait="100ms", preprocessors='["slow"]',
                            extra="threads_max = 4")
            + listener_toml(halve_q, "halve", threads=None, batch=100, wait="100ms", preprocessors='["slow"]',
                            extra="threads_max = 2"))
    app = build_app(plugin_config(tmp_path, body, listen=f"127.0.0.1:{free_port()}"), spark=spark)
    assert app.monitor is not None
    counters = app.bridge.counters
    grow, halve = f"amq:{grow_q}", f"amq:{halve_q}"

    def control(name: str) -> dict[str, Any]:
        return next(c for c in app.bridge.status()["listener_controls"] if c["name"] == name)

    caplog.set_level(logging.INFO, logger="mqbridge.control")
    running = RunningBridge(app.bridge)
    try:
        # When they run: the first grows by doublings to its ceiling, the second grows, then halves
        wait_until(lambda: control(grow)["threads"] == 4, 120, f"{grow} at its threads_max of 4 threads")
        wait_until(lambda: counters.total("listener_threads_tuned", listener=halve, direction="down") >= 1, 120,
                   f"{halve}'s threads halved for its latency target")
        total = sum(MESSAGES.values())
        wait_until(lambda: counters.total("messages_committed") >= total, 240, f"all {total} messages committed")
        # drained: the counts hold (the next change would be a drained one's, after a minute)
        app.bridge.reconcile()
        status = app.bridge.status()
        metrics = generate_latest(app.monitor.registry).decode()  # what /metrics serves
    finally:
        running.stop()
        app.plugins.close()

    # Then every message landed once, nothing is left on the queues, nothing was moved aside
    for queue, table in ((grow_q, "grow"), (halve_q, "halve")):
        landed = [bytes(r.body) for r in rows_of(spark, tmp_path, table)]
        assert len(landed) == len(set(landed)), f"{queue}: {len(landed) - len(set(landed))} duplicated"
        assert sorted(landed) == sorted(sent[queue]), f"{queue}: {len(set(sent[queue]) - set(landed))} lost"
        assert amq.depth(queue) == 0 and amq.depth(queue + ".backout") == 0
    # And each change was said once, with its reason, in the log, /status, `mqbridge status` and /metrics
    changes = [r.getMessage() for r in caplog.records if "(adaptive, up to" in r.getMessage()]
    assert f"listener {grow}: threads 1 -> 2 (adaptive, up to 4): slow start:" in "\n".join(changes)
    assert any(f"listener {grow}: threads 2 -> 4 (adaptive, up to 4): slow start: 1 -> 2 threads" in c
               for c in changes), changes
    assert any(f"listener {halve}: threads 2 -> 1 (adaptive, up to 2): receipt-to-commit" in c
               and "above 4 x the 0.05 s latency target: halved" in c for c in changes), changes
    assert counters.total("listener_threads_tuned", listener=grow, direction="up") >= 2
    # the threads the tuner added are not restarts: the alert on threads created stays quiet
    assert counters.total("listener_threads_created", listener=grow) == 1
    for name in (grow, halve):  # 4 kept, or back to 2 if 4 did not pay once the queue thinned out
        entry = next(c for c in status["listener_controls"] if c["name"] == name)
        threads = entry["threads"]
        assert entry["threads_mode"] == "adaptive" and entry["tuning"] and entry["tuned_at"], entry
        assert f'mqbridge_listener_threads{{listener="{name}"}} {threads:.1f}' in metrics
        ups = counters.total("listener_threads_tuned", listener=name, direction="up")
        assert f'mqbridge_listener_threads_tuned_total{{direction="up",listener="{name}"}} {ups:.1f}' in metrics
        text = render("http://x", status, True, "")
        assert (f"listener {name}: {threads} threads (adaptive, up to {entry['threads_max']}), {threads} alive; "
                f"last change at {entry['tuned_at']}: {entry['tuning']}") in text


def test_a_bridge_killed_while_it_adds_threads_loses_and_duplicates_nothing(tmp_path: Path, spark: Any,
                                                                             amq: AmqClient) -> None:
    # Given a backlog read by an `mqbridge run` whose thread count is adaptive
    queue = unique_queue("adaptive-kill")
    sent = bodies(8_000, "adaptive-kill")
    amq.put_many(queue, sent)
    write_plugin(tmp_path, "slow", SLOW)
    config = stomp_config(tmp_path, queue, threads=None, batch=100, extra_bridge='plugin_dirs = ["plugins"]',
                          extra_listener='preprocessors = ["slow"]')
    log = tmp_path / "killed.log"

    # When it is killed (kill -9) as soon as it has doubled its threads, units of both in flight
    with log.open("w") as out:
        proc = mqbridge("run", "--config", str(config), stdout=out)
    try:
        wait_until(lambda: "threads 1 -> 2 (adaptive" in log.read_text() or proc.poll() is not None, 180,
                   "the bridge to double its threads")
    finally:
        proc.kill()
        proc.wait(60)
    assert "threads 1 -> 2 (adaptive" in log.read_text(), log.read_text()[-4000:]
    # and a second run drains the queue
    run_until_idle(config, idle="2s")

    # Then every message is in the table once: none lost, none duplicated, none moved aside
    accounting = account(sent, landed(spark, tmp_path / "landing" / "orders"))
    assert accounting.clean, accounting
    assert amq.depth(queue) == 0 and amq.depth(queue + ".backout") == 0


def test_a_bridge_killed_while_it_adds_threads_before_its_first_commit_loses_and_duplicates_nothing(
        tmp_path: Path, spark: Any, amq: AmqClient) -> None:
    # Given a backlog read by an `mqbridge run` whose bulks Spark writes (its driver JVM starting: no commit
    # for seconds) and whose thread count is adaptive
    queue = unique_queue("adaptive-early")
    sent = bodies(8_000, "adaptive-early")
    amq.put_many(queue, sent)
    config = stomp_config(tmp_path, queue, threads=None, batch=500, spark='master = "local[2]"\nwriter = "spark"')
    log = tmp_path / "killed.log"

    # When it reads the backlog with more threads before its first commit, and is killed (kill -9) as
    # soon as it has doubled them twice (1 -> 2 -> 4, half of threads_max 8), units of all in flight
    with log.open("w") as out:
        proc = mqbridge("run", "--config", str(config), stdout=out)
    try:
        wait_until(lambda: "threads 2 -> 4 (adaptive" in log.read_text() or proc.poll() is not None, 180,
                   "the bridge to double its threads twice before its first commit")
    finally:
        proc.kill()
        proc.wait(60)
    said = log.read_text()
    assert "threads 1 -> 2 (adaptive, up to 8): before the first commit" in said, said[-4000:]
    assert "threads 2 -> 4 (adaptive, up to 8): before the first commit" in said, said[-4000:]
    # and a second run drains the queue
    run_until_idle(config, idle="2s")

    # Then every message is in the table once: none lost, none duplicated, none moved aside
    accounting = account(sent, landed(spark, tmp_path / "landing" / "orders"))
    assert accounting.clean, accounting
    assert amq.depth(queue) == 0 and amq.depth(queue + ".backout") == 0
