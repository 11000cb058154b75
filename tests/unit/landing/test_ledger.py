"""Unit tests of the landing ledger on a real SQLite file, the identity rules and `mqbridge ledger`."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mqbridge.cli import main
from mqbridge.errors import (
    DuplicateIdentityError,
    IdentityClaimedError,
    IdentityError,
    LedgerError,
    LedgerUnavailableError,
    SinkOutageError,
)
from mqbridge.identity import identity_of
from mqbridge.landing.ledger import Ledger, SqliteLedger, ledger_path, owner_alive, owner_id
from mqbridge.maintenance.engine.swap import purge_history, record_purge
from mqbridge.message import Message
from tests.support.ledger import dead_owner, ledger_config, parquet_of_rows, restarted_owner

MOVES = [("/t/_staging/o/b1/put_date=2024-01-01/part-0.parquet", "/t/put_date=2024-01-01/part-b1-00000.parquet")]


# -- round trips ------------------------------------------------------------------------------
def test_prepare_publish_forget_round_trip(ledger: Ledger) -> None:
    # Given a prepared bulk: its identities are not published yet, it is in progress
    ledger.prepare("b1", "orders", MOVES, ["m1", "m2"])
    assert ledger.published(["m1", "m2", "m3"]) == set()
    [bulk] = ledger.in_progress()
    assert (bulk.bulk_id, bulk.table, bulk.files, bulk.owner, bulk.identities) == (
        "b1", "orders", tuple(MOVES), owner_id(), 2)
    # When it is marked published
    ledger.mark_published("b1")
    # Then its identities are found, and nothing is in progress
    assert ledger.published(["m1", "m2", "m3"]) == {"m1", "m2"}
    assert ledger.in_progress() == []
    # And a rolled-back bulk leaves nothing behind
    ledger.prepare("b2", "orders", [], ["m3"])
    ledger.forget("b2")
    assert ledger.in_progress() == [] and ledger.identities_of("b2") == []
    assert ledger.stats().bulks == {"prepared": 0, "published": 1}
    # And a process forgets its own bulk only while it owns it (not once another took it over)
    ledger.prepare("b3", "orders", [], ["m4"])
    assert ledger.forget("b3", owner="another-host:1:1.00") is False and ledger.identities_of("b3") == ["m4"]
    assert ledger.forget("b3", owner=owner_id()) is True and ledger.in_progress() == []
    assert ledger.forget("b3", owner=owner_id()) is False  # gone


def test_an_identity_published_once_is_refused_by_prepare(ledger: Ledger) -> None:
    ledger.prepare("b1", "orders", [], ["m1"])
    ledger.mark_published("b1")
    with pytest.raises(DuplicateIdentityError) as info:
        ledger.prepare("b2", "orders", [], ["m2", "m1"])
    assert info.value.identities == ["m1"]
    assert [b.bulk_id for b in ledger.in_progress()] == []  # nothing of b2 was recorded


def test_an_identity_of_another_prepared_bulk_is_refused_until_that_bulk_is_decided(tmp_path: Path) -> None:
    # Given two processes sharing a ledger, the first has prepared a bulk holding m1
    path = tmp_path / "ledger.sqlite3"
    first, second = SqliteLedger.open(path, owner="h:1:1.00"), SqliteLedger.open(path, owner="h:2:2.00")
    try:
        first.prepare("b1", "orders", [], ["m1", "m2"])
        # When the second prepares a bulk holding m1 too (it read the message again after the first's
        # connection was lost): refused, nothing recorded, the claimed identities named
        with pytest.raises(IdentityClaimedError, match="in bulk b1 of h:1:1.00, prepared and not yet") as info:
            second.prepare("b2", "orders", [], ["m3", "m1"])
        assert info.value.identities == ["m1"]
        assert isinstance(info.value, DuplicateIdentityError)  # handled as a conflict like a published one
        assert [b.bulk_id for b in second.in_progress()] == ["b1"]
        # ... and a bulk of the same process holding it is refused as well
        with pytest.raises(IdentityClaimedError):
            first.prepare("b3", "orders", [], ["m2"])
        # Then once the first bulk is forgotten (rolled back, its version fenced) it may be prepared
        first.forget("b1")
        second.prepare("b2", "orders", [], ["m1", "m3", "m1"])  # duplicates within one bulk count once
        assert [b.identities for b in second.in_progress()] == [2]
        second.mark_published("b2")
        assert first.published(["m1", "m3"]) == {"m1", "m3"}
        # and a published one is refused as before (DuplicateIdentityError, not a claim)
        with pytest.raises(DuplicateIdentityError) as published:
            first.prepare("b4", "orders", [], ["m1"])
        assert not isinstance(published.value, IdentityClaimedError)
    finally:
        first.close()
        second.close()


def test_landing_of_names_the_published_bulk_of_an_identity(ledger: Ledger) -> None:
    # `mqbridge where`: the bulk, its table, its files (their put_date) and when it was published
    ledger.prepare("b1", "orders", MOVES, ["m1", "m2"])
    assert ledger.landing_of("m1") is None  # prepared is not landed
    before = time.time()
    ledger.mark_published("b1")
    found = ledger.landing_of("m1")
    assert found is not None and (found.bulk_id, found.table, found.files) == ("b1", "orders", tuple(MOVES))
    assert before <= found.published_at <= time.time()
    assert ledger.landing_of("m3") is None and ledger.landing_of("") is None


def test_landing_of_reads_a_read_only_ledger(tmp_path: Path) -> None:
    writer = SqliteLedger.open(tmp_path / "ledger.sqlite3", owner=owner_id())
    writer.prepare("b1", "orders", MOVES, ["m1"])
    writer.mark_published("b1")
    reader = SqliteLedger.open_read_only(tmp_path / "ledger.sqlite3", owner=owner_id())
    try:
        found = reader.landing_of("m1")
        assert found is not None and found.bulk_id == "b1"
    finally:
        reader.close()
        writer.close()


def test_mark_published_of_an_unknown_bulk_is_an_error(ledger: Ledger) -> None:
    with pytest.raises(LedgerError, match="no bulk 'nope'"):
        ledger.mark_published("nope")


def test_identities_over_the_sqlite_variable_limit(ledger: Ledger) -> None:
    many = [f"id-{n}" for n in range(2707)]  # more than SQLite's 999 host parameters would allow
    ledger.prepare("big", "orders", [], many)
    ledger.mark_published("big")
    asked = many + [f"other-{n}" for n in range(40_000)]
    assert ledger.published(asked) == set(many)
    with pytest.raises(DuplicateIdentityError):
        ledger.prepare("again", "orders", [], asked)


def test_identity_lookups_start_from_the_identities_asked(ledger: Ledger) -> None:
    """The plan of `published`/`prepare`/`prepared_holding`: each asked identity is found by the
    primary key, never by walking the ledger's bulks (which grows with the dedupe window)."""
    for n in range(30):
        ledger.prepare(f"b{n}", "orders", [], [f"b{n}-{i}" for i in range(50)])
        ledger.mark_published(f"b{n}")
    db = sqlite3.connect(ledger.path)
    try:
        plans = [[row[3] for row in db.execute(f"EXPLAIN QUERY PLAN SELECT i.identity {clause}", parameters)]
                 for clause, parameters in ((SqliteLedger.HOLDING, ('["x"]', "published")),
                                            (SqliteLedger.HOLDING_ANY, ('["x"]',)))]
    finally:
        db.close()
    for plan in plans:
        assert plan[0].startswith("SCAN j VIRTUAL TABLE"), plan
        assert any("SEARCH i USING PRIMARY KEY (identity=?)" in step for step in plan), plan
        assert not any("bulks_by_state" in step for step in plan), plan


def test_prune_removes_published_bulks_older_than_the_window(ledger: Ledger) -> None:
    ledger.prepare("old", "orders", [], ["a", "b"])
    ledger.mark_published("old")
    ledger.prepare("open", "orders", [], ["c"])  # prepared bulks are never pruned
    assert ledger.prune(older_than=3600) == 0  # published just now: inside the window
    assert ledger.prune(older_than=0) == 2
    assert ledger.published(["a", "b"]) == set()
    stats = ledger.stats()
    assert (stats.bulks, stats.identities, stats.prune_runs) == ({"prepared": 1, "published": 0}, 1, 2)
    assert stats.last_prune is not None and stats.oldest is not None and stats.file_bytes > 0


def test_two_handles_on_one_file_see_each_others_commits(tmp_path: Path) -> None:
    # Given two processes' views of one state_dir
    path = tmp_path / "ledger.sqlite3"
    first, second = SqliteLedger.open(path, owner="h:1:1.00"), SqliteLedger.open(path, owner="h:2:2.00")
    try:
        first.prepare("b1", "orders", MOVES, ["m1"])
        assert [b.owner for b in second.in_progress()] == ["h:1:1.00"]
        first.mark_published("b1")
        assert second.published(["m1"]) == {"m1"}
        with pytest.raises(DuplicateIdentityError):
            second.prepare("b2", "orders", [], ["m1"])
        assert second.created is False and first.created is True
    finally:
        first.close()
        second.close()


def test_threads_share_one_ledger(ledger: Ledger) -> None:
    def land(n: int) -> None:
        for k in range(20):
            ledger.prepare(f"b{n}-{k}", "orders", [], [f"{n}-{k}"])
            ledger.mark_published(f"b{n}-{k}")

    threads = [threading.Thread(target=land, args=(n,), name=f"land-{n}") for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert ledger.stats().bulks["published"] == 80


# -- durability and damaged files -------------------------------------------------------------
def test_durability_settings_are_applied(ledger: Ledger) -> None:
    db = ledger._db  # the connection the ledger writes with
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert db.execute("PRAGMA busy_timeout").fetchone()[0] >= 1000


def test_the_configured_busy_timeout_is_the_one_sqlite_waits(tmp_path: Path) -> None:
    # `[ledger] busy_timeout`, as `open_ledger` passes it: the writer's and the reader's connections wait as long
    ledger = SqliteLedger.open(tmp_path / "ledger.sqlite3", owner=owner_id(), busy_timeout=2.5)
    try:
        assert ledger._db.execute("PRAGMA busy_timeout").fetchone()[0] == 2500
        with ledger._read() as reader:
            assert reader.execute("PRAGMA busy_timeout").fetchone()[0] == 2500
    finally:
        ledger.close()
    # and WAL is a property of the file, seen by any other connection
    other = sqlite3.connect(ledger.path)
    assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    other.close()


def test_a_corrupt_file_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    path.write_bytes(b"this is not a database, it is a text file " * 200)
    with pytest.raises(LedgerError, match=f"ledger {path}: unreadable or corrupt"):
        SqliteLedger.open(path, owner=owner_id())
    assert path.read_bytes().startswith(b"this is not")  # never replaced by an empty ledger


def test_a_damaged_ledger_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    ledger = SqliteLedger.open(path, owner=owner_id())
    ledger.prepare("b1", "orders", [], [f"id-{n}" for n in range(5000)])
    ledger.close()
    sqlite3.connect(path).execute("PRAGMA wal_checkpoint(TRUNCATE)").close()
    data = bytearray(path.read_bytes())
    data[4096 * 2:4096 * 4] = b"\xff" * 8192  # overwrite pages in the middle of the file
    path.write_bytes(bytes(data))
    with pytest.raises(LedgerError, match=f"ledger {path}"):
        SqliteLedger.open(path, owner=owner_id())


def test_another_sqlite_database_is_not_taken_for_a_ledger(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    sqlite3.connect(path).execute("CREATE TABLE t (x)").connection.commit()
    with pytest.raises(LedgerError, match="not an mqbridge ledger"):
        SqliteLedger.open(path, owner=owner_id())


def test_a_missing_file_is_created(tmp_path: Path) -> None:
    ledger = SqliteLedger.open(ledger_path(tmp_path / "new" / "state"), owner=owner_id())
    assert ledger.created and ledger.path.exists()
    ledger.close()


def _open_when_told(path: Path, go: Any, results: Any) -> None:
    go.wait()
    try:
        SqliteLedger.open(path, owner=owner_id()).close()
        results.put("ok")
    except LedgerError as exc:
        results.put(str(exc))


def test_processes_started_together_all_open_a_new_ledger(tmp_path: Path) -> None:
    """Two bridges started at once on one state_dir: switching the new file to write-ahead logging
    returns "database is locked" at once (no busy handler) to the one that loses the race, which
    used to stop that bridge with "unreadable or corrupt". Raced often enough to have failed
    (about one round in seven did) before set-up was retried while the file is busy."""
    forked = multiprocessing.get_context("fork")
    failures = []
    for round_ in range(30):
        path = tmp_path / f"round-{round_}" / "ledger.sqlite3"
        go, results = forked.Event(), forked.Queue()
        openers = [forked.Process(target=_open_when_told, args=(path, go, results)) for _ in range(6)]
        for opener in openers:
            opener.start()
        time.sleep(0.05)
        go.set()
        failures += [r for r in (results.get(timeout=60) for _ in openers) if r != "ok"]
        for opener in openers:
            opener.join(timeout=60)
    assert failures == []


def test_a_ledger_locked_past_the_busy_timeout_is_named_locked_not_corrupt(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "ledger.sqlite3"
    SqliteLedger.open(path, owner=owner_id()).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process in the middle of a write
    monkeypatch.setattr("mqbridge.landing.ledger.sqlite.BUSY_TIMEOUT_MS", 300)
    try:
        with pytest.raises(LedgerError, match="locked by another process for more than") as raised:
            SqliteLedger.open(path, owner=owner_id())
        assert "corrupt" not in str(raised.value)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    SqliteLedger.open(path, owner=owner_id()).close()  # and opens once the writer is done


# -- owners -----------------------------------------------------------------------------------
def test_owners_alive_and_dead() -> None:
    assert owner_alive(owner_id())
    assert not owner_alive(dead_owner())
    assert not owner_alive(restarted_owner())  # same pid, another create time: pid reused
    assert owner_alive("another-host.example:1:1.00")  # cannot be checked: assumed alive


# -- identity rules ---------------------------------------------------------------------------
def test_identity_rules() -> None:
    message = Message("ID:1", b"<order/>", "amq", "/queue/orders", headers={"order-id": "A-7"})
    assert identity_of(message, "msg_id") == "ID:1"
    assert identity_of(message, "header:order-id") == "A-7"
    assert identity_of(message, "body-sha256") == hashlib.sha256(b"<order/>").hexdigest()
    with pytest.raises(IdentityError, match="message ID:1 has no header 'business-id'"):
        identity_of(message, "header:business-id")
    with pytest.raises(ValueError):
        identity_of(message, "header:")


# -- mqbridge ledger --------------------------------------------------------------------------
def test_ledger_command_prints_the_counts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = SqliteLedger.open(ledger_path(tmp_path / "state"), owner=owner_id())
    ledger.prepare("b1", "orders", [], ["m1", "m2"])
    ledger.mark_published("b1")
    ledger.prepare("b2", "orders", [], ["m3"])
    ledger.close()
    assert main(["ledger", "--config", str(ledger_config(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert f"ledger: {tmp_path / 'state' / 'ledger.sqlite3'}" in out
    assert "1 prepared, 1 published" in out and "identities   3" in out and "prune runs   0" in out


def test_ledger_verify_lists_missing_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    present, missing = tmp_path / "t" / "part-b1-00000.parquet", tmp_path / "t" / "part-b1-00001.parquet"
    present.parent.mkdir()
    parquet_of_rows(present, 1)  # b1's one row
    ledger = SqliteLedger.open(ledger_path(tmp_path / "state"), owner=owner_id())
    ledger.prepare("b1", "orders", [("/gone/0", str(present)), ("/gone/1", str(missing))], ["m1"])
    ledger.mark_published("b1")
    ledger.close()
    assert main(["ledger", "--config", str(ledger_config(tmp_path)), "--verify"]) == 1
    out = capsys.readouterr().out
    assert f"verify: 1 of 2 published files are missing:\n  b1: {missing}" in out
    parquet_of_rows(missing, 0)
    assert main(["ledger", "--config", str(ledger_config(tmp_path)), "--verify"]) == 0
    assert "verify: OK (1 published bulks, 2 files)" in capsys.readouterr().out


def test_ledger_verify_tells_files_a_purge_removed_from_missing_ones(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # Given two published bulks in one container, and a second container; a purge swapped the first
    # container after both were published (its history line), one line of the history torn
    table = tmp_path / "t"
    old = [table / "put_date=2024-06-01" / f"part-b{i}-00000.parquet" for i in (1, 2)]
    other = table / "put_date=2024-06-02" / "part-b3-00000.parquet"
    ledger = SqliteLedger.open(ledger_path(tmp_path / "state"), owner=owner_id())
    for i, final in enumerate([*old, other], 1):
        ledger.prepare(f"b{i}", "orders", [(f"/gone/{i}", str(final))], [f"m{i}"])
        ledger.mark_published(f"b{i}")
    ledger.close()
    table.mkdir()
    (table / "_mqbridge_purged.jsonl").write_text('{"container": "put_date=2024-06-0')
    record_purge(table, "put_date=2024-06-01", "copy")

    # Then the files of the purged container are not missing, the other one is
    assert main(["ledger", "--config", str(ledger_config(tmp_path)), "--verify"]) == 1
    out = capsys.readouterr().out
    assert (f"verify: 1 of 3 published files are missing; 2 removed since by purges of their containers:\n"
            f"  b3: {other}") in out

    # and once that container is purged too, nothing is
    record_purge(table, "put_date=2024-06-02", "drop")
    assert main(["ledger", "--config", str(ledger_config(tmp_path)), "--verify"]) == 0
    assert "verify: OK (3 published bulks, 3 files; 3 removed since by purges" in capsys.readouterr().out
    assert purge_history(table).keys() == {"put_date=2024-06-01", "put_date=2024-06-02"}


def test_ledger_verify_does_not_excuse_a_file_published_after_the_purge(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    table = tmp_path / "t"
    table.mkdir()
    (table / "_mqbridge_purged.jsonl").write_text(
        json.dumps({"container": "put_date=2024-06-01", "strategy": "copy", "at": time.time() - 3600}) + "\n")
    final = table / "put_date=2024-06-01" / "part-b1-00000.parquet"
    ledger = SqliteLedger.open(ledger_path(tmp_path / "state"), owner=owner_id())
    ledger.prepare("b1", "orders", [("/gone/1", str(final))], ["m1"])
    ledger.mark_published("b1")
    ledger.close()
    assert main(["ledger", "--config", str(ledger_config(tmp_path)), "--verify"]) == 1
    assert f"verify: 1 of 1 published files are missing:\n  b1: {final}" in capsys.readouterr().out


def test_ledger_command_without_a_ledger_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ledger", "--config", str(ledger_config(tmp_path)), "--verify"]) == 1
    assert "no ledger file" in capsys.readouterr().out
    assert not (tmp_path / "state" / "ledger.sqlite3").exists()  # asking did not create it


def test_bulk_sizes_counts_the_identities_of_published_bulks_only(ledger: Ledger) -> None:
    # Given two published bulks (one with a repeated identity) and one prepared
    ledger.prepare("b1", "orders", MOVES, ["m1", "m2", "m2"])
    ledger.prepare("b2", "orders", MOVES, ["m3"])
    ledger.prepare("b3", "orders", MOVES, ["m4", "m5"])
    ledger.mark_published("b1")
    ledger.mark_published("b2")
    # Then only the published ones are listed, each with its distinct identities
    assert ledger.bulk_sizes() == {"b1": 2, "b2": 1}


def test_a_ledger_that_cannot_take_writes_now_is_unavailable_not_untrustworthy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a ledger another process keeps write-locked past the busy timeout
    monkeypatch.setattr("mqbridge.landing.ledger.sqlite.BUSY_TIMEOUT_MS", 200)
    path = tmp_path / "ledger.sqlite3"
    ledger = SqliteLedger.open(path, owner=owner_id())
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        # Then a bulk's prepare and the breaker's probe are outages (LedgerUnavailableError, a
        # SinkOutageError), not the fatal LedgerError of a ledger whose records are in doubt
        for attempt in (lambda: ledger.prepare("b1", "orders", [], ["m1"]), ledger.probe_write):
            with pytest.raises(LedgerUnavailableError, match="unavailable: database is locked") as raised:
                attempt()
            assert isinstance(raised.value, SinkOutageError) and not isinstance(raised.value, LedgerError)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    # And once the lock is gone the same handle goes on
    ledger.probe_write()
    ledger.prepare("b1", "orders", [], ["m1"])
    assert [b.bulk_id for b in ledger.in_progress()] == ["b1"]
    ledger.close()
