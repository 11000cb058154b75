"""The scheduled purge: `[purge] interval` runs each type's retention on its own thread while the
listeners keep landing (off by default).

Every `interval` the thread purges, table by table, the rows whose `put_timestamp` and
`received_timestamp` are both older than their type's `retention` (a row that arrived within the
retention stays, whatever time its producer stamped; types without one are skipped), exactly as
`mqbridge purge` would with no `--where`: the same cost model and learned costs, the same swap under
the table lock (landing waits at most one swap), the same recovery. A failed round is logged and
the next one runs as planned.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mqbridge.counters import Counters
from mqbridge.observer import BridgeView, Observer
from mqbridge.purge.factory import PurgeFactory
from mqbridge.purge.purger import Designation, Purger

if TYPE_CHECKING:
    from mqbridge.config import BridgeConfig

log = logging.getLogger(__name__)


#: The Spark job group (a tag on Spark Connect) of the purge thread's jobs.
JOB_GROUP = "mqbridge-purge"
#: Longest wait at shutdown for a container in progress before its Spark jobs are cancelled.
STOP_WAIT = 15.0


def _is_connect(spark: Any) -> bool:
    return type(spark).__module__.startswith("pyspark.sql.connect")


def due(designated: int, rows: int, threshold: float) -> bool:
    """Whether the scheduled retention purges a container now: more than `threshold` of its rows
    designated, or all of them (dropping a container costs next to nothing)."""
    return designated > 0 and (designated >= rows or designated > threshold * rows)


class RoundScheduler(Observer):
    """Runs `run_round` on its own thread every `interval` from when the bridge is ready until it
    stops; a failed round is logged and counted (`<KIND>_failures`). The purge's and the
    compaction's (`mqbridge.compaction.schedule`) schedulers are this with their own round."""

    #: Names the thread, the Spark job group, the failure counter and the /status field.
    KIND = "purge"

    def __init__(self, config: BridgeConfig, session: Callable[[], Any], counters: Counters,
                 interval: float) -> None:
        self.interval = interval
        self.config = config
        self._session = session  # the bridge's SparkSession, started by its executors
        self.counters = counters
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.rounds = 0
        self.last_error: str | None = None
        # Shutdown waits this long for a container in progress, then as long again after cancelling.
        self.stop_wait = min(STOP_WAIT, config.bridge.shutdown_timeout / 4)

    @property
    def job_group(self) -> str:
        """The Spark job group (a tag on Spark Connect) of this thread's jobs: `JOB_GROUP` for the purge."""
        return f"mqbridge-{self.KIND}"

    def run_round(self) -> None:
        """One round of this scheduler's work (a purge, a compaction): each subclass's own."""
        raise NotImplementedError(f"{type(self).__name__} does not say what its round does")

    def on_ready(self, bridge: BridgeView) -> None:
        self._thread = threading.Thread(target=self._loop, name=f"mqbridge-{self.KIND}", daemon=True)
        self._thread.start()

    def on_stopping(self, bridge: BridgeView) -> None:
        """Stop the thread within `stop_wait` (twice, at worst), not whenever its container is done.

        A round ends after its current container; a container that takes longer has its Spark jobs
        cancelled: before the swap that only throws the new container away (the live one is
        untouched), and the swap itself is a few renames, never a Spark job. A thread still running
        after that is left behind (daemon): whatever it leaves is finished or rolled back by the
        recovery at the next start, as after a kill."""
        self._stop.set()
        thread = self._thread
        if thread is None:
            return
        thread.join(self.stop_wait)
        if not thread.is_alive():
            return
        log.warning("shutdown: the %s still runs after %.0fs: cancelling its Spark jobs (the container "
                    "in progress stays as it was)", self.KIND, self.stop_wait)
        self._cancel_jobs()
        thread.join(self.stop_wait)
        if thread.is_alive():
            log.error("shutdown: the %s thread did not end; going on without it (the next start finishes "
                      "or rolls back what it leaves)", self.KIND)

    def _tag_jobs(self, spark: Any) -> None:
        """Name this thread's Spark jobs (thread-local in Spark), so that shutdown can cancel them."""
        if _is_connect(spark):
            spark.addTag(self.job_group)
        else:
            spark.sparkContext.setJobGroup(self.job_group, f"mqbridge scheduled {self.KIND}", interruptOnCancel=True)

    def _cancel_jobs(self) -> None:
        try:
            spark = self._session()
            if _is_connect(spark):
                spark.interruptTag(self.job_group)
            else:
                spark.sparkContext.cancelJobGroup(self.job_group)
        except Exception as exc:  # Spark gone: nothing of ours is running there either
            log.warning("shutdown: cannot cancel the %s's Spark jobs: %s", self.KIND, exc)

    def status_fields(self) -> dict[str, Any]:
        return {self.KIND: {"interval": self.interval, "rounds": self.rounds, "last_error": self.last_error}}

    def _loop(self) -> None:
        next_round = time.monotonic() + self.interval
        while not self._stop.is_set():
            if time.monotonic() < next_round:
                self._stop.wait(min(1.0, next_round - time.monotonic()))
                continue
            try:
                self.run_round()
                self.last_error = None
            except Exception as exc:  # logged here, the boundary that handles it; next round as planned
                self.last_error = f"{type(exc).__name__}: {exc}"
                self.counters.inc(f"{self.KIND}_failures")
                log.error("scheduled %s failed (next round in %.0fs)", self.KIND, self.interval, exc_info=True)
            self.rounds += 1
            next_round = time.monotonic() + self.interval



class PurgeScheduler(RoundScheduler):
    """Starts the purge thread when the bridge is ready and stops it when the bridge stops."""

    def __init__(self, config: BridgeConfig, session: Callable[[], Any], counters: Counters) -> None:
        assert config.purge.interval is not None
        super().__init__(config, session, counters, config.purge.interval)
        self.threshold = config.purge.threshold
        self.factory = PurgeFactory(config)

    def run_round(self) -> None:
        """Purge every table of every type with a retention, once."""
        types = {name: t for name, t in self.config.types.items() if t.retention is not None}
        spark = self._session()
        self._tag_jobs(spark)
        purger = self.factory.purger(spark, counters=self.counters, stop=self._stop)
        now = datetime.now(timezone.utc)
        self.counters.inc("purge_runs")
        ages = {name: t.retention for name, t in types.items()}
        # Each type at its own retention, and only its own rows where others may land too.
        for table, designations in self.factory.designations(types, ages, now=now):
            for designation in designations:
                if self._stop.is_set():
                    return
                self._purge_table(purger, table, designation)

    def _purge_table(self, purger: Purger, table: Path, designation: Designation) -> None:
        if not table.is_dir():
            return
        plans = []
        for plan in purger.plan(table, designation):
            if due(plan.designated, plan.rows, self.threshold):
                plans.append(plan)
                continue
            # The seed's rule: purging pays once enough of a container is designated; until then
            # the designated rows wait for a later round (readers filter by put_timestamp anyway).
            log.info("purge %s put_date=%s: designated %d/%d, below the threshold %.2f: not purged this round",
                     table.name, plan.put_date, plan.designated, plan.rows, self.threshold)
            self.counters.inc("purge_containers_skipped")
        for result in purger.run(plans, designation):
            e = result.plan.estimate
            log.info("purge %s put_date=%s: designated %d/%d, estimated delete %.3fs copy-and-drop %.3fs, "
                     "strategy %s, measured %.3fs", table.name, result.plan.put_date, result.plan.designated,
                     result.plan.rows, e.delete_seconds, e.copy_seconds, result.strategy, result.seconds)
