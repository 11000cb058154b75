"""A Delta table made empty before its first bulk (`mqbridge.landing.delta_create`), checked with a bare
Spark and Delta (the session's Delta-enabled driver, no bridge) on real tables: of two writers that make
one table at once by Delta's writer alone one fails (the race is real), by the bridge's making neither
does, and one commit made the table; the table made is the one the first bulk's own commit would make
(columns, partitioning, properties), and that bulk's files are staged before its turn."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mqbridge.landing import delta, delta_create
from tests.support.delta_commits import APP, count_rows, raw_bulk
from tests.support.delta_tables import (
    delta_jars_fetched,  # noqa: F401 (the module's autouse fixture)
)
from tests.support.object_stores import DeltaSpark

pytestmark = pytest.mark.integration

deltalake = pytest.importorskip("deltalake")


# --- run in the Delta-enabled driver (`DeltaSpark.run`): module-level functions -------------------


def made_by_two_writers(spark: Any, root: str, rounds: int) -> dict[str, Any]:
    """Two threads of one driver make one new table at once, `rounds` times by Delta's writer alone
    (`delta_create.create_empty`: what each got), then `rounds` times by the bridge's `delta_create.made`;
    then the bridge makes a table that is there."""
    from mqbridge.landing import delta, delta_create
    from mqbridge.landing.writes.delta import empty_frame

    def create(path: str) -> None:
        delta_create.create_empty(empty_frame(spark, None), path)

    def bare(path: str) -> str:
        create(path)
        return "ok"

    def made(path: str) -> str:
        return delta_create.made(lambda: delta.current_version(spark, path), lambda: create(path))[0].value

    facts: dict[str, Any] = {}
    for kind, make in (("bare", bare), ("made", made)):
        facts[kind] = []
        for n in range(rounds):
            path = f"{root}/{kind}-{n}"
            facts[kind] += _two_at_once(make, path)
            facts[f"{kind}-{n} versions"] = _versions(spark, path)
    there = f"{root}/made-0"
    before = delta.current_version(spark, there)
    facts["made again"] = made(there)
    create(there)  # Delta's Ignore on a table that is there
    facts["versions added by writing it again"] = delta.current_version(spark, there) - before
    return facts


def _two_at_once(make: Any, path: str) -> list[str]:
    """`make(path)` called by two threads at once: what each returned, or the error it raised."""
    import threading

    start = threading.Barrier(2)
    outcomes: list[str] = []

    def run() -> None:
        start.wait()
        try:
            outcomes.append(make(path))
        except Exception as exc:
            outcomes.append(f"error: {type(exc).__name__}: {exc}"[:400])

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def _versions(spark: Any, path: str) -> list[tuple[int, str | None]]:
    return [(int(h["version"]), h["userMetadata"])
            for h in spark.sql(f"DESCRIBE HISTORY delta.`{path}`").orderBy("version").collect()]


def made_then_landed(spark: Any, root: str, handoff: str) -> dict[str, Any]:
    """A table the bridge makes (`delta_create.make_table`, the session's defaults for new tables of
    `delta.DEFAULT_CONF` set as the bridge's session has them) and a raw bulk landed into it by the
    pipelined commit (`stage_raw`, then `StagedCommit.commit`); beside it, a table made by that same
    bulk's own first commit, as before tables were made first."""
    from mqbridge.landing import delta, delta_commit, delta_create
    from mqbridge.landing.containers import SORT_COLUMNS
    from mqbridge.landing.ledger import TableTransaction
    from mqbridge.landing.rows import IDENTITY_COLUMN, arrow_table
    from mqbridge.landing.writes.delta import empty_frame

    defaults = {k: v for k, v in delta.DEFAULT_CONF.items() if ".properties.defaults." in k}
    for key, value in defaults.items():
        spark.conf.set(key, value)
    try:
        made, by_bulk = f"{root}/made", f"{root}/by-bulk"
        rows = arrow_table(raw_bulk(0, 50), list(range(50)))
        common = {"tasks": 1, "groups": 1, "sort": SORT_COLUMNS, "writer_options": {}, "identity": IDENTITY_COLUMN}
        facts: dict[str, Any] = {
            "made": delta_create.make_table(spark, made, lambda: empty_frame(spark, None)).value,
            "made again": delta_create.make_table(spark, made, lambda: empty_frame(spark, None)).value}
        facts["rows of the made table"] = count_rows(spark, made)
        staged = delta_commit.stage_raw(spark, rows, Path(handoff) / "1", made, bulk_id="bulk-1", **common)
        facts["staged into the made table"] = staged is not None
        facts["the bulk changes its metadata"] = staged is not None and staged.changes_metadata
        facts["committed"] = staged is not None and staged.commit(TableTransaction(APP, 1))
        delta_commit.raw_job(spark, rows, Path(handoff) / "2", by_bulk, bulk_id="bulk-1",
                             transaction=TableTransaction(APP, 1), **common)()
    finally:
        for key in defaults:
            spark.conf.unset(key)
    facts["history"] = _versions(spark, made)
    facts["rows"] = count_rows(spark, made)
    return facts


# --- the tests ------------------------------------------------------------------------------------


def test_two_writers_that_make_one_table_at_once_leave_one_table_and_neither_fails(
        tmp_path: Path, delta_spark: DeltaSpark) -> None:
    # Given two writers that find no table and make it at the same time (two threads of one driver)
    # When each writes the empty table by Delta's writer alone (3 tables), then by the bridge's `made` (3)
    outcome = delta_spark.run(made_by_two_writers, str(tmp_path), 3)
    assert outcome["ok"], outcome.get("traceback")
    facts = outcome["value"]
    print("Delta's writer alone, two at once:", facts["bare"])
    # Then each table holds one commit, the one that made it: the other writer's committed nothing
    for kind in ("bare", "made"):
        for n in range(3):
            assert facts[f"{kind}-{n} versions"] == [(0, delta_create.CREATE_MARK)], facts
    # and by Delta's writer alone one of the two failed at least once (the race is real) ...
    assert "ok" in facts["bare"] and any(o.startswith("error") for o in facts["bare"]), facts["bare"]
    # ... while by the bridge's `made` neither failed: the one that lost found the table made
    assert not [o for o in facts["made"] if o.startswith("error")], facts["made"]
    # And a table that is there is found, and writing it again commits nothing (SaveMode.Ignore)
    assert facts["made again"] == "found" and facts["versions added by writing it again"] == 0, facts


def test_a_table_made_before_its_first_bulk_is_the_table_that_bulk_would_have_made(
        tmp_path: Path, delta_spark: DeltaSpark) -> None:
    # Given a table made empty by the bridge (the session's defaults for new tables set as the bridge sets them)
    # When a raw bulk is staged into it (the pipelined commit) and committed
    outcome = delta_spark.run(made_then_landed, str(tmp_path), str(tmp_path / "handoff"))
    assert outcome["ok"], outcome.get("traceback")
    facts = outcome["value"]
    # Then the table was made once and was empty; the first bulk was staged before its turn and changed
    # nothing of the table's metadata: its columns are those the bulk's own first commit makes
    assert (facts["made"], facts["made again"], facts["rows of the made table"]) == ("created", "known", 0), facts
    assert facts["staged into the made table"] and not facts["the bulk changes its metadata"], facts
    assert facts["committed"] and facts["rows"] == 50, facts
    assert facts["history"] == [(0, delta_create.CREATE_MARK), (1, "bulk-1")], facts
    made, by_bulk = (deltalake.DeltaTable(str(tmp_path / name)) for name in ("made", "by-bulk"))
    assert made.schema().to_json() == by_bulk.schema().to_json()
    assert made.metadata().partition_columns == by_bulk.metadata().partition_columns == ["put_date"]
    # and the properties the bridge's session gives a new table
    properties = made.metadata().configuration
    assert properties.get("delta.checkpointInterval") == "100", properties
    assert properties.get("delta.dataSkippingStatsColumns") == ",".join(delta.STATS_COLUMNS), properties
    assert properties == by_bulk.metadata().configuration
