"""Purge of a Delta table: the designated rows of each put_date partition leave the table in one
Delta commit, by the strategy the cost model chooses (`strategy.choose`):

* drop and delete: `DELETE FROM delta.`<table>` WHERE put_date = d AND <designation>`. A partition
  whose rows are all designated loses every file as a whole (nothing is rewritten). The condition
  keeps the designation even then, not the partition alone: a row landed into that put_date after
  the count (a late message with an old put time, received within its retention) is not designated
  and must stay, and Delta checks the DELETE against every commit since it read the partition.
* copy (-and-drop): the partition's survivors, sorted by put_timestamp into few files, replace it in
  one commit (`mode("overwrite")` with `replaceWhere` on the partition); the old files stay in the
  storage, out of the table, until VACUUM.

Each commit is atomic: a process killed before it leaves the table as it was, one killed after it
the table purged; readers see one version or the other and need no REFRESH TABLE. A commit that
conflicts with another writer's (a bulk landed into the same partition meanwhile: Delta's
ConcurrentAppendException) is tried again on the table's new version, up to `committing.CONFLICT_TRIES` times
(`mqbridge.maintenance.purge.committing`, shared with Iceberg's purge).

After a run that committed, `VACUUM ... RETAIN <[purge] vacuum_retention>` deletes the files commits
removed longer ago than that: until then a reader can still time-travel (`versionAsOf`) to a version
before a purge, and read the rows it removed.

Killing points (`mqbridge.failpoints`), per partition: `delta_purge_before_commit` (the strategy is
chosen, nothing committed) and `delta_purge_after_commit` (committed; the cost model has not learnt
the run, and no VACUUM ran).
"""

from __future__ import annotations

import logging
import math
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, cast

from mqbridge import failpoints
from mqbridge.config.warehouse import Location
from mqbridge.errors import PurgeError
from mqbridge.landing.delta import is_delta_table
from mqbridge.maintenance.delta.strategy import choose, delete_rows
from mqbridge.maintenance.delta.table import deletion_vectors, sql_name, table_version, vacuum
from mqbridge.maintenance.engine.costs import Estimate
from mqbridge.maintenance.purge.committing import CommittingPurger, partition_condition
from mqbridge.maintenance.purge.designation import Designation
from mqbridge.maintenance.purge.purger import ContainerPlan, ContainerResult, designated_per_file

log = logging.getLogger("mqbridge.purge.delta")  # the name operators configure

_CONFLICT = re.compile(r"DELTA_CONCURRENT|Concurrent\w*Exception")


@dataclass
class DeltaContainerPlan(ContainerPlan):
    """A put_date partition of a Delta table with designated rows: per data file (rows, designated),
    the files' bytes, and whether the table's DELETE writes deletion vectors."""

    bytes: int = 0
    deletion_vectors: bool = False

    @property
    def condition(self) -> str:
        """The partition as a Spark SQL condition."""
        return partition_condition(self.table, self.put_date)


@dataclass(frozen=True)
class DeltaRun:
    """One table's purge in the words of `mqbridge purge`: its versions before and after, the rows
    left, and the containers purged by each strategy."""

    table: Location
    version_before: int
    version_after: int
    rows_left: int
    strategies: dict[str, int]


def conflict(exc: BaseException) -> bool:
    """Whether `exc` is Delta's refusal of a commit that conflicts with a concurrent one."""
    return bool(_CONFLICT.search(f"{type(exc).__name__} {exc}"))


@dataclass
class DeltaPurger(CommittingPurger):
    """Plans and runs purges of Delta tables; the same interface as the Parquet `Purger`."""

    log: ClassVar[logging.Logger] = log

    def plan(self, table: Location, designation: Designation, strategy: str = "auto") -> list[ContainerPlan]:
        """The partitions of `table` with designated rows, oldest first, each with its estimate; one
        Spark job counts the rows and the designated rows of every file of the current version."""
        from pyspark.sql import functions as F

        if not is_delta_table(table):
            return []
        frame = self.spark.read.format("delta").load(str(table))
        counted = designated_per_file(frame, table, designation, F.col("_metadata.file_name"),
                                      {"size": F.col("_metadata.file_size")})
        vectors = deletion_vectors(self.spark, table)
        files: dict[str, dict[str, tuple[int, int]]] = {}
        sizes: dict[str, int] = {}
        for row in counted:
            files.setdefault(row["put_date"], {})[row["file"]] = (int(row["rows"]), int(row["designated"]))
            sizes[row["put_date"]] = sizes.get(row["put_date"], 0) + int(row["size"])
        plans: list[ContainerPlan] = []
        for put_date, by_file in sorted(files.items()):
            # (ContainerPlan's `table` is typed for the Parquet engine's local paths; a Delta plan's may be a URI)
            plan = DeltaContainerPlan(cast(Path, table), put_date, by_file, Estimate(0.0, 0.0, "none"), sizes[put_date],
                                      vectors)
            if plan.designated == 0:
                continue
            rewritten = sum(by_file[f][0] for f in plan.partial)
            plan.estimate = choose(self.model, plan.rows, plan.designated, rewritten, deletion_vectors=vectors,
                                   forced=strategy)
            plans.append(plan)
        return plans

    def _version(self, table: Location) -> int:
        return table_version(self.spark, table)

    def _clean_up(self, table: Location) -> None:
        """VACUUM the table (`[purge] vacuum_retention`)."""
        started = time.perf_counter()
        vacuum(self.spark, table, self.vacuum_retention)
        log.info("purge %s: VACUUM (retain %.0fs) in %.3fs", table.name, self.vacuum_retention,
                 time.perf_counter() - started)

    def summary(self, table: Location) -> DeltaRun:
        """The purge runs of `table` so far, with the rows the table holds now (a Spark count)."""
        after = table_version(self.spark, table) if is_delta_table(table) else -1
        rows = self.spark.read.format("delta").load(str(table)).count() if after >= 0 else 0
        return DeltaRun(table, self._before.get(table, after), after, int(rows), dict(self._done.get(table, {})))

    # -- one partition -------------------------------------------------------------------------
    def _purge(self, plan: ContainerPlan, designation: Designation) -> ContainerResult:
        assert isinstance(plan, DeltaContainerPlan), plan
        strategy = plan.estimate.strategy
        start = time.perf_counter()
        failpoints.hit("delta_purge_before_commit")
        deleted, written = self._committed(plan, strategy, lambda: self._commit(plan, designation, strategy),
                                           conflict, plan.table.name)
        failpoints.hit("delta_purge_after_commit")
        seconds = time.perf_counter() - start
        rewritten = delete_rows(plan.designated, sum(plan.files[f][0] for f in plan.partial),
                                deletion_vectors=plan.deletion_vectors)
        self.model.learn(strategy, seconds, rows_rewritten=rewritten, rows_copied=plan.rows - plan.designated)
        return ContainerResult(plan, strategy, seconds, deleted, written)

    def _commit(self, plan: DeltaContainerPlan, designation: Designation, strategy: str) -> tuple[int, int]:
        """One commit removing the designated rows of the partition; (rows deleted, rows written)."""
        if strategy in ("drop", "delete"):
            [row] = self.spark.sql(f"DELETE FROM {sql_name(plan.table)} WHERE {plan.condition} "
                                   f"AND {designation.sql}").collect()
            return int(row[0]), 0
        if strategy != "copy":
            raise PurgeError(f"{plan.table} put_date={plan.put_date}: unknown strategy {strategy!r}")
        return self._copy(plan, designation)

    def _copy(self, plan: DeltaContainerPlan, designation: Designation) -> tuple[int, int]:
        """Replace the partition by its survivors, sorted by put_timestamp into files of about
        FILE_BYTES, in one commit. The read of the partition is part of the commit's transaction:
        Delta reads the table's version at the write, and refuses the commit if another writer added
        to the partition since (a conflict, tried again)."""
        from pyspark.sql import functions as F

        from mqbridge.landing.containers import SORT_COLUMNS
        from mqbridge.landing.writes.frames import FILE_BYTES

        survivors = plan.rows - plan.designated
        files = max(1, math.ceil(plan.bytes * survivors / max(plan.rows, 1) / FILE_BYTES))
        frame = (self.spark.read.format("delta").load(str(plan.table))
                 .where(F.expr(plan.condition)).where(~F.expr(designation.sql)))
        frame = frame.repartitionByRange(files, "put_timestamp") if files > 1 else frame.coalesce(1)
        (frame.sortWithinPartitions(*SORT_COLUMNS).write.format("delta").mode("overwrite")
         .option("replaceWhere", plan.condition)
         .option("userMetadata", f"mqbridge purge: copy of put_date={plan.put_date}")
         .save(str(plan.table)))
        return plan.designated, survivors
