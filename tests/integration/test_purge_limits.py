"""Purge designation by limits on a real Spark (`mqbridge.maintenance.purge.limits`): a type's row cap
(`[types.X] max_rows`) and the warehouse's free-space floor (`[purge] min_free_disk`), on a Parquet
table and a local Delta table. Rows put half an hour apart over the last 30 hours; `mqbridge purge`
and the scheduled purge take exactly the oldest rows beyond a cap, and never a row younger than
`[purge] keep_younger_than` (12 hours here), even where the cap or the floor asks for more; the
free-space floor is set above the disk's free space (from `shutil.disk_usage`) so that it must act.
Every row is accounted for: exactly the expected ones remain, each once. The output and the log say
which rule designated what. The Delta table's purges run in the session's Delta-enabled driver
(`delta_spark`, `tests.support.delta_tables.run_in_driver`): what they do to the table is the subject
here; `mqbridge purge` starting a driver of its own with Delta is tests/integration/test_delta_maintenance.py's."""

from __future__ import annotations

import collections
import logging
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from mqbridge.config import TypeConfig, load_config
from mqbridge.counters import Counters
from mqbridge.landing.executor import SparkExecutor
from mqbridge.landing.landing import Landing
from mqbridge.landing.ledger import SqliteLedger, owner_id
from mqbridge.landing.rows import IDENTITY_COLUMN, arrow_table
from mqbridge.maintenance.purge import PurgeScheduler
from mqbridge.message import Bulk, Message
from tests.support.configs import BridgeToml
from tests.support.delta_tables import SMALL_TABLE_CONF, run_in_driver
from tests.support.object_stores import DeltaSpark
from tests.support.processes import ROOT, mqbridge
from tests.support.purge import purge_bridge

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

#: Rows per table: row n is put (and received) 30 - n/2 hours ago: the oldest first.
ROWS = 40
#: keep_younger_than: rows 37, 38 and 39 (11.5, 11 and 10.5 hours old) are younger.
FLOOR_HOURS = 12
YOUNG = {37, 38, 39}
TYPES = ("orders", "refunds")
JARS = ROOT / "jars"


def put_times(now: datetime) -> list[datetime]:
    return [now - timedelta(hours=30) + timedelta(minutes=30 * n) for n in range(ROWS)]


def bulk_of(message_type: str, now: datetime) -> Bulk:
    bulk = Bulk(message_type)
    for n, put in enumerate(put_times(now)):
        bulk.add(Message(msg_id=f"{message_type}-{n}", body=f"{n}".encode() * 50, source="amq",
                         destination=f"/queue/{message_type}", message_type=message_type, put_timestamp=put,
                         received_timestamp=put))
    return bulk


def land_parquet(spark: Any, warehouse: Path, state: Path, now: datetime) -> None:
    """A Parquet table per type as the bridge lands them (ledger, markers), ROWS rows each."""
    ledger = SqliteLedger.open(state / "ledger.sqlite3", owner=owner_id())
    landing = Landing(ledger=ledger, owner=ledger.owner, counters=Counters(), dedupe_window=3600.0, warehouse=warehouse)
    for name in TYPES:
        SparkExecutor(spark, warehouse, name, TypeConfig(table=name), landing=landing).execute(bulk_of(name, now))
    landing.close()


def land_delta(warehouse: Path, now: datetime) -> None:
    """A Delta table per type (delta-rs: no JVM in the test process), ROWS rows each."""
    deltalake = pytest.importorskip("deltalake")
    for name in TYPES:
        bulk = bulk_of(name, now)
        rows = arrow_table(bulk, list(range(len(bulk.messages)))).drop_columns(["_row"])
        rows = rows.rename_columns([IDENTITY_COLUMN if c == "_identity" else c for c in rows.column_names])
        deltalake.write_deltalake(str(warehouse / name), rows, mode="append", partition_by=["put_date"])


def left(table: Path, table_format: str, spark: Any = None) -> collections.Counter[int]:
    """How often each row number is in `table` (Delta: read by delta-rs; Parquet: by Spark)."""
    if table_format == "delta":
        import deltalake

        ids = deltalake.DeltaTable(str(table)).to_pyarrow_table(columns=["msg_id"]).column("msg_id").to_pylist()
    else:
        ids = [r.msg_id for r in spark.read.parquet(str(table)).select("msg_id").collect()]
    return collections.Counter(int(i.rsplit("-", 1)[1]) for i in ids)


def exactly(table: Path, table_format: str, expected: set[int], spark: Any = None) -> None:
    """`table` holds exactly the rows `expected`, each once: 0 lost, 0 duplicated, 0 unexpected."""
    rows = left(table, table_format, spark)
    lost, unexpected = expected - set(rows), set(rows) - expected
    duplicated = sorted(n for n, k in rows.items() if k > 1)
    assert (sorted(lost), duplicated, sorted(unexpected)) == ([], [], []), table


def limits_bridge(table_format: str) -> BridgeToml:
    """`mqbridge purge`'s configuration: the two types, orders capped at 25 rows (the 15 oldest go),
    refunds at 2 (the floor keeps 3); equal per-row costs, no fixed container cost."""
    toml = (purge_bridge().set("purge", delete_row_seconds=1e-5, copy_row_seconds=1e-5, container_seconds=0,
                               keep_younger_than=f"{FLOOR_HOURS}h")
            .set("types.orders", max_rows=25).set("types.refunds", max_rows=2))
    if table_format == "delta":
        toml = (toml.set("spark", table_format="delta", jars_dir=str(JARS), writer="spark")
                .set("spark.conf", **SMALL_TABLE_CONF))
    return toml


def purge(config: Path, delta_spark: DeltaSpark | None = None) -> str:
    """`mqbridge purge`'s output, expecting exit 0: a process of its own, or run in `delta_spark`."""
    if delta_spark is not None:
        code, out = run_in_driver(delta_spark, "purge", "--config", str(config))
        assert code == 0, out
        return out
    proc = mqbridge("purge", "--config", str(config))
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    return out


def check_caps(warehouse: Path, table_format: str, out: str, spark: Any = None) -> None:
    # orders: exactly the 15 oldest rows went (rows 0-14), the rest stayed
    exactly(warehouse / "orders", table_format, set(range(15, ROWS)), spark)
    assert "orders: designated: max_rows 25: the 15 oldest rows, put and received before" in out, out
    # refunds: the cap asks for 38, the floor keeps the 3 rows younger than 12 hours
    exactly(warehouse / "refunds", table_format, YOUNG, spark)
    assert "refunds: designated: max_rows 2: the 37 oldest rows" in out, out
    assert "(held back by keep_younger_than 12h: the table stays above its cap)" in out, out


def test_row_caps_purge_the_oldest_rows_of_a_parquet_table_and_never_the_young(spark: Any, tmp_path: Path) -> None:
    # Given two Parquet tables of 40 rows each, put half an hour apart
    land_parquet(spark, tmp_path / "landing", tmp_path / "state", datetime.now(timezone.utc))
    config = limits_bridge("parquet").write(tmp_path / "bridge.toml")
    # When `mqbridge purge` runs with their row caps
    out = purge(config)
    # Then each lost its oldest rows beyond its cap, and no row younger than the floor
    check_caps(tmp_path / "landing", "parquet", out, spark)


def test_the_scheduled_purge_keeps_free_space_by_the_oldest_rows_and_the_floor_keeps_the_young(
        spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Given two Parquet tables, no cap, and a free-space floor above the disk's free space: it must act
    land_parquet(spark, tmp_path / "landing", tmp_path / "state", datetime.now(timezone.utc))
    floor = shutil.disk_usage(tmp_path).free + (1 << 30)
    toml = limits_bridge("parquet").set("types.orders", max_rows=10_000).set("types.refunds", max_rows=10_000)
    config = load_config(str(toml.set("purge", min_free_disk=floor, interval="1h").write(tmp_path / "bridge.toml")),
                         secrets=False)
    counters = Counters()
    # When the bridge's scheduled purge runs a round
    with caplog.at_level(logging.INFO, logger="mqbridge.purge"):
        PurgeScheduler(config, lambda: spark, counters).run_round()
    # Then every row older than the floor went from both tables (even a container below [purge]
    # threshold: low on disk), and the young rows stayed
    for name in TYPES:
        exactly(tmp_path / "landing" / name, "parquet", YOUNG, spark)
    assert counters.total("purge_rows_deleted") == 2 * (ROWS - len(YOUNG))
    said = [r.getMessage() for r in caplog.records]
    assert any("designated: min_free_disk" in line and "the 37 oldest rows" in line and
               "held back by keep_younger_than 12h" in line for line in said), said


@pytest.fixture(scope="module")
def _delta_jars() -> None:
    if not (JARS / "delta").is_dir():
        pytest.fail(f"the Delta Lake jars are missing from {JARS / 'delta'}: run scripts/jars.sh delta")


@pytest.mark.usefixtures("_delta_jars")
def test_row_caps_and_the_free_space_floor_purge_a_local_delta_table_oldest_first(
        tmp_path: Path, delta_spark: DeltaSpark) -> None:
    # Given two Delta tables of 40 rows each, put half an hour apart
    land_delta(tmp_path / "landing", datetime.now(timezone.utc))
    toml = limits_bridge("delta")
    # When `mqbridge purge` runs with their row caps (in the session's Delta-enabled driver)
    out = purge(toml.write(tmp_path / "bridge.toml"), delta_spark)
    # Then each lost its oldest rows beyond its cap, and no row younger than the floor
    check_caps(tmp_path / "landing", "delta", out)
    # When it runs again with no cap left to enforce and a free-space floor above the disk's free space
    floor = shutil.disk_usage(tmp_path).free + (1 << 30)
    toml = toml.set("types.orders", max_rows=10_000).set("types.refunds", max_rows=10_000)
    out = purge(toml.set("purge", min_free_disk=floor).write(tmp_path / "bridge.toml"), delta_spark)
    # Then the oldest rows of both tables went down to the floor, which kept the young ones
    for name in TYPES:
        exactly(tmp_path / "landing" / name, "delta", YOUNG)
    assert "nothing designated by retention or max_rows" in out, out
    assert "designated: min_free_disk" in out and "held back by keep_younger_than 12h" in out, out
    assert "orders: designated: min_free_disk" in out and "the 22 oldest rows" in out, out  # 15 went before

