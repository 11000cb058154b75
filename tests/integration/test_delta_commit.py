"""A bulk's Delta commit through Delta's transaction API (`mqbridge.landing.delta_commit`), checked with a
bare Spark and Delta (the session's Delta-enabled driver, no bridge) on real tables: its commit is a
normal Delta commit (delta-rs reads its rows and its app id's version, DESCRIBE HISTORY shows a WRITE
with the bulk id as user metadata, the table partitioned by put_date) whose SetTransaction Delta's own
writer honours (a DataFrame write of the same version is skipped); a later attempt of a version already
in the log is skipped, never written twice (also the bridge's own job for a raw bulk, `raw_job`, called
again); a first attempt that skipped the lookup still loses to a commit of the same app id that landed
after its transaction started (Delta's conflict check), and, with a ledger other hosts share
(`check_fence`), finds a fence that came before its transaction (its first version of a table it made,
the version after its own commit), which it would write through without that look; and readers polling
meanwhile (delta-rs in the test process, Spark in the driver) only ever see whole commits. (What a commit
costs after another writer's: test_delta_other_writers.py; a table made empty before its first bulk:
test_delta_create.py; how a dead process's prepared bulk is decided by the table: test_delta_settle.py.)"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from mqbridge.landing import delta, delta_create
from tests.support.delta_commits import APP, count_rows, frame_rows, raw_bulk
from tests.support.delta_tables import (
    bulk_counts_now,
    delta_jars_fetched,  # noqa: F401 (the module's autouse fixture)
)
from tests.support.object_stores import DeltaSpark

pytestmark = pytest.mark.integration

deltalake = pytest.importorskip("deltalake")

# --- run in the Delta-enabled driver (`DeltaSpark.run`): module-level functions -------------------


def commit_facts(spark: Any, path: str) -> dict[str, Any]:
    """A bulk committed by the transaction API (first attempt), then the same version again by a
    later attempt and by Delta's own DataFrame writer, then the next version: what the table says."""
    from mqbridge.landing import delta_commit
    from mqbridge.landing.ledger import TableTransaction

    facts: dict[str, Any] = {}
    facts["first attempt committed"] = delta_commit.write_frame(
        frame_rows(spark, "bulk-1", range(0, 5)), path, "bulk-1", TableTransaction(APP, 1))
    facts["rows after the first"] = count_rows(spark, path)
    facts["later attempt of version 1 committed"] = delta_commit.write_frame(
        frame_rows(spark, "bulk-1", range(0, 5)), path, "bulk-1", TableTransaction(APP, 1), first_attempt=False)
    (frame_rows(spark, "bulk-1", range(0, 5)).write.format("delta").mode("append").partitionBy("put_date")
     .option("txnAppId", APP).option("txnVersion", "1").save(path))
    facts["rows after the repeats"] = count_rows(spark, path)
    facts["later attempt of version 2 committed"] = delta_commit.write_frame(
        frame_rows(spark, "bulk-2", range(5, 8)), path, "bulk-2", TableTransaction(APP, 2), first_attempt=False)
    facts["rows at the end"] = count_rows(spark, path)
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").orderBy("version").collect()
    facts["history"] = [(int(h["version"]), h["operation"], h["userMetadata"], dict(h["operationParameters"]))
                        for h in history]
    return facts


def fenced_while_writing(spark: Any, path: str) -> dict[str, Any]:
    """Version 2's first attempt starts its transaction; then a fence of version 2 (Delta's writer,
    as `delta.settle` writes it) commits; then the first attempt tries to commit."""
    from mqbridge.landing import delta_commit
    from mqbridge.landing.ledger import TableTransaction

    delta_commit.write_frame(frame_rows(spark, "bulk-1", range(0, 5)), path, "bulk-1", TableTransaction(APP, 1))
    pending = delta_commit.start(frame_rows(spark, "bulk-2", range(5, 10)), path, "bulk-2", TableTransaction(APP, 2))
    assert pending is not None
    delta._fence(spark, path, TableTransaction(APP, 2))
    try:
        pending.commit()
        error = ""
    except Exception as exc:
        error = str(exc)
    return {"error": error[:2000], "rows": count_rows(spark, path)}


def commits_read_meanwhile(spark: Any, path: str, bulks: int, stop: str) -> dict[str, Any]:
    """`bulks` bulks of 50..(50 + 10 * bulks) rows committed by the transaction API in one thread,
    while another reads the rows per bulk_id with Spark until the last commit, then writes `stop`."""
    import threading

    from mqbridge.landing import delta_commit
    from mqbridge.landing.ledger import TableTransaction

    seen: list[dict[str, int]] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            try:
                frame = spark.read.format("delta").load(path).groupBy("bulk_id").count()
                seen.append({row["bulk_id"]: int(row["count"]) for row in frame.collect()})
            except Exception:  # no table yet
                time.sleep(0.05)

    reader = threading.Thread(target=read)
    reader.start()
    first = 0
    try:
        for n in range(1, bulks + 1):
            size = 50 + 10 * n
            delta_commit.write_frame(frame_rows(spark, f"bulk-{n}", range(first, first + size)), path, f"bulk-{n}",
                                     TableTransaction(APP, n))
            first += size
    finally:
        done.set()
        reader.join()
        Path(stop).touch()
    return {"seen": seen}


def raw_job_called_twice(spark: Any, path: str, handoff: str) -> dict[str, Any]:
    """A raw bulk of 300 landed rows (`mqbridge.landing.rows`, through its handoff file) committed by
    the bridge's job (`delta_commit.raw_job`), then that same job called again (a retry)."""
    from datetime import UTC, datetime

    from mqbridge.landing import delta_commit
    from mqbridge.landing.containers import SORT_COLUMNS
    from mqbridge.landing.ledger import TableTransaction
    from mqbridge.landing.rows import IDENTITY_COLUMN, arrow_table
    from mqbridge.message import Bulk, Message

    bulk = Bulk("orders")
    put = datetime(2026, 11, 28, 12, tzinfo=UTC)
    for i in range(300):
        bulk.add(Message(msg_id=f"ID:m-{i}", body=f"body {i}".encode(), source="test", destination="/queue/q",
                         put_timestamp=put, identity=f"ID:m-{i}"))
    job = delta_commit.raw_job(spark, arrow_table(bulk, list(range(300))), Path(handoff), path, tasks=1, groups=1,
                               sort=SORT_COLUMNS, writer_options={}, identity=IDENTITY_COLUMN, bulk_id="bulk-1",
                               transaction=TableTransaction(APP, 1))
    return {"first call": job(), "second call": job(), "rows": count_rows(spark, path),
            "columns": spark.read.format("delta").load(path).columns}


def staged_then_committed(spark: Any, path: str, handoff: str) -> dict[str, Any]:
    """Bulk 1 committed (the table made); bulks 2 and 3 staged (`delta_commit.stage_raw`: their files
    written, both on the snapshot of version 1's commit) and only then committed in order, with the same
    app id; bulk 4 staged and committed as a later attempt of version 3; a frame with a new column staged."""
    import os

    from mqbridge.landing import delta_commit
    from mqbridge.landing.containers import SORT_COLUMNS
    from mqbridge.landing.ledger import TableTransaction
    from mqbridge.landing.rows import IDENTITY_COLUMN, arrow_table

    def files_on_disk() -> int:
        return sum(name.endswith(".parquet") for _, _, names in os.walk(path) for name in names)

    def rows_of(first: int, count: int) -> Any:
        return arrow_table(raw_bulk(first, count), list(range(count)))

    common = {"tasks": 1, "groups": 1, "sort": SORT_COLUMNS, "writer_options": {}, "identity": IDENTITY_COLUMN}
    facts: dict[str, Any] = {}
    delta_commit.raw_job(spark, rows_of(0, 100), Path(handoff) / "1", path, bulk_id="bulk-1",
                         transaction=TableTransaction(APP, 1), **common)()
    facts["staged before the table exists"] = delta_commit.stage_raw(
        spark, rows_of(0, 1), Path(handoff) / "0", path + "-new", bulk_id="bulk-0", **common)
    committed_files = files_on_disk()
    second = delta_commit.stage_raw(spark, rows_of(100, 20), Path(handoff) / "2", path, bulk_id="bulk-2", **common)
    third = delta_commit.stage_raw(spark, rows_of(120, 30), Path(handoff) / "3", path, bulk_id="bulk-3", **common)
    assert second is not None and third is not None
    facts["files staged"] = files_on_disk() - committed_files
    facts["rows while staged"] = count_rows(spark, path)
    facts["second committed"] = second.commit(TableTransaction(APP, 2))
    facts["third committed"] = third.commit(TableTransaction(APP, 3))
    facts["rows after both"] = count_rows(spark, path)
    before_repeat = files_on_disk()
    repeat = delta_commit.stage_raw(spark, rows_of(150, 40), Path(handoff) / "4", path, bulk_id="bulk-4", **common)
    assert repeat is not None
    facts["repeat of version 3 committed"] = repeat.commit(TableTransaction(APP, 3))
    facts["files left by the repeat"] = files_on_disk() - before_repeat
    facts["rows at the end"] = count_rows(spark, path)
    pending = delta_commit.start(spark.read.format("delta").load(path).limit(3).selectExpr("*", "'x' AS extra"), path,
                                 "bulk-5", None)
    assert pending is not None
    facts["a new column changes the metadata"] = delta_commit.StagedCommit(spark, path, pending).changes_metadata
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").orderBy("version").collect()
    facts["user metadata"] = [h["userMetadata"] for h in history]
    facts["rows by history"] = [int((h["operationMetrics"] or {}).get("numOutputRows", -1)) for h in history]
    return facts


def fenced_before_writing(spark: Any, root: str, handoff: str) -> dict[str, Any]:
    """A fence (`delta._fence`, as another bridge's settle writes it) committed before a first attempt's
    transaction starts (this process stalled past its lease before its write), with `check_fence` on (a
    ledger other hosts share): for its first version of a table it made (`delta_create.make_table`), and
    for the version after its own commit of the one before; then with `check_fence` off. The fence scans
    (`delta_commit._fenced`) are counted."""
    from mqbridge.landing import delta_commit
    from mqbridge.landing.containers import SORT_COLUMNS
    from mqbridge.landing.ledger import TableTransaction
    from mqbridge.landing.rows import IDENTITY_COLUMN, arrow_table
    from mqbridge.landing.writes.delta import empty_frame

    common = {"tasks": 1, "groups": 1, "sort": SORT_COLUMNS, "writer_options": {}, "identity": IDENTITY_COLUMN}
    scans: list[tuple[int, int]] = []
    scan = delta_commit._fenced

    def counted(jvm: Any, delta_log: Any, start: int, end: int, transaction: Any) -> bool:
        scans.append((start, end))
        return scan(jvm, delta_log, start, end, transaction)

    def commit(path: str, version: int, first: int, check_fence: bool = True) -> bool:
        transaction = TableTransaction(APP, version, check_fence=check_fence)
        rows = arrow_table(raw_bulk(first, 10), list(range(10)))
        return bool(delta_commit.raw_job(spark, rows, Path(handoff) / f"{path.rsplit('/', 1)[-1]}-{version}", path,
                                         bulk_id=f"bulk-{version}", transaction=transaction, **common)())

    facts: dict[str, Any] = {}
    delta_commit._fenced = counted  # type: ignore[assignment]
    try:
        first = f"{root}/first"
        delta_create.make_table(spark, first, lambda: empty_frame(spark, None))
        delta._fence(spark, first, TableTransaction(APP, 1))
        facts["first version committed"] = commit(first, 1, 0)
        facts["first version rows"] = count_rows(spark, first)
        facts["first version scans"] = list(scans)
        second = f"{root}/second"
        delta_create.make_table(spark, second, lambda: empty_frame(spark, None))
        facts["version 1 committed"] = commit(second, 1, 0)
        delta._fence(spark, second, TableTransaction(APP, 2))
        facts["version 2 committed"] = commit(second, 2, 10)
        facts["second rows"] = count_rows(spark, second)
        facts["scans"] = list(scans)
        unchecked = f"{root}/unchecked"
        delta_create.make_table(spark, unchecked, lambda: empty_frame(spark, None))
        delta._fence(spark, unchecked, TableTransaction(APP, 1))
        facts["unchecked committed"] = commit(unchecked, 1, 0, check_fence=False)
        facts["unchecked rows"] = count_rows(spark, unchecked)
    finally:
        delta_commit._fenced = scan  # type: ignore[assignment]
    return facts


def test_a_transaction_api_commit_is_a_normal_delta_commit_and_a_repeated_version_is_never_written_twice(
        tmp_path: Path, delta_spark: DeltaSpark) -> None:
    # Given a new Delta table
    path = str(tmp_path / "t")
    # When bulk 1 is committed by the transaction API (first attempt: no lookup), then version 1 again
    # by a later attempt and by Delta's own writer, then version 2 by a later attempt
    outcome = delta_spark.run(commit_facts, path)
    assert outcome["ok"], outcome.get("traceback")
    facts = outcome["value"]
    # Then the first attempt committed, and both repeats of version 1 were skipped: 5 rows, not 10 or 15
    assert facts["first attempt committed"] is True and facts["rows after the first"] == 5, facts
    assert facts["later attempt of version 1 committed"] is False, facts
    assert facts["rows after the repeats"] == 5, facts
    assert facts["later attempt of version 2 committed"] is True and facts["rows at the end"] == 8, facts
    # and each is a normal Delta commit: a WRITE (append, partitioned by put_date) with the bulk id as
    # its user metadata, whose rows and app id version delta-rs reads
    writes = [(v, meta, params.get("partitionBy")) for v, op, meta, params in facts["history"] if op == "WRITE"]
    assert writes == [(0, "bulk-1", '["put_date"]'), (1, "bulk-2", '["put_date"]')], facts["history"]
    table = deltalake.DeltaTable(path)
    assert table.transaction_version(APP) == 2
    assert table.metadata().partition_columns == ["put_date"]
    ids = table.to_pyarrow_table(columns=["id"]).column("id").to_pylist()
    assert sorted(ids) == list(range(8))


def test_the_bridges_raw_job_called_again_for_its_version_is_skipped_not_written_twice(
        tmp_path: Path, delta_spark: DeltaSpark) -> None:
    # Given the bridge's job for a raw bulk of 300 landed rows
    # When it is called, then called again (a retry of the same version)
    outcome = delta_spark.run(raw_job_called_twice, str(tmp_path / "t"), str(tmp_path / "handoff"))
    assert outcome["ok"], outcome.get("traceback")
    facts = outcome["value"]
    # Then the second call asked the log and was skipped: 300 rows, not 600, with the landed columns
    assert (facts["first call"], facts["second call"], facts["rows"]) == (True, False, 300), facts
    assert "identity" in facts["columns"] and "put_date" in facts["columns"], facts


def test_a_first_attempt_loses_to_a_fence_of_its_version_that_landed_after_its_transaction_started(
        tmp_path: Path, delta_spark: DeltaSpark) -> None:
    # Given version 2's first attempt with its transaction started (the app id registered, not looked up)
    # When a fence of version 2 commits before it (a settle's empty commit) and it then tries to commit
    outcome = delta_spark.run(fenced_while_writing, str(tmp_path / "t"))
    assert outcome["ok"], outcome.get("traceback")
    # Then Delta refuses its commit (a concurrent transaction of the same app id) and its rows are not in
    assert "ConcurrentTransactionException" in outcome["value"]["error"], outcome["value"]
    assert outcome["value"]["rows"] == 5, outcome["value"]


@pytest.mark.timeout(300)
def test_readers_polling_meanwhile_only_ever_see_whole_commits(tmp_path: Path, delta_spark: DeltaSpark) -> None:
    # Given 12 bulks of different sizes committed one after the other by the transaction API, while
    # Spark (in the writing driver) and delta-rs (in this process) read the table
    path = tmp_path / "t"
    stop = tmp_path / "stop"
    bulks = 12
    future = delta_spark.submit(commits_read_meanwhile, str(path), bulks, str(stop))
    seen: list[dict[str, int]] = []
    deadline = time.monotonic() + 240
    while not stop.exists():
        assert time.monotonic() < deadline, "waited 240 s for the 12 commits (the stop file)"
        if (counts := bulk_counts_now(path)) is not None:
            seen.append(counts)
        time.sleep(0.05)
    outcome = future.result(timeout=120)
    assert outcome["ok"], outcome.get("traceback")
    # Then every bulk either reader saw was whole: as many rows as the bulk has
    size = {f"bulk-{n}": 50 + 10 * n for n in range(1, bulks + 1)}
    spark_seen: list[dict[str, int]] = outcome["value"]["seen"]
    partial = [(bulk, n) for snapshot in seen + spark_seen for bulk, n in snapshot.items() if n != size[bulk]]
    assert partial == [], partial[:5]
    # and both read while the bulks were landing
    total = sum(size.values())
    for name, snapshots in (("delta-rs", seen), ("Spark", spark_seen)):
        assert any(0 < sum(s.values()) < total for s in snapshots), f"{name} saw no table in between"


def test_staged_files_stay_invisible_until_their_commit_and_commit_in_order_under_one_app_id(
        tmp_path: Path, delta_spark: DeltaSpark) -> None:
    # Given a Delta table with bulk 1 committed
    path = str(tmp_path / "t")
    # When bulks 2 and 3 are staged (their Spark jobs write their files) before either commits, then
    # committed in order with the same app id, and a bulk staged for version 3 again is committed
    outcome = delta_spark.run(staged_then_committed, path, str(tmp_path / "handoff"))
    assert outcome["ok"], outcome.get("traceback")
    facts = outcome["value"]
    # Then nothing is staged before the table's first commit, and staged files are on disk but in no
    # reader's view until their commit
    assert facts["staged before the table exists"] is None, facts
    assert facts["files staged"] >= 2 and facts["rows while staged"] == 100, facts
    # and both commit although a commit of their app id landed after the files were written
    assert (facts["second committed"], facts["third committed"], facts["rows after both"]) == (True, True, 150), facts
    # and the repeat of version 3 is skipped, its files removed: never written twice
    assert facts["repeat of version 3 committed"] is False and facts["files left by the repeat"] == 0, facts
    assert facts["rows at the end"] == 150, facts
    assert facts["user metadata"] == ["bulk-1", "bulk-2", "bulk-3"], facts
    assert facts["rows by history"] == [100, 20, 30], facts  # the job's metrics in each commit's history
    table = deltalake.DeltaTable(path)
    assert table.transaction_version(APP) == 3
    assert len(set(table.to_pyarrow_table(columns=["msg_id"]).column("msg_id").to_pylist())) == 150
    # and a write that adds a column says so (the bridge writes such a bulk again in its turn)
    assert facts["a new column changes the metadata"] is True, facts


def test_a_first_attempt_that_must_look_for_a_fence_finds_one_that_came_before_its_transaction(
        tmp_path: Path, delta_spark: DeltaSpark) -> None:
    # Given a ledger other hosts share (check_fence) and fences of this process's versions committed
    # before their first attempts start (another bridge decided them while this one stalled)
    outcome = delta_spark.run(fenced_before_writing, str(tmp_path), str(tmp_path / "handoff"))
    assert outcome["ok"], outcome.get("traceback")
    facts = outcome["value"]
    # Then the first version of a table the writer made is skipped, found among the commits since the
    # table was made (version 0): the fence at version 1, no state rebuilt
    assert (facts["first version committed"], facts["first version rows"]) == (False, 0), facts
    assert facts["first version scans"] == [(1, 1)], facts
    # and the version after its own commit (version 1 at table version 1) is skipped, found among the
    # commits since that one: the fence at table version 2
    assert (facts["version 1 committed"], facts["version 2 committed"], facts["second rows"]) == (True, False, 10)
    assert facts["scans"][1:] == [(1, 0), (2, 2)], facts
    # And without check_fence the same write goes through the fence (why a shared ledger turns it on)
    assert (facts["unchecked committed"], facts["unchecked rows"]) == (True, 10), facts
