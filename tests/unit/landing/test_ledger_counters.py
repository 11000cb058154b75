"""The landing ledger's counters, its batched prune, heartbeats, `mqbridge ledger --verify` row counts,
and a ledger that cannot take writes (issue 23), on a real SQLite file."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from mqbridge.cli import main
from mqbridge.errors import (
    DuplicateIdentityError,
    LedgerUnavailableError,
)
from mqbridge.landing.ledger import Ledger, SqliteLedger, ledger_path, owner_id
from tests.support.ledger import ledger_config, parquet_of_rows


# -- counters, batched prune, verified row counts (issue 23) ---------------------------------
def _counted(path: Path) -> tuple[dict[str, int], int]:
    """What the counters must say, counted row by row: (bulks by state, identities)."""
    db = sqlite3.connect(path)
    try:
        bulks = {"prepared": 0, "published": 0}
        bulks.update(dict(db.execute("SELECT state, COUNT(*) FROM bulks GROUP BY state").fetchall()))
        return bulks, db.execute("SELECT COUNT(*) FROM identities").fetchone()[0]
    finally:
        db.close()


def _assert_counters_exact(ledger: Ledger) -> None:
    stats = ledger.stats()
    assert (stats.bulks, stats.identities) == _counted(Path(ledger.path))


def _age(path: Path, bulk_ids: list[str], seconds: float) -> None:
    """Make these bulks prepared and published `seconds` ago."""
    db = sqlite3.connect(path, isolation_level=None)
    at = time.time() - seconds
    db.executemany("UPDATE bulks SET prepared_at = ?, published_at = CASE WHEN published_at IS NULL THEN NULL "
                   "ELSE ? END WHERE bulk_id = ?", [(at, at, b) for b in bulk_ids])
    db.close()


def _fill(path: Path, bulks: int, per_bulk: int, age: float) -> None:
    """Add `bulks` published bulks of `per_bulk` identities, published `age` seconds ago, directly
    (fast), and drop the counters so that the next open counts them, as on a ledger from before."""
    db = sqlite3.connect(path, isolation_level=None)
    at = time.time() - age
    db.execute("BEGIN")
    db.executemany("INSERT INTO bulks VALUES (?, 'orders', '[]', 'o', 'published', ?, ?, ?)",
                   [(f"old-{b}", at, at + b * 1e-3, per_bulk) for b in range(bulks)])
    db.executemany("INSERT INTO identities VALUES (?, ?)",
                   [(f"old-{b}-{n}", f"old-{b}") for b in range(bulks) for n in range(per_bulk)])
    db.execute("DELETE FROM meta WHERE key LIKE 'count_%'")
    db.execute("COMMIT")
    db.close()


def test_counters_stay_exact_across_every_write_and_reopening(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    ledger = SqliteLedger.open(path, owner=owner_id())
    # Given bulks prepared (one with a repeated identity), published, published twice, forgotten
    ledger.prepare("b1", "orders", [], ["m1", "m2", "m2"])
    ledger.prepare("b2", "orders", [], ["m3"])
    ledger.prepare("b3", "orders", [], ["m4", "m5", "m6"])
    _assert_counters_exact(ledger)
    ledger.mark_published("b1")
    ledger.mark_published("b1")  # a roll-forward marks again: no count moves
    ledger.mark_published("b3")
    ledger.forget("b2")
    with pytest.raises(DuplicateIdentityError):
        ledger.prepare("b4", "orders", [], ["m1", "m7"])  # refused: counts nothing
    _assert_counters_exact(ledger)
    assert ledger.stats().bulks == {"prepared": 0, "published": 2} and ledger.stats().identities == 5
    # When one is pruned, another forgotten although published, and the ledger reopened
    _age(path, ["b1"], 7200)
    assert ledger.prune(older_than=3600) == 2
    _assert_counters_exact(ledger)
    ledger.forget("b3")
    _assert_counters_exact(ledger)
    ledger.prepare("b5", "orders", [], ["m8"])
    ledger.close()
    again = SqliteLedger.open(path, owner=owner_id())
    # Then the counters still say exactly what the rows are
    _assert_counters_exact(again)
    assert again.stats().bulks == {"prepared": 1, "published": 0} and again.stats().identities == 1
    again.close()


def test_counters_are_counted_once_on_a_ledger_from_before_them(tmp_path: Path) -> None:
    # Given a ledger whose meta has no counters (written by an mqbridge before them)
    path = tmp_path / "ledger.sqlite3"
    SqliteLedger.open(path, owner=owner_id()).close()
    _fill(path, bulks=4, per_bulk=3, age=60)
    db = sqlite3.connect(path)
    assert db.execute("SELECT COUNT(*) FROM meta WHERE key LIKE 'count_%'").fetchone()[0] == 0
    db.close()
    # When it is opened, then its counters are the counts, and are kept from there on
    ledger = SqliteLedger.open(path, owner=owner_id())
    assert (ledger.stats().bulks, ledger.stats().identities) == ({"prepared": 0, "published": 4}, 12)
    ledger.prepare("new", "orders", [], ["n1"])
    _assert_counters_exact(ledger)
    ledger.close()


def test_stats_reads_counters_and_the_oldest_entry_by_an_index(ledger: Ledger) -> None:
    db = sqlite3.connect(ledger.path)
    plan = [row[3] for row in db.execute("EXPLAIN QUERY PLAN SELECT MIN(prepared_at) FROM bulks")]
    db.close()
    assert plan == ["SEARCH bulks USING COVERING INDEX bulks_by_prepared"], plan
    ledger.prepare("b1", "orders", [], ["m1"])
    _age(Path(ledger.path), ["b1"], 100)
    ledger.prepare("b2", "orders", [], ["m2"])
    assert abs(ledger.stats().oldest - (time.time() - 100)) < 5  # type: ignore[operator]


def test_prune_in_batches_removes_exactly_the_old_published_bulks(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # Given batches of at most 4 identities of 2 bulks, 5 old published bulks of 3 identities, an
    # old prepared bulk and a recent published one
    monkeypatch.setattr("mqbridge.landing.ledger.base.PRUNE_BATCH_IDENTITIES", 4)
    monkeypatch.setattr("mqbridge.landing.ledger.base.PRUNE_BATCH_BULKS", 2)
    path = tmp_path / "ledger.sqlite3"
    SqliteLedger.open(path, owner=owner_id()).close()
    _fill(path, bulks=5, per_bulk=3, age=7200)
    ledger = SqliteLedger.open(path, owner=owner_id())
    ledger.prepare("open", "orders", [], ["p1", "p2"])
    _age(path, ["open"], 7200)
    ledger.prepare("recent", "orders", [], ["r1"])
    ledger.mark_published("recent")
    batches: list[tuple[int, int]] = []
    original = ledger._prune_batch
    monkeypatch.setattr(ledger, "_prune_batch", lambda cutoff: batches.append(original(cutoff)) or batches[-1])
    # When it is pruned past one hour
    assert ledger.prune(older_than=3600) == 15
    # Then the old published bulks are gone, in batches of at most 4 identities, and nothing else
    assert all(identities <= 4 for _, identities in batches) and len(batches) >= 4
    assert sum(bulks for bulks, _ in batches) == 5
    db = sqlite3.connect(path)
    assert sorted(row[0] for row in db.execute("SELECT bulk_id FROM bulks")) == ["open", "recent"]
    assert sorted(row[0] for row in db.execute("SELECT identity FROM identities")) == ["p1", "p2", "r1"]
    db.close()
    _assert_counters_exact(ledger)
    assert ledger.stats().prune_runs == 1
    ledger.close()


def test_a_prune_holds_the_lock_for_one_batch_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a ledger with 60 old bulks of 100 identities, pruned in batches of 300 identities
    monkeypatch.setattr("mqbridge.landing.ledger.base.PRUNE_BATCH_IDENTITIES", 300)
    path = tmp_path / "ledger.sqlite3"
    SqliteLedger.open(path, owner=owner_id()).close()
    _fill(path, bulks=60, per_bulk=100, age=7200)
    ledger = SqliteLedger.open(path, owner=owner_id())
    batches: list[tuple[float, float]] = []
    first = threading.Event()
    original = ledger._prune_batch

    def timed_batch(cutoff: float) -> tuple[int, int]:
        start = time.perf_counter()
        try:
            return original(cutoff)
        finally:
            batches.append((start, time.perf_counter()))
            first.set()

    monkeypatch.setattr(ledger, "_prune_batch", timed_batch)
    pruner = threading.Thread(target=ledger.prune, args=(3600,))
    pruner.start()
    # When bulks are prepared and published meanwhile
    assert first.wait(10)
    landings: list[tuple[float, float]] = []
    n = 0
    while pruner.is_alive() and n < 200:
        start = time.perf_counter()
        ledger.prepare(f"new-{n}", "orders", [], [f"n{n}"])
        ledger.mark_published(f"new-{n}")
        landings.append((start, time.perf_counter()))
        n += 1
    pruner.join(30)
    # Then landings went on between the batches, and none waited through the prune: a prune holding the
    # lock throughout would keep a landing waiting through every batch after the first (19 or more).
    # A landing may span a batch or two more than it waited for: its thread is not always scheduled
    # between two batches on a busy machine (the unit tests run on four processes), which is no lock.
    assert len(batches) >= 20
    assert any(end < batches[-1][0] for _, end in landings), "no landing between two batches"
    spans = [sum(1 for b_start, b_end in batches if start <= b_start and b_end <= end) for start, end in landings]
    assert max(spans) <= 3, f"a landing waited through {max(spans)} prune batches of {len(batches)}"
    _assert_counters_exact(ledger)
    assert ledger.stats().identities == n
    ledger.close()


def test_ledger_verify_compares_row_counts_with_identities(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Given three published bulks: one whose files hold one row per identity, one with a row too
    # many, one with an unreadable file
    table = tmp_path / "t" / "put_date=2024-06-01"
    files = {f"b{i}": table / f"part-b{i}-00000.parquet" for i in (1, 2, 3)}
    ledger = SqliteLedger.open(ledger_path(tmp_path / "state"), owner=owner_id())
    for i, (bulk_id, final) in enumerate(files.items()):
        ledger.prepare(bulk_id, "orders", [(f"/gone/{i}", str(final))], [f"{bulk_id}-m1", f"{bulk_id}-m2"])
        ledger.mark_published(bulk_id)
    ledger.close()
    parquet_of_rows(files["b1"], 2)
    parquet_of_rows(files["b2"], 3)
    files["b3"].write_bytes(b"not parquet")
    # Then --verify names both and fails
    assert main(["ledger", "--config", str(ledger_config(tmp_path)), "--verify"]) == 1
    out = capsys.readouterr().out
    assert "verify: 2 published bulks do not hold one row per identity:" in out
    assert "  b2: 2 identities, 3 rows in 1 files" in out and "  b3: 2 identities, a file cannot be read" in out
    assert "row counts   1 bulks hold one row per identity" in out
    # And once the files are right it passes
    parquet_of_rows(files["b2"], 2)
    parquet_of_rows(files["b3"], 2)
    assert main(["ledger", "--config", str(ledger_config(tmp_path)), "--verify"]) == 0
    assert "verify: OK (3 published bulks, 3 files)" in capsys.readouterr().out


def test_a_prepare_is_a_heartbeat_of_its_owner(tmp_path: Path) -> None:
    # Given an owner on another host whose last heartbeat is older than the lease
    other = SqliteLedger.open(tmp_path / "l.sqlite3", owner="elsewhere/1:42:1.00")
    judge = SqliteLedger.open(tmp_path / "l.sqlite3", owner=owner_id())
    judge.lease = 5.0
    with other._write() as db:
        db.execute("INSERT INTO owners (owner, last_seen) VALUES (?, ?)", (other.owner, time.time() - 60))
    assert not judge.owner_alive(other.owner)
    # When it prepares a bulk (its control thread may not have ticked for a while)
    other.prepare("orders-1", "orders", [], ["a"])
    # Then it counts as alive for another lease: its bulk is not another bridge's to finish
    assert judge.owner_alive(other.owner)
    other.close()
    judge.close()


@pytest.mark.parametrize(("fault", "cure", "says"), [
    # SQLite's own limit stands in for a full disk (SQLITE_FULL, the same error a full disk gives)
    ("PRAGMA max_page_count = {pages}", "PRAGMA max_page_count = 1073741823", "full"),
    # and query_only for a read-only file or mount (SQLITE_READONLY)
    ("PRAGMA query_only = ON", "PRAGMA query_only = OFF", "readonly"),
])
def test_a_full_or_read_only_ledger_is_unavailable_and_the_same_handle_goes_on(
        tmp_path: Path, fault: str, cure: str, says: str) -> None:
    # Given a ledger that can no longer take writes
    ledger = SqliteLedger.open(tmp_path / "ledger.sqlite3", owner=owner_id())
    pages = ledger._db.execute("PRAGMA page_count").fetchone()[0]
    ledger._db.execute(fault.format(pages=pages))
    # Then a bulk's prepare is an outage, nothing recorded (the probe's one row may still fit a
    # page that is already there: it is the bulk that needs new ones)
    with pytest.raises(LedgerUnavailableError, match=says):
        ledger.prepare("b1", "orders", [], [f"m{i}" * 50 for i in range(5000)])
    if says == "readonly":
        with pytest.raises(LedgerUnavailableError, match=says):
            ledger.probe_write()
    assert ledger.in_progress() == []
    # And once there is room (or write access) again, it goes on
    ledger._db.execute(cure)
    ledger.prepare("b1", "orders", [], ["m1"])
    assert [b.bulk_id for b in ledger.in_progress()] == ["b1"]
    ledger.close()
