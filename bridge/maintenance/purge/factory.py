"""The purge objects of one configuration, wired in one place for `mqbridge purge`, the bridge's
`PurgeScheduler` and the compaction's rounds (`mqbridge.maintenance.rounds`): the cost model
(`[purge]`, learned costs under `[bridge] state_dir`), purgers on a Spark session (a Delta table's
own, `mqbridge.maintenance.delta.purger`), and each table's designations.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mqbridge.counters import Counters
from mqbridge.landing.tables import holders, type_tables
from mqbridge.maintenance.delta.table import is_delta_config
from mqbridge.maintenance.engine.costs import CostModel
from mqbridge.maintenance.purge.designation import Designation, type_designations
from mqbridge.maintenance.purge.purger import Purger

if TYPE_CHECKING:
    from mqbridge.config import BridgeConfig, TypeConfig
    from mqbridge.maintenance.delta.purger import DeltaPurger


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
        # The purge reads and swaps local files (an object store's warehouse refuses retention at load).
        self.warehouse = config.local_warehouse("the purge")

    def purger(self, spark: Any, *, counters: Counters | None = None,
               stop: threading.Event | None = None) -> Purger:
        """A purger on `spark` with this configuration's cost model."""
        return Purger(spark, self.model, counters=counters if counters is not None else Counters(),
                      stop=stop if stop is not None else threading.Event())

    def is_delta(self, table: Path) -> bool:
        """Whether `table` (a table of the configured types) is a Delta table: a type landing there says so."""
        return is_delta_config(self.config, type_tables(self.warehouse, self.config.types).get(table, []))

    def purger_for(self, table: Path, spark: Any, *, counters: Counters | None = None,
                   stop: threading.Event | None = None) -> Purger | DeltaPurger:
        """The purger of `table`: Delta's commands for a Delta table (`mqbridge.maintenance.delta`),
        else the rewrite engine's swap of Parquet containers; both with this configuration's cost model."""
        if self.is_delta(table):
            from mqbridge.maintenance.delta.purger import DeltaPurger  # imports this policy's modules

            return DeltaPurger(spark, self.model, self.config.purge.vacuum_retention,
                               counters=counters if counters is not None else Counters(),
                               stop=stop if stop is not None else threading.Event())
        return self.purger(spark, counters=counters, stop=stop)

    def designations(self, types: Mapping[str, TypeConfig], ages: Mapping[str, float | None], *,
                     now: datetime, where: str | None = None) -> Iterator[tuple[Path, list[Designation]]]:
        """Each table `types` land in, with the designations that purge it (`type_designations`):
        each type at its own age, and only its own rows where other types land too. Lazily, table by
        table: a table's markers are read when it is reached."""
        for table, names in type_tables(self.warehouse, types).items():
            yield table, type_designations(names, ages, holders(self.warehouse, table, self.config.types),
                                           now=now, where=where)
