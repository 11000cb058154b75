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

A type's schema may have gained columns or widened types since the table was registered (docs/
spark-and-tables.md "Changing a type's schema"): at its first registration in a process, the table's
columns are brought to those of the file just landed (`evolve`): `ADD COLUMNS` for new ones; a widened
type, which Spark's `ALTER TABLE` cannot change for a Parquet table, by registering the table again
with the new columns (it is an external table: dropping it leaves the files).

A Delta table (`table_format = "delta"`) is registered as one, `CREATE TABLE IF NOT EXISTS name USING
delta LOCATION '…'`: its columns and partitions are in its own log, which a reader by name reads at
every query, so no partition is added, no schema brought along (a new column is in the log with the
commit that added it) and no reader needs `REFRESH TABLE` after a commit, a purge or a compaction. The
session must have Delta's catalog (the bridge's own driver has, `mqbridge.landing.delta.SESSION_CONF`).

A purge or a compaction swaps a `put_date` container for a rebuilt one (`mqbridge.purge.swap`): the
files a session listed for a catalog table (Spark caches the listing per session) are gone, and a
read by name fails ("File ... does not exist ... REFRESH TABLE") or misses rows. Both refresh the
table in their own session after each swap (`refresh_swapped`); a reader's session elsewhere must
refresh it itself (docs/compaction.md).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: The log directory that makes a table directory a Delta table.
DELTA_LOG = "_delta_log"


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
            if known is not None and (not todo or (location / DELTA_LOG).is_dir()):
                return
            try:
                # Inside the try: a session that cannot be started (the bridge's Spark may still be
                # starting, or down) fails the registration, never the landing.
                spark = self.session()
                if known is None and (location / DELTA_LOG).is_dir():
                    spark.sql(f"CREATE TABLE IF NOT EXISTS `{table}` USING delta LOCATION '{_quoted(location)}'")
                    self._known[table] = set(put_dates)  # the log holds its partitions: nothing to add later
                    log.info("catalog: Delta table %s registered at %s", table, location)
                    return
                if known is None:
                    spark.sql(f"CREATE TABLE IF NOT EXISTS `{table}` USING parquet LOCATION '{_quoted(location)}'")
                    evolve(spark, table, location, put_dates)  # the schema of the rows just landed
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


def refresh_swapped(spark: Any, table: Path) -> None:
    """After a swap of a container of `table` (a landed table's directory, registered by its name,
    `table.name`): drop this session's cached file listing of the catalog table of that name, if there
    is one. A failure is logged, never raised: the swap is done, and a read by path sees it."""
    name = table.name
    try:
        if spark.catalog.tableExists(f"`{name}`"):
            spark.catalog.refreshTable(f"`{name}`")
            log.debug("catalog: table %s refreshed after a swap of one of its containers", name)
    except Exception as exc:
        log.warning("catalog: table %s could not be refreshed after a swap (this session may list removed "
                    "files; REFRESH TABLE %s): %s", name, name, " ".join(str(exc).split())[:300])


def evolve(spark: Any, table: str, location: Path, put_dates: Iterable[str]) -> None:
    """Give the catalog's `table` the columns of the newest file in the `put_date` containers
    `put_dates` of `location`: the ones it lacks added, and, if a column's type differs, the table
    registered again with the file's columns (read with them, older files' narrower values widen)."""
    from mqbridge.landing.containers import data_files

    files = [f for d in put_dates for f in data_files(location / f"put_date={d}")]
    if not files:
        return
    newest = max(files, key=lambda f: f.stat().st_mtime)
    wanted = [f for f in spark.read.parquet(str(newest)).schema.fields if f.name.lower() != "put_date"]
    have = {f.name.lower(): f for f in spark.table(f"`{table}`").schema.fields}
    missing = [f for f in wanted if f.name.lower() not in have]
    changed = [f for f in wanted if f.name.lower() in have and have[f.name.lower()].dataType != f.dataType]
    if changed:
        columns = {f.name.lower(): f for f in (*have.values(), *wanted)}  # the file's type wins
        ddl = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in columns.values() if f.name != "put_date")
        spark.sql(f"DROP TABLE `{table}`")
        spark.sql(f"CREATE TABLE `{table}` ({ddl}, put_date DATE) USING parquet PARTITIONED BY (put_date) "
                  f"LOCATION '{_quoted(location)}'")
        log.info("catalog: table %s registered again with the widened columns %s", table,
                 ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in changed))
    elif missing:
        spark.sql(f"ALTER TABLE `{table}` ADD COLUMNS ("
                  + ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in missing) + ")")
        log.info("catalog: table %s gains the columns %s", table, ", ".join(f.name for f in missing))


def _quoted(path: Path) -> str:
    """`path` inside a SQL string literal."""
    return str(path).replace("\\", "\\\\").replace("'", "\\'")
