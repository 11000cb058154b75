"""The thread of a scheduled round: `RoundScheduler` runs a policy's round every interval while the
listeners keep landing, tags the round's Spark jobs so that shutdown can cancel them, and counts a
failed round; the next one runs as planned. The purge's `PurgeScheduler` (`[purge] interval`) and
the `CompactionScheduler` (`[compaction] interval`) are this with their own round.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from mqbridge.counters import Counters
from mqbridge.observer import BridgeView, Observer

if TYPE_CHECKING:
    from mqbridge.config import BridgeConfig

log = logging.getLogger("mqbridge.purge.schedule")  # the name operators configure


#: Longest wait at shutdown for a container in progress before its Spark jobs are cancelled.
STOP_WAIT = 15.0


def _is_connect(spark: Any) -> bool:
    return type(spark).__module__.startswith("pyspark.sql.connect")


class RoundScheduler(Observer):
    """Runs `run_round` on its own thread every `interval` from when the bridge is ready until it
    stops; a failed round is logged and counted (`<KIND>_failures`). The purge's and the
    compaction's (`mqbridge.maintenance.compaction_scheduler`) schedulers are this with their own round."""

    #: Names the thread, the Spark job group, the failure counter and the /status field ("purge",
    #: "compaction"): each subclass's own.
    KIND: ClassVar[str]

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
        """The Spark job group (a tag on Spark Connect) of this thread's jobs: `mqbridge-<KIND>`."""
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
