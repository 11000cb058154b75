"""Tables by name (`[spark] catalog = true`): each landed table is registered in the Spark session's
catalog, so `spark.table("orders")` and `spark-sql` read it by name. Which catalog that is belongs to
the user's `[spark.conf]` (a Hive metastore with `spark.sql.catalogImplementation = "hive"`, …);
Spark's default in-memory catalog forgets everything when the bridge stops.

A table is registered after its first publication in this process (the files are in place before
the catalog is told), as a Parquet table at its location: Spark infers its columns and its
`put_date` partitioning from the files, and `RECOVER PARTITIONS` registers the partitions already
there (landed by earlier runs, too). Each `put_date` the bridge lands into later is added as it
appears (`ADD IF NOT EXISTS PARTITION`), after the rows are published: a reader by name never
sees a partition before its data. A registration that fails is logged and tried again with the
table's next bulk; it never fails a landing: the rows are published, and a reader by path sees them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class CatalogRegistrar:
    """Registers tables and their partitions in the catalog of the current session (`session()`)."""

    def __init__(self, session: Callable[[], Any]) -> None:
        self.session = session
        self._lock = threading.Lock()
        self._known: dict[str, set[str]] = {}  # table -> put_dates registered by this process
        self.failures = 0

    def register(self, table: str, path: Path, put_dates: Iterable[str]) -> None:
        """Make `table` (the Parquet files under `path`) and these `put_date` partitions (YYYY-MM-DD)
        known to the catalog by name."""
        location = Path(path).absolute()
        with self._lock:
            known = self._known.get(table)
            todo = sorted(set(put_dates) - (known or set()))
            if known is not None and not todo:
                return
            try:
                # Inside the try: a session that cannot be started (the bridge's Spark may still be
                # starting, or down) fails the registration, never the landing.
                spark = self.session()
                if known is None:
                    spark.sql(f"CREATE TABLE IF NOT EXISTS `{table}` USING parquet LOCATION '{_quoted(location)}'")
                    spark.sql(f"ALTER TABLE `{table}` RECOVER PARTITIONS")  # every put_date already there
                    known = self._known[table] = set(todo)
                    log.info("catalog: table %s registered at %s", table, location)
                    return
                for put_date in todo:
                    spark.sql(f"ALTER TABLE `{table}` ADD IF NOT EXISTS PARTITION (put_date = '{put_date}') "
                              f"LOCATION '{_quoted(location / f'put_date={put_date}')}'")
                    known.add(put_date)
                    log.info("catalog: partition put_date=%s of table %s registered", put_date, table)
            except Exception as exc:
                self.failures += 1
                log.warning("catalog: table %s could not be registered (tried again with its next bulk; its rows "
                            "are landed and readable by path): %s", table, " ".join(str(exc).split())[:300])


def _quoted(path: Path) -> str:
    """`path` inside a SQL string literal."""
    return str(path).replace("\\", "\\\\").replace("'", "\\'")
