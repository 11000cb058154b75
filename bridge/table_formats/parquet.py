"""Parquet directories (`table_format = "parquet"`, the default): a table is a directory of
`put_date=YYYY-MM-DD` containers of Parquet files, published by renames under the ledger's protocol
(`mqbridge.landing.publication`), listed from the files' footers (`mqbridge.landing.containers`),
purged and compacted by the rewrite engine's swap of a container (`mqbridge.maintenance.purge`,
`mqbridge.maintenance.compaction`). The ledger records each bulk's files, so where a message is and
whether a bulk holds its rows is read from those files.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from mqbridge.config.warehouse import Location, ObjectStoreUri
from mqbridge.errors import ConfigError
from mqbridge.landing.containers import PARTITION, data_files
from mqbridge.table_formats.base import CompactionDone, TableCompaction, TableFormat, TablePurger

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

    from mqbridge.counters import Counters
    from mqbridge.landing.containers import Container
    from mqbridge.landing.ledger import Ledger, PreparedBulk, PublishedBulk
    from mqbridge.landing.verdicts import Verdict
    from mqbridge.maintenance.compaction.compactor import Compactor
    from mqbridge.maintenance.compaction.planner import Facts, Plan
    from mqbridge.maintenance.engine.costs import CostModel
    from mqbridge.maintenance.purge.purger import ContainerPlan

log = logging.getLogger("mqbridge.landing.catalog")  # the catalog's messages, by the name operators configure
stuck_log = logging.getLogger("mqbridge.landing.stuck")  # `ledger --abandon`'s


def local(table: Location) -> Path:
    """`table` as the local directory a Parquet table is; ConfigError for a URI of an object store or HDFS
    (Parquet tables are published by renames on a local file system: `config.warehouse` refuses them
    there at load, so this is only reached by a table written there by something else)."""
    if isinstance(table, ObjectStoreUri):
        raise ConfigError(f"{table}: a Parquet table is a directory of a local warehouse, not on {table.scheme}:// "
                          '(only Delta tables land there: table_format = "delta")')
    return Path(table)


class ParquetFormat(TableFormat):
    """A directory of Parquet files per put_date container (see the module docstring)."""

    name = "parquet"
    title = "Parquet"
    transactional = False
    catalog_partitions = True
    identity_column = None

    def holds(self, path: Location) -> bool:
        """Any local directory: Parquet is the format of a table directory no other format claims."""
        return isinstance(path, Path) and path.is_dir()

    def containers(self, table: Location) -> list[Container]:
        table = local(table)
        from mqbridge.landing.containers import containers

        return containers(table)

    def describe(self, table: Location) -> str:
        return "Parquet"

    def written_schemas(self, table: Location, message_type: str,
                        shared_by: StructType | None = None) -> dict[str, Path]:
        """From the footers Spark wrote: the newest file of the type in each container
        (`mqbridge.landing.schema_check.table_schemas`; each file's types are in its footer, so a shared
        table's other types are not read)."""
        from mqbridge.landing.schema_check import table_schemas

        return table_schemas(local(table), message_type)

    def session_conf(self, jars_dir: Path, conf: Mapping[str, str],
                     warehouse: Location | None = None) -> dict[str, str]:
        return dict(conf)  # Spark reads and writes Parquet as it is

    def read(self, spark: Any, table: Location, *, as_of_version: int | None = None,
             as_of_timestamp: str | None = None) -> Any:
        table = local(table)
        if as_of_version is not None or as_of_timestamp is not None:
            self.check_time_travel(str(table))
        return spark.read.parquet(str(table))

    def check_time_travel(self, table: str) -> None:
        raise ConfigError(f"--as-of-version/--as-of-timestamp: table {table} is not a Delta table (only Delta "
                          "tables keep older versions to read)")

    # -- the catalog ------------------------------------------------------------------------------
    def register(self, spark: Any, name: str, location: Location, put_dates: Iterable[str]) -> None:
        """A Parquet table at `location`: Spark infers its columns and `put_date` partitioning from the
        files; its columns brought to those of the rows just landed (`evolve`), then every partition
        already there registered (`RECOVER PARTITIONS`)."""
        location = local(location)
        spark.sql(f"CREATE TABLE IF NOT EXISTS `{name}` USING parquet LOCATION '{quoted(location)}'")
        evolve(spark, name, location, put_dates)  # the schema of the rows just landed
        spark.sql(f"ALTER TABLE `{name}` RECOVER PARTITIONS")  # every put_date already there

    def add_partition(self, spark: Any, name: str, location: Location, put_date: str) -> None:
        location = local(location)
        spark.sql(f"ALTER TABLE `{name}` ADD IF NOT EXISTS PARTITION (put_date = '{put_date}') "
                  f"LOCATION '{quoted(location / f'put_date={put_date}')}'")

    # -- the ledger's bulks -------------------------------------------------------------------------
    def landing_of(self, table: Location, identity: str, bulk: PublishedBulk) -> dict[str, Any]:
        return {}  # the ledger's own record of the bulk's files says where its rows are

    def verify(self, bulks: Sequence[Any], sizes: Mapping[str, int], warehouse: Location) -> int:
        """Every file of each published bulk is in place (or a purge or compaction removed it since),
        and each bulk no purge touched since holds one row per identity: its files' Parquet footers,
        or, in containers compacted since, its rows by bulk_id (`mqbridge.maintenance.compaction.verify`)."""
        warehouse = local(warehouse)
        from mqbridge.maintenance.compaction.verify import compacted_bulks
        from mqbridge.maintenance.engine.swap import PURGE_SLACK

        missing, purged, touched = _missing_files(bulks)
        lost = {bulk_id for bulk_id, _ in missing}
        # A bulk whose container only compactions swapped since: its rows counted by bulk_id instead.
        compacted, wrong = compacted_bulks([b for b in bulks if b.bulk_id in touched - lost], dict(sizes),
                                           slack=PURGE_SLACK)
        touched -= compacted
        wrong += _wrong_row_counts([b for b in bulks if b.bulk_id not in lost | touched | compacted], sizes)
        checked = sum(len(bulk.files) for bulk in bulks)
        since = f"; {purged} removed since by purges of their containers" if purged else ""
        skipped = f" ({len(touched)} in containers purged since: not compared)" if touched else ""
        print(f"  row counts   {len(bulks) - len(lost | touched) - len(wrong)} bulks hold one row per identity"
              f"{skipped}")
        if not missing and not wrong:
            print(f"verify: OK ({len(bulks)} published bulks, {checked} files{since})")
            return 0
        if missing:
            print(f"verify: {len(missing)} of {checked} published files are missing{since}:")
            for bulk_id, final in missing:
                print(f"  {bulk_id}: {final}")
        if wrong:
            print(f"verify: {len(wrong)} published bulks do not hold one row per identity:")
            for bulk_id, found in wrong:
                print(f"  {bulk_id}: {sizes.get(bulk_id)} identities, {found}")
        return 1

    def abandon(self, ledger: Ledger, bulk: PreparedBulk, warehouse: Location) -> Verdict:
        """Its owner dead and some of its staged files gone (`judge`): none of its rows in the containers
        it was to land in, forgotten (its staged files that are left removed); all of them, recorded
        published; then its staging directory goes. Raises LedgerError when the bulk names a path
        outside its table (`check_bulk_paths`)."""
        warehouse = local(warehouse)
        from mqbridge.landing.publication import check_bulk_paths, discard, gone_files, staging_dir
        from mqbridge.landing.verdicts import FORGET, PUBLISHED, REFUSE, judge

        check_bulk_paths(bulk, warehouse)
        alive = ledger.owner_alive(bulk.owner)
        gone = len(gone_files(bulk))
        rows = rows_in_table(bulk) if gone and not alive else 0
        verdict = judge(bulk.bulk_id, bulk, "prepared", alive=alive, gone=gone, rows=rows)
        if verdict.action == FORGET:
            for staged, _ in bulk.files:
                if os.path.exists(staged):
                    os.remove(staged)
            ledger.forget(bulk.bulk_id)
        elif verdict.action == PUBLISHED:
            ledger.mark_published(bulk.bulk_id)
        if verdict.action != REFUSE:
            discard(staging_dir(Path(warehouse) / bulk.table, bulk.owner, bulk.bulk_id))
            stuck_log.info("bulk %s abandoned by an operator: %s", bulk.bulk_id, verdict.reason)
        return verdict

    # -- recovery with Spark ---------------------------------------------------------------------------
    def settle(self, ledger: Ledger, bulk: PreparedBulk, spark: Any, location: Location) -> bool:
        raise ValueError(f"bulk {bulk.bulk_id} of Parquet table {location}: rolled forward or back from its files "
                         "(mqbridge.landing.publication), not settled by the table")

    def rebuild_ledger(self, ledger: Ledger, spark: Any, tables: Sequence[tuple[str, Location]],
                       dedupe_window: float) -> int:
        return 0  # its rows carry no identity: a lost ledger over it stays at-least-once for what landed before

    # -- maintenance ---------------------------------------------------------------------------------
    def purger(self, spark: Any, model: CostModel, *, vacuum_retention: float, counters: Counters,
               stop: threading.Event) -> TablePurger:
        """The rewrite engine's swap of a container (`mqbridge.maintenance.purge.Purger`)."""
        from mqbridge.maintenance.purge.purger import Purger

        # Its plan takes a local Path: a Parquet table is never on a store (`local`)
        return cast("TablePurger", Purger(spark, model, counters=counters, stop=stop))

    def recover(self, table: Location) -> None:
        """Finish or undo the swaps a killed purge or compaction of `table` left (`recover_purges`)."""
        table = local(table)
        from mqbridge.maintenance.engine.swap import recover_purges

        recover_purges(table)

    def purge_summary(self, purger: TablePurger, table: Location, vacuum_retention: float) -> list[str]:
        return []  # each container's line says it all

    def compaction(self, spark: Any, model: CostModel, *, small_file_size: int, target_file_size: int,
                   vacuum_retention: float, counters: Counters, stop: threading.Event) -> TableCompaction:
        from mqbridge.maintenance.compaction.compactor import Compactor

        return ParquetCompaction(self, Compactor(spark, model, target_file_size, counters=counters, stop=stop),
                                 small_file_size)


class ParquetCompaction(TableCompaction):
    """Facts from the Parquet footers; a container rewritten by the engine's swap (`Compactor`)."""

    def __init__(self, fmt: ParquetFormat, compactor: Compactor, small_file_size: int) -> None:
        self.format = fmt
        self.compactor = compactor
        self.small_file_size = small_file_size

    def recover(self, table: Location) -> None:
        table = local(table)
        self.format.recover(table)

    def facts(self, table: Location, designated: Mapping[str, tuple[int, int]]) -> dict[str, Facts]:
        table = local(table)
        import pyarrow.parquet as pq

        from mqbridge.landing.publication import unpublished_bulks
        from mqbridge.maintenance.compaction.planner import Facts

        facts: dict[str, Facts] = {}
        if not table.is_dir():
            return facts
        for directory in table.iterdir():
            match = PARTITION.fullmatch(directory.name)
            if not match or not directory.is_dir():
                continue
            files = data_files(directory)
            sizes = [p.stat().st_size for p in files]
            rows = sum(pq.read_metadata(p).num_rows for p in files)
            count, rewritten = designated.get(match[1], (0, 0))
            facts[match[1]] = Facts(match[1], len(files), sum(s < self.small_file_size for s in sizes),
                                    rows, sum(sizes), count, rewritten,
                                    tuple(unpublished_bulks(table, (p.name for p in files))))
        return facts

    def compact(self, table: Location, plan: Plan) -> CompactionDone | None:
        table = local(table)
        for compacted in self.compactor.run(table, [plan.put_date]):
            return CompactionDone(compacted.seconds, compacted.files_after)
        return None

    def files_after_purge(self, table: Location, plan: Plan, container: ContainerPlan) -> int:
        return len(data_files(container.path))

    def finish(self, table: Location, compacted: bool) -> None:
        return None


def evolve(spark: Any, table: str, location: Path, put_dates: Iterable[str]) -> None:
    """Give the catalog's `table` the columns of the newest file in the `put_date` containers
    `put_dates` of `location`: the ones it lacks added, and, if a column's type differs, the table
    registered again with the file's columns (read with them, older files' narrower values widen)."""
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
                  f"LOCATION '{quoted(location)}'")
        log.info("catalog: table %s registered again with the widened columns %s", table,
                 ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in changed))
    elif missing:
        spark.sql(f"ALTER TABLE `{table}` ADD COLUMNS ("
                  + ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in missing) + ")")
        log.info("catalog: table %s gains the columns %s", table, ", ".join(f.name for f in missing))


def quoted(path: Path) -> str:
    """`path` inside a SQL string literal."""
    return str(path).replace("\\", "\\\\").replace("'", "\\'")


def rows_in_table(bulk: PreparedBulk) -> int:
    """How many rows of the containers `bulk` was to land in carry its bulk id (its `bulk_id`
    column read, file by file, with pyarrow)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from mqbridge.landing.verdicts import row_bulk_id

    wanted = pa.array(sorted({bulk.bulk_id, row_bulk_id(bulk.bulk_id)}), type=pa.string())
    containers = sorted({os.path.dirname(final) for _, final in bulk.files})
    found = 0
    for container in containers:
        for path in data_files(Path(container)):
            column = pq.read_table(path, columns=["bulk_id"]).column(0)
            found += int(pc.sum(pc.is_in(column, value_set=wanted)).as_py() or 0)
    return found


def _wrong_row_counts(bulks: Sequence[Any], sizes: Mapping[str, int]) -> list[tuple[str, str]]:
    """The bulks whose files' footers hold another number of rows than the bulk has identities:
    (bulk id, what was found)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    wrong: list[tuple[str, str]] = []
    for bulk in bulks:
        try:
            rows = sum(pq.ParquetFile(final).metadata.num_rows for _, final in bulk.files)
        except (OSError, pa.ArrowException) as exc:
            wrong.append((bulk.bulk_id, f"a file cannot be read: {' '.join(str(exc).split())}"))
            continue
        if rows != sizes.get(bulk.bulk_id):
            wrong.append((bulk.bulk_id, f"{rows} rows in {len(bulk.files)} files"))
    return wrong


def _missing_files(bulks: Sequence[Any]) -> tuple[list[tuple[str, str]], int, set[str]]:
    """The published files that are missing, (bulk id, path), except those in a container a purge
    swapped or dropped after the bulk was published (the table's purge history); how many of
    those there were; and the bulks with a file in such a container (whose rows a purge changed)."""
    from mqbridge.maintenance.engine.swap import PURGE_SLACK, purge_history

    histories: dict[str, dict[str, float]] = {}
    missing: list[tuple[str, str]] = []
    purged = 0
    touched: set[str] = set()
    for bulk in bulks:
        for _, final in bulk.files:
            container = os.path.dirname(final)
            table = os.path.dirname(container)
            if table not in histories:
                histories[table] = purge_history(Path(table))
            swapped = histories[table].get(os.path.basename(container))
            since = swapped is not None and swapped >= bulk.published_at - PURGE_SLACK
            if since:
                touched.add(bulk.bulk_id)
            if os.path.exists(final):
                continue
            if since:
                purged += 1
            else:
                missing.append((bulk.bulk_id, final))
    return missing, purged, touched


FORMAT = ParquetFormat()
