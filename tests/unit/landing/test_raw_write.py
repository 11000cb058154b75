"""A raw bulk's Spark job built from the driver's Java objects (`handoff.raw_write`, the executor's
path for raw types on an in-process driver) writes what the DataFrame API's plan writes
(`handoff.bulk_frame`, kept for typed types, Spark Connect and the write failpoints): the same rows,
one file per put_date and task, each ordered by put_timestamp. A real local Spark writes both."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from mqbridge import failpoints
from mqbridge.config import TypeConfig
from mqbridge.counters import Counters
from mqbridge.landing import handoff
from mqbridge.landing.containers import SORT_COLUMNS
from mqbridge.landing.executor import SparkExecutor
from mqbridge.landing.landing import Landing
from mqbridge.landing.ledger import owner_id
from mqbridge.landing.ledger.sqlite import SqliteLedger
from mqbridge.landing.rows import arrow_table
from mqbridge.landing.writes.frames import SPARK_WRITE_FAILPOINTS, WRITE_OPTIONS
from mqbridge.message import Bulk, Message

UTC = dt.timezone.utc


def shuffled_bulk() -> Bulk:
    """Twelve messages over two UTC dates (even i on the 25th), the larger i the earlier its put time."""
    bulk = Bulk("orders")
    for i in (7, 2, 11, 0, 5, 9, 1, 10, 3, 8, 6, 4):
        day = dt.datetime(2026, 11, 25 + i % 2, 23, 0, tzinfo=UTC)
        bulk.add(Message(msg_id=f"ID:{i}", body=b"body-%d" % i, source="amq", destination="/queue/orders",
                         headers={"n": str(i)}, put_timestamp=day + dt.timedelta(seconds=60 - i)))
    return bulk


def files_by_date(target: Path) -> dict[str, list[list[str]]]:
    """put_date directory -> the msg_ids of each Parquet file in it, in file order."""
    found: dict[str, list[list[str]]] = {}
    for part in sorted(target.glob("put_date=*/*.parquet")):
        found.setdefault(part.parent.name, []).append(pq.read_table(part).column("msg_id").to_pylist())
    return found


def dataframe_api_write(spark: Any, bulk: Bulk, target: Path, scratch: Path, tasks: int) -> None:
    df = handoff.bulk_frame(spark, arrow_table(bulk, list(range(len(bulk.messages)))), scratch).drop("_row")
    df = df.repartition(tasks) if tasks > 1 else df.coalesce(1)
    (df.sortWithinPartitions(*SORT_COLUMNS).write.options(**WRITE_OPTIONS).partitionBy("put_date")
     .mode("overwrite").parquet(str(target)))


@pytest.mark.parametrize("tasks", [1, 2])
def test_raw_write_writes_what_the_dataframe_api_writes(spark: Any, tmp_path: Path, tasks: int) -> None:
    # Given a bulk over two dates whose put times are out of order
    bulk = shuffled_bulk()
    rows = arrow_table(bulk, list(range(len(bulk.messages))))
    # When it is written both ways
    job = handoff.raw_write(spark, rows, tmp_path / "h1", str(tmp_path / "raw"), mode="overwrite", tasks=tasks,
                            sort=SORT_COLUMNS, options=WRITE_OPTIONS)
    assert not (tmp_path / "raw").exists()  # built, not run
    job()
    dataframe_api_write(spark, bulk, tmp_path / "api", tmp_path / "h2", tasks)
    # Then each date holds the same rows
    raw, api = files_by_date(tmp_path / "raw"), files_by_date(tmp_path / "api")
    assert set(raw) == {"put_date=2026-11-25", "put_date=2026-11-26"} == set(api)
    for date in raw:
        assert sorted(sum(raw[date], [])) == sorted(sum(api[date], []))
    # and with one task, one file per date, ordered by put time (the later i, the earlier put)
    if tasks == 1:
        assert raw == api
        assert raw["put_date=2026-11-25"] == [["ID:10", "ID:8", "ID:6", "ID:4", "ID:2", "ID:0"]]
    # and the file has the landed schema: no `_row`, dictionary-free bodies
    part = next((tmp_path / "raw").glob("put_date=*/*.parquet"))
    assert "_row" not in pq.read_schema(part).names


def big_bulk(n: int) -> Bulk:
    """`n` messages of 1 KB (distinct bodies) on one date, the later the message the earlier its put time."""
    bulk = Bulk("orders")
    start = dt.datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
    for i in range(n):
        bulk.add(Message(msg_id=f"ID:{i}", body=os.urandom(512).hex().encode(), source="amq",
                         destination="/queue/orders", put_timestamp=start - dt.timedelta(milliseconds=i)))
    return bulk


def test_row_groups_give_each_core_a_task_of_at_least_split_bytes() -> None:
    assert handoff.row_groups(0, 2) == 1
    assert handoff.row_groups(handoff.SPLIT_BYTES * 2 - 1, 2) == 1  # two halves would be under SPLIT_BYTES
    assert handoff.row_groups(handoff.SPLIT_BYTES * 2, 2) == 2
    assert handoff.row_groups(handoff.SPLIT_BYTES * 100, 2) == 2  # never more than the cores
    assert handoff.row_groups(handoff.SPLIT_BYTES * 3, 8) == 3
    assert handoff.row_groups(handoff.SPLIT_BYTES * 100, 1) == 1


@pytest.mark.parametrize("plan", ["raw_write", "dataframe"])
def test_a_bulk_of_two_splits_is_written_by_two_tasks_each_file_sorted(spark: Any, tmp_path: Path,
                                                                       plan: str) -> None:
    # Given a bulk of 9,000 rows of 1 KB on local[2]: its handoff file in two row groups
    bulk = big_bulk(9_000)
    groups = handoff.row_groups(sum(len(m.body) for m in bulk.messages), handoff.scan_cores(spark))
    assert (handoff.scan_cores(spark), groups) == (2, 2)
    rows = arrow_table(bulk, list(range(len(bulk.messages))))
    target = tmp_path / "t"
    # When it is written (the raw plan from Java objects, or the DataFrame API's, as typed types do)
    if plan == "raw_write":
        handoff.raw_write(spark, rows, tmp_path / "h", str(target), mode="overwrite", tasks=1, sort=SORT_COLUMNS,
                          options=WRITE_OPTIONS, groups=groups)()
    else:
        df = handoff.partitioned(handoff.bulk_frame(spark, rows, tmp_path / "h", groups).drop("_row"), 1, groups)
        assert df.rdd.getNumPartitions() == 2
        df.sortWithinPartitions(*SORT_COLUMNS).write.partitionBy("put_date").mode("overwrite").parquet(str(target))
    # Then two tasks wrote a file each, together every row once, each file ordered by put time
    files = files_by_date(target)["put_date=2026-11-25"]
    assert len(files) == 2 and all(files)
    assert sorted(sum(files, [])) == sorted(m.msg_id for m in bulk.messages)
    for ids in files:
        assert ids == sorted(ids, key=lambda msg_id: -int(msg_id[3:]))  # later message, earlier put


def test_a_bulk_written_by_two_tasks_lands_exactly_once_through_the_ledger(spark: Any, tmp_path: Path) -> None:
    # Given an exactly-once executor and a bulk of 9,000 rows of 1 KB (two tasks on local[2])
    ledger = SqliteLedger.open(tmp_path / "ledger.sqlite3", owner=owner_id())
    landing = Landing(ledger=ledger, owner=ledger.owner, counters=Counters(), dedupe_window=3600.0,
                      warehouse=tmp_path)
    executor = SparkExecutor(spark, tmp_path, "orders", TypeConfig(table="orders"), landing=landing)
    bulk = big_bulk(9_000)
    try:
        # When it is executed
        results = executor.execute(bulk)
    finally:
        landing.close()
    # Then every message landed once, in two files the ledger published, and nothing is left staged
    assert [r.msg_id for r in results if r.ok] == [m.msg_id for m in bulk.messages]
    assert len(list(executor.path.glob("put_date=*/*.parquet"))) == 2
    rows = spark.read.parquet(str(executor.path)).select("msg_id").collect()
    assert sorted(r.msg_id for r in rows) == sorted(m.msg_id for m in bulk.messages)
    assert not list((executor.path / "_staging").rglob("*.parquet"))
    reopened = SqliteLedger.open(tmp_path / "ledger.sqlite3", owner=owner_id())
    try:
        assert reopened.published([m.msg_id for m in bulk.messages]) == {m.msg_id for m in bulk.messages}
    finally:
        reopened.close()


def test_the_java_parts_are_made_once_per_session(spark: Any, tmp_path: Path) -> None:
    bulk = shuffled_bulk()
    rows = arrow_table(bulk, list(range(len(bulk.messages))))
    for n in range(2):
        handoff.raw_write(spark, rows, tmp_path / f"h{n}", str(tmp_path / f"t{n}"), mode="overwrite", tasks=1,
                          sort=SORT_COLUMNS, options=WRITE_OPTIONS)()
        if n == 0:
            first = handoff._parts[id(spark)]
    assert handoff._parts[id(spark)] is first


def test_armed_names_a_failpoint_without_firing_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(failpoints.ENVIRONMENT_VARIABLE, "spark_write_hang")
    assert failpoints.armed(*SPARK_WRITE_FAILPOINTS)
    assert failpoints.armed(*SPARK_WRITE_FAILPOINTS)
    monkeypatch.setenv(failpoints.ENVIRONMENT_VARIABLE, "spark_poison_body:bad")
    assert failpoints.armed(*SPARK_WRITE_FAILPOINTS)
    monkeypatch.setenv(failpoints.ENVIRONMENT_VARIABLE, "before_source_commit")
    assert not failpoints.armed(*SPARK_WRITE_FAILPOINTS)
    monkeypatch.delenv(failpoints.ENVIRONMENT_VARIABLE)
    assert not failpoints.armed(*SPARK_WRITE_FAILPOINTS)
