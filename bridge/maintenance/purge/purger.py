"""Purge: remove designated rows from the containers (`put_date` partitions) of landed tables,
by delete, copy-and-drop or drop, whichever the cost model (`mqbridge.maintenance.engine.costs`) says
is cheaper. What goes is the `Designation`'s (`designation`); the rewrite and the swap are the engine's.

For each table one Spark job counts, per container and per file, the rows and the designated rows
(put *and* received before a cutoff, and/or a SQL condition). Then, per container with designated rows:

* drop   every row designated: the container directory is renamed away in one step.
* delete the files that hold designated *and* surviving rows are rewritten without the designated
         ones; files of designated rows only are left out; the other files are kept (hard links).
* copy   every surviving row is written into new files (a compacted container).

Delete and copy rewrite each message type's files in a Spark job of their own, with that type's
columns (`mqbridge.maintenance.engine.type_groups`): types sharing a table never get each other's columns.

Delete and copy build the new container under `<table>/_purge/<run>-<date>/new` (readers skip `_`
names), then swap it with the live directory in one `renameat2(RENAME_EXCHANGE)`: a reader lists
either the old container or the new one, never a mix. The swap holds the table's lock
(`containers.table_lock`), which every publication into the table also takes, so it never blocks
landing for longer than one publication; files that landed in the container after the count are
carried into the new container before the swap (they were not designated). The old files stay
no longer than the run. A reader whose listing of the container raced with the swap may fail with
a missing file (Spark: FAILED_READ_FILE.FILE_NOT_EXIST) and must read again; it never gets a mix.

Crash safety. Everything a run writes is under `<table>/_purge/<work>/` with a `journal.json`; the
new container holds a marker file `_mqbridge_purge_<work>`. `recover_purges` (at every start of
`mqbridge run` and `mqbridge purge`) finishes what a killed run left: marker in the live
container → the swap happened: the marker and the old files go (rolled forward); otherwise the
new container is thrown away (rolled back). The table is readable throughout. The ledger is not
touched: purged identities stay in the de-duplication window, so a redelivered copy of a purged
message is still recognised as landed.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mqbridge import failpoints
from mqbridge.counters import Counters
from mqbridge.errors import PurgeError
from mqbridge.landing.catalog_refresh import refresh_swapped
from mqbridge.landing.containers import SORT_COLUMNS, data_files, purge_lock, table_lock
from mqbridge.landing.publication import unpublished_bulks
from mqbridge.maintenance.engine.costs import CostModel, Estimate
from mqbridge.maintenance.engine.rewrite import begin, carry, container_work, seal
from mqbridge.maintenance.engine.swap import exchange, fresh_name, fsync, partition_dirs, record_purge
from mqbridge.maintenance.engine.type_groups import type_groups
from mqbridge.maintenance.purge.designation import Designation

log = logging.getLogger("mqbridge.purge.purger")  # the name operators configure

#: The column naming each row's source file while delete rewrites files one by one.
SOURCE = "_mqbridge_source_file"
STRATEGIES = ("auto", "delete", "copy")


@dataclass
class ContainerPlan:
    """One container with designated rows: its files at the count, per file (rows, designated)."""

    table: Path
    put_date: str
    files: dict[str, tuple[int, int]]
    estimate: Estimate

    @property
    def path(self) -> Path:
        return self.table / f"put_date={self.put_date}"

    @property
    def rows(self) -> int:
        return sum(r for r, _ in self.files.values())

    @property
    def designated(self) -> int:
        return sum(d for _, d in self.files.values())

    @property
    def partial(self) -> list[str]:
        """Files holding designated and surviving rows."""
        return sorted(f for f, (r, d) in self.files.items() if 0 < d < r)

    @property
    def untouched(self) -> list[str]:
        return sorted(f for f, (_, d) in self.files.items() if d == 0)


@dataclass
class ContainerResult:
    """What one container's purge did."""

    plan: ContainerPlan
    strategy: str
    seconds: float
    rows_deleted: int
    rows_written: int  # rows Spark wrote into new files (delete: of rewritten files; copy: every survivor)


@dataclass
class Purger:
    """Plans and runs purges of the tables under one warehouse (see the module docstring)."""

    spark: Any
    model: CostModel
    counters: Counters = field(default_factory=Counters)
    stop: threading.Event = field(default_factory=threading.Event)

    def plan(self, table: Path, designation: Designation, strategy: str = "auto") -> list[ContainerPlan]:
        """The containers of `table` with designated rows, oldest first, each with its estimate
        (and `strategy` when not "auto"; "drop" whenever every row is designated)."""
        from pyspark.sql import functions as F

        if not any(data_files(d) for d in partition_dirs(table)):
            return []
        counted = designated_per_file(self.spark.read.parquet(str(table)), table, designation,
                                      F.col("_metadata.file_name"))
        by_date: dict[str, dict[str, tuple[int, int]]] = {}
        for row in counted:
            by_date.setdefault(row["put_date"], {})[row["file"]] = (int(row["rows"]), int(row["designated"]))
        plans = []
        for put_date, files in sorted(by_date.items()):
            plan = ContainerPlan(table, put_date, files, Estimate(0.0, 0.0, "none"))
            if plan.designated == 0:
                continue
            rewritten = sum(files[f][0] for f in plan.partial)
            estimate = self.model.estimate(plan.rows, plan.designated, rewritten)
            if strategy != "auto" and estimate.strategy != "drop":
                estimate = Estimate(estimate.delete_seconds, estimate.copy_seconds, strategy)
            plan.estimate = estimate
            plans.append(plan)
        return plans

    def run(self, plans: list[ContainerPlan], designation: Designation) -> Iterator[ContainerResult]:
        """Purge each planned container, yielding its result as it is done."""
        locks = contextlib.ExitStack()
        for table in sorted({plan.table for plan in plans}):
            locks.enter_context(purge_lock(table))
        try:
            for plan in plans:
                if self.stop.is_set():
                    break
                with container_work(plan.table, plan.put_date) as work:
                    result = self._purge(plan, designation, work)
                self._account(result)
                yield result
        finally:
            locks.close()

    # -- one container -------------------------------------------------------------------------
    def _purge(self, plan: ContainerPlan, designation: Designation, work: Path) -> ContainerResult:
        strategy = plan.estimate.strategy
        start = time.perf_counter()
        new = begin(work, plan.path, strategy)
        written = 0
        if strategy == "delete":
            carry(plan.path, new, plan.untouched)
            if plan.partial:
                written = self._rewrite(plan, plan.partial, designation, work, per_file=True)
        elif strategy == "copy":
            written = self._rewrite(plan, sorted(plan.files), designation, work, per_file=False)
        elif not any(data_files(d) for d in partition_dirs(plan.table) if d != plan.path):
            # The table's last container: an empty one takes its place, or Spark could no longer
            # read the table at all (it infers the schema from a file).
            import pyarrow.parquet as pq

            schema = pq.read_schema(plan.path / next(iter(plan.files)))
            pq.write_table(schema.empty_table(), new / sorted(plan.files)[0])
        marker = seal(work, new)
        failpoints.hit("purge_before_swap")
        with table_lock(plan.table):
            # A bulk not yet recorded as published needs its files where they are (roll-forward).
            held = unpublished_bulks(plan.table, plan.files)
            if held:
                raise PurgeError(f"{plan.path}: holds files of bulk {', '.join(held)}, prepared and not yet recorded "
                                 "as published: left as it is until its bridge (or that bridge's next start) has "
                                 "finished it")
            current = {p.name for p in data_files(plan.path)}
            landed = sorted(current - set(plan.files))
            carry(plan.path, new, landed)  # landed after the count: not designated
            swapped = bool(data_files(new))
            if swapped:
                exchange(new, plan.path)
            else:  # nothing survives: the container goes in one rename
                os.rename(plan.path, work / "old")
            record_purge(plan.table, plan.path.name, strategy)
        failpoints.hit("purge_after_swap")
        if landed:
            log.info("purge of %s: %d files landed during the purge were carried into the new container",
                     plan.path, len(landed))
            self.counters.inc("purge_files_carried", len(landed))
        seconds = time.perf_counter() - start
        if swapped:
            (plan.path / marker).unlink()
        refresh_swapped(self.spark, plan.table)  # this session's cached listing of a catalog table is stale
        result = ContainerResult(plan, strategy, seconds, plan.designated, written)
        rewritten = sum(plan.files[f][0] for f in plan.partial)
        self.model.learn(strategy, seconds, rows_rewritten=rewritten, rows_copied=plan.rows - plan.designated)
        return result

    def _rewrite(self, plan: ContainerPlan, names: list[str], designation: Designation, work: Path, *,
                 per_file: bool) -> int:
        """Write the surviving rows of `names` (files of the container) into `work/new`; their count.

        One Spark job per message type, over that type's files only (`type_groups`): a table several
        types share keeps, per file, one type's columns, the schema that type's start-up check
        accepts (read together, every file written would hold every type's columns). A file holding
        several types' rows (a compaction before that rule) is rewritten alone and keeps its age.

        Every new file gets a name never used before (`fresh_name`), never the name of an old
        file: Spark lists a container's files (with their sizes) when it plans a read and opens
        them later, task by task. Had a rewritten file kept its old name, a read planned before the
        swap and running across it would open new content under an old name with the old size (a
        footer error), or read some files of the old container and some of the new one (a mix).
        With fresh names such a read meets a missing file and fails, to be read again; the files
        kept unchanged (delete's hard links) have the same content in both containers.
        """
        groups = type_groups(plan.path / name for name in names)
        rewrites = [(files, None) for files in groups.typed] + [([path], path) for path in groups.mixed]
        for n, (files, mtime_of) in enumerate(rewrites):
            self._rewrite_group(plan, files, designation, work / f"spark-{n}", work / "new", per_file=per_file,
                                mtime_of=mtime_of)
        return sum(plan.files[n][0] - plan.files[n][1] for n in names)

    def _rewrite_group(self, plan: ContainerPlan, files: list[Path], designation: Designation, out: Path,
                       new: Path, *, per_file: bool, mtime_of: Path | None) -> None:
        """Write the surviving rows of `files` (one type's, or one file of several types) through
        Spark into `out`, then move the files written into `new` under fresh names, fsynced; with
        the modification time of `mtime_of` when given (a file of several types: `type_groups`)."""
        from pyspark.sql import functions as F

        from mqbridge.landing.schema_check import read_container
        from mqbridge.landing.writes.frames import FILE_BYTES, WRITE_OPTIONS

        df = read_container(self.spark, plan.table, files).where(~F.expr(designation.sql))
        if failpoints.active("purge_write_hang"):  # test only: never ends until cancelled
            df = df.where(failpoints.HANG_FILTER)
        if per_file:  # one task and one output file per input file, in a directory named after it
            df = df.withColumn(SOURCE, F.col("_metadata.file_name")).repartition(SOURCE)
            (df.sortWithinPartitions(SOURCE, *SORT_COLUMNS).write.options(**WRITE_OPTIONS).mode("overwrite")
               .partitionBy("put_date", SOURCE).parquet(str(out)))
            written = []
            for directory in (out / plan.path.name).glob(f"{SOURCE}=*"):
                [path] = directory.glob("part-*.parquet")
                written.append(path)
        else:
            size = sum(path.stat().st_size for path in files)
            (df.coalesce(max(1, math.ceil(size / FILE_BYTES))).sortWithinPartitions(*SORT_COLUMNS)
               .write.options(**WRITE_OPTIONS).mode("overwrite").partitionBy("put_date").parquet(str(out)))
            written = sorted((out / plan.path.name).glob("part-*.parquet"))
            if len(written) > len(files):
                raise PurgeError(f"{plan.path}: copy wrote {len(written)} files for {len(files)} old ones")
        for path in written:
            if mtime_of is not None:
                old = mtime_of.stat()
                os.utime(path, ns=(old.st_atime_ns, old.st_mtime_ns))
            fsync(path)
            os.replace(path, new / fresh_name(path))

    def _account(self, result: ContainerResult) -> None:
        account(self.counters, result)


def designated_per_file(frame: Any, table: object, designation: Designation, file: Any,
                        beside: Mapping[str, Any] | None = None) -> list[Any]:
    """One Spark job over `frame` (a table's rows): per put_date and data file (the column `file`, and
    the columns `beside` it, by name) its rows and designated rows, as rows with put_date, file, rows,
    designated (and the names of `beside`). PurgeError naming `table` when the designation cannot be
    evaluated on its rows (a column it names is missing)."""
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    beside = dict(beside or {})
    keys = [F.col("put_date").cast("string").alias("put_date"), file.alias("file"),
            *(column.alias(name) for name, column in beside.items())]
    try:
        return list(frame.select(*keys, F.expr(designation.sql).cast("long").alias("designated"))
                    .groupBy("put_date", "file", *beside)
                    .agg(F.count(F.lit(1)).alias("rows"), F.sum("designated").alias("designated"))
                    .collect())
    except AnalysisException as exc:
        raise PurgeError(f"table {table}: cannot designate rows {designation.describe()}: "
                         f"{str(exc).strip().splitlines()[0]}") from exc


def account(counters: Counters, result: ContainerResult) -> None:
    """The counters of one purged container (every format's purge)."""
    strategy = result.strategy
    counters.inc("purge_containers", strategy=strategy)
    counters.inc("purge_rows_deleted", result.rows_deleted, strategy=strategy)
    counters.inc("purge_rows_written", result.rows_written, strategy=strategy)
    if strategy == "drop":
        counters.inc("purge_containers_dropped")
    estimate = result.plan.estimate
    counters.observe("purge_estimated_seconds", estimate.copy_seconds if strategy == "copy" else
                     estimate.delete_seconds, strategy=strategy)
    counters.observe("purge_measured_seconds", result.seconds, strategy=strategy)

