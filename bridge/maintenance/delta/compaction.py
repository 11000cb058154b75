"""Compaction of a Delta table, and the facts the compaction planner (`compaction.planner.decide`)
decides each put_date partition by, read from the table's current version.

A partition to compact gets `OPTIMIZE delta.`<table>` WHERE put_date = d ZORDER BY (put_timestamp)`:
one commit (`dataChange = false`) that rewrites the partition's files into files of about Delta's
target size (`spark.databricks.delta.optimize.maxFileSize`, 1 GB by default), each holding one range
of put_timestamp, so that a time-range read skips the others by their statistics. Delta 4.4 takes a
single Z-order column (it is then a range partitioning by it); plain OPTIMIZE would only bin-pack
the small files. Within a file Delta orders the rows only when `spark.databricks.io.skipping.mdc.
sortWithinFiles` is on, and adds a random byte to the curve unless `...mdc.addNoise` is off: both are
set for the command, so that each file's rows are in put_timestamp order to within one of Delta's
range ids (`...mdc.rangeId.max`, 1000 per partition). OPTIMIZE does not conflict with the bulks
landing meanwhile (their commits only add files), and rewrites the files whose deletion vectors
mark enough deleted rows (`spark.databricks.delta.optimize.maxDeletedRowsRatio`).

The files OPTIMIZE replaced stay in the storage, out of the table, until VACUUM (`[purge]
vacuum_retention`), which each round runs after compacting a table.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from mqbridge.config.warehouse import Location
from mqbridge.landing.delta import is_delta_table
from mqbridge.maintenance.compaction.compactor import Rewritten, TableRewrites, count_compaction
from mqbridge.maintenance.compaction.planner import Facts
from mqbridge.maintenance.delta.table import sql_name, vacuum

log = logging.getLogger("mqbridge.compaction.delta")  # the name operators configure

#: The session settings OPTIMIZE runs with (see the module docstring), restored after it.
ZORDER_CONF = {"spark.databricks.io.skipping.mdc.sortWithinFiles": "true",
               "spark.databricks.io.skipping.mdc.addNoise": "false"}


@dataclass
class DeltaCompaction(TableRewrites):
    """Reads the facts of a Delta table's partitions and compacts them, on one Spark session."""

    def facts(self, table: Location, designated: dict[str, tuple[int, int]]) -> dict[str, Facts]:
        """Per put_date: the data files of the table's current version (how many are small), their
        rows and bytes, and from `designated` (per put_date: the rows the retention designates, the
        rows of the files holding designated and surviving rows). Nothing of a bulk is ever half in a
        Delta table: no partition waits for an unpublished bulk."""
        from pyspark.sql import functions as F

        if not is_delta_table(table):
            return {}
        rows = (self.spark.read.format("delta").load(str(table))
                .select(F.col("put_date").cast("string").alias("put_date"), F.col("_metadata.file_name").alias("file"),
                        F.col("_metadata.file_size").alias("size"))
                .groupBy("put_date", "file", "size").count().collect())
        by_date: dict[str, list[tuple[int, int]]] = {}
        for row in rows:
            by_date.setdefault(row["put_date"], []).append((int(row["size"]), int(row["count"])))
        facts = {}
        for put_date, files in by_date.items():
            purge = designated.get(put_date, (0, 0))
            facts[put_date] = Facts(put_date, len(files), sum(size < self.small_file_size for size, _ in files),
                                    sum(n for _, n in files), sum(size for size, _ in files), purge[0], purge[1])
        return facts

    def optimize(self, table: Location, put_date: str, files_before: int, rows: int) -> Rewritten:
        """OPTIMIZE one partition ordered by put_timestamp (see the module docstring): one commit."""
        start = time.perf_counter()
        before = {key: self.spark.conf.get(key, None) for key in ZORDER_CONF}
        for key, value in ZORDER_CONF.items():
            self.spark.conf.set(key, value)
        try:
            [row] = self.spark.sql(f"OPTIMIZE {sql_name(table)} WHERE put_date = DATE'{put_date}' "
                                   "ZORDER BY (put_timestamp)").collect()
        finally:
            for key, value in before.items():
                if value is None:
                    self.spark.conf.unset(key)
                else:
                    self.spark.conf.set(key, value)
        metrics = row["metrics"]
        added, removed = int(metrics["numFilesAdded"]), int(metrics["numFilesRemoved"])
        seconds = time.perf_counter() - start
        self.model.learn("compact", seconds, rows_copied=rows)
        count_compaction(self.counters, removed=removed, written=added, rows=rows, seconds=seconds)
        return Rewritten(table, put_date, seconds, files_before, files_before - removed + added)

    def vacuum(self, table: Location) -> None:
        """VACUUM the table after its compaction (`[purge] vacuum_retention`)."""
        started = time.perf_counter()
        vacuum(self.spark, table, self.vacuum_retention)
        log.info("compaction %s: VACUUM (retain %.0fs) in %.3fs", table.name, self.vacuum_retention,
                 time.perf_counter() - started)
