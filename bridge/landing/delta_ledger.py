"""A lost ledger is rebuilt from the Delta tables: every row of a Delta table carries the identity
the ledger recognises its message by (`mqbridge.landing.rows.IDENTITY_COLUMN`) and its bulk id, so a
bridge whose `state_dir` was lost or wiped (a replaced disk) learns again, before any message is
landed, which messages its tables already hold, and lands none of them twice when the brokers
deliver them again.

Only the rows received within `[bridge] dedupe_window` are read back, as a ledger keeps no older
identities either (`Ledger.prune`). Each bulk becomes a published bulk of the new ledger
(`Ledger.adopt`); the bridge's Delta transaction versions need no rebuilding, since every process
writes under an app id of its own (`mqbridge.landing.delta.app_id`). Parquet tables carry no
identity column: a lost ledger over them stays at-least-once for the messages landed before (the
start says so). Iceberg tables' rows carry both too (`adopt_rows` serves their rebuild as well).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from mqbridge.config.warehouse import ObjectStoreUri
from mqbridge.landing.ledger import Ledger
from mqbridge.landing.rows import IDENTITY_COLUMN

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


def adopt_rows(ledger: Ledger, frame: DataFrame, name: str, cutoff: float) -> tuple[int, int]:
    """Adopt into `ledger` each bulk of table `name` whose rows (`frame`: a table whose rows carry
    their identity and bulk id, Delta's or Iceberg's) were received after `cutoff` (epoch seconds), as
    published; the bulks adopted and the identities learnt."""
    from pyspark.sql import functions as F

    bulks = (frame.where(F.col("received_timestamp") >= F.lit(cutoff).cast("timestamp"))
             .groupBy("bulk_id")
             .agg(F.collect_list(IDENTITY_COLUMN).alias("identities"), F.max("received_timestamp").alias("newest")))
    adopted = learnt = 0
    for row in bulks.toLocalIterator():
        newest = row["newest"].timestamp() if row["newest"] is not None else time.time()
        if ledger.adopt(f"{row['bulk_id']}~{name}", name, row["identities"], newest):
            adopted += 1
            learnt += len(row["identities"])
    return adopted, learnt


def rebuild(ledger: Ledger, spark: SparkSession, tables: Iterable[tuple[str, Path | ObjectStoreUri]],
            dedupe_window: float) -> int:
    """Adopt into `ledger` every bulk of the Delta `tables` ((name, path or object store URI) pairs;
    those without a Delta table are skipped) with rows received within `dedupe_window` seconds; the
    number of identities learnt."""
    cutoff = time.time() - dedupe_window
    learnt = 0
    for name, path in tables:
        if isinstance(path, Path) and not (path / "_delta_log").is_dir():
            continue
        started = time.monotonic()
        try:
            frame = spark.read.format("delta").load(str(path))
            columns = frame.columns  # (through Spark Connect a missing table fails here, not at `load`)
        except Exception as exc:
            if isinstance(path, ObjectStoreUri) and _no_table(exc):  # not listed: nothing landed there yet
                continue
            raise
        if IDENTITY_COLUMN not in columns:
            log.warning("ledger rebuild: Delta table %s has no %s column (landed before it existed): its messages "
                        "cannot be recognised if delivered again", path, IDENTITY_COLUMN)
            continue
        adopted, identities = adopt_rows(ledger, frame, name, cutoff)
        learnt += identities
        log.warning("ledger rebuild: table %s: %d bulks adopted from its Delta log in %.1fs", name, adopted,
                    time.monotonic() - started)
    return learnt


def _no_table(exc: BaseException) -> bool:
    """Whether `exc` says there is no Delta table at the path read (nothing there, or no log)."""
    text = str(exc)
    return any(mark in text for mark in ("DELTA_MISSING_DELTA_TABLE", "is not a Delta table", "PATH_NOT_FOUND"))
