"""Compaction of one container: the rows of each message type read through Spark, sorted by
`put_timestamp` across the container (a range partitioning, so each written file holds one slice of
time and a time-range read skips the others) and written into files of about `[compaction]
target_file_size`; then swapped in exactly as a purge swaps its new container (the engine's
`mqbridge.maintenance.engine.rewrite` and `swap`). Which containers to compact is the planner's
(`planner.decide`: enough small files, and room on the disk).

Each type's rows are rewritten apart, with the schema of that type's files (`_rewritable`): a table
several typed types share keeps, per file, one type's columns, the schema that type's start-up check
(`check_schemas`) accepts. Some files are carried as they are, under their names: those of a bulk
that may not be recorded as published yet (its owner, or the recovery that finishes a dead owner's
bulk, publishes and checks them by name: `mqbridge.landing.publication.unpublished_bulks`), and a file
holding several types' rows (from a compaction before this rule).

The swap is the engine's, the purge's too: the new container is built under `<table>/_purge/<work>/new` with a journal
and a marker, and exchanged with the live directory in one `renameat2(RENAME_EXCHANGE)` under the
table's lock, which every publication into the table takes too. A reader lists the old container or
the new one, never a mix. Files a bulk published into the container after the compaction listed it
are carried into the new container (hard links) under that lock before the exchange: nothing landed
meanwhile is lost (they stay unsorted until the next compaction). The swap is recorded in the table's
history (`record_purge(..., "compact")`), which `mqbridge ledger --verify` reads: the published files
the compaction replaced are accounted for, not missing. A run killed at any point is finished or
rolled back by `recover_purges` at the next start of `mqbridge run`, `purge` or `compact`.

Killing points (`mqbridge.failpoints`): `compact_before_swap` (the new container is built beside
the live one) and `compact_mid_swap` (the directories are exchanged; the history does not record it
yet and the marker is still in the live container).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mqbridge import failpoints
from mqbridge.config.warehouse import Location
from mqbridge.counters import Counters
from mqbridge.errors import PurgeError
from mqbridge.landing.catalog_refresh import refresh_swapped
from mqbridge.landing.containers import SORT_COLUMNS, data_files, purge_lock, table_lock
from mqbridge.landing.publication import published_bulk_of, unpublished_bulks
from mqbridge.landing.schema_check import read_container
from mqbridge.maintenance.engine.costs import CostModel
from mqbridge.maintenance.engine.rewrite import begin, carry, container_work, seal
from mqbridge.maintenance.engine.swap import exchange, fresh_name, fsync, record_purge
from mqbridge.maintenance.engine.type_groups import type_groups

log = logging.getLogger("mqbridge.compaction.compactor")  # the name operators configure


@dataclass(frozen=True)
class Compacted:
    """What one container's compaction did."""

    table: Path
    put_date: str
    files_before: int
    files_after: int  # written, plus carried
    rows: int
    carried: int  # files landed during the compaction, carried into the new container
    seconds: float


@dataclass
class Compactor:
    """Compacts containers of the tables under one warehouse (see the module docstring)."""

    spark: Any
    model: CostModel
    target_bytes: int
    counters: Counters = field(default_factory=Counters)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self, table: Path, put_dates: Sequence[str]) -> Iterator[Compacted]:
        """Compact each container of `table` named in `put_dates`, yielding its result as it is done;
        holds the table's purge lock throughout (one purge or compaction per table at a time)."""
        with purge_lock(table):
            for put_date in put_dates:
                if self.stop.is_set():
                    return
                with container_work(table, put_date) as work:
                    result = self._compact(table, put_date, work)
                self._account(result)
                yield result

    def _compact(self, table: Path, put_date: str, work: Path) -> Compacted:
        import pyarrow.parquet as pq

        start = time.perf_counter()
        container = table / f"put_date={put_date}"
        files = data_files(container)
        rows = sum(pq.read_metadata(p).num_rows for p in files)
        groups, kept = _rewritable(table, files)
        if not groups:  # every file is carried as it is: nothing to swap
            return Compacted(table, put_date, len(files), len(files), rows, len(files), time.perf_counter() - start)
        new = begin(work, container, "compact")
        written = [path for n, group in enumerate(groups) for path in self._write(table, container, group,
                                                                                  work / f"spark-{n}")]
        found = sum(pq.read_metadata(p).num_rows for p in (*written, *kept))
        if found != rows:  # never swap in a container that lost or gained a row
            raise PurgeError(f"{container}: compaction wrote {found} rows for {rows}: the container is left as it was")
        for path in written:
            os.replace(path, new / fresh_name(path))
        marker = seal(work, new)
        failpoints.hit("compact_before_swap")
        with table_lock(table):
            landed = sorted({p.name for p in data_files(container)} - {p.name for p in files})
            carry(container, new, [*landed, *(p.name for p in kept)])  # as they are, under their names
            exchange(new, container)
            failpoints.hit("compact_mid_swap")
            record_purge(table, container.name, "compact")
        (container / marker).unlink()
        refresh_swapped(self.spark, table)  # this session's cached listing of a catalog table is stale
        seconds = time.perf_counter() - start
        self.model.learn("compact", seconds, rows_copied=rows)
        if landed or kept:
            log.info("compaction of %s: %d files landed during it and %d files left as they were (%s) were carried "
                     "into the new container", container, len(landed), len(kept), _KEPT)
        carried = len(landed) + len(kept)
        return Compacted(table, put_date, len(files), len(written) + carried, rows, carried, seconds)

    def _write(self, table: Path, container: Path, files: list[Path], out: Path) -> list[Path]:
        """Write the rows of `files` sorted by put_timestamp across them into `out`; the files
        written, fsynced. Range partitioning: file i holds only timestamps below those of file i+1."""
        from mqbridge.landing.writes.frames import WRITE_OPTIONS

        size = sum(p.stat().st_size for p in files)
        count = max(1, math.ceil(size / self.target_bytes))
        df = read_container(self.spark, table, files)
        df = df.repartitionByRange(count, "put_timestamp") if count > 1 else df.coalesce(1)
        # put_date first, as the writer needs it (or it sorts again by put_date alone, losing the order).
        (df.sortWithinPartitions(*SORT_COLUMNS).write.options(**WRITE_OPTIONS).mode("overwrite")
           .partitionBy("put_date").parquet(str(out)))
        written = sorted((out / container.name).glob("part-*.parquet"))
        for path in written:
            fsync(path)
        return written

    def _account(self, result: Compacted) -> None:
        count_compaction(self.counters, removed=result.files_before - result.carried,
                         written=result.files_after - result.carried, rows=result.rows, seconds=result.seconds)
        self.counters.inc("compaction_files_carried", result.carried)


@dataclass
class TableRewrites:
    """What a compaction by a table's own rewrite command (Delta's OPTIMIZE, Iceberg's
    rewrite_data_files) works with, on one Spark session: the formats' compactions subclass it."""

    spark: Any
    model: CostModel
    small_file_size: int
    vacuum_retention: float
    counters: Counters = field(default_factory=Counters)
    stop: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True)
class Rewritten:
    """What one partition's rewrite by its table's own command did (Delta's OPTIMIZE, Iceberg's
    rewrite_data_files)."""

    table: Location
    put_date: str
    seconds: float
    files_before: int
    files_after: int


def count_compaction(counters: Counters, *, removed: int, written: int, rows: int, seconds: float) -> None:
    """The counters of one compacted container (every format's compaction)."""
    counters.inc("compaction_containers")
    counters.inc("compaction_files_removed", removed)
    counters.inc("compaction_files_written", written)
    counters.inc("compaction_rows", rows)
    counters.observe("compaction_seconds", seconds)


#: Why a file is carried as it is, for the log.
_KEPT = "bulks not yet recorded as published, files holding several message types"


def _rewritable(table: Path, files: list[Path]) -> tuple[list[list[Path]], list[Path]]:
    """`files` of a container of `table` as (the groups to rewrite, one per message type, by type name;
    the files to carry as they are, under their names).

    Carried: the files of a bulk that may not be recorded as published yet (`unpublished_bulks`):
    its owner, or the recovery that finishes a dead owner's bulk, publishes or checks them by their
    names. And a file holding rows of several types (a compaction before this rule). Every other file
    holds one type's rows (a bulk is one type's) and is rewritten with the files of its type only,
    read with their schema (`read_schema`): rows of types sharing a table never get each other's
    columns, which the schema check at start (`check_schemas`) would refuse as columns one type
    dropped (`mqbridge.maintenance.engine.type_groups`, the purge's rule too)."""
    held = set(unpublished_bulks(table, (p.name for p in files)))
    carried = [p for p in files if (bulk := published_bulk_of(p.name)) is not None and bulk in held]
    groups = type_groups(p for p in files if p not in carried)
    return groups.typed, [*carried, *groups.mixed]


