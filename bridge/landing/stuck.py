"""Stuck bulks: a prepared bulk of a process that is gone whose staged files are gone and were never
published, so that recovery can roll it neither forward nor back (`publication.roll_forward` raises
`StuckBulkError`), and what an operator does about it: `mqbridge ledger --config F --abandon BULK`.

What is safe depends on one fact, which the ledger alone cannot give: are the bulk's rows in the
table? Every landed row carries the `bulk_id` of the bulk that landed it, so the table is asked.

* none of its rows is there: the bulk never became visible. Its messages were never committed at
  the source (the source commits only after the ledger says published), so they are still on their
  queue (or were given back to it): forgetting the bulk (its identities with it) loses nothing, and
  they land when read again.
* all of them are there (one per identity): the bulk did become visible, and something rewrote its
  files afterwards (a compaction or purge before this guard existed, a copy by hand). Its identities
  must stay: recording it published makes its messages recognised as landed when they come back.
* some of them: part of it is visible and part is lost. Neither choice is exact (forgetting lands
  the visible ones twice, recording loses the others), so `--abandon` refuses and says why.

The bulk's owner must be dead (a live process is publishing it), and some of its files must be gone
(otherwise the next start rolls it forward, and nothing needs deciding).

A bulk of a Delta table has no files to look for: its commit carries its transaction (app id and
version, `mqbridge.landing.delta`), and the table's log is asked, with delta-rs, as the next start asks
it with Spark (`delta.settle`): the version committed by the bulk (its id is the commit's user metadata),
recorded published; not committed, the version is first fenced (an empty commit of it, so that a writer
of the dead process still under way is skipped), then the bulk is forgotten, unless its own commit came
first after all.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from mqbridge.errors import LedgerError, StuckBulkError
from mqbridge.landing.containers import data_files
from mqbridge.landing.ledger import Ledger, PreparedBulk
from mqbridge.landing.publication import check_bulk_paths, discard, gone_files, staging_dir

log = logging.getLogger(__name__)

#: The suffix of the ledger id of a bulk spread over several tables (`SparkExecutor`: one ledger bulk
#: per table, `<bulk_id>.<n>`); its rows carry the bulk's own id.
_TABLE_SUFFIX = re.compile(r"\.\d+\Z")

#: The verdicts of `judge`.
FORGET, PUBLISHED, REFUSE = "forget", "published", "refuse"


def abandon_command(bulk_id: str, config: str) -> str:
    """The command that decides about stuck bulk `bulk_id` (`config`: the configuration file, "" when unknown)."""
    return f"mqbridge ledger --config {config or '<the configuration file>'} --abandon {bulk_id}"


def advice(error: StuckBulkError, config: str, waiting: str) -> str:
    """`error` with what to do about it: the command, what it does, and what waits meanwhile (`waiting`)."""
    return (f"{error}. Whether its rows are in the table decides what is safe: run "
            f"`{abandon_command(error.bulk_id, config)}` (it looks for the bulk's rows in table {error.table}, "
            "then forgets the bulk if none is there: its messages were never committed at the source and land "
            f"again; or records it published if all are there). Until then {waiting}")


@dataclass(frozen=True)
class Verdict:
    """What `--abandon` does with a bulk (`FORGET`, `PUBLISHED` or `REFUSE`), and why, in words."""

    action: str
    reason: str


def judge(bulk_id: str, bulk: PreparedBulk | None, state: str | None, *, alive: bool, gone: int,
          rows: int) -> Verdict:
    """The verdict on bulk `bulk_id` (a pure decision): `bulk` as the ledger holds it prepared (None:
    it is not, and `state` says what it is), whether its owner is `alive`, how many of its staged
    files are `gone` (`gone_files`) and how many `rows` the table holds of it (`rows_in_table`)."""
    if bulk is None:
        what = f"is {state}" if state else "is not in the ledger (never prepared, rolled back or abandoned)"
        return Verdict(REFUSE, f"bulk {bulk_id} {what}: nothing to abandon")
    if alive:
        return Verdict(REFUSE, f"bulk {bulk_id} belongs to {bulk.owner}, which is running (or within its lease): "
                               "it is publishing the bulk; nothing to abandon")
    if not gone:
        return Verdict(REFUSE, f"every file of bulk {bulk_id} is still there (staged or published): it is not "
                               "stuck; the next start of `mqbridge run` rolls it forward")
    if rows == 0:
        return Verdict(FORGET, f"none of its {bulk.identities} rows is in table {bulk.table}: the bulk is "
                               "forgotten; its messages were never committed at the source and land when read again")
    if rows == bulk.identities:
        return Verdict(PUBLISHED, f"all {rows} of its rows are in table {bulk.table} (their files were rewritten): "
                                  "the bulk is recorded published; its messages are recognised as landed when "
                                  "they come back")
    return Verdict(REFUSE, f"{rows} rows of bulk {bulk_id} are in table {bulk.table}, for {bulk.identities} "
                           "identities: part of it is visible and part is lost. Forgetting it would land the visible "
                           "messages twice, recording it published would lose the others; the ledger is left as "
                           f"it is. The visible rows are those with bulk_id = '{row_bulk_id(bulk_id)}'")


def row_bulk_id(bulk_id: str) -> str:
    """The `bulk_id` the rows of ledger bulk `bulk_id` carry (the bulk's own id, without the table
    number of a bulk spread over several tables)."""
    return _TABLE_SUFFIX.sub("", bulk_id)


def rows_in_table(bulk: PreparedBulk, warehouse: Path) -> int:
    """How many rows of the containers `bulk` was to land in carry its bulk id (its `bulk_id`
    column read, file by file, with pyarrow)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    wanted = pa.array(sorted({bulk.bulk_id, row_bulk_id(bulk.bulk_id)}), type=pa.string())
    containers = sorted({os.path.dirname(final) for _, final in bulk.files})
    found = 0
    for container in containers:
        for path in data_files(Path(container)):
            column = pq.read_table(path, columns=["bulk_id"]).column(0)
            found += int(pc.sum(pc.is_in(column, value_set=wanted)).as_py() or 0)
    return found


def abandon(ledger: Ledger, bulk_id: str, warehouse: Path) -> Verdict:
    """Decide about stuck bulk `bulk_id` (`judge`) and carry the verdict out: forget it (its staged
    files that are left removed) or record it published; then its staging directory goes. Refused,
    nothing changes. Raises LedgerError when the bulk names a path outside its table
    (`check_bulk_paths`)."""
    bulk = next((b for b in ledger.in_progress() if b.bulk_id == bulk_id), None)
    if bulk is None:
        return judge(bulk_id, None, ledger.state_of(bulk_id), alive=False, gone=0, rows=0)
    if bulk.transaction is not None:
        return _abandon_committed_by_table(ledger, bulk, Path(warehouse))
    check_bulk_paths(bulk, warehouse)
    alive = ledger.owner_alive(bulk.owner)
    gone = len(gone_files(bulk))
    rows = rows_in_table(bulk, warehouse) if gone and not alive else 0
    verdict = judge(bulk_id, bulk, "prepared", alive=alive, gone=gone, rows=rows)
    if verdict.action == FORGET:
        for staged, _ in bulk.files:
            if os.path.exists(staged):
                os.remove(staged)
        ledger.forget(bulk_id)
    elif verdict.action == PUBLISHED:
        ledger.mark_published(bulk_id)
    if verdict.action != REFUSE:
        discard(staging_dir(Path(warehouse) / bulk.table, bulk.owner, bulk_id))
        log.info("bulk %s abandoned by an operator: %s", bulk_id, verdict.reason)
    return verdict


def _abandon_committed_by_table(ledger: Ledger, bulk: PreparedBulk, warehouse: Path) -> Verdict:
    """`abandon` of a bulk of a Delta table: its owner dead, the table's log decides (module docstring)."""
    from mqbridge.landing import delta_read
    from mqbridge.landing.delta import FENCE_MARK

    transaction = bulk.transaction
    assert transaction is not None
    if ledger.owner_alive(bulk.owner):
        return judge(bulk.bulk_id, bulk, "prepared", alive=True, gone=0, rows=0)
    root = Path(os.path.normpath(Path(warehouse).absolute()))
    table = Path(os.path.normpath(root / bulk.table))
    if root not in table.parents:  # the ledger is data: no table outside the warehouse
        raise LedgerError(f"prepared bulk {bulk.bulk_id} of {bulk.owner} names table {bulk.table!r}, which is not a "
                          f"directory of the warehouse {warehouse}: it is left as it is")
    if delta_read.is_delta(table):
        before = -1  # a commit of the bulk is one newer than this version
        committed = delta_read.transaction_version(table, transaction.app_id)
        if committed is None or committed < transaction.version:
            before = delta_read.newest_version(table)
            delta_read.fence(table, transaction, f"{FENCE_MARK} {transaction.app_id} {transaction.version}")
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
        verdict = Verdict(FORGET, f"there is no Delta table at {table}: bulk {bulk.bulk_id} never committed; it is "
                                  "forgotten, its messages land when read again")
        ledger.forget(bulk.bulk_id)
    discard(staging_dir(table, bulk.owner, bulk.bulk_id))
    log.info("bulk %s abandoned by an operator: %s", bulk.bulk_id, verdict.reason)
    return verdict

