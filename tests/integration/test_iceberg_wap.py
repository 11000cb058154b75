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
prints the time of a stage and of a publish (two catalog commits per bulk instead of one).

Then the bridge's own functions on it (`mqbridge.landing.iceberg`): a bulk staged by a writer that is
taken for dead is fenced by recovery (`settle`: forgotten), and that writer's publish afterwards is
refused (BulkFencedError), no row landed; bulks published before recovery asks are recorded published,
one by a fast-forward, one on top of a newer snapshot; and the table's lineage read by pyiceberg
(`iceberg_read.bulk_ids`) names those two and not the fence."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.iceberg_tables import bare_catalog, bare_properties, iceberg_conf, landed_rows
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


def fence_facts(spark: Any, base: str) -> dict[str, Any]:
    """The bridge's stage, publish and settle on the table `orders` (made by `ensure_table`), a ledger
    under `base` holding the bulks as prepared by a dead owner; what each step returned."""
    from mqbridge.errors import BulkFencedError
    from mqbridge.landing import iceberg
    from mqbridge.landing.ledger import SqliteLedger, TableTransaction

    catalog = bare_catalog(base)
    ledger = SqliteLedger.open(Path(base) / "ledger.db", owner="elsewhere:1:1.00")
    writer = spark.newSession()  # the dead writer's own session (the WAP id is a session setting)

    def frame(bulk: str, ids: list[str]) -> Any:
        return landed_rows(writer, [(i, "2026-11-06 10:00:00", bulk, 1) for i in ids])

    def prepared(bulk: str, ids: list[str], version: int) -> Any:
        ledger.prepare(bulk, "orders", (), ids, transaction=TableTransaction("mqbridge:dead", version))
        return next(b for b in ledger.in_progress() if b.bulk_id == bulk)

    iceberg.ensure_table(spark, catalog, "orders", frame("b-0", ["x"]))
    facts: dict[str, Any] = {}
    # A writer staged b-1 and stalled; recovery decides it
    one = prepared("b-1", ["i1", "i2"], 1)
    staged = iceberg.stage(frame("b-1", ["i1", "i2"]), catalog, "orders", "b-1", one.transaction)
    facts["settle_staged"] = iceberg.settle(ledger, one, spark, catalog)
    facts["state_after"] = ledger.state_of("b-1")
    try:
        iceberg.publish(writer, catalog, "orders", staged, "b-1")
        facts["late_publish"] = "published"
    except BulkFencedError as exc:
        facts["late_publish"] = str(exc)
    # Two bulks staged together, then published (a fast-forward, then one on top), then recovery asks
    two, three = prepared("b-2", ["i3"], 2), prepared("b-3", ["i4"], 3)
    staged_two = iceberg.stage(frame("b-2", ["i3"]), catalog, "orders", "b-2", two.transaction)
    staged_three = iceberg.stage(frame("b-3", ["i4"]), catalog, "orders", "b-3", three.transaction)
    iceberg.publish(writer, catalog, "orders", staged_two, "b-2")
    iceberg.publish(writer, catalog, "orders", staged_three, "b-3")
    facts["settle_published"] = [iceberg.settle(ledger, two, spark, catalog),
                                 iceberg.settle(ledger, three, spark, catalog)]
    facts["states"] = [ledger.state_of("b-2"), ledger.state_of("b-3")]
    facts["lineage"] = {b: iceberg.published_as(spark, catalog, "orders", b) for b in ("b-1", "b-2", "b-3")}
    facts["rows"] = sorted(r[0] for r in spark.table(catalog.identifier("orders")).select("identity").collect())
    return facts


# --- the test's side -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DeltaSpark, Path]]:
    """One bare Spark driver with Iceberg for the module, its SQLite catalog under a base of its own."""
    base = tmp_path_factory.mktemp("iceberg-wap")
    spark = DeltaSpark(iceberg_conf(base), base / "scratch")
    yield spark, base
    spark.close()


def test_a_wap_id_is_published_once_whatever_was_staged_first(driver: tuple[DeltaSpark, Path]) -> None:
    # Given a bare Spark driver with Iceberg and a table with write.wap.enabled
    result = driver[0].run(wap_facts)
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


def test_recovery_fences_a_stalled_writers_bulk_and_its_publish_after_is_refused(
        driver: tuple[DeltaSpark, Path]) -> None:
    from mqbridge.landing import iceberg, iceberg_catalog, iceberg_read

    spark, base = driver
    # Given bulks prepared in the ledger by a bridge taken for dead: b-1 staged, not published; b-2 and
    # b-3 staged together and published (when recovery asks, `iceberg.settle`)
    result = spark.run(fence_facts, str(base))
    assert result["ok"], result.get("traceback")
    facts = result["value"]
    # Then b-1 is fenced and forgotten, and its writer's publish afterwards is refused: none of its rows
    assert (facts["settle_staged"], facts["state_after"]) == (False, None), facts
    assert facts["late_publish"].startswith("bulk b-1 of Iceberg table orders was decided by another process"), facts
    # ... b-2 and b-3 are recorded published
    assert (facts["settle_published"], facts["states"]) == ([True, True], ["published", "published"]), facts
    assert facts["lineage"] == {"b-1": iceberg.FENCE, "b-2": iceberg.ROWS, "b-3": iceberg.ROWS}, facts
    assert facts["rows"] == ["i3", "i4"], facts
    # ... and pyiceberg reads the same lineage: the two bulks, not the fence
    table = iceberg_catalog.load_table(iceberg_catalog.open_catalog(bare_properties(base)), ("mqbridge", "orders"))
    assert sorted(iceberg_read.bulk_ids(table)) == ["b-2", "b-3"]
