"""What the readers ask of a Delta table's log without Spark (`mqbridge.landing.delta_read`), on tables
delta-rs writes: a bulk's commit found by its user metadata near its publication time, the commits
since a time with those that changed rows (a DELETE, not an OPTIMIZE), rows counted by bulk (read by
pyarrow's native file system, not delta-rs's Python one, which aborted exiting commands), a
version fenced by an empty commit; and `[spark] catalog = true` accepted for a Delta type."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pytest
from pyarrow import fs as pafs

from mqbridge.config import parse_config
from mqbridge.landing import delta_read
from mqbridge.landing.ledger import TableTransaction

deltalake = pytest.importorskip("deltalake")


def _commit(table: Path, bulk_id: str, identities: list[str], put_date: str = "2026-05-01") -> None:
    rows = pa.table({"identity": identities, "bulk_id": [bulk_id] * len(identities),
                     "put_date": [put_date] * len(identities)})
    deltalake.write_deltalake(str(table), rows, mode="append", partition_by=["put_date"],
                              commit_properties=deltalake.CommitProperties(custom_metadata={"userMetadata": bulk_id}))


def test_a_bulks_commit_is_found_by_its_id_near_its_publication(tmp_path: Path) -> None:
    # Given three bulks committed one after the other, the second into another put_date
    table = tmp_path / "orders"
    _commit(table, "b0", ["i0", "i1"])
    _commit(table, "b1", ["i2"], "2026-05-02")
    _commit(table, "b2", ["i3", "i4", "i5"])
    published = time.time()
    # When the second is looked for around its publication (the ledger's time, just after its commit)
    found = delta_read.commit_of(table, "b1", published)
    # Then its version, time and put_date are those of its commit
    assert found is not None and (found.version, found.put_dates) == (1, ("2026-05-02",))
    assert found.timestamp <= published + delta_read.CLOCK_SLACK
    # ... a bulk published long after every commit is not searched back for ever, nor an unknown one
    assert delta_read.commit_of(table, "b1", published + 2 * delta_read.COMMIT_WINDOW) is None
    assert delta_read.commit_of(table, "nope", published) is None
    assert delta_read.rows_by_bulk(table, ["b0", "b2", "nope"]) == {"b0": 2, "b2": 3}
    assert delta_read.put_dates_of(table, ["i2", "i4"]) == ["2026-05-01", "2026-05-02"]


def test_a_delete_changes_rows_an_optimize_does_not(tmp_path: Path) -> None:
    # Given two bulks in one put_date, compacted (OPTIMIZE), then one row deleted (a purge)
    table = tmp_path / "orders"
    _commit(table, "b0", ["i0", "i1"])
    _commit(table, "b1", ["i2"])
    start = delta_read.read_commit(table, 0)
    assert start is not None
    deltalake.DeltaTable(str(table)).optimize.compact()
    deltalake.DeltaTable(str(table)).delete("identity = 'i1'")
    # When the commits since the first are read
    commits = delta_read.commits_since(table, start.timestamp)
    # Then newest first, and only the DELETE changed rows
    assert [c.version for c in commits] == [3, 2, 1, 0]
    assert [c.changes_rows for c in commits] == [True, False, False, False]
    assert delta_read.rows_by_bulk(table, ["b0", "b1"]) == {"b0": 1, "b1": 1}
    assert delta_read.put_dates_of(table, ["i1"]) == []


def test_a_fence_commits_the_version_with_its_mark(tmp_path: Path) -> None:
    table = tmp_path / "orders"
    _commit(table, "b0", ["i0"])
    assert delta_read.transaction_version(table, "mqbridge:h:1:2") is None
    delta_read.fence(table, TableTransaction("mqbridge:h:1:2", 7), "mqbridge-fence mqbridge:h:1:2 7")
    assert delta_read.transaction_version(table, "mqbridge:h:1:2") == 7
    assert delta_read.newest_version(table) == 1
    fence = delta_read.read_commit(table, 1)
    assert fence is not None and fence.user_metadata == "mqbridge-fence mqbridge:h:1:2 7" and not fence.changes_rows
    assert delta_read.rows_by_bulk(table, ["b0"]) == {"b0": 1}


def test_rows_are_read_by_pyarrows_native_file_system_not_delta_rs_python_one(tmp_path: Path) -> None:
    # delta-rs reads a table's files through a file system written in Python by default, which pyarrow's
    # I/O threads call back into: one still finishing when `mqbridge where` or `ledger --verify` exits
    # aborted it (SIGABRT after its answer, 5 of 60 runs on a loaded 2-core machine; 0 of 60 read natively)
    table = tmp_path / "orders"
    _commit(table, "b0", ["i0", "i1"])
    assert isinstance(deltalake.DeltaTable(str(table)).to_pyarrow_dataset().filesystem, pafs.PyFileSystem)
    files = delta_read.local_files(table)
    assert isinstance(files, pafs.SubTreeFileSystem) and isinstance(files.base_fs, pafs.LocalFileSystem)
    assert delta_read.rows_by_bulk(table, ["b0"]) == {"b0": 2}


def test_the_catalog_is_accepted_for_a_delta_type() -> None:
    config = parse_config('[spark]\ntable_format = "delta"\ncatalog = true\n[types.orders]\n'
                          '[sources.amq]\nkind = "stomp"\n[[listeners]]\nsource = "amq"\nqueue = "/queue/orders"\n'
                          'message_type = "orders"\nbackout_queue = "/queue/orders.backout"\n')
    assert config.spark.catalog and config.spark.table_format == "delta"
