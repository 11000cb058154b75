"""One round of `mqbridge compact` over the tables of a configuration: each container's facts, its
plan (`compaction.planner.decide`) and the action carried out, by the purge policy (drop, delete,
copy: `purge.Purger`) or the compaction policy (compact: `compaction.Compactor`). Shared by
`mqbridge compact` and the bridge's `CompactionScheduler`. The one module that uses both policies:
neither imports the other.

Facts and actions are the table format's (`mqbridge.table_formats`: its `compaction` and its
`purger`): a Parquet table's facts come from its footers (files, sizes, rows) and its actions are the
rewrite engine's swaps; a Delta table's facts come from its current version, and its actions are
Delta's own commits: the purge's DELETE or copy, the compaction's OPTIMIZE ... ZORDER BY
(put_timestamp), then VACUUM (`[purge] vacuum_retention`). The rows the retention designates are
counted by the purge's own Spark job (its purger's `plan`), only for tables whose types have a
`retention`. A table several types with different retentions share is planned with the first
designation that designates rows in a container; the others follow in later rounds.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mqbridge.config.warehouse import Location
from mqbridge.counters import Counters
from mqbridge.maintenance.compaction.planner import Plan, Policy, decide
from mqbridge.maintenance.engine.costs import Estimate
from mqbridge.maintenance.engine.free_space import free_bytes
from mqbridge.maintenance.purge.designation import Designation
from mqbridge.maintenance.purge.factory import PurgeFactory
from mqbridge.maintenance.purge.purger import ContainerPlan
from mqbridge.table_formats import TableCompaction, TableFormat, TablePurger

if TYPE_CHECKING:
    from mqbridge.config import BridgeConfig

log = logging.getLogger("mqbridge.compaction.rounds")  # the name operators configure


@dataclass
class TablePlan:
    """The plans of one table's containers, with what the purge needs to carry out its actions."""

    table: Location
    plans: list[Plan]
    purges: dict[str, tuple[ContainerPlan, Designation]]  # by put_date
    table_format: TableFormat  # whose purger and compaction carry the plans out


@dataclass(frozen=True)
class Done:
    """One container's action carried out."""

    table: Location
    plan: Plan
    seconds: float
    files_after: int


class Compaction:
    """Plans and carries out rounds for one configuration on one Spark session."""

    def __init__(self, config: BridgeConfig, spark: Any, *, counters: Counters | None = None,
                 stop: threading.Event | None = None) -> None:
        self.config = config
        self.settings = config.compaction
        self.factory = PurgeFactory(config)
        self.counters = counters if counters is not None else Counters()
        self.stop = stop if stop is not None else threading.Event()
        self.spark = spark
        self._purgers: dict[str, TablePurger] = {}  # by format name, made when a table of it is reached
        self._compactions: dict[str, TableCompaction] = {}

    @property
    def warehouse(self) -> Location:
        return self.factory.warehouse

    def low_disk(self) -> bool:
        """Whether the warehouse's file system has less free space than `min_free_disk` (refused at load
        for an object store or HDFS, where free space is not measured: `config.warehouse`)."""
        limit = self.settings.min_free_disk
        return limit is not None and free_bytes(Path(self.warehouse)) < limit

    def purger(self, table_format: TableFormat) -> TablePurger:
        """The purger of `table_format`'s tables on this session (one per format and round)."""
        if table_format.name not in self._purgers:
            self._purgers[table_format.name] = table_format.purger(
                self.spark, self.factory.model, vacuum_retention=self.config.purge.vacuum_retention,
                counters=self.counters, stop=self.stop)
        return self._purgers[table_format.name]

    def table_compaction(self, table_format: TableFormat) -> TableCompaction:
        """`table_format`'s part of the rounds on this session (its facts and rewrite)."""
        if table_format.name not in self._compactions:
            self._compactions[table_format.name] = table_format.compaction(
                self.spark, self.factory.model, small_file_size=self.settings.small_file_size,
                target_file_size=self.settings.target_file_size, vacuum_retention=self.config.purge.vacuum_retention,
                counters=self.counters, stop=self.stop)
        return self._compactions[table_format.name]

    def tables(self, only: str | None = None) -> dict[Location, list[str]]:
        """`tables(self.config, only)`."""
        return tables(self.config, only)

    def plan(self, table: Location, types: list[str], *, low_disk: bool) -> TablePlan:
        """Every container of `table` with its plan, oldest first (nothing is changed)."""
        table_format = self.factory.format_of(table)
        purges = self._designated(table, types, table_format)
        policy = Policy(self.settings.small_files, low_disk=low_disk, purge_threshold=self.config.purge.threshold)
        # Per put_date: the rows designated, and the rows of the files holding designated and surviving rows
        designated = {d: (c.designated, sum(c.files[f][0] for f in c.partial)) for d, (c, _) in purges.items()}
        facts = self.table_compaction(table_format).facts(table, designated)
        return TablePlan(table, [decide(facts[d], policy, self.factory.model) for d in sorted(facts)], purges,
                         table_format)

    def carry_out(self, planned: TablePlan) -> Iterator[Done]:
        """Carry out the plans of one table (recovering killed runs first), yielding each container done;
        then the format's clean-up (a Delta table's VACUUM after compactions: a purge's run vacuums after
        its own commits)."""
        table = planned.table
        purger = self.purger(planned.table_format)
        compaction = self.table_compaction(planned.table_format)
        compaction.recover(table)
        compacted = False
        for plan in planned.plans:
            if self.stop.is_set():
                return
            if plan.action in ("drop", "delete", "copy"):
                container, designation = planned.purges[plan.put_date]
                container.estimate = Estimate(container.estimate.delete_seconds, container.estimate.copy_seconds,
                                              plan.action)
                for result in purger.run([container], designation):
                    self.counters.inc("compaction_purged", strategy=plan.action)
                    yield Done(table, plan, result.seconds, compaction.files_after_purge(table, plan, container))
            elif plan.action == "compact":
                done = compaction.compact(table, plan)
                if done is not None:
                    compacted = True
                    yield Done(table, plan, done.seconds, done.files_after)
        if not self.stop.is_set():
            compaction.finish(table, compacted)

    # -- facts -----------------------------------------------------------------------------------
    def _designated(self, table: Location, types: list[str],
                    table_format: TableFormat) -> dict[str, tuple[ContainerPlan, Designation]]:
        """Per put_date, the purge's count of the rows the types' retention designates."""
        retained = {n: self.config.types[n] for n in types if self.config.types[n].retention is not None}
        if not retained or not table_format.holds(table):
            return {}
        from mqbridge.landing.tables import holders
        from mqbridge.maintenance.purge.designation import type_designations

        ages = {n: t.retention for n, t in retained.items()}
        found: dict[str, tuple[ContainerPlan, Designation]] = {}
        for designation in type_designations(list(retained), ages, holders(self.warehouse, table, self.config.types),
                                             now=datetime.now(timezone.utc)):
            for container in self.purger(table_format).plan(table, designation):
                found.setdefault(container.put_date, (container, designation))
        return found


def tables(config: BridgeConfig, only: str | None = None) -> dict[Location, list[str]]:
    """The tables of the configured types (each with its types); `only`: the one under the warehouse
    named so (a directory, or an object store's URI). Needs no Spark."""
    from mqbridge.landing.tables import type_tables

    warehouse = config.tables_warehouse()
    return {p: n for p, n in type_tables(warehouse, config.types).items() if only is None or p == warehouse / only}


def plan_line(plan: Plan) -> str:
    """One container's plan as `mqbridge compact` prints it."""
    f = plan.facts
    return (f"  put_date={f.put_date}  {f.files:>5} files ({f.small_files} small)  {f.rows:>9} rows  "
            f"{f.bytes:>12} bytes  action {plan.action:<7}  estimated {plan.estimated_seconds:.3f}s  ({plan.reason})")
