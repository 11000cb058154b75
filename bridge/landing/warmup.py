"""Spark started beside the listeners, not before them.

A local driver JVM takes 10-35 s to start on a 2-core machine, and every `mqbridge run` used to wait
for it before any listener connected, even when nothing configured needed Spark. Now:

- a bridge that needs no Spark while it runs (`spark_needed`: pyarrow writes every bulk, no catalog,
  no scheduled purge) never starts one;
- otherwise `SparkWarmup.start` starts the session on a thread of its own when the bridge starts and
  then runs the checks that need it (each typed type's schema by Spark's own parser; the warehouse
  probe where Spark writes into the warehouse). The listeners connect meanwhile; a bulk that needs
  Spark waits for the session in `SparkSessions.get`.

What goes wrong there is handled as it would be at a write: a Spark that cannot start is an outage
of the sinks Spark writes (their breakers open: their listeners pause, the bulks already taken are
given back uncounted, the breakers probe until Spark starts, and `run --until-idle` gives up as for
any outage); a schema Spark refuses or a warehouse Spark cannot see stops the bridge (`Bridge.fail`,
exit 2), its units given back. With Spark Connect there is no JVM here (a session takes about a second) and the
server may not see the warehouse: `run` is called before any listener connects, as before, so such a
server is refused before anything is read.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING

from mqbridge.config import TypeConfig
from mqbridge.errors import FatalError
from mqbridge.landing.formats import body_format
from mqbridge.landing.session import SparkSessions
from mqbridge.landing.writer_choice import spark_writes_bulks

if TYPE_CHECKING:
    from mqbridge.config import BridgeConfig

log = logging.getLogger(__name__)


def spark_needed(config: BridgeConfig, sessions: SparkSessions) -> bool:
    """Whether the bridge of `config` needs a Spark session while it runs: Spark writes some type's
    bulks (`spark_writes_bulks`), registers tables in its catalog, or runs the scheduled purge (which
    needs the ledger's exactly-once landing, see `mqbridge.app`)."""
    spark = config.spark
    return (spark_writes_bulks(sessions, config.types, spark.writer, spark.conf, spark.table_format) or spark.catalog
            or (config.purge.interval is not None and config.bridge.exactly_once))


def schema_checks(types: Mapping[str, TypeConfig]) -> list[Callable[[], object]]:
    """A check per typed type: its schema parsed by Spark and checked against its format (ConfigError
    naming the key if refused)."""
    return [partial(body_format, name, t) for name, t in types.items() if t.schema_ddl]


class SparkWarmup:
    """Starts the session of `sessions` and then runs `checks` (each needs the session; each raises
    what it finds): at once (`run`) or on a thread of its own (`start`)."""

    def __init__(self, sessions: SparkSessions, checks: Sequence[Callable[[], object]]) -> None:
        self.sessions = sessions
        self.checks = list(checks)
        self._thread: threading.Thread | None = None

    def run(self) -> None:
        """Start the session and run the checks on this thread: SparkUnavailableError if Spark cannot
        start, or what a check raises."""
        self.sessions.get()
        for check in self.checks:
            check()

    def start(self, fail: Callable[[BaseException], None], outage: Callable[[str], None]) -> None:
        """`run` on the thread "spark-warmup": a FatalError (a schema refused, the warehouse invisible)
        goes to `fail`, which stops the bridge; Spark not starting (or the warehouse probe failing) is
        logged and its reason goes to `outage`, which opens the breakers of the sinks Spark writes."""

        def warm_up() -> None:
            try:
                self.run()
            except FatalError as exc:
                fail(exc)
            except Exception as exc:  # logged here, the boundary that handles it
                log.error("Spark is not available: %s; the bulks that need it are given back to their queues "
                          "and written once a probe write succeeds", exc)
                outage(f"Spark is not available: {exc}")

        self._thread = threading.Thread(target=warm_up, name="spark-warmup", daemon=True)
        self._thread.start()

    def join(self) -> None:
        """Wait until a start begun by `start` has ended. Why: the process must not end while a driver
        JVM is half started, with its private file of secret settings not yet removed (`launch_driver_gateway`)."""
        thread = self._thread
        if thread is None or not thread.is_alive():
            return
        log.info("waiting for the Spark session being started to finish before stopping")
        thread.join()
