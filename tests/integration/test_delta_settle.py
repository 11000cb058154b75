"""How a prepared bulk of a process that is gone is decided by its Delta table (`mqbridge.landing.delta.settle`),
checked with a bare Spark and Delta (the session's Delta-enabled driver, no bridge) on real tables: a
dead owner's bulk whose version a fence reached (a settler that died before forgetting it) is decided as
not landed, and so is a bulk whose write failed undecided and whose version a later bulk of its process
passed, while a committed one is recorded published; and once the log's history no longer holds their
commits (cleaned at a checkpoint after its retention), the committed bulk is still decided as landed, by
its rows, and the fenced one still not. (The commits themselves: test_delta_commit.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mqbridge.landing import delta
from tests.support.delta_commits import APP, count_rows, frame_rows
from tests.support.delta_tables import delta_jars_fetched  # noqa: F401 (the module's autouse fixture)
from tests.support.object_stores import DeltaSpark

pytestmark = pytest.mark.integration

# --- run in the Delta-enabled driver (`DeltaSpark.run`): module-level functions -------------------


def settled_after_a_fence(spark: Any, path: str, ledger_path: str) -> dict[str, Any]:
    """A dead owner's bulk of version 2, fenced by another bridge's settle that then died before it
    forgot the bulk (its `_fence` committed, its `ledger.forget` never ran): the next settle decides it.
    Also a bulk of version 3 whose commit did go in, for the contrast."""
    from pathlib import Path as _Path

    from mqbridge.landing import delta_commit
    from mqbridge.landing.ledger import SqliteLedger, TableTransaction

    ledger = SqliteLedger.open(_Path(ledger_path), owner="settler:1:1.00")
    delta_commit.write_frame(frame_rows(spark, "bulk-1", range(0, 5)), path, "bulk-1", TableTransaction(APP, 1))
    ledger.prepare("bulk-2", "t", [], ["m5", "m6"], transaction=TableTransaction(APP, 2))
    delta._fence(spark, path, TableTransaction(APP, 2))  # the first settler's fence; it died before forget
    ledger.prepare("bulk-3", "t", [], ["m7"], transaction=TableTransaction(APP, 3))
    delta_commit.write_frame(frame_rows(spark, "bulk-3", range(7, 8)), path, "bulk-3", TableTransaction(APP, 3))
    bulks = {b.bulk_id: b for b in ledger.prepared_holding(["m5", "m7"])}
    facts = {"bulk-2 landed": delta.settle(ledger, bulks["bulk-2"], spark, path),
             "bulk-3 landed": delta.settle(ledger, bulks["bulk-3"], spark, path)}
    facts.update({"bulk-2 state": ledger.state_of("bulk-2"), "bulk-3 state": ledger.state_of("bulk-3"),
                  "published": sorted(ledger.published(["m5", "m6", "m7"])), "rows": count_rows(spark, path)})
    ledger.close()
    return facts


def settled_past_a_later_version(spark: Any, path: str, ledger_path: str) -> dict[str, Any]:
    """This process's bulk of version 2, whose write failed while its table could not be asked (the
    store unreachable: the bulk left prepared, undecided), then its bulk of version 3, committed once the
    store answered again: the settle of version 2 when its messages come again, then a late write of
    version 2 (a Spark job still under way)."""
    from pathlib import Path as _Path

    from mqbridge.landing import delta_commit
    from mqbridge.landing.ledger import SqliteLedger, TableTransaction

    ledger = SqliteLedger.open(_Path(ledger_path), owner="bridge:1:1.00")
    delta_commit.write_frame(frame_rows(spark, "bulk-1", range(0, 5)), path, "bulk-1", TableTransaction(APP, 1))
    ledger.prepare("bulk-2", "t", [], ["m5", "m6"], transaction=TableTransaction(APP, 2))  # its write failed
    ledger.prepare("bulk-3", "t", [], ["m7"], transaction=TableTransaction(APP, 3))
    delta_commit.write_frame(frame_rows(spark, "bulk-3", range(7, 8)), path, "bulk-3", TableTransaction(APP, 3))
    ledger.mark_published("bulk-3")
    bulk = ledger.prepared_holding(["m5"])[0]
    facts: dict[str, Any] = {"bulk-2 landed": delta.settle(ledger, bulk, spark, path)}
    facts.update({"bulk-2 state": ledger.state_of("bulk-2"), "published": sorted(ledger.published(["m5", "m6", "m7"])),
                  "rows": count_rows(spark, path)})
    facts["late write committed"] = delta_commit.write_frame(
        frame_rows(spark, "bulk-2", range(5, 7)), path, "bulk-2", TableTransaction(APP, 2), first_attempt=False)
    facts["rows after"] = count_rows(spark, path)
    ledger.close()
    return facts


def settled_after_the_log_forgot_them(spark: Any, path: str, ledger_path: str) -> dict[str, Any]:
    """A dead owner's bulk of version 2 that committed, and its bulk of version 3 that another bridge's
    settle fenced before dying itself, both still prepared; then the log's history loses them: every
    entry so far made older than `delta.logRetentionDuration` (30 days), and a later commit's checkpoint
    (the table checkpoints at every commit) makes Delta clean the log. The next settle decides both."""
    import os
    import time as _time
    from pathlib import Path as _Path

    from mqbridge.landing import delta_commit
    from mqbridge.landing.ledger import SqliteLedger, TableTransaction

    ledger = SqliteLedger.open(_Path(ledger_path), owner="settler:1:1.00")
    delta_commit.write_frame(frame_rows(spark, "bulk-1", range(0, 5)), path, "bulk-1", TableTransaction(APP, 1))
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.checkpointInterval' = '1')")
    ledger.prepare("bulk-2", "t", [], ["m5", "m6"], transaction=TableTransaction(APP, 2))
    delta_commit.write_frame(frame_rows(spark, "bulk-2", range(5, 7)), path, "bulk-2", TableTransaction(APP, 2))
    ledger.prepare("bulk-3", "t", [], ["m7"], transaction=TableTransaction(APP, 3))
    delta._fence(spark, path, TableTransaction(APP, 3))
    delta_commit.write_frame(frame_rows(spark, "bulk-4", range(8, 9)), path, "bulk-4", TableTransaction(APP, 4))
    aged = _time.time() - 40 * 86400
    for entry in _Path(path, "_delta_log").iterdir():
        os.utime(entry, (aged, aged))
    delta_commit.write_frame(frame_rows(spark, "bulk-5", range(9, 10)), path, "bulk-5", TableTransaction(APP, 5))
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()
    bulks = {b.bulk_id: b for b in ledger.prepared_holding(["m5", "m7"])}
    facts = {"history": sorted((int(h["version"]), h["userMetadata"]) for h in history),
             "app version": delta.committed_version(spark, path, APP)[1],
             "bulk-2 landed": delta.settle(ledger, bulks["bulk-2"], spark, path),
             "bulk-3 landed": delta.settle(ledger, bulks["bulk-3"], spark, path)}
    facts.update({"bulk-2 state": ledger.state_of("bulk-2"), "bulk-3 state": ledger.state_of("bulk-3"),
                  "published": sorted(ledger.published(["m5", "m6", "m7"])), "rows": count_rows(spark, path)})
    ledger.close()
    return facts



# --- the test's side -----------------------------------------------------------------------------


def settled(delta_spark: DeltaSpark, scenario: Any, tmp_path: Path) -> dict[str, Any]:
    """The facts `scenario` (one of the functions above) returns from the Delta driver, for a table and a
    ledger under `tmp_path`; fails with the driver's traceback if it raised."""
    outcome = delta_spark.run(scenario, str(tmp_path / "t"), str(tmp_path / "ledger.sqlite3"))
    assert outcome["ok"], outcome.get("traceback")
    facts: dict[str, Any] = outcome["value"]
    return facts


def test_a_bulk_fenced_by_a_settler_that_died_before_forgetting_it_is_never_taken_for_landed(
        tmp_path: Path, delta_spark: DeltaSpark) -> None:
    # Given a dead owner's prepared bulk whose version another bridge fenced (an empty commit of that
    # version) before dying itself, the bulk still prepared; and a bulk whose commit went in
    # When the next bridge settles both
    facts = settled(delta_spark, settled_after_a_fence, tmp_path)
    # Then the fenced bulk is forgotten (its rows were never in: its messages land when they come back),
    # not recorded published (which would commit its messages at their source without landing them),
    # and the committed one is recorded published
    assert (facts["bulk-2 landed"], facts["bulk-2 state"]) == (False, None), facts
    assert (facts["bulk-3 landed"], facts["bulk-3 state"]) == (True, "published"), facts
    assert facts["published"] == ["m7"] and facts["rows"] == 6, facts


def test_a_bulk_whose_commit_left_the_logs_history_is_still_taken_for_landed_and_a_fenced_one_is_not(
        tmp_path: Path, delta_spark: DeltaSpark) -> None:
    # Given a dead owner's prepared bulk whose commit went in and one whose version was fenced, and the
    # log's history cleaned of both since (a bridge down longer than delta.logRetentionDuration, its
    # messages still on their queue)
    # When the next bridge settles both
    facts = settled(delta_spark, settled_after_the_log_forgot_them, tmp_path)
    metadata = [meta for _, meta in facts["history"]]
    assert "bulk-2" not in metadata and "bulk-5" in metadata, facts["history"]  # really gone from the log
    assert facts["app version"] == 5, facts
    # Then the committed bulk is recorded published by its rows (forgotten, its messages would land again),
    # and the fenced one, which left no row, is forgotten (its messages land when they come back)
    assert (facts["bulk-2 landed"], facts["bulk-2 state"]) == (True, "published"), facts
    assert (facts["bulk-3 landed"], facts["bulk-3 state"]) == (False, None), facts
    assert facts["published"] == ["m5", "m6"] and facts["rows"] == 9, facts


def test_a_bulk_whose_version_a_later_bulk_of_its_process_passed_is_never_taken_for_landed(
        tmp_path: Path, delta_spark: DeltaSpark) -> None:
    # Given a bridge's prepared bulk of version 2 whose write failed while the store could not be asked
    # (left undecided), and its next bulk, version 3, committed once the store answered (the S3 server
    # restarted under two listener threads: tests/integration/test_shared_faults.py)
    # When the bridge settles version 2 as its messages come again
    facts = settled(delta_spark, settled_past_a_later_version, tmp_path)
    # Then the bulk is forgotten (its messages land when they come back), not recorded published because
    # its app id's version passed 2 (which committed its messages at their source without landing them:
    # 10 of 400 lost), and a late write of version 2 is skipped by Delta
    assert (facts["bulk-2 landed"], facts["bulk-2 state"]) == (False, None), facts
    assert facts["published"] == ["m7"] and facts["rows"] == 6, facts
    assert (facts["late write committed"], facts["rows after"]) == (False, 6), facts
