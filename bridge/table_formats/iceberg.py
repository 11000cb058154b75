"""Apache Iceberg tables (`table_format = "iceberg"`): each bulk one append (one snapshot) of the table
`mqbridge.<namespace>.<table>` of the `[spark.iceberg]` catalog, carrying the bulk's id
(`mqbridge.landing.iceberg`). A directory with `metadata/*.metadata.json` is one.

The seam hands a format a table's location only; an Iceberg table is reached through its catalog,
which this format takes from the configuration loaded in the process (`mqbridge.config.iceberg.bound`,
bound by the loader). Reading back without Spark (`mqbridge tables`, `where`, `ledger --verify`,
`--abandon`, the schema check) is pyiceberg's (`mqbridge.landing.iceberg_read`); the purge and the
compaction are Iceberg's own commits through the same catalog (`mqbridge.maintenance.iceberg`).
"""

from __future__ import annotations

import importlib.util
import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from mqbridge.config.iceberg import bound
from mqbridge.config.warehouse import Location
from mqbridge.landing import iceberg
from mqbridge.landing.rows import IDENTITY_COLUMN
from mqbridge.table_formats.base import CompactionDone, TableCompaction, TableFormat, TablePurger

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

    from mqbridge.counters import Counters
    from mqbridge.landing.containers import Container
    from mqbridge.landing.ledger import Ledger, PreparedBulk, PublishedBulk
    from mqbridge.landing.verdicts import Verdict
    from mqbridge.maintenance.compaction.planner import Facts, Plan
    from mqbridge.maintenance.engine.costs import CostModel
    from mqbridge.maintenance.iceberg.compaction import IcebergCompaction
    from mqbridge.maintenance.purge.purger import ContainerPlan

log = logging.getLogger(__name__)

class IcebergFormat(TableFormat):
    """An Apache Iceberg table of the configuration's catalog (see the module docstring)."""

    name = "iceberg"
    title = "Iceberg"
    transactional = True
    catalog_partitions = False  # its metadata holds its partitions and columns
    identity_column = IDENTITY_COLUMN
    rolled_back = "not in the table: fenced (an empty append published under its WAP id) and rolled back"

    def holds(self, path: Location) -> bool:
        """A local directory whose `metadata` holds an Iceberg table's metadata file; on the object store
        of the configuration's Iceberg tables, a table of its catalog (asked through pyiceberg: an
        outage of the catalog or the store raised as one)."""
        if isinstance(path, Path):
            return any((path / "metadata").glob("*.metadata.json"))
        from mqbridge.landing.iceberg_catalog import is_table_on_store

        return is_table_on_store(path)

    def containers(self, table: Location) -> list[Container]:
        """From the current snapshot's manifests, read by pyiceberg (`iceberg_read.containers`); [] when
        the catalog has no such table yet."""
        from mqbridge.landing import iceberg_read

        found = _table(table)
        return iceberg_read.containers(found) if found is not None else []

    def describe(self, table: Location) -> str:
        from mqbridge.landing import iceberg_read

        found = _table(table)
        if found is None:
            return "Iceberg table, not created yet"
        facts = iceberg_read.snapshot_facts(found)
        return f"Iceberg table, snapshot {facts.current_snapshot_id} ({facts.snapshots} snapshots)"

    def written_schemas(self, table: Location, message_type: str,
                        shared_by: StructType | None = None) -> dict[str, Path]:
        """The one schema the table's current metadata keeps, read by pyiceberg (`iceberg_read.typed_schema`),
        its typed columns as declared: each column's declared field from its comment (`iceberg.declared_comment`,
        written by the bridge's CREATE / ALTER TABLE), else Iceberg's type as Spark names it, nullable unless
        `required` (a column another writer added); {its JSON: the metadata file} ({} when the table is not
        there yet or cannot be read now: logged). As Delta's, one schema for the table: for a table shared
        by several types only the columns of `shared_by` are compared."""
        from mqbridge.landing import iceberg_read
        from mqbridge.landing.schema_check import typed_columns

        try:
            found = _table(table)
            if found is None:
                return {}
            written = declared_schema(iceberg_read.typed_schema(found))
        except Exception as exc:  # the catalog down or refusing: the start's probe says so; nothing to compare
            log.warning("schema check: the Iceberg table %s is not read (%s): a refused change is found at the write",
                        table, exc)
            return {}
        typed = typed_columns(written, {f.name.lower() for f in shared_by.fields} if shared_by is not None else None)
        return {typed.json(): Path(Path(str(found.metadata_location)).name)} if typed.fields else {}

    def reader_missing(self) -> tuple[str, str] | None:
        """pyiceberg (the `iceberg` extra) reads them back."""
        if importlib.util.find_spec("pyiceberg") is not None:
            return None
        return ("Iceberg tables are read back (mqbridge tables, where, replay) with pyiceberg, which is not installed",
                'pip install "mqbridge[iceberg]"')

    # -- Spark --------------------------------------------------------------------------------
    def session_conf(self, jars_dir: Path, conf: Mapping[str, str],
                     warehouse: Location | None = None) -> dict[str, str]:
        """The jars, Iceberg's SQL extension and the bound configuration's catalog (`iceberg.session_conf`)."""
        return iceberg.session_conf(jars_dir, conf, bound())

    def read(self, spark: Any, table: Location, *, as_of_version: int | None = None,
             as_of_timestamp: str | None = None) -> Any:
        """The table by its catalog name; `as_of_version` is a snapshot id, `as_of_timestamp` a time. (Iceberg
        1.12 on Spark 4.1 refuses its own `snapshot-id` read option: Spark's `versionAsOf` takes the id.)"""
        reader = spark.read
        if as_of_version is not None:
            reader = reader.option("versionAsOf", str(as_of_version))
        elif as_of_timestamp is not None:
            reader = reader.option("timestampAsOf", as_of_timestamp)
        return reader.table(bound().identifier(bound().name_of(table)))

    def check_time_travel(self, table: str) -> None:
        return None  # every snapshot not expired

    def register(self, spark: Any, name: str, location: Location, put_dates: Iterable[str]) -> None:
        """Nothing: the table is in the catalog `mqbridge` already, read by `mqbridge.<namespace>.<table>`."""
        log.info("Iceberg table %s is read by name as %s", name, bound().identifier(bound().name_of(location)))

    # -- the ledger's bulks in the table -------------------------------------------------------
    def landing_of(self, table: Location, identity: str, bulk: PublishedBulk) -> dict[str, Any]:
        """The snapshot that appended the bulk, and the put_date of the message's row in the current one
        (`in_table` false when that row is gone)."""
        from mqbridge.landing import iceberg_read

        found = _table(table)
        if found is None:
            return {"in_table": False, "iceberg_note": f"no Iceberg table {bound().name_of(table)} in the catalog"}
        result: dict[str, Any] = {}
        snapshot = iceberg_read.snapshot_of_bulk(found, bulk.bulk_id)
        if snapshot is not None:
            result["iceberg_snapshot"] = snapshot.snapshot_id
        dates = iceberg_read.put_dates_of(found, [identity])
        result["in_table"] = bool(dates)
        result["put_date"] = dates[0] if len(dates) == 1 else None
        if len(dates) > 1:
            result["put_dates"] = dates
        return result

    def verify(self, bulks: Sequence[Any], sizes: Mapping[str, int], warehouse: Location) -> int:
        """Each bulk's rows in the table's current snapshot (those with its bulk_id, read by pyiceberg)
        are as many as its identities. A bulk with fewer, in a table whose snapshots show rows removed
        since it was published (a purge's delete or overwrite), or whose kept snapshots all came after it
        (the ones between expired: nothing tells), is counted apart, not compared; more rows, or fewer
        without either, are listed (exit 1)."""
        from mqbridge.landing import iceberg_read
        from mqbridge.landing.delta_read import CLOCK_SLACK
        from mqbridge.landing.verdicts import row_bulk_id

        by_table: dict[str, list[Any]] = {}
        for bulk in bulks:
            by_table.setdefault(bulk.table, []).append(bulk)
        wrong: list[tuple[str, str]] = []
        purged = 0
        for name, members in sorted(by_table.items()):
            found = _table(warehouse / name)
            if found is None:
                wrong += [(b.bulk_id, f"no Iceberg table {name} in the catalog") for b in members]
                continue
            rows = iceberg_read.rows_by_bulk(found, [row_bulk_id(b.bulk_id) for b in members])
            kept = [s for s in iceberg_read.snapshots(found) if s.current]
            changes = [s.committed_at for s in kept if s.changes_rows]
            oldest = min((s.committed_at for s in kept), default=0.0)
            for b in members:
                count, expected = rows[row_bulk_id(b.bulk_id)], sizes.get(b.bulk_id)
                if count == expected:
                    continue
                if expected is not None and count < expected and (
                        oldest > b.published_at + CLOCK_SLACK
                        or any(t >= b.published_at - CLOCK_SLACK for t in changes)):
                    purged += 1
                    continue
                wrong.append((b.bulk_id, f"{count} rows with bulk_id {row_bulk_id(b.bulk_id)} in Iceberg "
                                         f"table {name}"))
        since = f" ({purged} with rows removed since by purges: not compared)" if purged else ""
        print(f"  iceberg rows {len(bulks) - purged - len(wrong)} bulks of {len(by_table)} Iceberg tables hold one "
              f"row per identity{since}")
        if not wrong:
            print(f"verify: OK ({len(bulks)} published bulks of Iceberg tables, checked by their rows)")
            return 0
        print(f"verify: {len(wrong)} published bulks of Iceberg tables do not hold one row per identity:")
        for bulk_id, text in wrong:
            print(f"  {bulk_id}: {sizes.get(bulk_id)} identities, {text}")
        return 1

    def abandon(self, ledger: Ledger, bulk: PreparedBulk, warehouse: Location) -> Verdict:
        """Its owner dead and its driver JVM gone (waited for, `iceberg.await_driver_gone`), the table's
        snapshots decide: one carries the bulk id, recorded published; none, forgotten."""
        from mqbridge.landing import iceberg_read
        from mqbridge.landing.verdicts import FORGET, PUBLISHED, Verdict, judge

        if ledger.owner_alive(bulk.owner):
            return judge(bulk.bulk_id, bulk, "prepared", alive=True, gone=0, rows=0)
        iceberg.await_driver_gone(bound(), bulk.owner)
        if not ledger.take_over(bulk.bulk_id):  # its owner, if only stalled, can never record it published now
            return judge(bulk.bulk_id, None, ledger.state_of(bulk.bulk_id), alive=False, gone=0, rows=0)
        found = _table(warehouse / bulk.table)
        if found is not None and iceberg_read.snapshot_of_bulk(found, bulk.bulk_id) is not None:
            ledger.mark_published(bulk.bulk_id)
            verdict = Verdict(PUBLISHED, f"table {bulk.table} holds the snapshot of bulk {bulk.bulk_id}: the bulk is "
                                         "recorded published; its messages are recognised as landed when they come "
                                         "back")
        else:
            ledger.forget(bulk.bulk_id)
            verdict = Verdict(FORGET, f"no snapshot of table {bulk.table} carries bulk {bulk.bulk_id}, and the driver "
                                      "of its dead process is gone: the bulk is forgotten; its messages were never "
                                      "committed at the source and land when read again")
        logging.getLogger("mqbridge.landing.stuck").info("bulk %s abandoned by an operator: %s", bulk.bulk_id,
                                                         verdict.reason)
        return verdict

    # -- recovery with Spark -------------------------------------------------------------------
    def settle(self, ledger: Ledger, bulk: PreparedBulk, spark: Any, location: Location) -> bool:
        """The bulk's publication in the table's lineage, fenced first if it is not there (`iceberg.settle`)."""
        return iceberg.settle(ledger, bulk, spark, bound())

    def rebuild_ledger(self, ledger: Ledger, spark: Any, tables: Sequence[tuple[str, Location]],
                       dedupe_window: float) -> int:
        """Every row carries its identity and bulk id: each bulk with rows received within the window
        adopted as published (`delta_ledger.adopt_rows`, as for Delta)."""
        from mqbridge.landing.delta_ledger import adopt_rows

        catalog = bound()
        cutoff = time.time() - dedupe_window
        learnt = 0
        for name, _ in tables:
            if not iceberg.table_exists(spark, catalog, name):
                continue
            adopted, identities = adopt_rows(ledger, spark.table(catalog.identifier(name)), name, cutoff)
            learnt += identities
            log.warning("ledger rebuild: Iceberg table %s: %d bulks adopted", name, adopted)
        return learnt

    # -- maintenance ----------------------------------------------------------------------------------
    def purger(self, spark: Any, model: CostModel, *, vacuum_retention: float, counters: Counters,
               stop: threading.Event) -> TablePurger:
        """Iceberg's own commits, a DELETE (position deletes) or a copy per partition
        (`mqbridge.maintenance.iceberg.purger`)."""
        from mqbridge.maintenance.iceberg.purger import IcebergPurger

        return IcebergPurger(spark, model, vacuum_retention, counters=counters, stop=stop)

    def recover(self, table: Location) -> None:
        return None  # every append, purge and compaction is one snapshot commit: nothing is ever half done

    def purge_summary(self, purger: TablePurger, table: Location, vacuum_retention: float) -> list[str]:
        """The strategies that ran, the rows left, the snapshots expired, and the snapshot to time-travel
        to for the rows the purge removed (until it expires)."""
        from mqbridge.maintenance.iceberg.purger import IcebergPurger

        run = cast(IcebergPurger, purger).summary(table)
        ran = ", ".join(f"{strategy} {n}" for strategy, n in sorted(run.strategies.items())) or "nothing"
        lines = [f"Iceberg table: purged by {ran}; {run.rows_left} rows left (snapshot {run.snapshot_after}); "
                 f"{run.expired} snapshots expired"]
        if run.snapshot_after != run.snapshot_before and run.snapshot_before is not None and vacuum_retention > 0:
            lines.append(f"the rows purged stay readable as of snapshot {run.snapshot_before} (`mqbridge replay "
                         f"--as-of-version {run.snapshot_before}`) until it expires, {vacuum_retention:.0f}s after "
                         "this purge ([purge] vacuum_retention)")
        return lines

    def compaction(self, spark: Any, model: CostModel, *, small_file_size: int, target_file_size: int,
                   vacuum_retention: float, counters: Counters, stop: threading.Event) -> TableCompaction:
        """Facts from the table's metadata tables; `rewrite_data_files` sorted by put_timestamp
        (`mqbridge.maintenance.iceberg.compaction`)."""
        from mqbridge.maintenance.iceberg.compaction import IcebergCompaction

        return _IcebergTableCompaction(IcebergCompaction(spark, model, small_file_size, vacuum_retention,
                                                         counters=counters, stop=stop))


class _IcebergTableCompaction(TableCompaction):
    """Facts from the table's current snapshot; `rewrite_data_files` sorted by put_timestamp; old
    snapshots expired after compactions (a purge's run expires after its own commits)."""

    def __init__(self, compaction: IcebergCompaction) -> None:
        self.iceberg = compaction

    def recover(self, table: Location) -> None:
        return None

    def facts(self, table: Location, designated: Mapping[str, tuple[int, int]]) -> dict[str, Facts]:
        return self.iceberg.facts(table, dict(designated))

    def compact(self, table: Location, plan: Plan) -> CompactionDone | None:
        done = self.iceberg.rewrite(table, plan.put_date, plan.facts.files, plan.facts.rows)
        return CompactionDone(done.seconds, done.files_after)

    def files_after_purge(self, table: Location, plan: Plan, container: ContainerPlan) -> int:
        # A DELETE leaves the data files (and adds a position delete file), a copy writes one, a drop none
        return plan.facts.files if plan.action == "delete" else int(plan.action == "copy")

    def finish(self, table: Location, compacted: bool) -> None:
        if compacted:
            self.iceberg.expire(table)


def _table(location: Location) -> Any:
    """The Iceberg table at `location` through the bound catalog (`iceberg_catalog.table_at`); None when
    the catalog or the table is not there yet."""
    from mqbridge.landing import iceberg_catalog

    return iceberg_catalog.table_at(location)


def declared_schema(schema: pa.Schema) -> StructType:
    """`schema` (a table's typed columns as pyiceberg reads them, `iceberg_read.typed_schema`) as Spark's
    StructType: each column whose comment (b"doc") is the bridge's (`iceberg.DECLARED_COMMENT`) with its
    declared field as metadata (`schema_check.DECLARED`, which `typed_columns` takes), the others as
    Iceberg keeps them (a timestamp without zone as TIMESTAMP_NTZ)."""
    from pyspark.sql.pandas.types import from_arrow_type
    from pyspark.sql.types import StructField, StructType

    from mqbridge.landing.schema_check import DECLARED

    fields = []
    for field in schema:
        doc = (field.metadata or {}).get(b"doc", b"").decode("utf-8", "replace")
        metadata = {DECLARED: doc[len(iceberg.DECLARED_COMMENT):]} if doc.startswith(iceberg.DECLARED_COMMENT) else {}
        fields.append(StructField(field.name, from_arrow_type(field.type, prefer_timestamp_ntz=True), field.nullable,
                                  metadata))
    return StructType(fields)


FORMAT = IcebergFormat()
