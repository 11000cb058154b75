"""Recovery only touches paths of the warehouse's own tables: a prepared bulk whose ledger entry
names anything else is refused with an error and left alone, its files untouched."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mqbridge.counters import Counters
from mqbridge.errors import LedgerError
from mqbridge.landing.landing import Landing
from mqbridge.landing.ledger import Ledger, SqliteLedger, ledger_path, owner_id
from mqbridge.landing.publication import recover, staged_moves, staging_dir
from tests.support.ledger import dead_owner, stage_like_spark


@pytest.fixture
def table(tmp_path: Path) -> Path:
    path = tmp_path / "warehouse" / "orders"
    path.mkdir(parents=True)
    return path


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    opened = SqliteLedger.open(ledger_path(tmp_path), owner=owner_id())
    yield opened
    opened.close()


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file outside the warehouse that a tampered ledger aims at."""
    path = tmp_path / "elsewhere" / "precious.txt"
    path.parent.mkdir()
    path.write_text("keep me")
    return path


def dead_bulk(tmp_path: Path, table: Path, bulk_id: str, identities: list[str]) -> None:
    """A bulk staged and prepared by mqbridge in a process that has since died."""
    owner = dead_owner()
    staging = staging_dir(table, owner, bulk_id)
    stage_like_spark(staging, {"2024-01-01": 1})
    dead = SqliteLedger.open(ledger_path(tmp_path), owner=owner)
    dead.prepare(bulk_id, "orders", staged_moves(table, staging, bulk_id), identities)
    dead.close()


def tampered_bulk(tmp_path: Path, table: Path, moves: list[tuple[str, str]], *, name: str = "orders") -> None:
    """A bulk of a dead owner whose ledger entry holds `moves` as written (not by mqbridge)."""
    dead = SqliteLedger.open(ledger_path(tmp_path), owner=dead_owner())
    dead.prepare("orders-x-00000001", name, moves, ["m1"])
    dead.close()


def cases(table: Path, victim: Path) -> dict[str, tuple[list[tuple[str, str]], str]]:
    staged = staging_dir(table, dead_owner(), "orders-x-00000001") / "put_date=2024-01-01" / "part-0.parquet"
    final = table / "put_date=2024-01-01" / "part-orders-x-00000001-00000.parquet"
    return {
        "a staged file outside": ([(str(victim), str(final))], "orders"),
        "a target outside": ([(str(staged), str(victim))], "orders"),
        "a target climbing out by '..'": ([(str(staged), f"{table}/../../elsewhere/part-orders-x-00000001-0.parquet")],
                                          "orders"),
        "a staged file climbing out": ([(f"{table}/_staging/../../elsewhere/precious.txt", str(final))], "orders"),
        "a target in the staging area": ([(str(staged), f"{table}/_staging/part-orders-x-00000001-00000.parquet")],
                                         "orders"),
        "a target that is not its part file": ([(str(staged), str(table / "put_date=2024-01-01" / "other.parquet"))],
                                               "orders"),
        "a table outside the warehouse": ([(str(victim), str(final))], "../elsewhere"),
    }


@pytest.mark.parametrize("case", ["a staged file outside", "a target outside", "a target climbing out by '..'",
                                  "a staged file climbing out", "a target in the staging area",
                                  "a target that is not its part file", "a table outside the warehouse"])
def test_recovery_refuses_a_bulk_naming_a_path_outside_its_table(
        tmp_path: Path, table: Path, ledger: Ledger, victim: Path, case: str) -> None:
    # Given a ledger someone else wrote a prepared bulk of a dead owner into
    moves, name = cases(table, victim)[case]
    tampered_bulk(tmp_path, table, moves, name=name)
    # When the bridge starts
    with pytest.raises(LedgerError, match="prepared bulk orders-x-00000001 of .* names a path outside the "
                                          "warehouse's tables: .*; it is left alone"):
        recover(ledger, [table], warehouse=table.parent)
    # Then nothing moved: the file it aims at is where it was, the bulk still prepared
    assert victim.read_text() == "keep me" and sorted(p.name for p in victim.parent.iterdir()) == ["precious.txt"]
    assert [b.bulk_id for b in ledger.in_progress()] == ["orders-x-00000001"]


def test_a_live_bridge_meeting_such_a_bulk_refuses_it_too(
        tmp_path: Path, table: Path, ledger: Ledger, victim: Path) -> None:
    moves, _ = cases(table, victim)["a target outside"]
    tampered_bulk(tmp_path, table, moves)
    landing = Landing(ledger=ledger, owner=ledger.owner, counters=Counters(), dedupe_window=3600.0,
                      warehouse=table.parent)
    with pytest.raises(LedgerError, match="names a path outside the warehouse's tables"):
        landing.published(["m1"])
    assert victim.read_text() == "keep me" and len(ledger.in_progress()) == 1


def test_a_bulk_the_bridge_wrote_is_recovered_with_a_warehouse_given_by_a_relative_path(
        tmp_path: Path, table: Path, ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    # The configuration's warehouse may be written with '..': the same table, not another one
    dead_bulk(tmp_path, table, "b1", ["m1"])
    monkeypatch.chdir(tmp_path / "warehouse")
    assert recover(ledger, [table], warehouse=Path("..") / "warehouse").rolled_forward == 1


def test_a_bulk_staged_under_a_warehouse_path_with_dots_is_recovered(tmp_path: Path, ledger: Ledger) -> None:
    # staged_moves keeps the table path as given: "<base>/../warehouse/orders/..." is still the table
    (tmp_path / "conf").mkdir()
    table = tmp_path / "conf" / ".." / "warehouse" / "orders"
    table.mkdir(parents=True)
    dead_bulk(tmp_path, table, "b2", ["m2"])
    assert recover(ledger, [table], warehouse=table.parent).rolled_forward == 1
