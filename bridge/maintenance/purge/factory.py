"""The purge objects of one configuration, wired in one place for `mqbridge purge`, the bridge's
`PurgeScheduler` and the compaction's rounds (`mqbridge.maintenance.rounds`): the cost model
(`[purge]`, learned costs under `[bridge] state_dir`), purgers on a Spark session (each table's
format's own, `mqbridge.table_formats`: the engine's swap of Parquet containers, a Delta table's own
commits), and each table's designations.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from mqbridge.config.warehouse import Location
from mqbridge.counters import Counters
from mqbridge.landing.tables import holders, type_tables
from mqbridge.maintenance.engine.costs import CostModel
from mqbridge.maintenance.purge.designation import Designation, type_designations
from mqbridge.table_formats import TableFormat, TablePurger, format_for

if TYPE_CHECKING:
    from mqbridge.config import BridgeConfig, TypeConfig
    from mqbridge.maintenance.purge.limits import Limits


class PurgeFactory:
    """Makes the purge objects of `config`; the cost model is loaded once, when it is made."""

    def __init__(self, config: BridgeConfig) -> None:
        self.config = config
        p = config.purge
        self.model = CostModel.in_state_dir(config.resolve_path(config.bridge.state_dir), margin=p.margin,
                                            delete_row_seconds=p.delete_row_seconds,
                                            copy_row_seconds=p.copy_row_seconds,
                                            container_seconds=p.container_seconds,
                                            compact_row_seconds=config.compaction.compact_row_seconds)
        # A directory, or an object store's or HDFS's URI (its Delta tables purged by Delta's own commits).
        self.warehouse: Location = config.tables_warehouse()

    def format_of(self, table: Location) -> TableFormat:
        """The format of `table` (a table of the configured types) as the types landing there say
        (`format_for`: ConfigError when they say different ones)."""
        return format_for(self.config, type_tables(self.warehouse, self.config.types).get(table, []))

    def holds(self, table: Location) -> bool:
        """Whether a table of its configured format is at `table` (nothing to purge otherwise)."""
        return self.format_of(table).holds(table)

    def purger_for(self, table: Location, spark: Any, *, counters: Counters | None = None,
                   stop: threading.Event | None = None) -> TablePurger:
        """The purger of `table`, its format's (`TableFormat.purger`: the rewrite engine's swap of
        Parquet containers, Delta's own commands), with this configuration's cost model."""
        return self.format_of(table).purger(spark, self.model, vacuum_retention=self.config.purge.vacuum_retention,
                                            counters=counters if counters is not None else Counters(),
                                            stop=stop if stop is not None else threading.Event())

    def designations(self, types: Mapping[str, TypeConfig], ages: Mapping[str, float | None], *,
                     now: datetime, where: str | None = None) -> Iterator[tuple[Location, list[Designation]]]:
        """Each table `types` land in, with the designations that purge it (`type_designations`):
        each type at its own age, and only its own rows where other types land too. Lazily, table by
        table: a table's markers are read when it is reached."""
        for table, names in type_tables(self.warehouse, types).items():
            yield table, type_designations(names, ages, holders(self.warehouse, table, self.config.types),
                                           now=now, where=where)

    def table_designations(self, types: Mapping[str, TypeConfig], limits: Limits, *,
                           now: datetime) -> Iterator[tuple[Location, list[Designation]]]:
        """Each table `types` land in, with the designations of their configured rules: each type's
        `retention` and, when a type has one, its `max_rows` (`Limits.designations`, which counts the
        rows by age with Spark). The free-space floor comes after these have run
        (`Limits.free_space_designations`)."""
        if any(t.max_rows for t in types.values()):
            return limits.designations(types)
        return self.designations(types, {name: t.retention for name, t in types.items()}, now=now)
