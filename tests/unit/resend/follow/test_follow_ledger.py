"""The follow ledger (a real SQLite file): per lane, the row keys of a bulk being sent, the bulks
finished (their keys and batches deleted then), each forward's mark and floor; and the landing
ledger's list of bulks published since a time, which a forward reads, a page at a time."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from mqbridge.config.forwards import ForwardConfig
from mqbridge.landing.ledger.sqlite import SqliteLedger
from mqbridge.resend.follow import Follower, FollowLedger, lane_id, runner


def test_a_bulk_being_sent_keeps_its_keys_until_finished_then_only_its_id(tmp_path: Path) -> None:
    ledger = FollowLedger.in_state_dir(tmp_path / "state")
    ledger.intend("lane", "b1", ["bulk1/m1/d/1", "bulk1/m2/d/1"])
    ledger.mark_sent("lane", "b1")
    ledger.intend("lane", "b2", ["bulk1/m3/d/1"])  # in doubt
    ledger.intend("lane", "b3", ["bulk10/m1/d/1"])  # another bulk whose id bulk1 begins
    ledger.intend("other", "b4", ["bulk1/m9/d/1"])  # another lane's
    assert ledger.bulk_keys("lane", "bulk1") == {"bulk1/m1/d/1", "bulk1/m2/d/1", "bulk1/m3/d/1"}
    ledger.mark_sent("lane", "b2")

    ledger.finish("lane", "bulk1.0", "bulk1", 3, published_at=100.0)

    assert ledger.finished("lane", ["bulk1.0", "bulk10"]) == {"bulk1.0"}
    assert ledger.bulk_keys("lane", "bulk1") == set()
    assert ledger.bulk_keys("lane", "bulk10") == {"bulk10/m1/d/1"} and ledger.in_doubt("lane") == ["b3"]
    assert ledger.bulk_keys("other", "bulk1") == {"bulk1/m9/d/1"}
    assert ledger.lane_totals("lane") == (1, 3)
    ledger.close()


def test_a_forward_keeps_its_mark_and_floor_and_forgets_bulks_it_no_longer_looks_at(tmp_path: Path) -> None:
    ledger = FollowLedger.in_state_dir(tmp_path / "state")
    assert ledger.since("f") is None and ledger.floor("f") == 0.0
    ledger.set_since("f", 50.0, floor=50.0)
    ledger.set_since("f", 80.0)
    ledger.finish("lane", "old", "old", 1, published_at=10.0)
    ledger.finish("lane", "new", "new", 1, published_at=70.0)
    ledger.close()

    again = FollowLedger.in_state_dir(tmp_path / "state")
    assert (again.since("f"), again.floor("f")) == (80.0, 50.0)
    assert again.forget_before("lane", 60.0) == 1
    assert again.finished("lane", ["old", "new"]) == {"new"}
    again.close()


def test_lane_ids_differ_by_forward_and_destination_and_fit_a_queue_name() -> None:
    ids = {lane_id(f, d) for f in ("a", "b") for d in ("/queue/x", "/queue/y")}
    assert len(ids) == 4
    assert all(i.replace("-", "").isalnum() for i in ids)


def test_the_landing_ledger_lists_a_tables_bulks_published_since_oldest_first(tmp_path: Path) -> None:
    ledger = SqliteLedger.open(tmp_path / "ledger.sqlite3", owner="test")
    for bulk, table in (("a", "orders"), ("b", "invoices"), ("c", "orders"), ("d", "orders")):
        ledger.prepare(bulk, table, (), [f"{bulk}-1", f"{bulk}-2"])
        if bulk != "d":  # d stays prepared: not landed
            ledger.mark_published(bulk)
    listed = ledger.published_since("orders", 0.0, 10)
    assert [b for b, _, _ in listed] == ["a", "c"] and all(n == 2 for _, _, n in listed)
    assert listed[0][1] <= listed[1][1]
    assert [b for b, _, _ in ledger.published_since("orders", listed[1][1], 10)] == ["c"]
    assert len(ledger.published_since("orders", 0.0, 1)) == 1
    assert ledger.newest_publication() == max(at for _, at, _ in ledger.published_since("invoices", 0.0, 10) + listed)
    ledger.close()


def test_a_forward_pages_past_finished_bulks_to_the_ones_not_sent(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # Given more bulks published within the look-back margin than a page holds, all but the last
    # three finished by the forward's one destination
    monkeypatch.setattr(runner, "BULKS_PER_PASS", 10)
    landing = SqliteLedger.open(tmp_path / "ledger.sqlite3", owner="test")
    ids = [f"bulk{n:02d}" for n in range(25)]
    for bulk in ids:
        landing.prepare(bulk, "orders", (), [f"{bulk}-1"])
        landing.mark_published(bulk)
    ledger = FollowLedger.in_state_dir(tmp_path / "state")
    forward = ForwardConfig(name="f", table="orders", source="amq", to=["/queue/x"], start="all")
    follower = Follower([forward], lambda name: name, None, landing, ledger,  # type: ignore[arg-type]
                        lambda lane: None, time.time, 1)  # type: ignore[arg-type,return-value]
    lane = follower.lanes["f"][0]
    for bulk, at, _ in landing.published_since("orders", 0.0, 100)[:22]:
        ledger.finish(lane.id, bulk, bulk, 1, at)

    # When it looks for bulks to send
    seen, pending, finished, full = follower.pending(forward)

    # Then it has paged past the finished ones to the three it has not sent
    assert [b.bulk_id for b in pending] == ids[22:]
    assert [b.bulk_id for b in seen] == ids and not full and finished[lane.id] == set(ids[:22])
    landing.close()
    ledger.close()
