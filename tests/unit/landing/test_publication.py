"""Unit tests of staging, publication and start-up recovery on real files and a real ledger."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mqbridge.counters import Counters
from mqbridge.errors import (
    LedgerUnavailableError,
    PublicationError,
    SinkOutageError,
    StagingMismatchError,
)
from mqbridge.landing.landing import Landing
from mqbridge.landing.ledger import Ledger, SqliteLedger, owner_id
from mqbridge.landing.publication import (
    discard,
    owner_dirname,
    publish,
    recover,
    staged_moves,
    staging_dir,
    verify_staged,
)
from tests.support.ledger import dead_owner, stage_like_spark


@pytest.fixture
def table(tmp_path: Path) -> Path:
    path = tmp_path / "warehouse" / "orders"
    path.mkdir(parents=True)
    return path


def open_ledger(tmp_path: Path, owner: str) -> Ledger:
    return SqliteLedger.open(tmp_path / "state" / "ledger.sqlite3", owner=owner)


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    opened = open_ledger(tmp_path, owner_id())
    yield opened
    opened.close()


def landed(table: Path) -> list[str]:
    """The table's visible files, as a Parquet reader lists them (underscore directories skipped)."""
    return sorted(str(p.relative_to(table)) for p in table.rglob("*.parquet")
                  if not any(part.startswith("_") for part in p.relative_to(table).parts))


def prepare_dead_bulk(tmp_path: Path, table: Path, bulk_id: str, identities: list[str],
                      files: dict[str, int] | None = None, owner: str | None = None) -> list[tuple[str, str]]:
    """A bulk staged and prepared by a process that has since died (or by `owner`)."""
    owner = owner or dead_owner()
    staging = staging_dir(table, owner, bulk_id)
    stage_like_spark(staging, files or {"2024-01-01": 1, "2024-01-02": 2})
    moves = staged_moves(table, staging, bulk_id)
    dead = open_ledger(tmp_path, owner)
    dead.prepare(bulk_id, "orders", moves, identities)
    dead.close()
    return moves


# -- staging and publication ------------------------------------------------------------------
def test_staging_is_under_an_underscore_directory_named_after_the_owner(table: Path) -> None:
    staging = staging_dir(table, "host-1:4242:1712.50", "orders-ab12-00000001")
    assert staging == table / "_staging" / "host-1_4242_1712.50" / "orders-ab12-00000001"
    assert owner_dirname("h:1:2.00") == "h_1_2.00"
    with pytest.raises(ValueError):
        staging_dir(table, "h:1:2.00", "../escape")


def test_staged_moves_name_files_per_put_date(table: Path) -> None:
    staging = staging_dir(table, owner_id(), "b1")
    stage_like_spark(staging, {"2024-01-02": 2, "2024-01-01": 1})
    (staging / "_temporary" / "0" / "put_date=2024-01-01").mkdir(parents=True)  # an uncommitted attempt
    (staging / "_temporary" / "0" / "put_date=2024-01-01" / "part-00009-x.parquet").write_bytes(b"x")
    moves = staged_moves(table, staging, "b1")
    assert [final for _, final in moves] == [
        str(table / "put_date=2024-01-01" / "part-b1-00000.parquet"),
        str(table / "put_date=2024-01-02" / "part-b1-00001.parquet"),
        str(table / "put_date=2024-01-02" / "part-b1-00002.parquet"),
    ]
    assert all(Path(staged).is_relative_to(staging) and staged.endswith(".snappy.parquet") for staged, _ in moves)
    assert staged_moves(table, staging, "b1") == moves  # deterministic: roll-forward repeats it


def test_publish_moves_into_place_and_is_idempotent(table: Path) -> None:
    staging = staging_dir(table, owner_id(), "b1")
    stage_like_spark(staging, {"2024-01-01": 2})
    moves = staged_moves(table, staging, "b1")
    assert landed(table) == []  # staged files are invisible to readers
    publish(moves)
    assert landed(table) == ["put_date=2024-01-01/part-b1-00000.parquet", "put_date=2024-01-01/part-b1-00001.parquet"]
    publish(moves)  # again, as after a crash before mark_published
    assert len(landed(table)) == 2
    discard(staging)
    assert not staging.exists() and not staging.parent.exists()


def test_publish_refuses_a_move_with_neither_source_nor_target(table: Path) -> None:
    staging = staging_dir(table, owner_id(), "b1")
    stage_like_spark(staging, {"2024-01-01": 2})
    moves = staged_moves(table, staging, "b1")
    Path(moves[1][0]).unlink()
    with pytest.raises(PublicationError, match="1 staged files are gone"):
        publish(moves)
    assert landed(table) == []  # checked before moving anything


# -- recovery ---------------------------------------------------------------------------------
def test_a_dead_owners_bulk_is_rolled_forward_once(tmp_path: Path, table: Path, ledger: Ledger) -> None:
    # Given a bulk prepared by a process that died before publishing it
    moves = prepare_dead_bulk(tmp_path, table, "b1", ["m1", "m2"])
    # When this process starts
    report = recover(ledger, [table], warehouse=table.parent)
    # Then its files are in the table, it is published, and its staging is gone
    assert (report.rolled_forward, report.rolled_back, report.skipped_live) == (1, 0, 0)
    assert report.stale_dirs_removed == 1
    assert landed(table) == sorted(str(Path(final).relative_to(table)) for _, final in moves)
    assert ledger.in_progress() == [] and ledger.published(["m1", "m2"]) == {"m1", "m2"}
    assert not (table / "_staging").exists() or list((table / "_staging").iterdir()) == []
    # And a second start changes nothing
    assert recover(ledger, [table], warehouse=table.parent) == type(report)(0, 0, 0, 0)
    assert len(landed(table)) == 3


def test_a_half_published_bulk_is_completed(tmp_path: Path, table: Path, ledger: Ledger) -> None:
    moves = prepare_dead_bulk(tmp_path, table, "b1", ["m1"])
    publish(moves[:1])  # the process died after its first rename
    assert len(landed(table)) == 1
    assert recover(ledger, [table], warehouse=table.parent).rolled_forward == 1
    assert len(landed(table)) == 3 and ledger.published(["m1"]) == {"m1"}


def test_a_live_owners_bulk_and_staging_are_left_alone(tmp_path: Path, table: Path, ledger: Ledger) -> None:
    # Given another live bridge (here: this very process) in the middle of a bulk
    other = open_ledger(tmp_path, owner_id())
    staging = staging_dir(table, owner_id(), "live")
    stage_like_spark(staging, {"2024-01-01": 1})
    staging_moves = staged_moves(table, staging, "live")
    other.prepare("live", "orders", staging_moves, ["m1"])
    other.close()
    report = recover(ledger, [table], warehouse=table.parent)
    assert (report.rolled_forward, report.skipped_live, report.stale_dirs_removed) == (0, 1, 0)
    assert Path(staging_moves[0][0]).exists() and landed(table) == []
    assert [b.bulk_id for b in ledger.in_progress()] == ["live"]


def test_a_bulk_on_another_host_is_left_alone(tmp_path: Path, table: Path, ledger: Ledger) -> None:
    remote = open_ledger(tmp_path, "elsewhere.example:1:1.00")
    remote.prepare("remote", "orders", [("/nowhere/a", "/nowhere/b")], ["m1"])
    remote.close()
    (table / "_staging" / "elsewhere.example_1_1.00").mkdir(parents=True)
    report = recover(ledger, [table], warehouse=table.parent)
    assert (report.skipped_live, report.stale_dirs_removed) == (1, 0)
    assert (table / "_staging" / "elsewhere.example_1_1.00").is_dir()


def test_stale_staging_and_spark_temporary_are_removed(tmp_path: Path, table: Path, ledger: Ledger) -> None:
    # Given a dead process of this ledger whose staging never got prepared, and Spark's leftovers in the table
    owner = dead_owner()
    dead = open_ledger(tmp_path, owner)
    dead.heartbeat()  # as every bridge does when it opens its ledger
    dead.close()
    stale = staging_dir(table, owner, "never-prepared")
    stage_like_spark(stale, {"2024-01-01": 1})
    (table / "_temporary" / "0" / "_temporary").mkdir(parents=True)
    live = staging_dir(table, owner_id(), "writing")
    live.mkdir(parents=True)
    report = recover(ledger, [table], warehouse=table.parent)
    assert report.stale_dirs_removed == 2
    assert not stale.parent.exists() and not (table / "_temporary").exists()
    assert live.is_dir()  # our own (live) staging stays


def test_a_dead_owners_staging_of_another_ledger_is_left_to_that_ledgers_recovery(
        tmp_path: Path, table: Path, ledger: Ledger) -> None:
    # Given a bulk a dead bridge with another ledger (another state_dir on this warehouse) prepared
    elsewhere = tmp_path / "other-bridge"
    owner = dead_owner()
    staging = staging_dir(table, owner, "theirs")
    stage_like_spark(staging, {"2024-01-01": 1})
    theirs = SqliteLedger.open(elsewhere / "state" / "ledger.sqlite3", owner=owner)
    theirs.prepare("theirs", "orders", staged_moves(table, staging, "theirs"), ["m1"])
    theirs.close()
    # When this bridge starts: its ledger never knew that owner, so its staged files stay
    report = recover(ledger, [table], warehouse=table.parent)
    assert report.stale_dirs_removed == 0 and any(staging.rglob("*.parquet"))
    # and that bridge's own start rolls its bulk forward
    mine = SqliteLedger.open(elsewhere / "state" / "ledger.sqlite3", owner=owner_id())
    try:
        assert recover(mine, [table], warehouse=table.parent).rolled_forward == 1
    finally:
        mine.close()
    assert landed(table) == ["put_date=2024-01-01/part-theirs-00000.parquet"]


def test_a_dead_bulk_whose_messages_another_bulk_published_is_rolled_back(
        tmp_path: Path, table: Path, ledger: Ledger) -> None:
    moves = prepare_dead_bulk(tmp_path, table, "dead", ["m1", "m2"])
    # the messages were redelivered and landed by another bulk before this start (by a bridge from
    # before `prepare` refused an identity another prepared bulk holds: recorded here as published)
    ledger.adopt("winner", "orders", ["m2"], time.time())
    report = recover(ledger, [table], warehouse=table.parent)
    assert (report.rolled_forward, report.rolled_back) == (0, 1)
    assert landed(table) == [] and not any(Path(staged).exists() for staged, _ in moves)
    assert ledger.in_progress() == []


def test_a_bulk_whose_staged_file_is_gone_is_reported_stuck_and_the_others_recover(
        tmp_path: Path, table: Path, ledger: Ledger) -> None:
    # Given two dead bulks: one whose staged file is gone (never published), one intact
    moves = prepare_dead_bulk(tmp_path, table, "broken", ["m1"], files={"2024-01-01": 1})
    Path(moves[0][0]).unlink()
    prepare_dead_bulk(tmp_path, table, "intact", ["m2"], files={"2024-01-02": 1})
    # When this process starts
    report = recover(ledger, [table], warehouse=table.parent)
    # Then the intact one is rolled forward, the broken one reported with its bulk, table and what is gone
    assert report.rolled_forward == 1 and [(e.bulk_id, e.table) for e in report.stuck] == [("broken", "orders")]
    assert "prepared bulk broken of table orders cannot be rolled forward: 1 of its 1 staged files are gone" \
        in str(report.stuck[0])
    assert [b.bulk_id for b in ledger.in_progress()] == ["broken"]  # still prepared: an operator decides
    # and its staging directory stays (the bulk's claim on its files, see unpublished_bulks)
    assert staging_dir(table, ledger.in_progress()[0].owner, "broken").is_dir()


def test_a_live_bridge_rolls_forward_a_dead_owners_bulk_when_its_messages_come_back(
        tmp_path: Path, table: Path, ledger: Ledger) -> None:
    # Given a bulk a dead process moved into the table but never marked published
    moves = prepare_dead_bulk(tmp_path, table, "orders-dead-00000001", ["m1", "m2"])
    publish(moves[:1])
    landing = Landing(ledger=ledger, owner=ledger.owner, counters=Counters(),
                      dedupe_window=3600.0, warehouse=table.parent)
    # When its messages come back to this (live) bridge
    found = landing.published(["m1", "m2", "m3"])
    # Then they count as landed, the bulk is finished and published, its staging is gone
    assert found == {"m1", "m2"}
    assert len(landed(table)) == 3 and ledger.in_progress() == []
    assert not (table / "_staging").exists() or not any((table / "_staging").rglob("*.parquet"))
    assert landing.counters.total("recovery_rolled_forward") == 1


def test_a_live_owners_prepared_bulk_is_not_taken_over(tmp_path: Path, table: Path, ledger: Ledger,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # A prepared bulk of another process that is still running (here: this test process) stays its own
    staging = staging_dir(table, owner_id(), "orders-live-00000001")
    stage_like_spark(staging, {"2024-01-01": 1})
    ledger.prepare("orders-live-00000001", "orders", staged_moves(table, staging, "orders-live-00000001"), ["x"])
    other = Landing(ledger=ledger, owner="another-host:1:1.00", counters=Counters(),
                    dedupe_window=3600.0, warehouse=table.parent)
    # Another bridge that meets "x" again is not told "not landed" (it would land it twice): it waits
    # for the bulk, and past CLAIM_WAIT gives its unit back (an outage, uncounted)
    monkeypatch.setattr("mqbridge.landing.landing.CLAIM_WAIT", 0.3)
    with pytest.raises(LedgerUnavailableError, match="in bulk orders-live-00000001, prepared .* by .*alive or within"):
        other.published(["x", "y"])
    assert len(ledger.in_progress()) == 1 and landed(table) == []
    # Once its owner has published it, the same question finds "x" landed, at once
    publish(staged_moves(table, staging, "orders-live-00000001"))
    ledger.mark_published("orders-live-00000001")
    assert other.published(["x", "y"]) == {"x"}


def test_an_owner_in_another_pid_namespace_is_judged_by_its_heartbeat(tmp_path: Path, table: Path,
                                                                       ledger: Ledger) -> None:
    # Given a bulk prepared by a bridge of this host name in another pid namespace (another
    # container): its pid means nothing here, whatever process has that number in ours
    stranger = f"{socket.gethostname()}/1:{os.getpid()}:1000.00"
    moves = prepare_dead_bulk(tmp_path, table, "b1", ["m1"], owner=stranger)
    ledger.lease = 60.0
    theirs = SqliteLedger.open(Path(ledger.path), owner=stranger)
    theirs.heartbeat()  # its heartbeat is fresh
    theirs.close()
    assert ledger.owner_alive(stranger) and recover(ledger, [table], warehouse=table.parent).skipped_live == 1
    # When its heartbeat is older than the lease, it is dead: its bulk is finished here
    ledger.lease = 0.0
    assert not ledger.owner_alive(stranger)
    assert recover(ledger, [table], warehouse=table.parent).rolled_forward == 1
    assert landed(table) == sorted(str(Path(final).relative_to(table)) for _, final in moves)


# -- what is staged is checked before anything is recorded ---------------------------------------
def test_staged_files_must_hold_the_bulks_rows(table: Path) -> None:
    staging = staging_dir(table, owner_id(), "b1")
    stage_like_spark(staging, {"2024-01-01": 1, "2024-01-02": 2}, rows_per_file=5)
    moves = staged_moves(table, staging, "b1")
    verify_staged(moves, 15, staging, what="bulk b1")  # 3 files of 5 rows: as expected
    with pytest.raises(StagingMismatchError, match=r"bulk b1: expected 16 rows staged, found 15 rows in 3 files"):
        verify_staged(moves, 16, staging, what="bulk b1")


def test_nothing_staged_is_an_outage_naming_the_staging_directory(table: Path) -> None:
    # Spark wrote somewhere this process does not see: the staging directory is empty or missing
    staging = staging_dir(table, owner_id(), "b1")
    with pytest.raises(StagingMismatchError, match="expected 3 rows staged, found no Parquet file under") as raised:
        verify_staged(staged_moves(table, staging, "b1"), 3, staging, what="bulk b1")
    assert str(staging) in str(raised.value) and "warehouse must be the same directory" in str(raised.value)
    assert isinstance(raised.value, SinkOutageError)  # the unit goes back uncounted


def test_a_staged_file_that_is_not_parquet_is_an_outage(table: Path) -> None:
    staging = staging_dir(table, owner_id(), "b1")
    stage_like_spark(staging, {"2024-01-01": 1})
    next(staging.rglob("part-*.parquet")).write_bytes(b"truncated")
    with pytest.raises(StagingMismatchError, match="cannot be read back"):
        verify_staged(staged_moves(table, staging, "b1"), 1, staging, what="bulk b1")


def test_land_records_nothing_when_the_staged_rows_are_missing(table: Path, ledger: Ledger) -> None:
    # Given a bulk of 4 messages whose staging holds 3 rows (a file lost on the way)
    landing = Landing(ledger=ledger, owner=ledger.owner, counters=Counters(),
                      dedupe_window=3600, warehouse=table.parent)
    staging = staging_dir(table, ledger.owner, "b1")
    stage_like_spark(staging, {"2024-01-01": 1}, rows_per_file=3)
    # When it is landed: an outage, and the ledger holds nothing of it, the table nothing either
    with pytest.raises(StagingMismatchError):
        landing.land("b1", "orders", table, staging, ["m1", "m2", "m3", "m4"])
    assert ledger.in_progress() == [] and ledger.published(["m1", "m2", "m3", "m4"]) == set()
    assert landed(table) == [] and not staging.exists()
    # And once the staging holds every row, the same bulk lands
    stage_like_spark(staging, {"2024-01-01": 1}, rows_per_file=4)
    landing.land("b1", "orders", table, staging, ["m1", "m2", "m3", "m4"])
    assert ledger.published(["m1", "m2", "m3", "m4"]) == {"m1", "m2", "m3", "m4"}
    landing.close()
