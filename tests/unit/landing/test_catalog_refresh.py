"""A session that reads a catalog table by name caches the table's file listing: after a compaction
or a purge swapped one of its `put_date` containers, the bridge's own session refreshes the table
(`mqbridge.landing.catalog.refresh_swapped`), so a read by name there sees the new files, not the
removed ones. A real local Spark, a real in-memory catalog, files written by pyarrow."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from mqbridge.landing.catalog import CatalogRegistrar
from mqbridge.maintenance.compaction.compactor import Compactor
from mqbridge.maintenance.engine.costs import CostModel
from mqbridge.maintenance.purge import Designation, Purger

DAY1, DAY2 = "2024-05-01", "2024-05-02"


def land_file(table: Path, put_date: str, msg_ids: list[str]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    container = table / f"put_date={put_date}"
    container.mkdir(parents=True, exist_ok=True)
    at = datetime.fromisoformat(put_date).replace(hour=12, tzinfo=timezone.utc)
    pq.write_table(pa.table({"msg_id": msg_ids, "message_type": ["orders"] * len(msg_ids),
                             "put_timestamp": pa.array([at] * len(msg_ids), pa.timestamp("us", tz="UTC"))}),
                   container / f"part-{uuid.uuid4()}.c000.snappy.parquet")


def msg_ids(spark: Any, name: str) -> list[str]:
    return sorted(r.msg_id for r in spark.table(f"`{name}`").select("msg_id").collect())


def test_the_bridges_session_reads_a_catalog_table_rightly_after_each_swap(spark: Any, tmp_path: Path) -> None:
    # Given a table registered by name, three files in one put_date and one in another, read by name
    # once (the session now caches its file listing)
    name = f"orders_{uuid.uuid4().hex[:8]}"
    table = tmp_path / "landing" / name
    for ids in (["m0"], ["m1"], ["m2"]):
        land_file(table, DAY1, ids)
    land_file(table, DAY2, ["m3"])
    registrar = CatalogRegistrar(lambda: spark)
    registrar.register(name, table, [DAY1, DAY2])
    assert registrar.failures == 0
    try:
        assert msg_ids(spark, name) == ["m0", "m1", "m2", "m3"]
        model = CostModel(tmp_path / "costs.json")
        # When the first put_date is compacted (its three files swapped for one new file)
        [done] = Compactor(spark, model, 1 << 20).run(table, [DAY1])
        assert (done.files_before, done.files_after) == (3, 1)
        # Then the same session reads every row by name (a stale listing names the removed files)
        assert msg_ids(spark, name) == ["m0", "m1", "m2", "m3"]
        # When a purge copies the first put_date without one row, and drops the second whole
        purger = Purger(spark, model)
        for where, strategy in (("msg_id = 'm0'", "copy"), ("msg_id = 'm3'", "auto")):
            designation = Designation(where=where)
            [plan] = purger.plan(table, designation, strategy)
            [result] = purger.run([plan], designation)
            assert result.strategy == ("copy" if strategy == "copy" else "drop")
        # Then the session reads by name exactly the rows left
        assert msg_ids(spark, name) == ["m1", "m2"]
    finally:
        spark.sql(f"DROP TABLE IF EXISTS `{name}`")
