"""What `mqbridge ledger --abandon` decides about a stuck bulk (`mqbridge.landing.stuck`): the verdicts,
the pure decision from what was found (`judge`), the `bulk_id` a ledger bulk's rows carry
(`row_bulk_id`) and whether a table holds any (`holds_rows_of`). Apart from `stuck`, so that the table
formats that look for a bulk's rows (`mqbridge.table_formats`, `mqbridge.landing.delta` and `iceberg`)
and `ledger --verify` use them without importing the command's module.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from mqbridge.landing.ledger import PreparedBulk

#: The suffix of the ledger id of a bulk spread over several tables (`SparkExecutor`: one ledger bulk
#: per table, `<bulk_id>.<n>`), or of a bulk a rebuilt ledger adopted from a table's rows
#: (`delta_ledger.adopt_rows`: `<bulk_id>~<table>`; a bulk id never holds '~'); its rows carry the
#: bulk's own id.
_TABLE_SUFFIX = re.compile(r"(\.\d+|~[^~]*)\Z")

#: The verdicts of `judge`.
FORGET, PUBLISHED, REFUSE = "forget", "published", "refuse"


@dataclass(frozen=True)
class Verdict:
    """What `--abandon` does with a bulk (`FORGET`, `PUBLISHED` or `REFUSE`), and why, in words."""

    action: str
    reason: str


def judge(bulk_id: str, bulk: PreparedBulk | None, state: str | None, *, alive: bool, gone: int,
          rows: int) -> Verdict:
    """The verdict on bulk `bulk_id` (a pure decision): `bulk` as the ledger holds it prepared (None:
    it is not, and `state` says what it is), whether its owner is `alive`, how many of its staged
    files are `gone` (`gone_files`) and how many `rows` the table holds of it
    (`mqbridge.table_formats.parquet.rows_in_table`)."""
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


def holds_rows_of(table: Any, bulk_id: str) -> bool:
    """Whether the Spark DataFrame `table` (a table's current version) holds a row of ledger bulk
    `bulk_id`. A table format's settle asks it when no commit it still keeps carries the bulk's id: a
    commit leaves Delta's log history after `delta.logRetentionDuration` and an Iceberg snapshot is
    expired after `[purge] vacuum_retention`, while the rows they wrote stay (a bulk settled that long
    after its commit was taken for never landed, and landed again). What is left: a bulk whose commit
    left the log and whose rows a purge removed too reads as never landed, and lands again."""
    from pyspark.sql import functions as F

    return bool(table.where(F.col("bulk_id") == F.lit(row_bulk_id(bulk_id))).limit(1).collect())
