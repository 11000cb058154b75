"""What Iceberg's write-audit-publish (WAP) promises, checked with a bare Spark driver (Iceberg 1.12's
jars, a JDBC catalog on SQLite, in a child process: `DeltaSpark`) before the bridge builds an
idempotent, fenceable Iceberg append on it (issue 49: Iceberg has no `txnAppId` as Delta has).

On a table with `write.wap.enabled`, an append made while the session's `spark.wap.id` is set is
*staged*: a snapshot that readers do not see until `CALL <catalog>.system.cherrypick_snapshot`
publishes it, and a second publish of the same WAP id fails (`DuplicateWAPCommitException`), whatever
was staged first and whether the publish fast-forwards the table or is applied on top of newer
snapshots. That is what would make an Iceberg bulk's publish idempotent (the WAP id is the bulk's
transaction) and let recovery fence a dead writer's version (stage an empty append with its WAP id and
publish it first: the dead writer's publish then fails). Each fact is one scenario below; the test
prints the time of a stage and of a publish (two catalog commits per bulk instead of one)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_iceberg_read import iceberg_conf
from tests.support.object_stores import DeltaSpark

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

TABLE = "mqbridge.mqbridge.wap"
DUPLICATE = "DuplicateWAPCommitException"


# --- the child's side (DeltaSpark.run calls these with its session) ------------------------------------


def _ids(spark: Any) -> list[int]:
    return sorted(r[0] for r in spark.table(TABLE).collect())


def _stage(spark: Any, wap_id: str, ids: list[int]) -> int:
    """Append `ids` with `spark.wap.id` = `wap_id` set; the id of the snapshot it staged."""
    spark.conf.set("spark.wap.id", wap_id)
    try:
        spark.createDataFrame([(i,) for i in ids], "id INT").writeTo(TABLE).append()
    finally:
        spark.conf.unset("spark.wap.id")
    staged = spark.sql(f"SELECT snapshot_id FROM {TABLE}.snapshots WHERE summary['wap.id'] = '{wap_id}' "
                       "ORDER BY committed_at DESC").collect()
    return int(staged[0][0])


def _publish(spark: Any, snapshot_id: int) -> str:
    """"published", or the name of the Java exception the cherry-pick failed with."""
    try:
        spark.sql(f"CALL mqbridge.system.cherrypick_snapshot('{TABLE}', {snapshot_id})").collect()
        return "published"
    except Exception as exc:  # noqa: BLE001 -- the failure's Java class is the fact checked
        text = str(exc)
        return DUPLICATE if DUPLICATE in text else text[:300]


def _published_ids(spark: Any) -> list[str]:
    """The WAP ids published in the current snapshot's history: `published-wap-id` of a cherry-pick
    applied on top, `wap.id` of a staged snapshot that became current by a fast-forward."""
    lineage = spark.sql(f"SELECT summary FROM {TABLE}.snapshots s JOIN {TABLE}.history h "
                        "ON s.snapshot_id = h.snapshot_id WHERE h.is_current_ancestor").collect()
    found = []
    for (summary,) in lineage:
        wap = summary.get("published-wap-id") or summary.get("wap.id")
        if wap:
            found.append(wap)
    return sorted(found)


def wap_facts(spark: Any) -> dict[str, Any]:
    """The module's scenarios, in order, on one table: what each step returned and what readers saw."""
    spark.sql("CREATE NAMESPACE IF NOT EXISTS mqbridge.mqbridge")
    spark.sql(f"CREATE TABLE {TABLE} (id INT) USING iceberg "
              "TBLPROPERTIES ('format-version' = '2', 'write.wap.enabled' = 'true')")
    facts: dict[str, Any] = {}
    started = time.monotonic()
    one = _stage(spark, "app:1", [1, 2])
    facts["stage_seconds"] = time.monotonic() - started
    two = _stage(spark, "app:2", [3])  # staged while app:1 is staged too: overlapping bulks
    facts["staged_unseen"] = _ids(spark)
    started = time.monotonic()
    facts["publish_one"] = _publish(spark, one)  # a fast-forward: the table's current is its parent
    facts["publish_seconds"] = time.monotonic() - started
    facts["publish_two"] = _publish(spark, two)  # applied on top of app:1: a new snapshot
    facts["after_two"] = _ids(spark)
    facts["publish_one_again"] = _publish(spark, one)
    facts["publish_two_again"] = _publish(spark, two)
    facts["after_again"] = _ids(spark)
    # A fence first: an empty append staged and published with app:3's id; then app:3's rows
    fence = _stage(spark, "app:3", [])
    facts["fence_publish"] = _publish(spark, fence)
    late = _stage(spark, "app:3", [4])
    facts["late_publish"] = _publish(spark, late)
    facts["after_fence"] = _ids(spark)
    # The rows first, then a fence of the same id: the fence fails, the rows stay
    rows = _stage(spark, "app:4", [5])
    facts["rows_publish"] = _publish(spark, rows)
    fence = _stage(spark, "app:4", [])
    facts["fence_after_rows"] = _publish(spark, fence)
    facts["after_rows"] = _ids(spark)
    facts["published_ids"] = _published_ids(spark)
    return facts


# --- the test's side -------------------------------------------------------------------------------------


def test_a_wap_id_is_published_once_whatever_was_staged_first(tmp_path: Path) -> None:
    # Given a bare Spark driver with Iceberg and a table with write.wap.enabled
    driver = DeltaSpark(iceberg_conf(tmp_path), tmp_path / "scratch")
    try:
        result = driver.run(wap_facts)
    finally:
        driver.close()
    assert result["ok"], result.get("traceback")
    facts = result["value"]
    # Then staged appends are unseen, even two at once ...
    assert facts["staged_unseen"] == []
    # ... each publishes once, by a fast-forward or on top of a newer snapshot
    assert (facts["publish_one"], facts["publish_two"], facts["after_two"]) == ("published", "published", [1, 2, 3])
    # ... and a second publish of either id fails with Iceberg's duplicate-WAP error, nothing added
    assert (facts["publish_one_again"], facts["publish_two_again"]) == (DUPLICATE, DUPLICATE), facts
    assert facts["after_again"] == [1, 2, 3]
    # ... an empty append published with an id fences it: the rows staged with it later never publish
    assert (facts["fence_publish"], facts["late_publish"], facts["after_fence"]) == (
        "published", DUPLICATE, [1, 2, 3]), facts
    # ... and a fence staged after the rows' publish fails, the rows stay
    assert (facts["rows_publish"], facts["fence_after_rows"], facts["after_rows"]) == (
        "published", DUPLICATE, [1, 2, 3, 5]), facts
    # ... and the table's history names every id published (how recovery would ask)
    assert facts["published_ids"] == ["app:1", "app:2", "app:3", "app:4"], facts
    print(f"stage {facts['stage_seconds']:.2f}s, publish {facts['publish_seconds']:.2f}s")
