"""Where is message X (`mqbridge.tracing.where`): the answers of the running bridge (a bridge on the
in-memory broker whose executor holds a bulk), of a real SQLite ledger and of a real backout log,
what each says when it cannot answer, and which state wins when several know the message."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mqbridge.commands.where import render
from mqbridge.errors import LedgerUnavailableError
from mqbridge.landing.ledger import SqliteLedger, owner_id
from mqbridge.loop.in_flight import Connections, Held, PendingUnit
from mqbridge.loop.unit_plan import UnitResults
from mqbridge.maintenance.engine.swap import HISTORY, record_purge
from mqbridge.message import Message, MessageResult
from mqbridge.tracing.backout_log import BackoutLog, MovedMessage
from mqbridge.tracing.where import Locator, put_dates
from tests.support.bridge import RunningBridge
from tests.support.memory import RecordingExecutor, memory_app, memory_config
from tests.support.waiting import wait_until

DAY1 = "/w/orders/put_date=2024-05-01/part-b1-00000.parquet"
DAY2 = "/w/orders/put_date=2024-05-02/part-b1-00001.parquet"


@pytest.fixture
def ledger(tmp_path: Path) -> Any:
    opened = SqliteLedger.open(tmp_path / "state" / "ledger.sqlite3", owner=owner_id())
    yield opened
    opened.close()


def landed(ledger: SqliteLedger, bulk_id: str, identities: list[str], files: list[str] | None = None) -> None:
    ledger.prepare(bulk_id, "orders", [("/w/orders/_staging/x", f) for f in (files or [DAY1])], identities)
    ledger.mark_published(bulk_id)


def moved_log(tmp_path: Path, *moves: MovedMessage) -> BackoutLog:
    log = BackoutLog.in_state_dir(tmp_path / "state")
    for move in moves:
        log.record(move)
    log.close()
    return log


def move(msg_id: str, at: float, identity: str = "") -> MovedMessage:
    return MovedMessage(at, "amq:/queue/orders#1", "/queue/orders", "/queue/orders.backout", msg_id, identity,
                        "body is not valid JSON", "orders", 2)


def test_landed_names_the_table_put_date_bulk_and_publication(ledger: SqliteLedger) -> None:
    cfg, _ = memory_config()
    landed(ledger, "b1", ["ID:1"])
    doc = Locator(cfg.listeners, cfg.bridge.dedupe_window, ledger=ledger).locate("ID:1")
    assert doc["state"] == "landed" and doc["searched"] == ["the landing ledger"]
    assert {k: doc["landed"][k] for k in ("table", "put_date", "bulk", "identity")} == {
        "table": "orders", "put_date": "2024-05-01", "bulk": "b1", "identity": "ID:1"}
    assert doc["landed"]["published"].startswith(time.strftime("%Y-", time.gmtime()))
    assert "in_flight" not in doc and "moved" not in doc


def test_a_bulk_across_midnight_names_both_put_dates(ledger: SqliteLedger) -> None:
    cfg, _ = memory_config()
    landed(ledger, "b1", ["ID:1"], [DAY2, DAY1])
    found = Locator(cfg.listeners, cfg.bridge.dedupe_window, ledger=ledger).locate("ID:1")["landed"]
    assert found["put_date"] is None and found["put_dates"] == ["2024-05-01", "2024-05-02"]
    assert put_dates([("s", "C:\\w\\orders\\put_date=2024-05-03\\part-0.parquet")]) == ["2024-05-03"]


def test_a_container_swapped_since_publication_is_named_rewritten_then_purged(tmp_path: Path,
                                                                             ledger: SqliteLedger) -> None:
    # A compaction merges the put_date container's files, then a purge by retention drops it: the
    # ledger's paths are stale both times, the table's swap history (real files) says what happened.
    cfg, _ = memory_config()
    table = tmp_path / "w" / "orders"
    day1, day2 = table / "put_date=2024-05-01", table / "put_date=2024-05-02"
    for day in (day1, day2):
        day.mkdir(parents=True)
    before = json.dumps({"container": day1.name, "strategy": "copy", "at": time.time() - 3_600})
    (table / HISTORY).write_text(before + "\n")  # a purge before the bulk: its rows were not there yet
    landed(ledger, "b1", ["ID:1"], [str(day1 / "part-b1-00000.parquet")])
    landed(ledger, "b2", ["ID:2"], [str(day2 / "part-b2-00000.parquet")])
    locator = Locator(cfg.listeners, cfg.bridge.dedupe_window, ledger=ledger)
    assert "rewritten" not in locator.locate("ID:1")["landed"]
    record_purge(table, day1.name, "compact")
    found = locator.locate("ID:1")["landed"]
    [rewrite] = found["rewritten"]
    assert (rewrite["put_date"], rewrite["by"]) == ("2024-05-01", "compact") and "compaction" in rewrite["means"]
    assert found["table"] == "orders" and found["put_date"] == "2024-05-01" and "purged" not in found
    shutil.rmtree(day1)
    record_purge(table, day1.name, "drop")
    doc = locator.locate("ID:1")
    assert [r["by"] for r in doc["landed"]["rewritten"]] == ["compact", "drop"]
    assert doc["landed"]["purged"] == doc["landed"]["rewritten"][-1]["at"]
    assert "purged     at " in render(doc) and "rewritten  put_date 2024-05-01" in render(doc)
    assert "rewritten" not in locator.locate("ID:2")["landed"]  # the other put_date was not touched


def test_moved_names_the_backout_queue_and_reason(tmp_path: Path) -> None:
    cfg, _ = memory_config()
    log = moved_log(tmp_path, move("ID:9", time.time(), identity="ORDER-9"))
    for key in ("ID:9", "ORDER-9"):
        doc = Locator(cfg.listeners, cfg.bridge.dedupe_window, backout_log=log).locate(key)
        assert doc["state"] == "moved" and doc["searched"] == ["the backout log"]
        assert {k: doc["moved"][k] for k in ("backout_queue", "queue", "msg_id", "identity", "reason")} == {
            "backout_queue": "/queue/orders.backout", "queue": "/queue/orders", "msg_id": "ID:9",
            "identity": "ORDER-9", "reason": "body is not valid JSON"}


def test_landed_and_moved_the_later_event_is_the_state(tmp_path: Path, ledger: SqliteLedger) -> None:
    # A message moved, put back on its queue from the backout queue, and landed then
    cfg, _ = memory_config()
    log = moved_log(tmp_path, move("ID:1", time.time() - 60), move("ID:2", time.time() + 60))
    landed(ledger, "b1", ["ID:1", "ID:2"])
    locator = Locator(cfg.listeners, cfg.bridge.dedupe_window, ledger=ledger, backout_log=log)
    first, second = locator.locate("ID:1"), locator.locate("ID:2")
    assert first["state"] == "landed" and "moved" in first
    assert second["state"] == "moved" and "landed" in second


def test_a_prepared_bulk_is_in_flight_in_the_ledger(ledger: SqliteLedger) -> None:
    # A bulk prepared and not published (a bridge sharing the ledger publishing it, or one killed)
    cfg, _ = memory_config()
    ledger.prepare("b7", "orders", [("/w/orders/_staging/x", DAY1)], ["ID:7"])
    doc = Locator(cfg.listeners, cfg.bridge.dedupe_window, ledger=ledger).locate("ID:7")
    assert doc["state"] == "in_flight"
    [held] = doc["in_flight"]
    assert (held["bulk"], held["bulk_state"], held["table"], held["put_date"], held["owner"]) == (
        "b7", "prepared", "orders", "2024-05-01", owner_id())


def test_a_prepared_bulks_time_in_flight_is_judged_by_the_ledgers_clock_that_stamped_it(
        ledger: SqliteLedger, monkeypatch: pytest.MonkeyPatch) -> None:
    # A shared ledger stamps prepared_at by its server's clock; this host's clock may be minutes off
    cfg, _ = memory_config()
    ledger.prepare("b7", "orders", [("/w/orders/_staging/x", DAY1)], ["ID:7"])
    [bulk] = ledger.in_progress()
    monkeypatch.setattr(ledger, "clock", lambda: bulk.prepared_at + 42.0)
    monkeypatch.setattr(time, "time", lambda: bulk.prepared_at + 600.0)  # this host 10 minutes ahead
    doc = Locator(cfg.listeners, cfg.bridge.dedupe_window, ledger=ledger).locate("ID:7")
    assert doc["in_flight"][0]["seconds_in_flight"] == 42.0


def test_unknown_says_what_it_cannot_rule_out(tmp_path: Path, ledger: SqliteLedger) -> None:
    cfg, _ = memory_config(extra='identity = "header:order-id"')
    doc = Locator(cfg.listeners, cfg.bridge.dedupe_window, ledger=ledger,
                  backout_log=BackoutLog.in_state_dir(tmp_path / "state")).locate("ID:404")
    assert doc["state"] == "unknown" and doc["searched"] == ["the landing ledger", "the backout log"]
    notes = "\n".join(doc["notes"])
    assert "mem:orders (header:order-id)" in notes and "not by their message id" in notes
    assert "dedupe_window (7d)" in notes and "newest 10,000 to 20,000 moves of the last 30 days" in notes


def test_a_part_that_fails_is_named_and_the_others_still_answer(tmp_path: Path) -> None:
    class Unavailable:
        def landing_of(self, identity: str) -> Any:
            raise LedgerUnavailableError("ledger db:5432 unavailable: connection refused")

        def prepared_holding(self, identities: Any) -> Any:
            raise LedgerUnavailableError("ledger db:5432 unavailable: connection refused")

    def broken(key: str) -> list[Held]:
        raise RuntimeError("boom")

    cfg, _ = memory_config()
    log = moved_log(tmp_path, move("ID:1", time.time()))
    doc = Locator(cfg.listeners, cfg.bridge.dedupe_window, ledger=Unavailable(), backout_log=log,
                  holding=broken).locate("ID:1")
    assert doc["state"] == "moved" and doc["searched"] == ["the backout log"]
    assert any("landing ledger could not be read: ledger db:5432 unavailable" in n for n in doc["notes"])
    assert any("running bridge's units and bulks could not be read: boom" in n for n in doc["notes"])
    no_ledger = Locator(cfg.listeners, cfg.bridge.dedupe_window, ledger_note="exactly_once = false: no ledger")
    assert no_ledger.locate("x")["notes"][0] == "exactly_once = false: no ledger"


@pytest.mark.parametrize("key", ["", "   ", "x" * 1025])
def test_an_empty_or_overlong_id_is_refused(key: str) -> None:
    cfg, _ = memory_config()
    with pytest.raises(ValueError):
        Locator(cfg.listeners, cfg.bridge.dedupe_window).locate(key)


def test_a_listeners_units_are_seen_reading_pending_and_finishing() -> None:
    one, two = Message("m1", b"", "mem", "orders", identity="ORDER-1"), Message("m2", b"", "mem", "orders")
    connections = Connections([object()])  # type: ignore[list-item]  # no source is touched
    seen: list[list[tuple[str, str]]] = []

    def stages(key: str) -> list[tuple[str, str]]:
        return [(stage, m.msg_id) for stage, m in connections.holding(key)]

    with connections.reading([one]):
        assert stages("ORDER-1") == [("reading", "m1")]
        connections.add(PendingUnit(connections.sources[0], UnitResults([one]), lambda: None, [one]))
    connections.add(PendingUnit(connections.sources[0], UnitResults([two]),
                                lambda: seen.append(stages("m2")), [two]))
    assert stages("m1") == [("pending", "m1")] and stages("") == []
    connections.finish(connections.pop_oldest())
    connections.finish(connections.pop_oldest())
    assert seen == [[("finishing", "m2")]] and stages("m2") == []


def test_the_running_bridge_names_the_listener_and_the_bulk_then_the_move() -> None:
    # Given a bridge whose executor holds the bulk with "hold" until released, and fails "bad" for good
    cfg, broker = memory_config(batch=5)
    [hold] = broker.put_many("orders", [b"hold"])
    entered, release = threading.Event(), threading.Event()

    def decide(message: Message) -> MessageResult | None:
        if message.body == b"bad":
            return MessageResult.permanent(message.msg_id, "body is not an order")
        entered.set()
        release.wait(30)
        return None

    app = memory_app(cfg, RecordingExecutor(decide))
    locator = Locator(cfg.listeners, cfg.bridge.dedupe_window, backout_log=app.backout_log, holding=app.bridge.holding)
    running = RunningBridge(app.bridge)
    try:
        assert entered.wait(30)
        # When it is asked while the bulk is being written
        [held] = app.bridge.holding(hold)
        doc = locator.locate(hold)
        # Then it says which listener thread, which bulk, and since when
        assert (held.listener, held.bulk_state) == ("mem:orders#1", "writing") and held.unit in ("pending",
                                                                                                  "finishing")
        assert doc["state"] == "in_flight" and doc["searched"] == ["the running bridge", "the backout log"]
        [entry] = doc["in_flight"]
        assert (entry["listener"], entry["bulk"], entry["bulk_state"], entry["msg_id"], entry["queue"]) == (
            "mem:orders#1", held.bulk_id, "writing", hold, "orders")
        assert entry["received"] and entry["seconds_in_flight"] >= 0 and entry["delivery_count"] == 1
        release.set()
        wait_until(lambda: not app.bridge.holding(hold), 30, "the held message to be committed")
        # And a message moved to the backout queue is found in the backout log, with the reason
        [bad] = broker.put_many("orders", [b"bad"])
        wait_until(lambda: locator.locate(bad)["state"] == "moved", 30, "the move to be in the backout log")
        found = locator.locate(bad)["moved"]
        assert (found["backout_queue"], found["listener"], found["reason"]) == (
            "orders.backout", "mem:orders#1", "body is not an order")
        assert locator.locate(hold)["state"] == "unknown"  # landed by an executor that has no ledger
    finally:
        release.set()
        running.stop()
        assert app.backout_log is not None
        app.backout_log.close()
