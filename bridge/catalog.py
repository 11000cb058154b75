"""Tables by name (`[spark] catalog = true`): each landed table, and each `put_date` partition it
gains, is registered in the Spark session's catalog, so `spark.table("orders")` and `spark-sql`
read it by name. Which catalog that is belongs to the user's `[spark.conf]` (a Hive metastore with
`spark.sql.catalogImplementation = "hive"`, …); the default in-memory catalog forgets everything
when the bridge stops.

Registration follows publication: the files are in the table before the catalog is told, so a
reader by name never sees a partition without its data. A registration that fails is logged and
retried with the next bulk of that table; it never fails a landing (the rows are in the table,
where a reader by path sees them).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_PARTITION = re.compile(r"put_date=(\d{4}-\d{2}-\d{2})")


def partitions_of(paths: Iterable[str | Path]) -> set[str]:
    """The `put_date` values (YYYY-MM-DD) of the partition directories in `paths`."""
    return {match[1] for path in paths for match in [_PARTITION.search(str(path))] if match}


class CatalogRegistrar:
    """Registers tables and their partitions in one SparkSession's catalog, each once."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self._lock = threading.Lock()
        self._registered: set[tuple[str, str]] = set()  # (table, put_date); put_date "" for the table
        self.failures = 0

    def register(self, table: str, path: Path, put_dates: Iterable[str]) -> None:
        """Make `table` (files under `path`) and these partitions known to the catalog."""
        wanted = ["", *sorted(set(put_dates))]
        with self._lock:
            todo = [d for d in wanted if (table, d) not in self._registered]
            if not todo:
                return
            try:
                for put_date in todo:
                    self.spark.sql(self._statement(table, Path(path).absolute(), put_date))
                    self._registered.add((table, put_date))
            except Exception as exc:
                self.failures += 1
                log.warning("catalog: table %s could not be registered (retried with its next bulk; its rows are "
                            "landed and readable by path): %s", table, " ".join(str(exc).split())[:300])

    @staticmethod
    def _statement(table: str, path: Path, put_date: str) -> str:
        location = str(path).replace("'", "\\'")
        if not put_date:
            return (f"CREATE TABLE IF NOT EXISTS `{table}` USING parquet "
                    f"LOCATION '{location}'")
        return (f"ALTER TABLE `{table}` ADD IF NOT EXISTS PARTITION (put_date = DATE '{put_date}') "
                f"LOCATION '{location}/put_date={put_date}'")
