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
with the new columns (it is an external table: dropping it leaves the files;
`mqbridge.table_formats.parquet.evolve`).

A Delta table (`table_format = "delta"`) is registered as one, `CREATE TABLE IF NOT EXISTS name USING
delta LOCATION '…'`: its columns and partitions are in its own log, which a reader by name reads at
every query, so no partition is added, no schema brought along (a new column is in the log with the
commit that added it) and no reader needs `REFRESH TABLE` after a commit, a purge or a compaction. The
session must have Delta's catalog (the bridge's own driver has, `mqbridge.landing.delta.SESSION_CONF`).

A Delta table on an object store or HDFS is registered by its URI (`LOCATION 's3a://bucket/prefix/orders'`,
`'hdfs://…'`): the metastore keeps the URI as written, and a reader by name reaches it through its own
S3A or HDFS settings, as a reader by path does.

What is registered, and how, is the table format's (`mqbridge.table_formats`: `register`,
`add_partition`, `catalog_partitions`), by what is on disk at the table's location.

A purge or a compaction swaps a `put_date` container for a rebuilt one (`mqbridge.purge.swap`): the
files a session listed for a catalog table (Spark caches the listing per session) are gone, and a
read by name fails ("File ... does not exist ... REFRESH TABLE") or misses rows. Both refresh the
table in their own session after each swap (`refresh_swapped`, `mqbridge.landing.catalog_refresh`);
a reader's session elsewhere must refresh it itself (docs/compaction.md).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from mqbridge.config.warehouse import Location, ObjectStoreUri
from mqbridge.landing.catalog_refresh import refresh_swapped
from mqbridge.table_formats import DEFAULT, format_of

log = logging.getLogger(__name__)

__all__ = ["CatalogRegistrar", "refresh_swapped"]


class CatalogRegistrar:
    """Registers tables and their partitions in the catalog of the current session (`session()`)."""

    def __init__(self, session: Callable[[], Any]) -> None:
        self.session = session
        self._lock = threading.Lock()
        self._known: dict[str, set[str]] = {}  # table -> put_dates registered by this process
        self.failures = 0

    def register(self, table: str, path: Location, put_dates: Iterable[str]) -> None:
        """Make `table` (the table under `path`, a directory or the URI of a Delta table on an object
        store or HDFS, as its format registers it) and these `put_date` partitions (YYYY-MM-DD) known
        to the catalog by name."""
        location = path if isinstance(path, ObjectStoreUri) else Path(path).absolute()
        with self._lock:
            known = self._known.get(table)
            todo = sorted(set(put_dates) - (known or set()))
            table_format = format_of(location)
            if known is not None and (not todo or not table_format.catalog_partitions):
                return
            try:
                # Inside the try: a session that cannot be started (the bridge's Spark may still be
                # starting, or down) fails the registration, never the landing.
                spark = self.session()
                if known is None:
                    table_format.register(spark, table, location, put_dates)
                    # A format whose metadata holds its partitions: nothing to add later
                    self._known[table] = set(todo) if table_format.catalog_partitions else set(put_dates)
                    kind = "table" if table_format is DEFAULT else f"{table_format.title} table"
                    log.info("catalog: %s %s registered at %s", kind, table, location)
                    return
                for put_date in todo:
                    table_format.add_partition(spark, table, location, put_date)
                    known.add(put_date)
                    log.info("catalog: partition put_date=%s of table %s registered", put_date, table)
            except Exception as exc:
                self.failures += 1
                log.warning("catalog: table %s could not be registered (tried again with its next bulk; its rows "
                            "are landed and readable by path): %s", table, " ".join(str(exc).split())[:300])
