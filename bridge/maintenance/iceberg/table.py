"""What the Iceberg purge and compaction ask of a table through the session's catalog `mqbridge`: its
Spark name, its current snapshot, and the clean-up after a purge or compaction (`expire`).

Clean-up, after `[purge] vacuum_retention` (the setting Delta's VACUUM takes):
`CALL mqbridge.system.expire_snapshots` removes the snapshots older than the retention (the newest is
always kept), and with them the data and delete files only they read: time travel to them ends.
`CALL mqbridge.system.remove_orphan_files` deletes the files of the table's folder no snapshot reads
(a write that failed or was killed before its commit). Iceberg 1.12's procedure refuses an age under
24 hours (checked in tests/integration/test_iceberg_maintenance.py): an append in flight has written
files that no snapshot reads *yet*, and removing them would break its commit. The bridge lands while it
purges, so orphans are removed once older than the retention or 24 hours, whichever is longer.
"""

from __future__ import annotations

import logging
import time
from datetime import date, datetime, timedelta, timezone
from typing import Any

from mqbridge.config.iceberg import ICEBERG_CATALOG, bound
from mqbridge.config.warehouse import Location
from mqbridge.maintenance.purge.committing import partition_condition

log = logging.getLogger("mqbridge.purge.iceberg")  # the name operators configure

#: Iceberg's `remove_orphan_files` refuses a younger `older_than` (see the module docstring).
ORPHAN_MIN_AGE = 24 * 3600.0


def day_condition(table: Location, put_date: str) -> str:
    """The put_date `put_date` of the table as a Spark SQL condition: `put_date = d` and the day's
    put_timestamp range. The range is what Iceberg prunes partitions by (days or hours of put_timestamp,
    `[types.X] partition_by`); the put_date column is put_timestamp's UTC date, so both say the same rows,
    and a table partitioned by put_date (made before partition_by) is pruned by the first. A purge or a
    compaction works by day on any of these specs: a day is whole partitions of each."""
    condition = partition_condition(table, put_date)  # PurgeError for no date
    day = date.fromisoformat(put_date)
    return (f"{condition} AND put_timestamp >= TIMESTAMP'{day} 00:00:00+00:00' "
            f"AND put_timestamp < TIMESTAMP'{day + timedelta(days=1)} 00:00:00+00:00'")


def name_of(table: Location) -> str:
    """The table's name in the bound catalog (`IcebergCatalog.name_of`)."""
    return bound().name_of(table)


def identifier(table: Location) -> str:
    """The table's Spark identifier, `mqbridge.<namespace>.`<table>``."""
    return bound().identifier(name_of(table))


def procedure_table(table: Location) -> str:
    """The table as a procedure's `table` argument names it: a string literal of its whole identifier (with
    the namespace alone, a namespace named as the catalog, `mqbridge` by default, is taken for it)."""
    return "'" + identifier(table).replace("\\", "\\\\").replace("'", "\\'") + "'"


def exists(spark: Any, table: Location) -> bool:
    return bool(spark.catalog.tableExists(f"{ICEBERG_CATALOG}.{bound().namespace}.{name_of(table)}"))


def current_snapshot(spark: Any, table: Location) -> int | None:
    """The id of the table's current snapshot (None: no snapshot yet)."""
    rows = spark.sql(f"SELECT snapshot_id FROM {identifier(table)}.snapshots ORDER BY committed_at DESC "
                     "LIMIT 1").collect()
    return int(rows[0][0]) if rows else None


def snapshots(spark: Any, table: Location) -> int:
    """How many snapshots the table keeps."""
    return int(spark.sql(f"SELECT count(*) FROM {identifier(table)}.snapshots").first()[0])


def _timestamp(seconds_ago: float) -> str:
    moment = datetime.fromtimestamp(time.time() - seconds_ago, tz=timezone.utc)
    return f"TIMESTAMP '{moment.strftime('%Y-%m-%d %H:%M:%S.%f')}'"


def expire(spark: Any, table: Location, retention: float) -> tuple[int, int]:
    """Expire the snapshots older than `retention` seconds and remove orphan files older than the
    retention or `ORPHAN_MIN_AGE` (see the module docstring); (snapshots expired, orphan files removed).
    The session's time zone is UTC (`mqbridge.landing.session.DEFAULT_CONF`), as the literals are."""
    started = time.perf_counter()
    before = snapshots(spark, table)
    spark.sql(f"CALL {ICEBERG_CATALOG}.system.expire_snapshots(table => {procedure_table(table)}, "
              f"older_than => {_timestamp(retention)}, retain_last => 1)").collect()
    expired = before - snapshots(spark, table)
    orphans = spark.sql(f"CALL {ICEBERG_CATALOG}.system.remove_orphan_files(table => {procedure_table(table)}, "
                        f"older_than => {_timestamp(max(retention, ORPHAN_MIN_AGE))})").collect()
    log.info("%s: %d snapshots expired (older than %.0fs), %d orphan files removed in %.3fs", name_of(table), expired,
             retention, len(orphans), time.perf_counter() - started)
    return expired, len(orphans)
