"""The scheduled compaction: `[compaction] interval` runs a round (`mqbridge.maintenance.rounds`) over
every table on its own thread while the listeners keep landing (off by default). The loop, the
Spark job group cancelled at shutdown and the failure accounting are the engine's, the scheduled
purge's too (`mqbridge.maintenance.engine.scheduler.RoundScheduler`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mqbridge.counters import Counters
from mqbridge.maintenance.engine.scheduler import RoundScheduler
from mqbridge.maintenance.rounds import Compaction

if TYPE_CHECKING:
    from mqbridge.config import BridgeConfig

log = logging.getLogger("mqbridge.compaction.schedule")  # the name operators configure


class CompactionScheduler(RoundScheduler):
    """Plans and carries out every table's containers every `[compaction] interval`."""

    KIND = "compaction"

    def __init__(self, config: BridgeConfig, session: Callable[[], Any], counters: Counters) -> None:
        assert config.compaction.interval is not None
        super().__init__(config, session, counters, config.compaction.interval)
        self.low_disk = False
        self.last_actions: dict[str, int] = {}

    def run_round(self) -> None:
        """One round over every table (see `mqbridge.maintenance.rounds`)."""
        spark = self._session()
        self._tag_jobs(spark)
        compaction = Compaction(self.config, spark, counters=self.counters, stop=self._stop)
        self.counters.inc("compaction_runs")
        self.low_disk = compaction.low_disk()
        self.counters.set("compaction_low_disk", int(self.low_disk))
        actions: dict[str, int] = {}
        for table, types in compaction.tables().items():
            if self._stop.is_set():
                return
            planned = compaction.plan(table, types, low_disk=self.low_disk)
            for done in compaction.carry_out(planned):
                actions[done.plan.action] = actions.get(done.plan.action, 0) + 1
                log.info("compaction %s put_date=%s: %s (%s), estimated %.3fs, measured %.3fs, %d files after",
                         table.name, done.plan.put_date, done.plan.action, done.plan.reason,
                         done.plan.estimated_seconds, done.seconds, done.files_after)
        self.last_actions = actions

    def status_fields(self) -> dict[str, Any]:
        fields = super().status_fields()
        s = self.config.compaction
        fields[self.KIND].update({"low_disk": self.low_disk, "last_round": self.last_actions,
                                  "small_files": s.small_files, "small_file_size": s.small_file_size,
                                  "target_file_size": s.target_file_size, "min_free_disk": s.min_free_disk})
        return fields
