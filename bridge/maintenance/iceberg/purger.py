"""Purge of an Iceberg table: the designated rows of each put_date partition leave the table in one
Iceberg commit (one snapshot), by the strategy the cost model chooses (`choose`):

* delete: `DELETE FROM <table> WHERE put_date = d AND <designation>` written as position deletes
  (merge-on-read: `write.delete.mode`, which the purge sets on the table before its first delete).
  No data file is rewritten: one small delete file per partition names the deleted rows, cheap now,
  so its cost is counted in the designated rows (as Delta's deletion vectors); every reader then skips
  those rows on each read until the compaction's `rewrite_data_files` rewrites the files.
* copy (-and-drop): the partition's survivors, read at the table's current snapshot and sorted by
  put_timestamp into few files, replace every file of the partition in one overwrite commit
  (copy-on-write of the whole partition; the old files stay in the storage, out of the table, until
  the snapshots that read them expire).
* drop: every row designated: the same overwrite with no survivors (Iceberg commits it as a delete
  of the partition's files, none written).

Checked by tests/integration/test_iceberg_maintenance.py (Iceberg 1.12 on Spark 4.1): a merge-on-read
DELETE of 20 of 300 rows spread over 5 files adds one position delete file (20 position deletes) and
rewrites no data file; the same DELETE in copy-on-write rewrites the one file holding them.

Both commits are validated against the snapshot the partition was read at: Iceberg's DELETE checks
for conflicting appends itself (`write.delete.isolation-level`, serializable by default), the copy's
overwrite is told the snapshot it read (`validate-from-snapshot-id`, serializable). A bulk landed into
the partition meanwhile (a late message with an old put time) makes the commit fail with Iceberg's
ValidationException ("Found conflicting files"); it is tried again on the new snapshot, up to
`committing.CONFLICT_TRIES` times (`mqbridge.maintenance.purge.committing`, shared with Delta's purge), so that
no late row is lost.

Each commit is atomic: a process killed before it leaves the table as it was, after it the table
purged; readers see one snapshot or the other and need no REFRESH TABLE. After a run that committed,
`table.expire` expires the snapshots older than `[purge] vacuum_retention` (until then `mqbridge replay
--as-of-version <snapshot>` reads the rows the purge removed) and removes orphan files.
"""

from __future__ import annotations

import logging
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, cast

from mqbridge.config.warehouse import Location
from mqbridge.errors import PurgeError
from mqbridge.maintenance.engine.costs import CostModel, Estimate
from mqbridge.maintenance.iceberg.table import current_snapshot, day_condition, exists, expire, identifier, name_of
from mqbridge.maintenance.purge.committing import CommittingPurger
from mqbridge.maintenance.purge.designation import Designation
from mqbridge.maintenance.purge.purger import ContainerPlan, ContainerResult, designated_per_file

log = logging.getLogger("mqbridge.purge.iceberg")  # the name operators configure

#: The strategies a caller may force (`mqbridge purge --strategy`); "drop" is never forced, it is chosen.
FORCED = ("auto", "delete", "copy")
#: The table property that makes a DELETE write position deletes, and its value.
DELETE_MODE = ("write.delete.mode", "merge-on-read")
_CONFLICT = re.compile(r"ValidationException|CommitFailedException|Found conflicting files")


def choose(model: CostModel, rows: int, designated: int, forced: str = "auto") -> Estimate:
    """The estimate of one partition of `rows` rows, `designated` of them to go: drop when every row is
    designated, else `forced` unless "auto", else the cheaper by the model, a delete counted in the
    designated rows (position deletes: nothing rewritten), a copy in the survivors."""
    if forced not in FORCED:
        raise ValueError(f"strategy {forced!r}: one of {', '.join(FORCED)}")
    estimate = model.estimate(rows, designated, designated)
    if forced != "auto" and estimate.strategy != "drop":
        return Estimate(estimate.delete_seconds, estimate.copy_seconds, forced)
    return estimate


def conflict(exc: BaseException) -> bool:
    """Whether `exc` is Iceberg's refusal of a commit that conflicts with a concurrent one."""
    return bool(_CONFLICT.search(f"{type(exc).__name__} {exc}"))


@dataclass
class IcebergContainerPlan(ContainerPlan):
    """A put_date partition of an Iceberg table with designated rows: per data file (rows, designated),
    and the partition's bytes."""

    bytes: int = 0

    @property
    def condition(self) -> str:
        """The put_date as a Spark SQL condition that Iceberg prunes partitions by (`table.day_condition`)."""
        return day_condition(self.table, self.put_date)


@dataclass(frozen=True)
class IcebergRun:
    """One table's purge in the words of `mqbridge purge`: its snapshots before and after, the rows
    left, the containers purged by each strategy, and what the clean-up expired."""

    table: Location
    snapshot_before: int | None
    snapshot_after: int | None
    rows_left: int
    strategies: dict[str, int]
    expired: int


@dataclass
class IcebergPurger(CommittingPurger):
    """Plans and runs purges of Iceberg tables; the same interface as the Parquet `Purger`."""

    log: ClassVar[logging.Logger] = log
    version_word: ClassVar[str] = "snapshot"
    _expired: dict[Location, int] = field(default_factory=dict)

    def plan(self, table: Location, designation: Designation, strategy: str = "auto") -> list[ContainerPlan]:
        """The partitions of `table` with designated rows, oldest first, each with its estimate; one
        Spark job counts the rows and the designated rows of every data file of the current snapshot."""
        from pyspark.sql import functions as F

        if not exists(self.spark, table):
            return []
        counted = designated_per_file(self.spark.table(identifier(table)), table, designation, F.col("_file"))
        sizes = {str(r[0]): int(r[1]) for r in self.spark.sql(
            f"SELECT file_path, file_size_in_bytes FROM {identifier(table)}.data_files").collect()}
        files: dict[str, dict[str, tuple[int, int]]] = {}
        for row in counted:
            files.setdefault(row["put_date"], {})[row["file"]] = (int(row["rows"]), int(row["designated"] or 0))
        plans: list[ContainerPlan] = []
        for put_date, by_file in sorted(files.items()):
            # (ContainerPlan's `table` is typed for the Parquet engine's local paths)
            plan = IcebergContainerPlan(cast(Path, table), put_date, by_file, Estimate(0.0, 0.0, "none"),
                                        sum(sizes.get(f, 0) for f in by_file))
            if plan.designated == 0:
                continue
            plan.estimate = choose(self.model, plan.rows, plan.designated, strategy)
            plans.append(plan)
        return plans

    def _version(self, table: Location) -> int | None:
        return current_snapshot(self.spark, table)

    def _clean_up(self, table: Location) -> None:
        """Expire the table's snapshots and remove its orphan files (`table.expire`)."""
        expired, _ = expire(self.spark, table, self.vacuum_retention)
        self._expired[table] = self._expired.get(table, 0) + expired

    def summary(self, table: Location) -> IcebergRun:
        """The purge runs of `table` so far, with the rows the table holds now (a Spark count)."""
        there = exists(self.spark, table)
        after = current_snapshot(self.spark, table) if there else None
        rows = self.spark.table(identifier(table)).count() if there else 0
        return IcebergRun(table, self._before.get(table, after), after, int(rows), dict(self._done.get(table, {})),
                          self._expired.get(table, 0))

    # -- one partition -------------------------------------------------------------------------
    def _purge(self, plan: ContainerPlan, designation: Designation) -> ContainerResult:
        assert isinstance(plan, IcebergContainerPlan), plan
        strategy = plan.estimate.strategy
        start = time.perf_counter()
        deleted, written = self._committed(plan, strategy, lambda: self._commit(plan, designation, strategy),
                                           conflict, name_of(plan.table))
        seconds = time.perf_counter() - start
        self.model.learn(strategy, seconds, rows_rewritten=plan.designated, rows_copied=plan.rows - plan.designated)
        return ContainerResult(plan, strategy, seconds, deleted, written)

    def _commit(self, plan: IcebergContainerPlan, designation: Designation, strategy: str) -> tuple[int, int]:
        """One commit removing the designated rows of the partition; (rows deleted, rows written)."""
        if strategy == "delete":
            self._merge_on_read(plan.table)
            self.spark.sql(f"DELETE FROM {identifier(plan.table)} WHERE {plan.condition} AND {designation.sql}")
            return plan.designated, 0
        if strategy not in ("copy", "drop"):
            raise PurgeError(f"{plan.table} put_date={plan.put_date}: unknown strategy {strategy!r}")
        return self._copy(plan, designation, strategy)

    def _merge_on_read(self, table: Location) -> None:
        """Make the table's DELETE write position deletes (once: a table property, kept)."""
        key, value = DELETE_MODE
        rows = self.spark.sql(f"SHOW TBLPROPERTIES {identifier(table)} ('{key}')").collect()
        if rows and str(rows[0]["value"]) == value:
            return
        self.spark.sql(f"ALTER TABLE {identifier(table)} SET TBLPROPERTIES ('{key}' = '{value}')")
        log.info("%s: %s set to %s (a purge's DELETE writes position deletes)", name_of(table), key, value)

    def _copy(self, plan: IcebergContainerPlan, designation: Designation, strategy: str) -> tuple[int, int]:
        """Replace the partition by its survivors (none for a drop), sorted by put_timestamp into files of
        about FILE_BYTES, in one overwrite validated against the snapshot the survivors were read at."""
        from pyspark.sql import functions as F

        from mqbridge.landing.containers import SORT_COLUMNS
        from mqbridge.landing.writes.frames import FILE_BYTES

        snapshot = current_snapshot(self.spark, plan.table)
        survivors = plan.rows - plan.designated
        files = max(1, math.ceil(plan.bytes * survivors / max(plan.rows, 1) / FILE_BYTES))
        frame = (self.spark.read.option("versionAsOf", str(snapshot)).table(identifier(plan.table))
                 .where(F.expr(plan.condition)).where(~F.expr(designation.sql)))
        frame = frame.repartitionByRange(files, "put_timestamp") if files > 1 else frame.coalesce(1)
        (frame.sortWithinPartitions(*SORT_COLUMNS).writeTo(identifier(plan.table))
         .option("validate-from-snapshot-id", str(snapshot)).option("isolation-level", "serializable")
         .option("snapshot-property.mqbridge.purge", f"{strategy} of put_date={plan.put_date}")
         .overwrite(F.expr(plan.condition)))
        return plan.designated, survivors if strategy == "copy" else 0
