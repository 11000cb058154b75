"""A Delta table is made, empty, before the first bulk this process lands in it is prepared: every bulk's
commit, the table's first bulk's too, then goes into a table that exists, so it can be fenced.

Why: a bridge that finds a prepared bulk's owner dead decides the bulk (`mqbridge.landing.delta.settle`),
and it may do so for an owner on another host whose lease expired but which only stalled; it then
fences the owner's version (an empty commit with the owner's app id and version), so that Delta skips
the owner's commit if it ever comes. A fence is a commit *of the table*: with no table there is nothing
to commit it to, and the stalled owner's late commit would make the table with the bulk in it after
the other bridge landed the same messages. So no bulk is prepared for a table that does not exist.

When: before the first bulk of each table this process writes (`ensure_table`, called by the Delta
writer before `Landing.commit` prepares the bulk), not at the type's start: a template such as
`table = "{destination}"` names its tables only as messages come. Asked once per table and process
(`_known`): a table is never removed by the bridge itself (the purge deletes rows, `mqbridge tables
delete` is an operator's).

How: an empty frame with the bulk's own columns (the writer's frame of no rows: the schema every bulk of
the type writes, a typed type's declared column metadata included) is written by Delta's DataFrame writer
in SaveMode.Ignore, partitioned by put_date, carrying `CREATE_MARK` as its user metadata. Delta commits
version 0 (the table's protocol and metadata, with the session's defaults for new tables:
`delta.DEFAULT_CONF`'s checkpointInterval and dataSkippingStatsColumns) only where there is no table, and
leaves a table that exists as it is (no commit). Later bulks merge their schema into it as before
(`mergeSchema`). Two bridges that both find no table and both write: version 0's log file is created only
where absent, so one commit wins and the other's write fails: Delta's ProtocolChangedException ("multiple
writers are writing to an empty directory"; two threads of one driver, 3 races of 3, Delta 4.4:
tests/integration/test_delta_commit.py; a transaction begun on the empty directory that writes after the
table was made fails with DELTA_METADATA_MISMATCH instead). Whatever a failed write says, a table that is
there afterwards is what was wanted: the writer goes on as if it had found it (`made`).
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from mqbridge import failpoints
from mqbridge.errors import one_line

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

#: The column a bridge's Delta table is partitioned by.
PARTITION_COLUMN = "put_date"
#: The user metadata of the commit that makes a table (DESCRIBE HISTORY shows why version 0 holds no rows).
CREATE_MARK = "mqbridge-create"


class Made(enum.Enum):
    """How `ensure_table` found a table."""

    #: Known to this process already: nothing asked.
    KNOWN = "known"
    #: There already (another process, an earlier run, another writer of this process).
    FOUND = "found"
    #: Made by this call.
    CREATED = "created"
    #: Made by another writer at the same time: this call's write failed on it.
    CREATED_BY_ANOTHER = "created by another"


#: Table location -> a version the table had when this process made or found it (`ensure_table`): every
#: commit after that is newer. A fence of a version this process prepared later is among those commits
#: (`mqbridge.landing.delta_commit`: where its first commit of the table looks for one).
_known: dict[str, int] = {}
_known_lock = threading.Lock()


def made(current_version: Callable[[], int], create: Callable[[], None]) -> tuple[Made, int]:
    """Make the table unless it is there: `current_version` says its version (-1: no table), `create`
    writes the empty commit that makes it. A `create` that failed while another writer made the table
    counts as made once the table is there (CREATED_BY_ANOTHER); its error propagates while there is
    still no table to be seen. With how: a version the table had by then (every later commit is newer)."""
    version = current_version()
    if version >= 0:
        return Made.FOUND, version
    try:
        create()
    except Exception as exc:
        try:
            version = current_version()
        except Exception:
            version = -1
        if version < 0:
            raise
        log.info("the Delta table's making failed while another writer made it (%s)", one_line(exc))
        return Made.CREATED_BY_ANOTHER, version
    return Made.CREATED, 0


def known(location: Path | str) -> bool:
    """Whether this process made or found the table at `location` already (`ensure_table`)."""
    with _known_lock:
        return str(location) in _known


def met_at(location: Path | str) -> int | None:
    """A version the table at `location` had when this process made or found it (`ensure_table`), before
    it prepared any bulk of it; None if it did not."""
    with _known_lock:
        return _known.get(str(location))


def ensure_table(location: Path | str, current_version: Callable[[], int], create: Callable[[], None]) -> Made:
    """`made` for the table at `location`, once per process: KNOWN when it was done before (see the
    module docstring: the table then exists). Logs a table it made."""
    key = str(location)
    if known(key):
        return Made.KNOWN
    outcome, version = made(current_version, create)
    with _known_lock:
        _known.setdefault(key, version)
    if outcome is not Made.FOUND:
        log.info("Delta table %s %s empty before its first bulk (so that every commit of it can be fenced)",
                 location, "made" if outcome is Made.CREATED else "made by another bridge at the same time")
    return outcome


def create_empty(empty: DataFrame, location: Path | str) -> None:
    """Write `empty` (a frame of no rows with a bulk's columns) as the Delta table at `location`,
    partitioned by put_date, unless a table is there (SaveMode.Ignore: then nothing is committed)."""
    if failpoints.active("delta_create_hang"):  # test only: the making never ends, until its jobs are cancelled
        empty.sparkSession.range(1).where(failpoints.HANG_FILTER).count()  # a filter on no rows would not hang
    (empty.write.format("delta").mode("ignore").partitionBy(PARTITION_COLUMN)
     .option("userMetadata", CREATE_MARK).save(str(location)))


def make_table(spark: SparkSession, location: Path | str, empty: Callable[[], DataFrame]) -> Made:
    """`ensure_table` with Spark: the version read from the table's history (`delta.current_version`),
    the table made by `create_empty` from `empty()` (the writer's frame of no rows, built only when needed)."""
    from mqbridge.landing.delta import current_version

    return ensure_table(location, lambda: current_version(spark, location),
                        lambda: create_empty(empty(), location))
