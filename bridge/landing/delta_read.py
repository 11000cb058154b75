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

from mqbridge.errors import ConfigError
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


def is_delta(table: Path | str) -> bool:
    """Whether a Delta table is at `table` (its log directory is there)."""
    return (Path(table) / LOG_DIR).is_dir()


def delta_table(table: Path | str, version: int | None = None) -> DeltaTable:
    """The Delta table at `table` (as of `version`, None: the newest) read by delta-rs; ConfigError
    naming the extra to install when delta-rs is missing."""
    try:
        from deltalake import DeltaTable
    except ImportError as exc:
        raise ConfigError(f"reading the Delta table {table} needs delta-rs: {INSTALL}") from exc
    return DeltaTable(str(table), version=version)


@dataclass(frozen=True)
class Commit:
    """One commit of a Delta table's log, as the readers need it."""

    version: int
    timestamp: float  # epoch seconds (commitInfo.timestamp)
    operation: str
    user_metadata: str | None
    put_dates: tuple[str, ...]  # the put_date partitions of the files it added
    changes_rows: bool  # it removed data files with dataChange (a DELETE, a rewrite: a purge)


def commit_versions(table: Path | str) -> list[int]:
    """The versions whose JSON commit is still in the log, oldest first."""
    folder = Path(table) / LOG_DIR
    if not folder.is_dir():
        return []
    return sorted(int(m[1]) for name in os.listdir(folder) if (m := _COMMIT_FILE.fullmatch(name)))


def read_commit(table: Path | str, version: int) -> Commit | None:
    """The commit `version` of the table at `table`; None when its JSON file is gone (cleaned up after
    a checkpoint, `delta.logRetentionDuration`)."""
    try:
        with open(Path(table) / LOG_DIR / f"{version:020d}.json", encoding="utf-8") as lines:
            actions = [json.loads(line) for line in lines if line.strip()]
    except FileNotFoundError:
        return None
    info: dict[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
    dates = sorted({str(a["add"].get("partitionValues", {}).get("put_date")) for a in actions
                    if "add" in a and a["add"].get("partitionValues", {}).get("put_date")})
    removes = any("remove" in a and a["remove"].get("dataChange", True) for a in actions)
    return Commit(version, float(info.get("timestamp", 0)) / 1000.0, str(info.get("operation", "")),
                  info.get("userMetadata"), tuple(dates), removes)


def commit_of(table: Path | str, user_metadata: str, near: float) -> Commit | None:
    """The commit of the table at `table` whose user metadata is `user_metadata` (a bulk's id), made
    at or shortly before `near` (epoch seconds: when the ledger recorded the bulk published); None
    when the log holds no such commit (any more)."""
    versions = commit_versions(table)
    times = _Times(table, versions)
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


def commits_since(table: Path | str, since: float) -> list[Commit]:
    """The commits of the table at `table` made at or after `since` (epoch seconds), newest first."""
    found = []
    for version in reversed(commit_versions(table)):
        commit = read_commit(table, version)
        if commit is None:
            continue
        if commit.timestamp < since:
            break
        found.append(commit)
    return found


class _Times:
    """The commits of `versions`, each read once, by position (for the binary search of `commit_of`)."""

    def __init__(self, table: Path | str, versions: Sequence[int]) -> None:
        self._table = table
        self._versions = versions
        self._read: dict[int, Commit | None] = {}

    def commit(self, index: int) -> Commit | None:
        if index not in self._read:
            self._read[index] = read_commit(self._table, self._versions[index])
        return self._read[index]

    def at(self, index: int) -> float:
        commit = self.commit(index)
        return commit.timestamp if commit is not None else 0.0


def rows_by_bulk(table: Path | str, bulk_ids: Iterable[str]) -> collections.Counter[str]:
    """How many rows of the newest version of the table at `table` carry each of `bulk_ids`."""
    wanted = set(bulk_ids)
    if not wanted:
        return collections.Counter()
    column = _strings(_read(table, ["bulk_id"]).column("bulk_id"))
    counts = column.value_counts().to_pylist()  # [{"values": bulk id, "counts": rows}]
    return collections.Counter({c["values"]: int(c["counts"]) for c in counts if c["values"] in wanted})


def put_dates_of(table: Path | str, identities: Sequence[str], put_dates: Sequence[str] = ()) -> list[str]:
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


def _read(table: Path | str, columns: list[str], filters: Any = None) -> Any:
    """`columns` of the newest version of the local table at `table` (a pyarrow Table), its files read
    by pyarrow's native local file system. By default delta-rs hands pyarrow a file system written in
    Python (`PyFileSystem`), which pyarrow's I/O threads call back into: one still finishing when a
    command's interpreter exits aborts the process (SIGABRT, "terminate called without an active
    exception") after it printed its answer, so that its exit code is no longer the answer."""
    return delta_table(table).to_pyarrow_table(columns=columns, filters=filters, filesystem=local_files(table))


def local_files(table: Path | str) -> Any:
    """pyarrow's native file system rooted at the local table `table` (its files' paths in the log are
    relative to it)."""
    from pyarrow import fs

    return fs.SubTreeFileSystem(str(Path(table).absolute()), fs.LocalFileSystem())


def _strings(column: Any) -> Any:
    """A string column as plain strings (delta-rs reads its own files' strings as string_view)."""
    import pyarrow as pa

    return column.cast(pa.string()) if column.type != pa.string() else column


def newest_version(table: Path | str) -> int:
    """The table's newest version."""
    return int(delta_table(table).version())


def transaction_version(table: Path | str, app_id: str) -> int | None:
    """The newest `txnVersion` of `app_id` in the table's log (None: it never committed there)."""
    version = delta_table(table).transaction_version(app_id)
    return int(version) if version is not None else None


def fence(table: Path | str, transaction: TableTransaction, mark: str) -> None:
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


def iso_version_time(commit: Commit) -> str:
    """When `commit` was made, ISO 8601 in UTC."""
    return datetime.fromtimestamp(commit.timestamp, timezone.utc).isoformat(timespec="milliseconds")
