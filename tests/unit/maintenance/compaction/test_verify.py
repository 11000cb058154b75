"""`mqbridge ledger --verify` after a compaction: the bulks whose files it replaced are checked by
their rows (counted by bulk_id in their containers), and a row lost in a compaction is reported."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mqbridge.cli import main
from mqbridge.landing.ledger import SqliteLedger, ledger_path, owner_id
from mqbridge.maintenance.engine.swap import record_purge
from tests.support.ledger import ledger_config


def test_compacted_bulks_are_checked_by_their_rows_and_a_lost_row_is_reported(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Given two bulks of 2 and 3 identities published into one container, since compacted into one file
    container = tmp_path / "t" / "put_date=2024-06-01"
    ledger = SqliteLedger.open(ledger_path(tmp_path / "state"), owner=owner_id())
    for bulk, n in (("b1", 2), ("b2", 3)):
        ledger.prepare(bulk, "orders", [(f"/gone/{bulk}", str(container / f"part-{bulk}.parquet"))],
                       [f"{bulk}-m{i}" for i in range(n)])
        ledger.mark_published(bulk)
    ledger.close()
    container.mkdir(parents=True)
    compacted = container / "part-compacted.parquet"
    pq.write_table(pa.table({"bulk_id": ["b1", "b1", "b2", "b2", "b2"]}), compacted)
    record_purge(tmp_path / "t", container.name, "compact")
    config = ledger_config(tmp_path)

    # Then --verify counts both bulks' rows and is satisfied
    assert main(["ledger", "--config", str(config), "--verify"]) == 0
    out = capsys.readouterr().out
    assert "row counts   2 bulks hold one row per identity\n" in out and "verify: OK (2 published bulks" in out

    # When the compacted file had lost one of b2's rows, that is reported
    pq.write_table(pa.table({"bulk_id": ["b1", "b1", "b2", "b2"]}), compacted)
    assert main(["ledger", "--config", str(config), "--verify"]) == 1
    out = capsys.readouterr().out
    assert "verify: 1 published bulks do not hold one row per identity:\n  b2: 3 identities, 2 rows in its " \
           "compacted containers" in out, out

    # and once a purge swapped the container too, its rows are no longer compared (a purge removes rows)
    record_purge(tmp_path / "t", container.name, "copy")
    assert main(["ledger", "--config", str(config), "--verify"]) == 0
    assert "(2 in containers purged since: not compared)" in capsys.readouterr().out


def test_a_bulk_spread_over_two_tables_is_counted_in_each_table_by_the_id_its_rows_carry(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Given bulk b1 of a `{destination}` type spread over tables t and u: ledger bulks b1.0 (2 identities)
    # and b1.1 (3), whose rows carry `b1`; both containers since compacted into one file each
    ledger = SqliteLedger.open(ledger_path(tmp_path / "state"), owner=owner_id())
    for bulk, table, n in (("b1.0", "t", 2), ("b1.1", "u", 3)):
        container = tmp_path / table / "put_date=2024-06-01"
        ledger.prepare(bulk, table, [(f"/gone/{bulk}", str(container / f"part-{bulk}.parquet"))],
                       [f"{bulk}-m{i}" for i in range(n)])
        ledger.mark_published(bulk)
        container.mkdir(parents=True)
        pq.write_table(pa.table({"bulk_id": ["b1"] * n}), container / "part-compacted.parquet")
        record_purge(tmp_path / table, container.name, "compact")
    ledger.close()

    # Then --verify counts each ledger bulk's rows in its own table and is satisfied
    assert main(["ledger", "--config", str(ledger_config(tmp_path)), "--verify"]) == 0
    out = capsys.readouterr().out
    assert "row counts   2 bulks hold one row per identity\n" in out and "verify: OK (2 published bulks" in out
