"""A raw bulk's Delta data files written by pyarrow and committed through Delta's transaction API
(`delta_commit.stage_arrow`, `ArrowFiles`; `mqbridge.landing.delta_files` describes each file), checked
with a bare Spark and Delta (the session's Delta-enabled driver, no bridge) and delta-rs on a real table:
staged files are in no reader's view until their commit; the commit is a normal Delta commit (Spark and
delta-rs read every row once, DESCRIBE HISTORY shows a WRITE with the bulk id and its row count, the app
id's version is in the log); a later attempt of a version already in the log is skipped and its files
removed; the statistics bound every row, so that a query for the newest put time of a file, which falls
between two milliseconds, still finds its row through Delta's data skipping, and they say what Spark's
writer says of the same rows (row and null counts, bounds within its millisecond truncation); a table whose
metadata changed after the files were written commits nothing (the bridge writes that bulk by Spark), and
a table whose shape needs Spark's writer gets no files at all."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.delta_commits import APP, count_rows
from tests.support.delta_tables import delta_jars_fetched  # noqa: F401 (the module's autouse fixture)
from tests.support.object_stores import DeltaSpark

pytestmark = pytest.mark.integration

deltalake = pytest.importorskip("deltalake")


def varied_bulk(first: int, count: int) -> Any:
    """A raw bulk of `count` landed rows with ids from `first`, put at times between milliseconds from
    half a second before midnight on, 5 ms apart (200 rows: two put_dates), a third with a correlation id."""
    from datetime import UTC, datetime, timedelta

    from mqbridge.message import Bulk, Message

    bulk = Bulk("orders")
    start = datetime(2026, 11, 28, 23, 59, 59, 500_000, tzinfo=UTC)
    for i in range(first, first + count):
        bulk.add(Message(msg_id=f"ID:m-{i}", body=f"body {i}".encode(), source="test", destination="/queue/q",
                         put_timestamp=start + timedelta(microseconds=5_001 * (i - first) + 1),
                         identity=f"ID:m-{i}", correlation_id=f"c-{i}" if i % 3 == 0 else None))
    return bulk


def pyarrow_files_committed(spark: Any, root: str) -> dict[str, Any]:
    """Bulk 1 staged by pyarrow and committed; staged again for version 1 (a later attempt); bulk 2 written
    by Spark's job (`stage_raw`) for comparison; bulk 3 staged, the table's properties changed, then its
    commit; a table without the statistics columns property offered files."""
    import os

    from pyspark.sql import functions as F

    from mqbridge.landing import delta_commit, delta_create
    from mqbridge.landing.containers import SORT_COLUMNS
    from mqbridge.landing.delta import STATS_COLUMNS
    from mqbridge.landing.ledger import TableTransaction
    from mqbridge.landing.rows import IDENTITY_COLUMN, arrow_table
    from mqbridge.landing.writes.delta import empty_frame
    from mqbridge.landing.writes.frames import FILE_BYTES

    path = Path(root) / "t"

    def files_on_disk() -> int:
        return sum(name.endswith(".parquet") for _, _, names in os.walk(path) for name in names)

    row_bulk_ids: dict[str, str] = {}  # the bulk_id column of each bulk's rows (its Bulk's own id)

    def rows_of(first: int, count: int, bulk_id: str) -> Any:
        bulk = varied_bulk(first, count)
        row_bulk_ids[bulk_id] = bulk.bulk_id
        return arrow_table(bulk, list(range(count)))

    def stage(first: int, count: int, bulk_id: str, where: Path = path) -> Any:
        return delta_commit.stage_arrow(spark, rows_of(first, count, bulk_id), where, codec="snappy",
                                        file_bytes=FILE_BYTES, bulk_id=bulk_id)

    facts: dict[str, Any] = {}
    delta_create.make_table(spark, path, lambda: empty_frame(spark, None))
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES "
              f"('delta.dataSkippingStatsColumns' = '{','.join(STATS_COLUMNS)}')")
    first = stage(0, 200, "bulk-1")
    assert first is not None
    facts["files staged"] = files_on_disk()
    facts["rows while staged"] = count_rows(spark, str(path))
    facts["first committed"] = first.commit(TableTransaction(APP, 1))
    facts["rows after the first"] = count_rows(spark, str(path))
    before = files_on_disk()
    again = stage(200, 50, "bulk-1-again")
    facts["later attempt of version 1 committed"] = again.commit(TableTransaction(APP, 1))
    facts["files left by the later attempt"] = files_on_disk() - before
    by_spark = delta_commit.stage_raw(spark, rows_of(1000, 200, "bulk-2"), path.parent / "handoff", str(path),
                                      tasks=1, groups=1, sort=SORT_COLUMNS, writer_options={},
                                      identity=IDENTITY_COLUMN, bulk_id="bulk-2")
    assert by_spark is not None
    facts["spark's committed"] = by_spark.commit(TableTransaction(APP, 2))
    table = spark.read.format("delta").load(str(path))
    first_rows = F.col("bulk_id") == row_bulk_ids["bulk-1"]
    newest = table.where(first_rows).agg(F.max("put_timestamp")).collect()[0][0]
    facts["rows at the newest put time, by data skipping"] = table.where(
        (F.col("put_timestamp") == F.lit(newest)) & first_rows).count()
    facts["row bulk ids"] = row_bulk_ids
    facts["adds"] = [json.loads(line)["add"] for commit in sorted((path / "_delta_log").glob("*.json"))
                     for line in commit.read_text().splitlines() if line.startswith('{"add"')]
    before = files_on_disk()
    third = stage(2000, 30, "bulk-3")
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('mqbridge.test' = 'changed')")
    facts["commit after a metadata change"] = third.commit(TableTransaction(APP, 3))
    facts["files left by it"] = files_on_disk() - before
    facts["rows at the end"] = count_rows(spark, str(path))
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").orderBy("version").collect()
    facts["history"] = [(h["operation"], h["userMetadata"], int((h["operationMetrics"] or {}).get("numOutputRows", -1)))
                        for h in history]
    other = Path(root) / "plain"
    delta_create.make_table(spark, other, lambda: empty_frame(spark, None))
    facts["files for a table without the statistics property"] = stage(0, 10, "bulk-x", other)
    return facts


def test_pyarrow_files_commit_as_a_normal_delta_commit_with_statistics_that_bound_every_row(
        tmp_path: Path, delta_spark: DeltaSpark) -> None:
    # Given a Delta table as the bridge makes it, keeping statistics of the bridge's columns
    # When a bulk's files are written by pyarrow and committed, the version again, a bulk by Spark's
    # job, and a bulk whose table changed after its files were written
    outcome = delta_spark.run(pyarrow_files_committed, str(tmp_path))
    assert outcome["ok"], outcome.get("traceback")
    facts = outcome["value"]
    # Then the staged files are on disk but in no reader's view until their commit
    assert facts["files staged"] == 2 and facts["rows while staged"] == 0, facts  # two put_dates: two files
    assert (facts["first committed"], facts["rows after the first"]) == (True, 200), facts
    # and a later attempt of the same version is skipped, its files removed: never written twice
    assert facts["later attempt of version 1 committed"] is False and facts["files left by the later attempt"] == 0
    assert facts["spark's committed"] is True, facts
    # and the newest put time of the pyarrow bulk, between two milliseconds, is found through the statistics
    assert facts["rows at the newest put time, by data skipping"] == 1, facts
    # and the statistics say what Spark's writer says of the same rows, in the same columns
    adds = facts["adds"]
    arrow_adds = [a for a in adds if facts["row bulk ids"]["bulk-1"] in a["stats"]]
    spark_adds = [a for a in adds if facts["row bulk ids"]["bulk-2"] in a["stats"]]
    assert len(arrow_adds) == 2 and len(spark_adds) == 2, adds
    for ours, theirs in zip(sorted(arrow_adds, key=lambda a: a["path"]), sorted(spark_adds, key=lambda a: a["path"]),
                            strict=True):
        mine, spark_stats = json.loads(ours["stats"]), json.loads(theirs["stats"])
        assert ours["partitionValues"] == theirs["partitionValues"], (ours, theirs)
        assert mine["numRecords"] == spark_stats["numRecords"] and mine["nullCount"] == spark_stats["nullCount"]
        assert set(mine["minValues"]) == set(spark_stats["minValues"]), (mine, spark_stats)
        assert mine["minValues"]["put_timestamp"] == spark_stats["minValues"]["put_timestamp"], (mine, spark_stats)
        assert mine["maxValues"]["put_timestamp"] > spark_stats["maxValues"]["put_timestamp"], (mine, spark_stats)
        assert mine["minValues"]["source"] == spark_stats["minValues"]["source"] == "test"
    # And a commit after the table's metadata changed commits nothing and removes its files
    assert facts["commit after a metadata change"] is None and facts["files left by it"] == 0, facts
    assert facts["rows at the end"] == 400, facts
    assert [h for h in facts["history"] if h[1] and h[1].startswith("bulk-")] == [("WRITE", "bulk-1", 200),
                                                                                  ("WRITE", "bulk-2", 200)], facts
    # and a table without the statistics property gets no files (Spark's writer writes its bulks)
    assert facts["files for a table without the statistics property"] is None, facts
    # And delta-rs reads every row once, and the app id's version
    table = deltalake.DeltaTable(str(tmp_path / "t"))
    assert table.transaction_version(APP) == 2
    ids = table.to_pyarrow_table(columns=["msg_id", "correlation_id"])
    assert len(set(ids.column("msg_id").to_pylist())) == 400 == ids.num_rows
    assert ids.column("correlation_id").null_count == 400 - sum(1 for i in [*range(200), *range(1000, 1200)]
                                                                if i % 3 == 0)
