"""Exactly-once landing on the real parts: `mqbridge run` killed with SIGKILL at each step of the landing
protocol in turn (failpoints; each start recovering the kill before), then run until idle; every message
must be in its table exactly once, byte-identical, with the queue empty and no staging leftovers."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from mqbridge.app import build_app
from mqbridge.config import load_config
from mqbridge.landing.ledger import SqliteLedger, ledger_path, owner_id
from tests.support.amq import AmqClient, unique_queue
from tests.support.bridge import run_until_idle as run_until_idle_in_process
from tests.support.processes import killed_in_turn, landed, leftovers, run_until_idle, run_until_killed, stomp_config
from tests.support.tcpproxy import TcpProxy

pytestmark = pytest.mark.integration

#: Bodies with every byte value, so a landed body that is not byte-identical shows.
def bodies(n: int, tag: str) -> list[bytes]:
    return [f"{tag}-{i:05d}:".encode() + bytes(range(256)) for i in range(n)]


#: The steps a bridge of each ack mode is killed at, in turn, in one test (`killed_in_turn`).
STEPS = {"cumulative": ("after_stage", "after_prepare", "after_publish", "before_source_commit", "after_source_commit"),
         "individual": ("after_publish", "before_source_commit")}


@pytest.mark.timeout(900)
@pytest.mark.parametrize("ack_mode", list(STEPS))
def test_kill_at_each_step_then_restart_lands_every_message_exactly_once(
        tmp_path: Path, spark: Any, amq: AmqClient, ack_mode: str) -> None:
    # Given 3,000 messages and a bridge
    q = unique_queue(f"eo-{ack_mode}")
    sent = bodies(3000, ack_mode)
    amq.put_many(q, sent)
    config = stomp_config(tmp_path, q, ack_mode=ack_mode)
    table = tmp_path / "landing" / "orders"
    # When it is killed at each step of the landing in turn (each start recovers what the kill before left,
    # then dies at the next step), then runs until idle
    runs = killed_in_turn(config, STEPS[ack_mode])
    # Then every message is in the table exactly once, byte-identical; nothing is left behind
    rows = landed(spark, table)
    assert set(rows) == set(sent), f"{len(set(sent) - set(rows))} lost, {len(set(rows) - set(sent))} unexpected"
    assert [b for b, n in rows.items() if n > 1] == [], "duplicated"
    assert amq.depth(q) == 0 and amq.depth(q + ".backout") == 0
    assert leftovers(table) == []
    for step in STEPS[ack_mode]:
        if step in ("after_prepare", "after_publish"):
            assert re.search(r"ledger recovery: [1-9]\d* bulks rolled forward", runs.after[step]), (step, runs.last)
        if step in ("after_prepare", "after_publish", "before_source_commit"):
            # the killed unit comes back and is recognised, not landed again
            assert "already landed; committed without landing them again" in runs.after[step], (step, runs.last)


def test_a_deleted_ledger_degrades_to_at_least_once_with_a_warning(tmp_path: Path, spark: Any, amq: AmqClient) -> None:
    # Given a bridge killed after publishing, whose ledger is then deleted
    q = unique_queue("eo-noledger")
    sent = bodies(1000, "nl")
    amq.put_many(q, sent)
    config = stomp_config(tmp_path, q)
    run_until_killed(config, "before_source_commit")
    for path in (tmp_path / "state").glob("ledger.sqlite3*"):
        path.unlink()
    # When it starts again
    out = run_until_idle(config)
    # Then it says it cannot recognise earlier landings, and nothing is lost (duplicates allowed)
    assert "messages landed before it existed cannot be recognised" in out
    rows = landed(spark, tmp_path / "landing" / "orders")
    assert set(rows) == set(sent) and amq.depth(q) == 0


def test_the_ledger_is_pruned_past_the_dedupe_window(tmp_path: Path, amq: AmqClient) -> None:
    q = unique_queue("eo-prune")
    amq.put_many(q, bodies(300, "pr"))
    config = stomp_config(tmp_path, q, extra_bridge='dedupe_window = "1s"')
    run_until_idle(config, idle="3s")
    # A second run starts after the window: its first tick prunes everything the first one landed
    amq.put_many(q, bodies(10, "pr2"))
    run_until_idle(config, idle="3s")
    ledger = SqliteLedger.open(ledger_path(tmp_path / "state"), owner=owner_id())
    try:
        stats = ledger.stats()
        assert stats.prune_runs >= 2
        assert stats.identities <= 10
    finally:
        ledger.close()


@pytest.mark.parametrize("forward", [False, True], ids=["commit-never-reaches-broker", "receipt-never-comes-back"])
def test_a_commit_cut_off_before_its_receipt_lands_nothing_twice(
        tmp_path: Path, spark: Any, amq: AmqClient, activemq: tuple[str, int], forward: bool) -> None:
    # Given a bridge whose connection is cut at its third STOMP COMMIT (after its bulk was published):
    # either before the broker sees the COMMIT, or after (the receipt never comes back)
    q = unique_queue("eo-receipt")
    sent = bodies(1500, "rc")
    amq.put_many(q, sent)
    proxy = TcpProxy(activemq)
    try:
        proxy.cut_at(b"COMMIT\n", skip=2, forward=forward)
        cfg = load_config(str(stomp_config(tmp_path, q, port=proxy.port, threads=1, batch=100)))
        bridge = build_app(cfg, spark=spark).bridge
        # When it runs until idle (it reconnects by itself)
        assert run_until_idle_in_process(bridge, idle=2.0, timeout=240) == 0
    finally:
        proxy.close()
    # Then the cut happened, the commit was in doubt, and every message landed exactly once
    assert proxy.trapped.is_set()
    assert bridge.counters.total("listener_restarts") >= 1
    rows = landed(spark, tmp_path / "landing" / "orders")
    assert set(rows) == set(sent) and [b for b, n in rows.items() if n > 1] == []
    if not forward:  # the broker redelivered the unit; the ledger knew it had landed
        # (the cut ends both connections of the listener, in_flight = 2: a second landed unit in
        # flight is given back with it and recognised too)
        assert bridge.counters.total("messages_deduplicated") in (100, 200)
    assert amq.depth(q) == 0
