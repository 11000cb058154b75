"""One round of `mqbridge compact` over the tables of a configuration: each container's facts, its
plan (`compaction.planner.decide`) and the action carried out, by the purge policy (drop, delete,
copy: `purge.Purger`) or the compaction policy (compact: `compaction.Compactor`). Shared by
`mqbridge compact` and the bridge's `CompactionScheduler`. The one module that uses both policies:
neither imports the other.

Facts come from the Parquet footers (files, sizes, rows); the rows the retention designates are
counted by the purge's own Spark job (`Purger.plan`), only for tables whose types have a
`retention`. A table several types with different retentions share is planned with the first
designation that designates rows in a container; the others follow in later rounds.

A Delta table's facts come from its current version, and its actions are Delta's own commits: the
purge's DELETE or copy (`mqbridge.maintenance.delta.purger`), the compaction's OPTIMIZE ... ZORDER BY
(put_timestamp) (`mqbridge.maintenance.delta.compaction`), then VACUUM (`[purge] vacuum_retention`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mqbridge.counters import Counters
from mqbridge.landing.containers import PARTITION, data_files
from mqbridge.landing.publication import unpublished_bulks
from mqbridge.maintenance.compaction.compactor import Compactor, free_bytes
from mqbridge.maintenance.compaction.planner import Facts, Plan, Policy, decide
from mqbridge.maintenance.delta.compaction import DeltaCompaction
from mqbridge.maintenance.delta.purger import DeltaPurger
from mqbridge.maintenance.engine.costs import Estimate
from mqbridge.maintenance.engine.swap import recover_purges
from mqbridge.maintenance.purge.designation import Designation
from mqbridge.maintenance.purge.factory import PurgeFactory
from mqbridge.maintenance.purge.purger import ContainerPlan, Purger

if TYPE_CHECKING:
    from mqbridge.config import BridgeConfig

log = logging.getLogger("mqbridge.compaction.rounds")  # the name operators configure


@dataclass
class TablePlan:
    """The plans of one table's containers, with what the purge needs to carry out its actions."""

    table: Path
    plans: list[Plan]
    purges: dict[str, tuple[ContainerPlan, Designation]]  # by put_date
    delta: bool = False  # a Delta table: Delta's commands carry the plans out


@dataclass(frozen=True)
class Done:
    """One container's action carried out."""

    table: Path
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
        self.purger: Purger = self.factory.purger(spark, counters=self.counters, stop=self.stop)
        self.compactor = Compactor(spark, self.factory.model, self.settings.target_file_size,
                                   counters=self.counters, stop=self.stop)
        retention = config.purge.vacuum_retention
        self.delta_purger = DeltaPurger(spark, self.factory.model, retention, counters=self.counters, stop=self.stop)
        self.delta = DeltaCompaction(spark, self.factory.model, self.settings.small_file_size, retention,
                                     counters=self.counters, stop=self.stop)

    @property
    def warehouse(self) -> Path:
        return self.factory.warehouse

    def low_disk(self) -> bool:
        """Whether the warehouse's file system has less free space than `min_free_disk`."""
        limit = self.settings.min_free_disk
        return limit is not None and free_bytes(self.warehouse) < limit

    def tables(self, only: str | None = None) -> dict[Path, list[str]]:
        """`tables(self.config, only)`."""
        return tables(self.config, only)

    def plan(self, table: Path, types: list[str], *, low_disk: bool) -> TablePlan:
        """Every container of `table` with its plan, oldest first (nothing is changed)."""
        delta = self.factory.is_delta(table)
        purges = self._designated(table, types, delta)
        policy = Policy(self.settings.small_files, low_disk=low_disk, purge_threshold=self.config.purge.threshold)
        facts = self._delta_facts(table, purges) if delta else self._facts(table, purges)
        return TablePlan(table, [decide(facts[d], policy, self.factory.model) for d in sorted(facts)], purges, delta)

    def carry_out(self, planned: TablePlan) -> Iterator[Done]:
        """Carry out the plans of one table (recovering killed runs first), yielding each container done."""
        table = planned.table
        if planned.delta:
            yield from self._carry_out_delta(planned)
            return
        recover_purges(table)
        for plan in planned.plans:
            if self.stop.is_set():
                return
            if plan.action in ("drop", "delete", "copy"):
                container, designation = planned.purges[plan.put_date]
                container.estimate = Estimate(container.estimate.delete_seconds, container.estimate.copy_seconds,
                                              plan.action)
                for result in self.purger.run([container], designation):
                    self.counters.inc("compaction_purged", strategy=plan.action)
                    yield Done(table, plan, result.seconds, len(data_files(container.path)))
            elif plan.action == "compact":
                for compacted in self.compactor.run(table, [plan.put_date]):
                    yield Done(table, plan, compacted.seconds, compacted.files_after)

    def _carry_out_delta(self, planned: TablePlan) -> Iterator[Done]:
        """`carry_out` of a Delta table: each action one Delta commit, then VACUUM after compactions
        (the purge's run vacuums after its own commits)."""
        compacted = False
        for plan in planned.plans:
            if self.stop.is_set():
                return
            if plan.action in ("drop", "delete", "copy"):
                container, designation = planned.purges[plan.put_date]
                container.estimate = Estimate(container.estimate.delete_seconds, container.estimate.copy_seconds,
                                              plan.action)
                for result in self.delta_purger.run([container], designation):
                    self.counters.inc("compaction_purged", strategy=plan.action)
                    after = plan.facts.files if plan.action == "delete" else int(plan.action == "copy")
                    yield Done(planned.table, plan, result.seconds, after)
            elif plan.action == "compact":
                done = self.delta.optimize(planned.table, plan.put_date, plan.facts.files, plan.facts.rows)
                compacted = True
                yield Done(planned.table, plan, done.seconds, done.files_after)
        if compacted and not self.stop.is_set():
            self.delta.vacuum(planned.table)

    # -- facts -----------------------------------------------------------------------------------
    def _designated(self, table: Path, types: list[str],
                    delta: bool = False) -> dict[str, tuple[ContainerPlan, Designation]]:
        """Per put_date, the purge's count of the rows the types' retention designates."""
        retained = {n: self.config.types[n] for n in types if self.config.types[n].retention is not None}
        if not retained or not table.is_dir():
            return {}
        from mqbridge.landing.tables import holders
        from mqbridge.maintenance.purge.designation import type_designations

        ages = {n: t.retention for n, t in retained.items()}
        found: dict[str, tuple[ContainerPlan, Designation]] = {}
        for designation in type_designations(list(retained), ages, holders(self.warehouse, table, self.config.types),
                                             now=datetime.now(timezone.utc)):
            for container in (self.delta_purger if delta else self.purger).plan(table, designation):
                found.setdefault(container.put_date, (container, designation))
        return found

    def _delta_facts(self, table: Path, purges: dict[str, tuple[ContainerPlan, Designation]]) -> dict[str, Facts]:
        """The facts of a Delta table's partitions, from its current version (`DeltaCompaction.facts`)."""
        designated = {d: (c.designated, sum(c.files[f][0] for f in c.partial)) for d, (c, _) in purges.items()}
        return self.delta.facts(table, designated)

    def _facts(self, table: Path, purges: dict[str, tuple[ContainerPlan, Designation]]) -> dict[str, Facts]:
        import pyarrow.parquet as pq

        facts: dict[str, Facts] = {}
        if not table.is_dir():
            return facts
        for directory in table.iterdir():
            match = PARTITION.fullmatch(directory.name)
            if not match or not directory.is_dir():
                continue
            files = data_files(directory)
            sizes = [p.stat().st_size for p in files]
            rows = sum(pq.read_metadata(p).num_rows for p in files)
            purge = purges.get(match[1])
            designated = purge[0].designated if purge else 0
            rewritten = sum(purge[0].files[f][0] for f in purge[0].partial) if purge else 0
            facts[match[1]] = Facts(match[1], len(files), sum(s < self.settings.small_file_size for s in sizes),
                                    rows, sum(sizes), designated, rewritten,
                                    tuple(unpublished_bulks(table, (p.name for p in files))))
        return facts


def tables(config: BridgeConfig, only: str | None = None) -> dict[Path, list[str]]:
    """The tables of the configured types (each with its types); `only`: the one under the warehouse
    named so. Needs no Spark."""
    from mqbridge.landing.tables import type_tables

    warehouse = config.local_warehouse("the compaction")
    return {p: n for p, n in type_tables(warehouse, config.types).items() if only is None or p == warehouse / only}


def plan_line(plan: Plan) -> str:
    """One container's plan as `mqbridge compact` prints it."""
    f = plan.facts
    return (f"  put_date={f.put_date}  {f.files:>5} files ({f.small_files} small)  {f.rows:>9} rows  "
            f"{f.bytes:>12} bytes  action {plan.action:<7}  estimated {plan.estimated_seconds:.3f}s  ({plan.reason})")
