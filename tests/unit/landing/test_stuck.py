"""A prepared bulk whose staged files are gone (`mqbridge.landing.stuck`), on real files and a real
ledger: start-up reports it instead of stopping; only what needs it waits; `mqbridge ledger --abandon`
forgets it when none of its rows is in the table, records it published when all are, refuses otherwise;
and purge and compaction leave the files of bulks not yet published where they are."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mqbridge.config import TypeConfig
from mqbridge.counters import Counters
from mqbridge.errors import HaltListener, StuckBulkError
from mqbridge.landing.landing import Landing
from mqbridge.landing.ledger import Ledger, PreparedBulk, SqliteLedger
from mqbridge.landing.publication import publish, recover, staged_moves, staging_dir, unpublished_bulks
from mqbridge.landing.stuck import FORGET, PUBLISHED, REFUSE, abandon, judge, row_bulk_id
from tests.support.ledger import dead_owner

BULK = "orders-ab12cd34-00000007"


@pytest.fixture
def table(tmp_path: Path) -> Path:
    path = tmp_path / "warehouse" / "orders"
    path.mkdir(parents=True)
    return path


def stage_rows(staging: Path, bulk_id: str, rows_per_file: list[int]) -> None:
    """Staged part files (one per entry, put_date 2024-01-01) whose rows carry `bulk_id`, as landed rows do."""
    directory = staging / "put_date=2024-01-01"
    directory.mkdir(parents=True)
    for n, rows in enumerate(rows_per_file):
        pq.write_table(pa.table({"bulk_id": [bulk_id] * rows, "body": [f"{n}-{r}".encode() for r in range(rows)]}),
                       directory / f"part-{n:05d}-x.c000.snappy.parquet")


def dead_bulk(tmp_path: Path, table: Path, rows_per_file: list[int], owner: str | None = None) -> list[tuple[str, str]]:
    """BULK staged and prepared by a process that has since died (or `owner`), one identity per row."""
    owner = owner or dead_owner()
    staging = staging_dir(table, owner, BULK)
    stage_rows(staging, BULK, rows_per_file)
    moves = staged_moves(table, staging, BULK)
    dead = SqliteLedger.open(tmp_path / "state" / "ledger.sqlite3", owner=owner)
    dead.prepare(BULK, "orders", moves, [f"m{i}" for i in range(sum(rows_per_file))])
    dead.close()
    return moves


def landing(ledger: Ledger, table: Path) -> Landing:
    return Landing(ledger=ledger, owner=ledger.owner, counters=Counters(), dedupe_window=3600.0,
                   warehouse=table.parent, config_path="/etc/mqbridge/bridge.toml")


# -- the decision ------------------------------------------------------------------------------
def test_the_verdict_follows_the_rows_in_the_table() -> None:
    bulk = PreparedBulk(BULK, "orders", (("s", "f"),), "h:1:1.00", 0.0, 3)
    assert judge(BULK, bulk, "prepared", alive=False, gone=1, rows=0).action == FORGET
    assert judge(BULK, bulk, "prepared", alive=False, gone=1, rows=3).action == PUBLISHED
    partial = judge(BULK, bulk, "prepared", alive=False, gone=1, rows=2)
    assert partial.action == REFUSE and "part of it is visible and part is lost" in partial.reason
    assert judge(BULK, bulk, "prepared", alive=True, gone=1, rows=0).action == REFUSE  # its owner publishes it
    assert "rolls it forward" in judge(BULK, bulk, "prepared", alive=False, gone=0, rows=0).reason
    assert "is published" in judge(BULK, None, "published", alive=False, gone=0, rows=0).reason
    assert row_bulk_id(f"{BULK}.1") == BULK  # a bulk spread over tables: its rows carry the bulk's own id
    assert row_bulk_id(f"{BULK}~orders_v2.1") == BULK  # adopted by a rebuilt ledger from table orders_v2.1's rows


# -- start-up and the running bridge ----------------------------------------------------------
def test_only_the_sinks_of_a_stuck_bulks_table_wait_and_they_resume_once_it_is_decided(
        tmp_path: Path, table: Path, ledger: Ledger) -> None:
    # Given a dead bulk whose staged file is gone (never published)
    owner = dead_owner()
    moves = dead_bulk(tmp_path, table, [2], owner)
    Path(moves[0][0]).unlink()
    report = recover(ledger, [table], warehouse=table.parent)
    assert [e.bulk_id for e in report.stuck] == [BULK]
    # When the bridge holds it: the types landing in its table wait, with the command to run
    lander = landing(ledger, table)
    types = {"orders": TypeConfig(table="orders"), "by_queue": TypeConfig(table="{destination}"),
             "invoices": TypeConfig(table="invoices")}
    waiting = lander.hold(report.stuck, types)
    assert sorted(waiting) == ["by_queue", "orders"]  # a template that can render "orders" too
    assert f"mqbridge ledger --config /etc/mqbridge/bridge.toml --abandon {BULK}" in waiting["orders"]
    assert lander.stuck_in("orders", "orders") is not None and lander.stuck_in("invoices", "invoices") is None
    # and a listener meeting its messages halts (itself only), told the same command
    with pytest.raises(StuckBulkError, match=f"--abandon {BULK}") as info:
        lander.published(["m0", "other"])
    assert isinstance(info.value, HaltListener)
    # When an operator abandons it: nothing of it is in the table, so it is forgotten
    verdict = abandon(ledger, BULK, table.parent)
    assert verdict.action == FORGET, verdict.reason
    assert ledger.in_progress() == [] and ledger.published(["m0", "m1"]) == set()
    assert not staging_dir(table, owner, BULK).exists()
    # Then its table's sinks are let go, and its messages are new again
    assert lander.stuck_in("orders", "orders") is None
    assert lander.published(["m0", "m1"]) == set()


def test_a_bulk_whose_files_a_rewrite_renamed_is_recorded_published(tmp_path: Path, table: Path,
                                                                    ledger: Ledger) -> None:
    # Given a dead bulk killed after its files were moved into the table (not marked published),
    # whose files something then rewrote under other names (a compaction before the guard)
    moves = dead_bulk(tmp_path, table, [2, 3])
    publish(moves)
    for _, final in moves:
        Path(final).rename(Path(final).with_name(f"part-00000-rewritten-{Path(final).name[-13:]}"))
    [stuck] = recover(ledger, [table], warehouse=table.parent).stuck
    assert "2 of its 2 staged files are gone" in str(stuck)
    # When an operator abandons it: all 5 rows are in the table, so it is recorded published
    verdict = abandon(ledger, BULK, table.parent)
    assert verdict.action == PUBLISHED, verdict.reason
    # Then its messages count as landed (they are not landed twice when they come back)
    assert ledger.published([f"m{i}" for i in range(5)]) == {f"m{i}" for i in range(5)}
    assert sum(pq.read_metadata(p).num_rows for p in table.glob("put_date=*/*.parquet")) == 5


def test_a_partly_visible_bulk_is_refused_and_left_as_it_is(tmp_path: Path, table: Path, ledger: Ledger) -> None:
    moves = dead_bulk(tmp_path, table, [2, 3])
    publish(moves[:1])  # 2 rows visible
    Path(moves[1][0]).unlink()  # 3 rows lost
    verdict = abandon(ledger, BULK, table.parent)
    assert verdict.action == REFUSE and "2 rows of bulk" in verdict.reason and "5 identities" in verdict.reason
    assert [b.bulk_id for b in ledger.in_progress()] == [BULK]


def test_a_live_owners_or_an_intact_bulk_is_not_abandoned(tmp_path: Path, table: Path, ledger: Ledger) -> None:
    dead_bulk(tmp_path, table, [1])
    assert abandon(ledger, BULK, table.parent).action == REFUSE  # intact: the next start rolls it forward
    assert abandon(ledger, "no-such-bulk", table.parent).action == REFUSE
    assert [b.bulk_id for b in ledger.in_progress()] == [BULK]


# -- what purge and compaction leave alone ------------------------------------------------------
def test_files_of_a_bulk_not_yet_published_are_told_by_its_staging_directory(tmp_path: Path, table: Path,
                                                                            ledger: Ledger) -> None:
    moves = dead_bulk(tmp_path, table, [1, 1])
    publish(moves)  # killed after publishing: the ledger does not say published yet
    names = [Path(final).name for _, final in moves] + ["part-00000-0d1e.c000.snappy.parquet"]
    assert unpublished_bulks(table, names) == [BULK]
    # once recovery has finished it, its staging directory is gone: its files may be rewritten
    assert recover(ledger, [table], warehouse=table.parent).rolled_forward == 1
    assert unpublished_bulks(table, names) == []
