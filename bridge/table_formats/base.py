"""The interface of a table format (`TableFormat`): what the rest of the bridge asks of a landed table,
named for what it means, so that the landing, the purge, the compaction, replay, `where`, the catalog
and `ledger --verify` / `--abandon` never ask "is this Delta?" themselves.

Every operation on a table takes its `Location`: a local directory, or its URI on an object store or
HDFS (`mqbridge.config.warehouse.ObjectStoreUri`, carrying what delta-rs needs to reach it). Which
formats a store can hold is the configuration's concern (`config.warehouse.object_store_problems`).

An implementation is one module of this package (`parquet`, `delta`, `iceberg`) listed in
`mqbridge.table_formats.FORMATS`. The Spark-side maintenance objects it hands out (its purger and
its compaction) are imported when asked for, so that this package can be imported by the landing and
the maintenance modules without importing the other at start-up.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

    from mqbridge.config.warehouse import Location
    from mqbridge.counters import Counters
    from mqbridge.landing.containers import Container
    from mqbridge.landing.ledger import Ledger, PreparedBulk, PublishedBulk
    from mqbridge.landing.verdicts import Verdict
    from mqbridge.maintenance.compaction.planner import Facts, Plan
    from mqbridge.maintenance.engine.costs import CostModel
    from mqbridge.maintenance.purge.designation import Designation
    from mqbridge.maintenance.purge.purger import ContainerPlan, ContainerResult


class TablePurger(Protocol):
    """A format's purge of a table's containers (`mqbridge.maintenance.purge.Purger`, `DeltaPurger`)."""

    def plan(self, table: Location, designation: Designation, strategy: str = "auto") -> list[ContainerPlan]: ...

    def run(self, plans: list[ContainerPlan], designation: Designation) -> Iterator[ContainerResult]: ...


@dataclass(frozen=True)
class CompactionDone:
    """One container rewritten by a format's compaction: how long it took, and its files after."""

    seconds: float
    files_after: int


class TableCompaction(ABC):
    """A format's part of a compaction round (`mqbridge.maintenance.rounds`): the facts the planner
    decides on, and the rewrite of one container; the purge's actions run through `TableFormat.purger`."""

    @abstractmethod
    def recover(self, table: Location) -> None:
        """Before a table's actions: `TableFormat.recover`."""

    @abstractmethod
    def facts(self, table: Location, designated: Mapping[str, tuple[int, int]]) -> dict[str, Facts]:
        """Per put_date, the facts of the table's containers; `designated` per put_date: (rows the
        retention designates, rows of the files holding designated and surviving rows)."""

    @abstractmethod
    def compact(self, table: Location, plan: Plan) -> CompactionDone | None:
        """Rewrite the container of `plan` (its small files into fewer, sorted by put_timestamp); None
        when a stop came first."""

    @abstractmethod
    def files_after_purge(self, table: Location, plan: Plan, container: ContainerPlan) -> int:
        """How many data files the container of `plan` has after the purge's action on it."""

    @abstractmethod
    def finish(self, table: Location, compacted: bool) -> None:
        """After a table's actions (`compacted`: a container was rewritten): the format's clean-up."""


class TableFormat(ABC):
    """One way of keeping a landed table (see the module docstring)."""

    #: The name `[spark] table_format` / `[types.X] table_format` gives it.
    name: str
    #: Its name in a sentence: "Parquet", "Delta".
    title: str
    #: Whether a bulk is published by the table's own commit carrying the bulk's transaction (the
    #: ledger's `TableTransaction`) rather than by renaming the files the ledger records.
    transactional: bool
    #: Whether the catalog must be told of each put_date partition as it appears (the table's own
    #: metadata holds them otherwise).
    catalog_partitions: bool
    #: The column each row's identity (what the ledger dedupes on) lands in; None where rows carry none.
    identity_column: str | None
    #: How recovery says a dead process's prepared bulk that never committed was undone (a
    #: transactional format's, logged by `Landing`): Delta fences the bulk's version first.
    rolled_back: str = "fenced and rolled back"

    # -- what is on disk ---------------------------------------------------------------------
    @abstractmethod
    def holds(self, path: Location) -> bool:
        """Whether the local directory `path` is a table of this format."""

    @abstractmethod
    def containers(self, table: Location) -> list[Container]:
        """Every put_date partition of the table with rows, oldest first (rows, size, files,
        put_timestamp range): what `mqbridge tables` lists."""

    @abstractmethod
    def describe(self, table: Location) -> str:
        """The table's kind in a few words, e.g. "Parquet", "Delta table, version 12"."""

    @abstractmethod
    def written_schemas(self, table: Location, message_type: str,
                        shared_by: StructType | None = None) -> dict[str, Path]:
        """The distinct schemas `message_type`'s rows were written with in the table at `table` (the
        JSON of their typed columns as declared, `mqbridge.landing.schema_check`), each with where it
        was read ({} when the table is not there yet, or cannot be read now: logged): what the schema
        check compares a type's configured schema with. `shared_by`: the type's schema now, when other
        types land in the table too (a format that keeps one schema for the table compares only the
        columns the type names)."""

    def reader_missing(self) -> tuple[str, str] | None:
        """Why the commands that read this format's tables back without Spark (`mqbridge tables`,
        `where`, `replay`, `ledger --verify`) cannot on this machine, and the fix, as (problem, fix)
        (`check-config` warns); None when they can (Parquet: pyarrow, a dependency)."""
        return None

    # -- Spark --------------------------------------------------------------------------------
    @abstractmethod
    def session_conf(self, jars_dir: Path, conf: Mapping[str, str],
                     warehouse: Location | None = None) -> dict[str, str]:
        """The settings a Spark driver of the bridge's own needs to read and write this format besides
        `conf` (which wins), in `warehouse` where that matters: nothing for Parquet; Delta's jars, SQL
        extension and catalog (and on `s3a://` its log store). ConfigError naming the command that
        fetches a jar that is missing (`check-config` reports it)."""

    @abstractmethod
    def read(self, spark: Any, table: Location, *, as_of_version: int | None = None,
             as_of_timestamp: str | None = None) -> Any:
        """The table's rows as a DataFrame, of its newest version or, where the format keeps older
        ones, as of a version or a time; ConfigError where it cannot (no time travel, no reader)."""

    @abstractmethod
    def check_time_travel(self, table: str) -> None:
        """Raise ConfigError naming `table` when the format keeps no older versions to read (`read`'s
        `as_of_*`), so that a command refuses before it starts Spark."""

    @abstractmethod
    def register(self, spark: Any, name: str, location: Location, put_dates: Iterable[str]) -> None:
        """Register the table at `location` in the session's catalog as `name` (its partitions among them)."""

    def add_partition(self, spark: Any, name: str, location: Location, put_date: str) -> None:
        """Tell the catalog of a put_date partition that appeared after `register` (`catalog_partitions`)."""
        raise NotImplementedError(f"a {self.name} table's partitions are in its own metadata")

    # -- the ledger's bulks in the table -------------------------------------------------------
    @abstractmethod
    def landing_of(self, table: Location, identity: str, bulk: PublishedBulk) -> dict[str, Any]:
        """What the table itself says of a landed message (`mqbridge where`): {} when the ledger's
        answer is all there is (the ledger's files say where its rows are)."""

    @abstractmethod
    def verify(self, bulks: Sequence[Any], sizes: Mapping[str, int], warehouse: Location) -> int:
        """`mqbridge ledger --verify` of the published `bulks` of this format's tables (`sizes`: their
        identities by bulk id): print what was checked and found; 0 when all hold, 1 otherwise."""

    @abstractmethod
    def abandon(self, ledger: Ledger, bulk: PreparedBulk, warehouse: Location) -> Verdict:
        """`mqbridge ledger --abandon` of a prepared `bulk` (`mqbridge.landing.stuck`): whether its rows
        are in its table decides (`mqbridge.landing.verdicts`); the verdict carried out. Raises
        LedgerError when the bulk names a path outside its table."""

    # -- recovery with Spark (a dead process's bulks; a lost ledger) -----------------------------------
    @abstractmethod
    def settle(self, ledger: Ledger, bulk: PreparedBulk, spark: Any, location: Location) -> bool:
        """Decide a dead process's prepared `bulk` of the table at `location` by asking the table (a
        transactional format): True when its rows are in it (recorded published), False when not
        (forgotten: its messages land again). A format whose bulks are decided by their files
        (`mqbridge.landing.publication`) raises ValueError: no such bulk reaches it."""

    @abstractmethod
    def rebuild_ledger(self, ledger: Ledger, spark: Any, tables: Sequence[tuple[str, Location]],
                       dedupe_window: float) -> int:
        """Adopt into a ledger created at this start the bulks the `tables` ((name, location) pairs)
        hold with rows received within `dedupe_window` seconds; the number of identities learnt (0
        where the format's rows carry no identity)."""

    # -- maintenance ----------------------------------------------------------------------------
    @abstractmethod
    def purger(self, spark: Any, model: CostModel, *, vacuum_retention: float, counters: Counters,
               stop: threading.Event) -> TablePurger:
        """The purge of this format's tables on `spark` with the cost model `model`."""

    @abstractmethod
    def recover(self, table: Location) -> None:
        """Before a purge of `table`: finish or undo what a killed purge or compaction left (nothing
        where the format's own commits are atomic)."""

    @abstractmethod
    def purge_summary(self, purger: TablePurger, table: Location, vacuum_retention: float) -> list[str]:
        """What `mqbridge purge` says of a table after its purge, beyond each container's line."""

    @abstractmethod
    def compaction(self, spark: Any, model: CostModel, *, small_file_size: int, target_file_size: int,
                   vacuum_retention: float, counters: Counters, stop: threading.Event) -> TableCompaction:
        """This format's part of a compaction round (`TableCompaction`)."""

