"""The bridge's Delta log store for tables on a local file system (`org.mqbridge.delta.LocalLinkLogStore`,
`mqbridge.landing.log_store`) and the checksum writer the bridge gives such tables
(`mqbridge.landing.delta.LOCAL_WAREHOUSE_CONF`), checked with a bare Spark and Delta (the session's
Delta-enabled driver, configured for local tables as the bridge's own driver is; no bridge): the promise
Delta asks of a log store, that only one writer creates a version's log file, kept by a hard link (the
second write of one file is refused with the exception Delta's commit retries on, the first one's bytes
kept); a table committed through it has each version's log entry and checksum file and no temporary file
left over; and two writers appending to one table at once each commit every bulk once, in versions of
their own (Delta's retry after the refusal), every row once as delta-rs reads it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mqbridge.landing import log_store
from tests.support.delta_tables import (
    delta_jars_fetched,  # noqa: F401 (the module's autouse fixture)
    delta_log_store,
    log_store_writes,
)
from tests.support.object_stores import DeltaSpark

pytestmark = pytest.mark.integration

deltalake = pytest.importorskip("deltalake")

WRITERS, COMMITS, ROWS = 2, 15, 10

# --- run in the Delta-enabled driver (`DeltaSpark.run`): module-level functions -------------------


def appended_in_turn(spark: Any, path: str) -> dict[str, Any]:
    """Three appends to a new table; the log store Delta used and the table's files."""
    for first in (0, 10, 20):
        spark.range(first, first + 10).write.format("delta").mode("append").save(path)
    return {"store": delta_log_store(spark, path)}


def appended_at_once(spark: Any, path: str) -> dict[str, Any]:
    """WRITERS threads appending COMMITS bulks of ROWS rows each to one table at once (the first bulk made
    the table before): the errors, if any, and the versions in the log."""
    import threading

    spark.range(0, 0).write.format("delta").save(path)
    errors: list[str] = []
    start = threading.Barrier(WRITERS)

    def writer(number: int) -> None:
        start.wait()
        for commit in range(COMMITS):
            first = (number * COMMITS + commit) * ROWS
            try:
                spark.range(first, first + ROWS).write.format("delta").mode("append").save(path)
            except Exception as exc:  # a commit that did not land: the test says which
                errors.append(f"writer {number} commit {commit}: {str(exc)[:500]}")

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(600)
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()
    return {"errors": errors, "versions": sorted(int(h["version"]) for h in history),
            "store": delta_log_store(spark, path)}


# --- the tests -----------------------------------------------------------------------------------


def _ok(outcome: dict[str, Any]) -> Any:
    assert outcome["ok"], outcome.get("traceback")
    return outcome["value"]


def test_the_second_writer_of_one_local_log_file_is_refused_and_the_first_ones_bytes_kept(
        tmp_path: Path, delta_spark: DeltaSpark) -> None:
    # Given a version's log file written by the bridge's local log store
    # When a second writer writes the same file (two writers of one version)
    log_file = tmp_path / "t" / "_delta_log" / "00000000000000000001.json"
    outcome = _ok(delta_spark.run(log_store_writes, f"file:{log_file}", log_store.LOCAL_CLASS_NAME))
    # Then it gets the exception by which Delta's commit detects a concurrent commit, the first one's bytes
    # stay, and no temporary file is left beside it
    assert outcome == {"first": "written", "second": "java.nio.file.FileAlreadyExistsException",
                       "content": "first"}, outcome
    assert sorted(p.name for p in log_file.parent.iterdir()) == [log_file.name]


def test_a_local_table_commits_through_the_link_log_store_with_each_versions_checksum_file(
        tmp_path: Path, delta_spark: DeltaSpark) -> None:
    # Given the driver configured for local tables as the bridge's is
    # When three bulks are appended to a new table
    table = tmp_path / "t"
    facts = _ok(delta_spark.run(appended_in_turn, f"file:{table}"))
    # Then Delta committed them through the bridge's log store
    assert facts["store"] == log_store.LOCAL_CLASS_NAME, facts
    # and each version has its log entry and its checksum file (Delta's checksum writer, with the bridge's
    # checkpoint file manager: a wrong class name there would make Delta skip it with only a warning),
    # with no temporary file left over
    names = {p.name for p in (table / "_delta_log").iterdir()}
    for version in range(3):
        assert f"{version:020d}.json" in names and f"{version:020d}.crc" in names, sorted(names)
    assert not [name for name in names if name.endswith(".tmp")], sorted(names)
    read = deltalake.DeltaTable(str(table)).to_pyarrow_table(columns=["id"]).column("id").to_pylist()
    assert sorted(read) == list(range(30))


def test_two_writers_at_once_on_one_local_table_commit_every_bulk_once(
        tmp_path: Path, delta_spark: DeltaSpark) -> None:
    # Given two writers appending to one local table at once through the bridge's log store
    table = tmp_path / "t"
    facts = _ok(delta_spark.run(appended_at_once, f"file:{table}", timeout=900))
    # Then every bulk committed, each in a version of its own (the loser of a version retried on the next)
    assert facts["errors"] == [], facts["errors"]
    assert facts["store"] == log_store.LOCAL_CLASS_NAME, facts
    assert facts["versions"] == list(range(WRITERS * COMMITS + 1)), facts["versions"]
    # and every row is in the table once
    read = deltalake.DeltaTable(str(table)).to_pyarrow_table(columns=["id"]).column("id").to_pylist()
    assert len(read) == len(set(read)) == WRITERS * COMMITS * ROWS
    assert sorted(read) == list(range(WRITERS * COMMITS * ROWS))
