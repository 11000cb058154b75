"""Delta Lake tables (`table_format = "delta"`): each bulk one commit of the table's own log carrying
the bulk's transaction (`mqbridge.landing.delta`), read back without Spark by delta-rs
(`mqbridge.landing.delta_read`: `mqbridge tables`, `where`, `ledger --verify`), purged and compacted by
Delta's own commands (`mqbridge.maintenance.delta`). A directory with a `_delta_log` is one. Every
operation takes a local directory or a table's URI on an object store or HDFS (`Location`: delta-rs
reaches it with the storage options the URI carries, Spark through S3A or HDFS).
"""

from __future__ import annotations

import importlib.util
import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from mqbridge.config.warehouse import Location, ObjectStoreUri
from mqbridge.errors import ConfigError
from mqbridge.landing import delta, delta_read
from mqbridge.landing.rows import IDENTITY_COLUMN
from mqbridge.table_formats.base import CompactionDone, TableCompaction, TableFormat, TablePurger

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

    from mqbridge.counters import Counters
    from mqbridge.landing.containers import Container
    from mqbridge.landing.ledger import Ledger, PreparedBulk, PublishedBulk
    from mqbridge.landing.verdicts import Verdict
    from mqbridge.maintenance.compaction.planner import Facts, Plan
    from mqbridge.maintenance.delta.compaction import DeltaCompaction
    from mqbridge.maintenance.engine.costs import CostModel
    from mqbridge.maintenance.purge.purger import ContainerPlan


class DeltaFormat(TableFormat):
    """A Delta Lake table (see the module docstring)."""

    name = "delta"
    title = "Delta"
    transactional = True
    catalog_partitions = False  # its log holds its partitions and columns
    identity_column = IDENTITY_COLUMN

    def holds(self, path: Location) -> bool:
        return delta.is_delta_table(path)

    def containers(self, table: Location) -> list[Container]:
        return delta.containers(table)

    def describe(self, table: Location) -> str:
        version = delta.table_version(table)
        return f"Delta table, version {version}" if version >= 0 else "Delta table, not created yet"

    def written_schemas(self, table: Location, message_type: str,
                        shared_by: StructType | None = None) -> dict[str, Path]:
        """The one schema the table's log keeps, read by delta-rs on a local disk and a store alike
        (`mqbridge.landing.schema_check.log_schemas`): the union of every type landing there, so for a
        shared table only the columns of `shared_by` are compared."""
        from mqbridge.landing.schema_check import log_schemas

        return log_schemas(table, shared_by)

    def reader_missing(self) -> tuple[str, str] | None:
        """delta-rs (`deltalake`, the `delta` extra) reads them back."""
        if importlib.util.find_spec("deltalake") is not None:
            return None
        return ("Delta tables are read back (mqbridge tables, where, replay) with delta-rs, which is not installed",
                'pip install "mqbridge[delta]"')

    def session_conf(self, jars_dir: Path, conf: Mapping[str, str],
                     warehouse: Location | None = None) -> dict[str, str]:
        return delta.session_conf(jars_dir, conf, warehouse)

    def read(self, spark: Any, table: Location, *, as_of_version: int | None = None,
             as_of_timestamp: str | None = None) -> Any:
        """The table as one (`format("delta")`): the rows of its newest version, or of an older one
        (time travel reads the rows a purge deleted since, until VACUUM removes that version's files)."""
        reader = spark.read.format("delta")
        if as_of_version is not None:
            reader = reader.option("versionAsOf", str(as_of_version))
        elif as_of_timestamp is not None:
            reader = reader.option("timestampAsOf", as_of_timestamp)
        try:
            return reader.load(str(table))
        except Exception as exc:
            if delta.missing_from_spark(exc):
                raise ConfigError(f"reading the Delta table {table}: {delta.MISSING_FROM_SPARK}") from exc
            if as_of_version is not None or as_of_timestamp is not None:  # past the newest, or older than the log
                when = f"version {as_of_version}" if as_of_version is not None else f"time {as_of_timestamp}"
                raise ConfigError(f"table {table} cannot be read as of {when}: "
                                  f"{' '.join(str(exc).split())[:400]}") from exc
            raise

    def check_time_travel(self, table: str) -> None:
        return None  # every version its log and files still hold

    def register(self, spark: Any, name: str, location: Location, put_dates: Iterable[str]) -> None:
        """`CREATE TABLE ... USING delta LOCATION`: its columns and partitions are in its log, which a
        reader by name reads at every query (the session needs Delta's catalog, `delta.SESSION_CONF`)."""
        location_text = str(location).replace("\\", "\\\\").replace("'", "\\'")
        spark.sql(f"CREATE TABLE IF NOT EXISTS `{name}` USING delta LOCATION '{location_text}'")

    def landing_of(self, table: Location, identity: str, bulk: PublishedBulk) -> dict[str, Any]:
        """The version that committed the bulk (found in the table's log by the bulk id, around its
        publication), and the put_date of the message's row in the newest version; `in_table` false
        when that row is gone (a purge deleted it: the commit's version still holds it until VACUUM)."""
        if not delta_read.is_delta(table):
            return {"in_table": False, "delta_note": f"no Delta table at {table} (dropped, or moved elsewhere)"}
        found: dict[str, Any] = {}
        commit = delta_read.commit_of(table, bulk.bulk_id, bulk.published_at)
        dates = list(commit.put_dates) if commit is not None else []
        if commit is not None:
            found["delta_version"] = commit.version
            found["committed"] = delta_read.iso_version_time(commit)
        rows = delta_read.put_dates_of(table, [identity], dates)
        if not rows and dates:  # moved to another partition by a rewrite? asked across the table
            rows = delta_read.put_dates_of(table, [identity])
        found["in_table"] = bool(rows)
        dates = rows or dates
        found["put_date"] = dates[0] if len(dates) == 1 else None
        if len(dates) > 1:
            found["put_dates"] = dates
        if not rows:
            newest = delta_read.newest_version(table)
            version = f"version {commit.version}" if commit is not None else "a version before the purge"
            found["delta_note"] = (f"its row is not in the newest version ({newest}) of the table: a purge deleted "
                                   f"it; {version} still reads it (VERSION AS OF, `mqbridge replay "
                                   "--as-of-version`) until VACUUM removes that version's files")
        elif commit is None:
            found["delta_note"] = ("the commit of this bulk is no longer in the table's log (cleaned up after a "
                                   "checkpoint, delta.logRetentionDuration): its version is not known")
        return found

    def verify(self, bulks: Sequence[Any], sizes: Mapping[str, int], warehouse: Location) -> int:
        """Each bulk's rows in the table's newest version (those with its bulk_id, read by delta-rs) are
        as many as its identities. A bulk with fewer, in a table a commit changed rows of since it was
        published (a purge's DELETE or rewrite), is counted apart, not compared; more rows, or fewer
        without such a commit, are listed (exit 1)."""
        from mqbridge.landing.verdicts import row_bulk_id

        by_table: dict[str, list[Any]] = {}
        for bulk in bulks:
            by_table.setdefault(bulk.table, []).append(bulk)
        wrong: list[tuple[str, str]] = []
        purged = 0
        for table, members in sorted(by_table.items()):
            path = warehouse / table
            if not delta_read.is_delta(path):
                wrong += [(b.bulk_id, f"no Delta table at {path}") for b in members]
                continue
            rows = delta_read.rows_by_bulk(path, [row_bulk_id(b.bulk_id) for b in members])
            oldest = min(b.published_at for b in members)
            changes = [c.timestamp for c in delta_read.commits_since(path, oldest - delta_read.CLOCK_SLACK)
                       if c.changes_rows]
            for bulk in members:
                found, expected = rows[row_bulk_id(bulk.bulk_id)], sizes.get(bulk.bulk_id)
                if found == expected:
                    continue
                if expected is not None and found < expected and any(
                        t >= bulk.published_at - delta_read.CLOCK_SLACK for t in changes):
                    purged += 1
                    continue
                wrong.append((bulk.bulk_id,
                              f"{found} rows with bulk_id {row_bulk_id(bulk.bulk_id)} in Delta table {path}"))
        since = f" ({purged} with rows deleted since by purges: not compared)" if purged else ""
        print(f"  delta rows   {len(bulks) - purged - len(wrong)} bulks of {len(by_table)} Delta tables hold one "
              f"row per identity{since}")
        if not wrong:
            print(f"verify: OK ({len(bulks)} published bulks of Delta tables, checked by their rows)")
            return 0
        print(f"verify: {len(wrong)} published bulks of Delta tables do not hold one row per identity:")
        for bulk_id, found_text in wrong:
            print(f"  {bulk_id}: {sizes.get(bulk_id)} identities, {found_text}")
        return 1

    def abandon(self, ledger: Ledger, bulk: PreparedBulk, warehouse: Location) -> Verdict:
        """Its owner dead, the table's log decides (`mqbridge.landing.stuck`): the bulk's version
        committed, recorded published; not, the version fenced first, then the bulk forgotten unless
        its own commit came first after all; no table at all, forgotten."""
        from mqbridge.landing.publication import discard, staging_dir
        from mqbridge.landing.verdicts import FORGET, PUBLISHED, Verdict, judge

        transaction = bulk.transaction
        if transaction is None:
            raise ValueError(f"bulk {bulk.bulk_id} has no table transaction")
        if ledger.owner_alive(bulk.owner):
            return judge(bulk.bulk_id, bulk, "prepared", alive=True, gone=0, rows=0)
        if not ledger.take_over(bulk.bulk_id):  # its owner, if only stalled, can never record it published now
            return judge(bulk.bulk_id, None, ledger.state_of(bulk.bulk_id), alive=False, gone=0, rows=0)
        table = _table_in(warehouse, bulk)
        if delta_read.is_delta(table):
            before = -1  # a commit of the bulk is one newer than this version
            committed = delta_read.transaction_version(table, transaction.app_id)
            if committed is None or committed < transaction.version:
                before = delta_read.newest_version(table)
                delta_read.fence(table, transaction, f"{delta.FENCE_MARK} {transaction.app_id} {transaction.version}")
            commits = delta_read.commits_since(table, bulk.prepared_at - delta_read.CLOCK_SLACK)
            if any(c.user_metadata == bulk.bulk_id and c.version > before for c in commits):
                verdict = Verdict(PUBLISHED, f"table {bulk.table} holds the commit of bulk {bulk.bulk_id} (version "
                                             f"{transaction.version} of {transaction.app_id}): the bulk is recorded "
                                             "published; its messages are recognised as landed when they come back")
                ledger.mark_published(bulk.bulk_id)
            else:
                verdict = Verdict(FORGET, f"bulk {bulk.bulk_id} never committed into table {bulk.table} (its version "
                                          f"{transaction.version} of {transaction.app_id} is fenced now): the bulk is "
                                          "forgotten; its messages were never committed at the source and land when "
                                          "read again")
                ledger.forget(bulk.bulk_id)
        else:
            verdict = Verdict(FORGET, f"there is no Delta table at {table}: bulk {bulk.bulk_id} never committed; it "
                                      "is forgotten, its messages land when read again")
            ledger.forget(bulk.bulk_id)
        if isinstance(table, Path):  # nothing is staged on a store: a bulk is written from its handoff file
            discard(staging_dir(table, bulk.owner, bulk.bulk_id))
        logging.getLogger("mqbridge.landing.stuck").info("bulk %s abandoned by an operator: %s", bulk.bulk_id,
                                                         verdict.reason)
        return verdict

    # -- recovery with Spark ---------------------------------------------------------------------------
    def settle(self, ledger: Ledger, bulk: PreparedBulk, spark: Any, location: Location) -> bool:
        """The dead process's version in the log, or fenced and forgotten (`mqbridge.landing.delta.settle`)."""
        return delta.settle(ledger, bulk, spark, location)

    def rebuild_ledger(self, ledger: Ledger, spark: Any, tables: Sequence[tuple[str, Location]],
                       dedupe_window: float) -> int:
        """Every row carries its identity and bulk id (`mqbridge.landing.delta_ledger.rebuild`)."""
        from mqbridge.landing.delta_ledger import rebuild

        return rebuild(ledger, spark, tables, dedupe_window)

    # -- maintenance -----------------------------------------------------------------------------------
    def purger(self, spark: Any, model: CostModel, *, vacuum_retention: float, counters: Counters,
               stop: threading.Event) -> TablePurger:
        """Delta's own commits, a DELETE or a copy per partition (`mqbridge.maintenance.delta.purger`)."""
        from mqbridge.maintenance.delta.purger import DeltaPurger

        return DeltaPurger(spark, model, vacuum_retention, counters=counters, stop=stop)

    def recover(self, table: Location) -> None:
        return None  # every purge and compaction is one commit of the log: nothing is ever half done

    def purge_summary(self, purger: TablePurger, table: Location, vacuum_retention: float) -> list[str]:
        """The strategies that ran, the rows left, and the version to time-travel to for the rows the
        purge removed (until VACUUM deletes their files)."""
        from mqbridge.maintenance.delta.purger import DeltaPurger

        run = cast(DeltaPurger, purger).summary(table)
        ran = ", ".join(f"{strategy} {n}" for strategy, n in sorted(run.strategies.items())) or "nothing"
        lines = [f"Delta table: purged by {ran}; {run.rows_left} rows left (version {run.version_after})"]
        if run.version_after != run.version_before:
            lines.append(f"the rows purged stay readable with versionAsOf {run.version_before} until VACUUM "
                         f"removes their files, {vacuum_retention:.0f}s after this purge ([purge] vacuum_retention)")
        return lines

    def compaction(self, spark: Any, model: CostModel, *, small_file_size: int, target_file_size: int,
                   vacuum_retention: float, counters: Counters, stop: threading.Event) -> TableCompaction:
        from mqbridge.maintenance.delta.compaction import DeltaCompaction

        return _DeltaTableCompaction(DeltaCompaction(spark, model, small_file_size, vacuum_retention,
                                                     counters=counters, stop=stop))


class _DeltaTableCompaction(TableCompaction):
    """Facts from the table's current version; OPTIMIZE ... ZORDER BY (put_timestamp); VACUUM after
    compactions (a purge's run vacuums after its own commits)."""

    def __init__(self, compaction: DeltaCompaction) -> None:
        self.delta = compaction

    def recover(self, table: Location) -> None:
        return None

    def facts(self, table: Location, designated: Mapping[str, tuple[int, int]]) -> dict[str, Facts]:
        return self.delta.facts(table, dict(designated))

    def compact(self, table: Location, plan: Plan) -> CompactionDone | None:
        done = self.delta.optimize(table, plan.put_date, plan.facts.files, plan.facts.rows)
        return CompactionDone(done.seconds, done.files_after)

    def files_after_purge(self, table: Location, plan: Plan, container: ContainerPlan) -> int:
        # A DELETE leaves the files (deletion vectors or rewritten ones), a copy writes one
        return plan.facts.files if plan.action == "delete" else int(plan.action == "copy")

    def finish(self, table: Location, compacted: bool) -> None:
        if compacted:
            self.delta.vacuum(table)


def _table_in(warehouse: Location, bulk: PreparedBulk) -> Location:
    """The table of `bulk` under `warehouse`; LedgerError when the ledger names a table outside it (the
    ledger is data: a table name with '..' or an absolute path is left as it is)."""
    import os

    from mqbridge.errors import LedgerError

    refused = LedgerError(f"prepared bulk {bulk.bulk_id} of {bulk.owner} names table {bulk.table!r}, which is not "
                          f"a directory of the warehouse {warehouse}: it is left as it is")
    if isinstance(warehouse, ObjectStoreUri):
        parts = bulk.table.split("/")
        if bulk.table.startswith("/") or not bulk.table or any(p in ("", ".", "..") for p in parts):
            raise refused
        return warehouse / bulk.table
    root = Path(os.path.normpath(Path(warehouse).absolute()))
    table = Path(os.path.normpath(root / bulk.table))
    if root not in table.parents:
        raise refused
    return table


FORMAT = DeltaFormat()
