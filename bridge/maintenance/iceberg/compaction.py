"""Compaction of an Iceberg table, and the facts the compaction planner (`compaction.planner.decide`)
decides each put_date partition by, read from the table's current snapshot.

A put_date to compact (a day: whole partitions of a days or hours spec, and of a table partitioned by
put_date, made before `[types.X] partition_by`) gets `CALL mqbridge.system.rewrite_data_files(table =>
..., strategy => 'sort', sort_order => 'put_timestamp', where => <the day>)` (`table.day_condition`):
one commit (a `replace` snapshot) that rewrites the day's files into files of about Iceberg's target size
(`write.target-file-size-bytes`, 512 MB by default) in the table's current spec (a table whose spec was
evolved is then partitioned one way again), sorted by put_timestamp, so that a time-range read skips the
others by their statistics. Options: `rewrite-all` (the planner has decided; Iceberg's own thresholds,
such as 5 input files at least, would otherwise skip a partition) and `remove-dangling-deletes` (the
position delete files a purge's DELETE wrote, which no rewritten file needs any more, leave the table
with it). A bulk landing meanwhile only adds files, which the rewrite leaves alone (Iceberg commits a
rewrite over concurrent appends).

The files a rewrite replaced stay in the storage, out of the table, until their snapshots expire
(`table.expire`, after `[purge] vacuum_retention`), which each round runs after compacting a table.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from mqbridge.config.iceberg import ICEBERG_CATALOG
from mqbridge.config.warehouse import Location
from mqbridge.maintenance.compaction.compactor import Rewritten, TableRewrites, count_compaction
from mqbridge.maintenance.compaction.planner import Facts
from mqbridge.maintenance.iceberg.table import day_condition, exists, expire, identifier, procedure_table

log = logging.getLogger("mqbridge.compaction.iceberg")  # the name operators configure

#: The options of every rewrite (see the module docstring).
REWRITE_OPTIONS = {"rewrite-all": "true", "remove-dangling-deletes": "true"}


@dataclass
class IcebergCompaction(TableRewrites):
    """Reads the facts of an Iceberg table's partitions and compacts them, on one Spark session."""

    def facts(self, table: Location, designated: dict[str, tuple[int, int]]) -> dict[str, Facts]:
        """Per put_date: the data files of the table's current snapshot (how many are small, from its
        `data_files` metadata table), their rows as a reader sees them (position deletes applied) and
        bytes, and from `designated` (per put_date: the rows the retention designates, the rows of the
        files holding designated and surviving rows). Nothing of a bulk is ever half in an Iceberg
        table: no partition waits for an unpublished bulk."""
        if not exists(self.spark, table):
            return {}
        name = identifier(table)
        # By the put_date column's bounds, not the partition: a table is partitioned by days or hours of
        # put_timestamp (or, made before partition_by, by put_date), and by two specs after an evolution;
        # every file holds one put_date (its partition is a day or an hour of it).
        files = self.spark.sql(f"SELECT cast(readable_metrics.put_date.lower_bound AS STRING) AS put_date, "
                               f"file_size_in_bytes AS size FROM {name}.data_files").collect()
        rows = {r[0]: int(r[1]) for r in self.spark.sql(
            f"SELECT cast(put_date AS STRING), count(*) FROM {name} GROUP BY 1").collect()}
        by_date: dict[str, list[int]] = {}
        for row in files:
            by_date.setdefault(row["put_date"], []).append(int(row["size"]))
        facts = {}
        for put_date, sizes in by_date.items():
            purge = designated.get(put_date, (0, 0))
            facts[put_date] = Facts(put_date, len(sizes), sum(size < self.small_file_size for size in sizes),
                                    rows.get(put_date, 0), sum(sizes), purge[0], purge[1])
        return facts

    def rewrite(self, table: Location, put_date: str, files_before: int, rows: int) -> Rewritten:
        """Rewrite one partition's files sorted by put_timestamp (see the module docstring): one commit."""
        start = time.perf_counter()
        options = ", ".join(f"'{k}', '{v}'" for k, v in REWRITE_OPTIONS.items())
        [row] = self.spark.sql(f"CALL {ICEBERG_CATALOG}.system.rewrite_data_files(table => {procedure_table(table)}, "
                               "strategy => 'sort', sort_order => 'put_timestamp', "
                               f"where => \"{day_condition(table, put_date)}\", options => map({options}))").collect()
        removed, added = int(row["rewritten_data_files_count"]), int(row["added_data_files_count"])
        seconds = time.perf_counter() - start
        self.model.learn("compact", seconds, rows_copied=rows)
        count_compaction(self.counters, removed=removed, written=added, rows=rows, seconds=seconds)
        return Rewritten(table, put_date, seconds, files_before, files_before - removed + added)

    def expire(self, table: Location) -> None:
        """Expire the table's old snapshots after its compaction (`[purge] vacuum_retention`)."""
        expire(self.spark, table, self.vacuum_retention)
