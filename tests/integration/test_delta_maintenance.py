"""Purge and compaction of Delta tables (`table_format = "delta"`) on a real Spark with Delta Lake:
`mqbridge purge` and `mqbridge compact`, each in a process of its own, and the bridge's scheduled
rounds in the session's Spark driver with Delta (`delta_spark`: the test process's Spark has no
Delta). Every row is accounted for like a total-queue checker, by delta-rs (an independent reader):
exactly the designated rows leave, every other row stays, once. The strategy the cost model picks
is printed and checked; a version before a purge stays readable by time travel until VACUUM
removes its files; `mqbridge purge` killed with SIGKILL before and after a partition's commit
leaves the table as before or after, never half. Tables are built by delta-rs (two put_date
partitions of 5 small files each) so that only the command under test starts a JVM; a second command
on the same table (the purge after a first one, the purge after a killed one) runs in the session's
Delta-enabled driver instead (`tests.support.delta_tables.run_in_driver`): what it does to the table is
what is checked, and the command's own start with Delta was the first one's."""

from __future__ import annotations

import collections
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from mqbridge.landing.rows import IDENTITY_COLUMN, arrow_table
from mqbridge.message import Bulk, Message
from tests.support.configs import BridgeToml
from tests.support.delta_tables import (
    SMALL_TABLE_CONF,
    delta_jars_fetched,  # noqa: F401 (the module's autouse fixture)
    run_in_driver,
    scheduled_rounds,
)
from tests.support.object_stores import DeltaSpark
from tests.support.processes import ROOT, mqbridge
from tests.support.purge import purge_bridge

#: Each test starts one or two Spark drivers with Delta (tens of seconds each on a busy 2-core machine).
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

JARS = ROOT / "jars"
deltalake = pytest.importorskip("deltalake")

T0 = datetime(2024, 6, 1, tzinfo=timezone.utc)
#: Partition 2024-06-01: m0..m299, message n put n minutes after midnight; 2024-06-02: d0..d49.
DAY1, DAY2, FILES = 300, 50, 5
#: Every tenth message of the first day survives; the rest of that day is designated, in every file.
NINETY_PERCENT = "msg_id LIKE 'm%' AND cast(substring(msg_id, 2) AS INT) % 10 != 0"
#: Twenty messages of the first day, all in one of its files (file k holds the messages n % 5 == k).
ONE_FILE = "msg_id LIKE 'm%' AND cast(substring(msg_id, 2) AS INT) % 5 = 0 AND cast(substring(msg_id, 2) AS INT) < 100"


def land(table: Path) -> set[str]:
    """The Delta table as the bridge lands it (its columns, `put_date` partitions), built by delta-rs in
    FILES appends: append k holds the first day's messages n % FILES == k (their put times interleave
    across the files) and 10 of the second day's. Returns every msg_id."""
    for k in range(FILES):
        bulk = Bulk("orders")
        for n in range(k, DAY1, FILES):
            put = T0 + timedelta(minutes=n)
            bulk.add(Message(msg_id=f"m{n}", body=f"{n}:".encode() + bytes(range(256)), source="amq",
                             destination="/queue/orders", message_type="orders", put_timestamp=put,
                             received_timestamp=put))
        for n in range(k * 10, k * 10 + 10):
            put = T0 + timedelta(days=1, minutes=n)
            bulk.add(Message(msg_id=f"d{n}", body=b"next day", source="amq", destination="/queue/orders",
                             message_type="orders", put_timestamp=put, received_timestamp=put))
        rows = arrow_table(bulk, list(range(len(bulk.messages)))).drop_columns(["_row"])
        rows = rows.rename_columns([IDENTITY_COLUMN if c == "_identity" else c for c in rows.column_names])
        deltalake.write_deltalake(str(table), rows, mode="append", partition_by=["put_date"])
    return {f"m{n}" for n in range(DAY1)} | {f"d{n}" for n in range(DAY2)}


def msg_ids(table: Path, version: int | None = None) -> collections.Counter[str]:
    """How often each msg_id is in the table (at `version`), read by delta-rs."""
    ids = deltalake.DeltaTable(str(table), version=version).to_pyarrow_table(columns=["msg_id"]).column("msg_id")
    return collections.Counter(ids.to_pylist())


def version(table: Path) -> int:
    return int(deltalake.DeltaTable(str(table)).version())


def exactly(table: Path, expected: set[str]) -> None:
    """The table holds exactly `expected`, each once: 0 lost, 0 duplicated, 0 unexpected."""
    rows = msg_ids(table)
    lost, unexpected = expected - set(rows), set(rows) - expected
    duplicated = sorted(i for i, n in rows.items() if n > 1)
    assert (len(lost), len(duplicated), len(unexpected)) == (0, 0, 0), (sorted(lost)[:5], duplicated[:5],
                                                                        sorted(unexpected)[:5])


def number(msg_id: str) -> int:
    return int(msg_id[1:])


def delta_bridge(vacuum_retention: str = "7d") -> BridgeToml:
    """`mqbridge purge`/`compact`'s configuration for a Delta type `orders` (tests.support.purge), with an
    operator's equal per-row costs and no fixed partition cost; 2 shuffle partitions (a table of a few
    hundred rows: Spark's 200 tasks per shuffle would be most of each command's time) and 2 tasks to
    list a table's files (`SMALL_TABLE_CONF`: VACUUM's 10,000 by default took 75 s of each purge)."""
    return (purge_bridge().set("spark", table_format="delta", jars_dir=str(JARS), writer="spark")
            .set("spark.conf", **SMALL_TABLE_CONF)
            .set("purge", delete_row_seconds=1e-5, copy_row_seconds=1e-5, container_seconds=0,
                 vacuum_retention=vacuum_retention)
            .set("types.orders"))


def run(config: Path, *args: str, failpoint: str | None = None,
        driver: DeltaSpark | None = None) -> subprocess.CompletedProcess[str]:
    """`mqbridge ARGS[0] --config CONFIG ARGS[1:]` to its end: a process of its own (killed at `failpoint`,
    if given), or run in `driver`, the session's Delta-enabled one."""
    if driver is not None:
        assert failpoint is None, "a failpoint kills a process of its own"
        code, out = run_in_driver(driver, args[0], "--config", str(config), *args[1:])
        return subprocess.CompletedProcess(["mqbridge", *args], code, out)
    proc = mqbridge(args[0], "--config", str(config), *args[1:], failpoint=failpoint)
    out, _ = proc.communicate(timeout=600)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out)


def test_purge_deletes_copies_and_drops_exactly_the_designated_rows_and_vacuum_ends_time_travel(
        tmp_path: Path, delta_spark: DeltaSpark) -> None:
    # Given a Delta table of two partitions, 5 files each
    table = tmp_path / "landing" / "orders"
    every = land(table)
    config = delta_bridge().write(tmp_path / "bridge.toml")
    before = version(table)

    # When `mqbridge purge` designates 20 rows of the first day, all held by one of its files
    first = run(config, "purge", "--where", ONE_FILE)

    # Then that file alone is rewritten (delete is cheaper than copying the day), exactly those rows go
    assert first.returncode == 0, first.stdout
    assert "put_date=2024-06-01  designated 20/300" in first.stdout, first.stdout
    assert "strategy delete  measured" in first.stdout, first.stdout
    survivors = every - {f"m{n}" for n in range(0, 100, 5)}
    exactly(table, survivors)
    assert f"orders: Delta table: purged by delete 1; {len(survivors)} rows left" in first.stdout, first.stdout
    # and the version before the purge is still readable by time travel (VACUUM keeps 7 days)
    assert msg_ids(table, before) == collections.Counter(every)
    assert f"versionAsOf {before} until VACUUM" in first.stdout, first.stdout

    # When a purge designates 90% of the first day (in every file) and all of the second, with VACUUM
    # keeping nothing (in the session's Delta-enabled driver)
    config = delta_bridge(vacuum_retention="0s").write(tmp_path / "bridge.toml")
    second = run(config, "purge", "--where", f"({NINETY_PERCENT}) OR msg_id LIKE 'd%'", driver=delta_spark)

    # Then the first day is copied (cheaper than rewriting every file), the second dropped, and
    # exactly the survivors remain
    assert second.returncode == 0, second.stdout
    assert "put_date=2024-06-01  designated 260/280" in second.stdout, second.stdout
    assert "strategy copy  measured" in second.stdout and "put_date=2024-06-02  designated 50/50" in second.stdout
    assert "strategy drop  measured" in second.stdout, second.stdout
    survivors = {i for i in survivors if i.startswith("m") and number(i) % 10 == 0}
    exactly(table, survivors)
    assert f"orders: Delta table: purged by copy 1, drop 1; {len(survivors)} rows left" in second.stdout, \
        second.stdout
    # and the version before both purges can no longer be read: VACUUM removed its files
    with pytest.raises(Exception, match="(?i)not found|no such file|does not exist"):
        msg_ids(table, before)


@pytest.mark.parametrize("failpoint", ["delta_purge_before_commit", "delta_purge_after_commit"])
def test_a_purge_killed_before_or_after_its_commit_leaves_the_table_as_before_or_after(
        tmp_path: Path, failpoint: str, delta_spark: DeltaSpark) -> None:
    # Given a Delta table of two partitions
    table = tmp_path / "landing" / "orders"
    every = land(table)
    config = delta_bridge().write(tmp_path / "bridge.toml")
    survivors = {i for i in every if not (i.startswith("m") and number(i) % 10 != 0)}

    # When `mqbridge purge` (a copy of the first day's survivors) is killed with SIGKILL at the failpoint
    killed = run(config, "purge", "--where", NINETY_PERCENT, "--strategy", "copy", failpoint=failpoint)
    assert killed.returncode == -9 and f"failpoint {failpoint} reached" in killed.stdout, killed.stdout

    # Then the table is whole at once: as before the purge (before the commit) or as after it
    exactly(table, every if failpoint == "delta_purge_before_commit" else survivors)
    if failpoint == "delta_purge_before_commit":
        # and the next purge leaves exactly the survivors (in the session's Delta-enabled driver)
        again = run(config, "purge", "--where", NINETY_PERCENT, "--strategy", "copy", driver=delta_spark)
        assert again.returncode == 0, again.stdout
        exactly(table, survivors)


def test_compact_optimizes_a_partition_of_small_files_into_one_ordered_by_put_timestamp(tmp_path: Path) -> None:
    # Given a Delta table whose partitions hold 5 small files each, their put times interleaved
    table = tmp_path / "landing" / "orders"
    every = land(table)
    config = delta_bridge().set("compaction", small_files=3).write(tmp_path / "bridge.toml")

    # When `mqbridge compact` runs
    done = run(config, "compact")

    # Then both partitions are compacted into one file each, every row kept once, in put_timestamp
    # order within the file
    assert done.returncode == 0, done.stdout
    assert done.stdout.count("action compact") == 2 and done.stdout.count("1 files after") == 2, done.stdout
    exactly(table, every)
    delta = deltalake.DeltaTable(str(table))
    files = delta.file_uris()
    assert len(files) == 2, files
    for uri in files:
        puts = pq.read_table(uri.removeprefix("file://"), columns=["put_timestamp"]).column("put_timestamp")
        assert puts.to_pylist() == sorted(puts.to_pylist())
    assert any(h.get("operation") == "OPTIMIZE" for h in delta.history()), delta.history()


def test_the_scheduled_purge_and_compaction_of_a_bridge_work_on_a_delta_table(
        tmp_path: Path, delta_spark: DeltaSpark) -> None:
    # Given a Delta table and a type whose retention designates the first 240 minutes of the first
    # day (80% of it: past the threshold), nothing of the second
    table = tmp_path / "landing" / "orders"
    every = land(table)
    cutoff = T0 + timedelta(hours=4, seconds=-30)
    retention = int((datetime.now(timezone.utc) - cutoff).total_seconds())
    config = (delta_bridge().set("types.orders", retention=f"{retention}s").set("purge", interval="1h")
              .set("compaction", interval="1h", small_files=3).write(tmp_path / "bridge.toml"))

    # When one round of the bridge's scheduled purge runs, then one of its scheduled compaction (on the
    # session's Spark driver with Delta)
    rounds = delta_spark.run(scheduled_rounds, str(config), timeout=600)

    # Then the first day lost exactly its designated rows, the second day was compacted, nothing else changed
    assert rounds["ok"], rounds.get("traceback")
    assert rounds["value"] == {"purge_containers": 1, "purge_containers_skipped": 0, "compaction_containers": 1}, \
        rounds["value"]
    exactly(table, {i for i in every if not (i.startswith("m") and number(i) < 240)})
    assert len(deltalake.DeltaTable(str(table)).file_uris()) == 2
