"""The scheduled purge: `[purge] interval` runs each type's retention and row cap, and the free-space
floor, on its own thread while the listeners keep landing (off by default).

Every `interval` the thread purges, table by table, the rows whose `put_timestamp` and
`received_timestamp` are both older than their type's `retention` (a row that arrived within the
retention stays, whatever time its producer stamped; types without one are skipped) and the oldest
rows beyond a type's `max_rows`; then, while the warehouse's free space is below `[purge]
min_free_disk`, the oldest rows of every type (`mqbridge.maintenance.purge.limits`: the rules and
their order). Exactly as `mqbridge purge` would with no `--where`: the same cost model and learned
costs, the same swap under the table lock (landing waits at most one swap), the same recovery; each
table by its format's purger (`mqbridge.table_formats`: a Delta table by Delta's own commits instead
of the swap). A failed round is logged and the next one runs as planned (the thread:
`mqbridge.maintenance.engine.scheduler.RoundScheduler`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from mqbridge.config.warehouse import Location
from mqbridge.counters import Counters
from mqbridge.maintenance.engine.scheduler import RoundScheduler
from mqbridge.maintenance.purge.designation import Designation
from mqbridge.maintenance.purge.factory import PurgeFactory
from mqbridge.maintenance.purge.limits import Limits

if TYPE_CHECKING:
    from mqbridge.config import BridgeConfig
    from mqbridge.table_formats import TablePurger

log = logging.getLogger("mqbridge.purge.schedule")  # the name operators configure


#: The Spark job group (a tag on Spark Connect) of the purge thread's jobs (`RoundScheduler.job_group`).
JOB_GROUP = "mqbridge-purge"


def due(designated: int, rows: int, threshold: float) -> bool:
    """Whether the scheduled retention purges a container now: more than `threshold` of its rows
    designated, or all of them (dropping a container costs next to nothing)."""
    return designated > 0 and (designated >= rows or designated > threshold * rows)


class PurgeScheduler(RoundScheduler):
    """Starts the purge thread when the bridge is ready and stops it when the bridge stops."""

    KIND = "purge"

    def __init__(self, config: BridgeConfig, session: Callable[[], Any], counters: Counters) -> None:
        assert config.purge.interval is not None
        super().__init__(config, session, counters, config.purge.interval)
        self.threshold = config.purge.threshold
        self.factory = PurgeFactory(config)

    def run_round(self) -> None:
        """Purge every table of every type with a retention or a row cap, once; then, with `[purge]
        min_free_disk`, the oldest rows of every type while the free space is below it
        (`mqbridge.maintenance.purge.limits`: the rules and their order)."""
        types = {name: t for name, t in self.config.types.items() if t.retention is not None or t.max_rows}
        spark = self._session()
        self._tag_jobs(spark)
        now = datetime.now(timezone.utc)
        self.counters.inc("purge_runs")
        limits = Limits(self.factory, spark, now=now)
        # Each type at its own retention and row cap, and only its own rows where others may land too.
        for table, designations in self.factory.table_designations(types, limits, now=now):
            # The table's format's purger: the engine's swap, or a Delta table's own commits.
            purger = self.factory.purger_for(table, spark, counters=self.counters, stop=self._stop)
            for designation in designations:
                if self._stop.is_set():
                    return
                self._purge_table(purger, table, designation)
        # Measured after the rules above ran: what they freed counts.
        for table, designation in limits.free_space_designations(self.config.types):
            if self._stop.is_set():
                return
            purger = self.factory.purger_for(table, spark, counters=self.counters, stop=self._stop)
            # Low on disk, a designated container is purged whatever [purge] threshold says.
            self._purge_table(purger, table, designation, urgent=True)

    def _purge_table(self, purger: TablePurger, table: Location, designation: Designation, *,
                     urgent: bool = False) -> None:
        if not self.factory.holds(table):  # a local directory, or a table on an object store or HDFS
            return
        plans = []
        for plan in purger.plan(table, designation):
            if urgent or due(plan.designated, plan.rows, self.threshold):
                plans.append(plan)
                continue
            # The seed's rule: purging pays once enough of a container is designated; until then
            # the designated rows wait for a later round (readers filter by put_timestamp anyway).
            log.info("purge %s put_date=%s: designated %d/%d, below the threshold %.2f: not purged this round",
                     table.name, plan.put_date, plan.designated, plan.rows, self.threshold)
            self.counters.inc("purge_containers_skipped")
        if plans:
            log.info("purge %s: designated: %s; %d containers to purge", table.name, designation.describe(),
                     len(plans))
        for result in purger.run(plans, designation):
            e = result.plan.estimate
            log.info("purge %s put_date=%s: designated %d/%d, estimated delete %.3fs copy-and-drop %.3fs, "
                     "strategy %s, measured %.3fs", table.name, result.plan.put_date, result.plan.designated,
                     result.plan.rows, e.delete_seconds, e.copy_seconds, result.strategy, result.seconds)
