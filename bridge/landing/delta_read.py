"""Reading a landed Delta Lake table back without Spark: what `mqbridge where`, `mqbridge ledger
--verify` and `--abandon` ask of a Delta table, answered with delta-rs (`deltalake`, the `delta` extra)
and the table's own log.

A bulk's commit is found by its user metadata (the ledger's bulk id, `mqbridge.landing.delta.commit_options`)
in the log's JSON commits, `<table>/_delta_log/<version>.json` (the Delta protocol's commit files; a
checkpoint keeps no commit info). The ledger knows when the bulk was published, right after its commit:
the commits are searched by their time around it (binary search on versions, then a short scan), not
read from the first. A commit that removes data files with `dataChange` (a DELETE, a rewrite, an
overwrite: a purge) changes rows; an `OPTIMIZE` removes files without changing any row. Rows are read by
delta-rs, which applies the table's deletion vectors and reads any version still in the log.

A table is a local directory or an object store's or HDFS's URI (`ObjectStoreUri`, carrying delta-rs's
`storage_options`, `ObjectStoreUri.with_storage`): its log files are then listed and read through
delta-rs's own store client (`deltalake.fs.DeltaStorageHandler`) and its rows read by delta-rs's query
engine (native code end to end: no Python file system under pyarrow's I/O threads, see `_read`).
"""

from __future__ import annotations

import bisect
import collections
import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mqbridge.config.warehouse import Location, ObjectStoreUri
from mqbridge.errors import ConfigError
from mqbridge.landing.object_stores import message_line
from mqbridge.landing.rows import IDENTITY_COLUMN

if TYPE_CHECKING:
    from deltalake import DeltaTable

    from mqbridge.landing.ledger import TableTransaction

#: The log's directory in a Delta table.
LOG_DIR = "_delta_log"
#: How far a commit's own time may lie after the ledger's time of publication (another clock: a Spark
#: Connect server's or a cluster's driver), and how long before it a commit is still looked for (a commit
#: retried with backoff: `Landing.land` with a `commit`).
CLOCK_SLACK = 60.0
COMMIT_WINDOW = 3600.0
_COMMIT_FILE = re.compile(r"(\d{20})\.json")
#: What says to install delta-rs.
INSTALL = "pip install \"mqbridge[delta]\" (delta-rs, the `deltalake` package)"


def is_delta(table: Location | str) -> bool:
    """Whether a Delta table is at `table` (its log directory is there, with a file in it on a store)."""
    if isinstance(table, ObjectStoreUri):
        return bool(_LogFiles(table).names())
    return (Path(table) / LOG_DIR).is_dir()


def directories(location: ObjectStoreUri) -> list[str]:
    """The names of the directories right under `location` on its object store or HDFS ([] when there
    is nothing there), listed by delta-rs's own store client (one LIST with a delimiter on S3, 17 ms for
    a warehouse of three tables on the test server; a directory listing on HDFS, 4 ms): what finds the
    tables a template rendered (`mqbridge.landing.tables.tables_of_type`). OSError when the store cannot
    be reached or refuses the keys."""
    from pyarrow import fs

    try:
        from deltalake.fs import DeltaStorageHandler
    except ImportError as exc:
        raise ConfigError(f"listing the Delta tables under {location} needs delta-rs: {INSTALL}") from exc
    store = DeltaStorageHandler(str(location), storage_options(location))
    try:
        infos = store.get_file_info_selector(fs.FileSelector("", allow_not_found=True))
    except FileNotFoundError:
        return []
    return sorted(info.path.rstrip("/").rsplit("/", 1)[-1] for info in infos if info.type == fs.FileType.Directory)


def storage_options(table: Location | str) -> dict[str, str] | None:
    """delta-rs's `storage_options` for `table` (those its URI carries; None for a local table)."""
    if not isinstance(table, ObjectStoreUri):
        return None
    return dict(table.storage_options) or None


def delta_table(table: Location | str, version: int | None = None) -> DeltaTable:
    """The Delta table at `table` (as of `version`, None: the newest) read by delta-rs; ConfigError
    naming the extra to install when delta-rs is missing."""
    try:
        from deltalake import DeltaTable
    except ImportError as exc:
        raise ConfigError(f"reading the Delta table {table} needs delta-rs: {INSTALL}") from exc
    return DeltaTable(str(table), version=version, storage_options=storage_options(table))


class _LogFiles:
    """The files of a table's log: a local directory's, or read through delta-rs's client of the
    table's object store or HDFS (made once per reader: it connects)."""

    def __init__(self, table: Location | str) -> None:
        self.table = table
        self._store: Any = None
        if isinstance(table, ObjectStoreUri):
            try:
                from deltalake.fs import DeltaStorageHandler
            except ImportError as exc:
                raise ConfigError(f"reading the Delta table {table} needs delta-rs: {INSTALL}") from exc
            self._store = DeltaStorageHandler(str(table), storage_options(table))

    def names(self) -> list[str]:
        """The names of the files in the log ([] when there is no log)."""
        if self._store is None:
            folder = Path(self.table) / LOG_DIR
            return os.listdir(folder) if folder.is_dir() else []
        from pyarrow import fs

        try:
            infos = self._store.get_file_info_selector(fs.FileSelector(LOG_DIR, allow_not_found=True))
        except FileNotFoundError:
            return []
        return [info.path.rsplit("/", 1)[-1] for info in infos]

    def read(self, name: str) -> bytes:
        """The log file `name`; FileNotFoundError when it is gone."""
        if self._store is None:
            with open(Path(self.table) / LOG_DIR / name, "rb") as data:
                return data.read()
        try:
            return bytes(self._store.open_input_file(f"{LOG_DIR}/{name}").read())
        except FileNotFoundError:
            raise
        except OSError as exc:
            if "not found" in str(exc).lower() or "no such" in str(exc).lower():
                raise FileNotFoundError(f"{self.table}/{LOG_DIR}/{name}") from exc
            raise


@dataclass(frozen=True)
class Commit:
    """One commit of a Delta table's log, as the readers need it."""

    version: int
    timestamp: float  # epoch seconds (commitInfo.timestamp)
    operation: str
    user_metadata: str | None
    put_dates: tuple[str, ...]  # the put_date partitions of the files it added
    changes_rows: bool  # it removed data files with dataChange (a DELETE, a rewrite: a purge)


def commit_versions(table: Location | str, log: _LogFiles | None = None) -> list[int]:
    """The versions whose JSON commit is still in the log, oldest first."""
    names = (log or _LogFiles(table)).names()
    return sorted(int(m[1]) for name in names if (m := _COMMIT_FILE.fullmatch(name)))


def read_commit(table: Location | str, version: int, log: _LogFiles | None = None) -> Commit | None:
    """The commit `version` of the table at `table`; None when its JSON file is gone (cleaned up after
    a checkpoint, `delta.logRetentionDuration`)."""
    try:
        text = (log or _LogFiles(table)).read(f"{version:020d}.json").decode("utf-8")
    except FileNotFoundError:
        return None
    actions = [json.loads(line) for line in text.splitlines() if line.strip()]
    info: dict[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
    dates = sorted({str(a["add"].get("partitionValues", {}).get("put_date")) for a in actions
                    if "add" in a and a["add"].get("partitionValues", {}).get("put_date")})
    removes = any("remove" in a and a["remove"].get("dataChange", True) for a in actions)
    return Commit(version, float(info.get("timestamp", 0)) / 1000.0, str(info.get("operation", "")),
                  info.get("userMetadata"), tuple(dates), removes)


def commit_of(table: Location | str, user_metadata: str, near: float) -> Commit | None:
    """The commit of the table at `table` whose user metadata is `user_metadata` (a bulk's id), made
    at or shortly before `near` (epoch seconds: when the ledger recorded the bulk published); None
    when the log holds no such commit (any more)."""
    log = _LogFiles(table)
    versions = commit_versions(table, log)
    times = _Times(log, versions)
    start = bisect.bisect_right(range(len(versions)), near + CLOCK_SLACK, key=times.at)
    for index in range(min(start, len(versions)) - 1, -1, -1):
        commit = times.commit(index)
        if commit is None:
            continue
        if commit.user_metadata == user_metadata:
            return commit
        if commit.timestamp < near - COMMIT_WINDOW:
            break
    return None


def commits_since(table: Location | str, since: float) -> list[Commit]:
    """The commits of the table at `table` made at or after `since` (epoch seconds), newest first."""
    found = []
    log = _LogFiles(table)
    for version in reversed(commit_versions(table, log)):
        commit = read_commit(table, version, log)
        if commit is None:
            continue
        if commit.timestamp < since:
            break
        found.append(commit)
    return found


class _Times:
    """The commits of `versions`, each read once, by position (for the binary search of `commit_of`)."""

    def __init__(self, log: _LogFiles, versions: Sequence[int]) -> None:
        self._log = log
        self._versions = versions
        self._read: dict[int, Commit | None] = {}

    def commit(self, index: int) -> Commit | None:
        if index not in self._read:
            self._read[index] = read_commit(self._log.table, self._versions[index], self._log)
        return self._read[index]

    def at(self, index: int) -> float:
        commit = self.commit(index)
        return commit.timestamp if commit is not None else 0.0


def rows_by_bulk(table: Location | str, bulk_ids: Iterable[str]) -> collections.Counter[str]:
    """How many rows of the newest version of the table at `table` carry each of `bulk_ids`."""
    wanted = set(bulk_ids)
    if not wanted:
        return collections.Counter()
    column = _strings(_read(table, ["bulk_id"]).column("bulk_id"))
    counts = column.value_counts().to_pylist()  # [{"values": bulk id, "counts": rows}]
    return collections.Counter({c["values"]: int(c["counts"]) for c in counts if c["values"] in wanted})


def put_dates_of(table: Location | str, identities: Sequence[str], put_dates: Sequence[str] = ()) -> list[str]:
    """The put_date of each row of the newest version of the table at `table` whose identity column is
    one of `identities` (only in the partitions `put_dates`, when given): [] when none is there."""
    import pyarrow as pa
    import pyarrow.compute as pc

    # Filtered here, not by the scan: pyarrow compares a filter's strings with the statistics of files
    # delta-rs wrote (string_view) and fails ("no kernel matching input types (string, string_view)").
    filters = [("put_date", "in", [date.fromisoformat(d) for d in put_dates])] if put_dates else None
    frame = _read(table, [IDENTITY_COLUMN, "put_date"], filters)
    mask = pc.is_in(_strings(frame.column(IDENTITY_COLUMN)), value_set=pa.array(list(identities), pa.string()))
    return sorted({str(d) for d in frame.filter(mask).column("put_date").to_pylist()})


def _read(table: Location | str, columns: list[str], filters: Any = None) -> Any:
    """`columns` of the newest version of the table at `table` (a pyarrow Table). A local table's files
    are read by pyarrow's native local file system. By default delta-rs hands pyarrow a file system
    written in Python (`PyFileSystem`), which pyarrow's I/O threads call back into: one still finishing
    when a command's interpreter exits aborts the process (SIGABRT, "terminate called without an active
    exception") after it printed its answer, so that its exit code is no longer the answer. A table on
    an object store or HDFS is read by delta-rs's own query engine (`_query`), native as well."""
    if isinstance(table, ObjectStoreUri):
        return _query(table, columns, filters)
    return delta_table(table).to_pyarrow_table(columns=columns, filters=filters, filesystem=local_files(table))


def _query(table: ObjectStoreUri, columns: list[str], filters: Any = None) -> Any:
    """`_read` of a table on a store: a SELECT of `columns` by delta-rs's query engine (DataFusion),
    `filters` (only `(column, "in", [dates])`) as its WHERE."""
    import pyarrow as pa
    from deltalake import QueryBuilder

    selected = ", ".join(f'"{c}"' for c in columns)
    where = ""
    if filters:
        [(column, _, values)] = filters
        where = f' WHERE "{column}" IN ({", ".join(f"DATE {chr(39)}{v.isoformat()}{chr(39)}" for v in values)})'
    reader = QueryBuilder().register("landed", delta_table(table)).execute(f"SELECT {selected} FROM landed{where}")
    frame = pa.table(reader.read_all())
    # Its strings come as string_view, which pyarrow's filter and take kernels do not take (yet)
    views = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}
    return frame.cast(pa.schema([f.with_type(views.get(f.type, f.type)) for f in frame.schema]))


def local_files(table: Location | str) -> Any:
    """pyarrow's native file system rooted at the local table `table` (its files' paths in the log are
    relative to it)."""
    from pyarrow import fs

    return fs.SubTreeFileSystem(str(Path(table).absolute()), fs.LocalFileSystem())


def _strings(column: Any) -> Any:
    """A string column as plain strings (delta-rs reads its own files' strings as string_view)."""
    import pyarrow as pa

    return column.cast(pa.string()) if column.type != pa.string() else column


def newest_version(table: Location | str) -> int:
    """The table's newest version."""
    return int(delta_table(table).version())


def transaction_version(table: Location | str, app_id: str) -> int | None:
    """The newest `txnVersion` of `app_id` in the table's log (None: it never committed there)."""
    version = delta_table(table).transaction_version(app_id)
    return int(version) if version is not None else None


def fence(table: Location | str, transaction: TableTransaction, mark: str) -> None:
    """An empty commit carrying `transaction` (its app id and version) and `mark` as its user metadata,
    written by delta-rs: Delta then skips a later commit of that version by the app's own writer (a
    Spark Connect server or cluster finishing the job of a bridge that is gone), as
    `mqbridge.landing.delta.settle` fences with Spark."""
    import pyarrow as pa
    from deltalake import CommitProperties, Transaction, write_deltalake

    current = delta_table(table)
    empty = pa.schema(current.schema().to_arrow()).empty_table()
    write_deltalake(current, empty, mode="append", partition_by=current.metadata().partition_columns or None,
                    commit_properties=CommitProperties(custom_metadata={"userMetadata": mark},
                                                       app_transactions=[Transaction(transaction.app_id,
                                                                                     transaction.version)]))


def error_text(exc: BaseException) -> str:
    """A reader's error as one line: delta-rs's chain of causes (one per line, marked with coloured
    arrows) joined by ": " (`object_stores.message_line`). It names the store's URL and what failed,
    never the storage options."""
    return message_line(str(exc)) or type(exc).__name__


def iso_version_time(commit: Commit) -> str:
    """When `commit` was made, ISO 8601 in UTC."""
    return datetime.fromtimestamp(commit.timestamp, timezone.utc).isoformat(timespec="milliseconds")
