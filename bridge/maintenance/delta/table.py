"""What the Delta purge and compaction ask of a table and its Spark session: the table's SQL name,
version and deletion-vector setting, and VACUUM (the session's settings are the format's,
`mqbridge.table_formats.command_session_conf`)."""

from __future__ import annotations

import logging
from typing import Any

from mqbridge.config.warehouse import Location

log = logging.getLogger("mqbridge.purge.delta")  # the name operators configure

#: Delta refuses a VACUUM retention under the table's `delta.deletedFileRetentionDuration` (7 days by
#: default) unless this check is off; the operator's `[purge] vacuum_retention` is the decision.
RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"
#: Delta's own default retention of removed files (`delta.deletedFileRetentionDuration`).
DELTA_DEFAULT_RETENTION = 7 * 86400.0


def sql_name(table: Location | str) -> str:
    """The table at `table` as Spark SQL names it by path: delta.`<path>`."""
    return "delta.`" + str(table).replace("`", "``") + "`"


def table_version(spark: Any, table: Location | str) -> int:
    """The current version of the Delta table at `table`."""
    [row] = spark.sql(f"DESCRIBE HISTORY {sql_name(table)} LIMIT 1").select("version").collect()
    return int(row["version"])


def deletion_vectors(spark: Any, table: Location | str) -> bool:
    """Whether DELETE writes deletion vectors into the table (`delta.enableDeletionVectors`)."""
    [row] = spark.sql(f"DESCRIBE DETAIL {sql_name(table)}").select("properties").collect()
    return str((row["properties"] or {}).get("delta.enableDeletionVectors", "false")).lower() == "true"


def vacuum(spark: Any, table: Location | str, retention: float) -> None:
    """VACUUM the table: the files commits removed more than `retention` seconds ago are deleted from
    the storage (time travel to the versions that read them ends). Below Delta's own 7-day default the
    safety check is turned off for this command only: the operator configured the retention."""
    hours = retention / 3600.0
    text = f"{hours:.0f}" if hours == int(hours) else f"{hours:.6f}"
    statement = f"VACUUM {sql_name(table)} RETAIN {text} HOURS"
    if retention >= DELTA_DEFAULT_RETENTION:
        spark.sql(statement).collect()
        return
    before = spark.conf.get(RETENTION_CHECK, None)
    spark.conf.set(RETENTION_CHECK, "false")
    try:
        spark.sql(statement).collect()
    finally:
        if before is None:
            spark.conf.unset(RETENTION_CHECK)
        else:
            spark.conf.set(RETENTION_CHECK, before)
