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

How the table is asked is its format's (`mqbridge.table_formats`, `abandon`): a Parquet table's
containers are read for rows with the bulk's id. A bulk of a Delta table has no files to look for: its
commit carries its transaction (app id and version, `mqbridge.landing.delta`), and the table's log is
asked, with delta-rs, as the next start asks it with Spark (`delta.settle`): the version committed by
the bulk (its id is the commit's user metadata), recorded published; not committed, the version is
first fenced (an empty commit of it, so that a writer of the dead process still under way is skipped),
then the bulk is forgotten, unless its own commit came first after all.
"""

from __future__ import annotations

from mqbridge.config.warehouse import Location
from mqbridge.errors import StuckBulkError
from mqbridge.landing.ledger import Ledger
from mqbridge.landing.verdicts import FORGET, PUBLISHED, REFUSE, Verdict, judge, row_bulk_id
from mqbridge.table_formats import format_of_bulk

__all__ = ["FORGET", "PUBLISHED", "REFUSE", "Verdict", "abandon", "abandon_command", "advice", "judge",
           "row_bulk_id"]


def abandon_command(bulk_id: str, config: str) -> str:
    """The command that decides about stuck bulk `bulk_id` (`config`: the configuration file, "" when unknown)."""
    return f"mqbridge ledger --config {config or '<the configuration file>'} --abandon {bulk_id}"


def advice(error: StuckBulkError, config: str, waiting: str) -> str:
    """`error` with what to do about it: the command, what it does, and what waits meanwhile (`waiting`)."""
    return (f"{error}. Whether its rows are in the table decides what is safe: run "
            f"`{abandon_command(error.bulk_id, config)}` (it looks for the bulk's rows in table {error.table}, "
            "then forgets the bulk if none is there: its messages were never committed at the source and land "
            f"again; or records it published if all are there). Until then {waiting}")


def abandon(ledger: Ledger, bulk_id: str, warehouse: Location) -> Verdict:
    """Decide about stuck bulk `bulk_id` and carry the verdict out, as the format of its table says
    (`TableFormat.abandon`: forgotten, or recorded published; refused, nothing changes). Raises
    LedgerError when the bulk names a path outside its table."""
    bulk = next((b for b in ledger.in_progress() if b.bulk_id == bulk_id), None)
    if bulk is None:
        return judge(bulk_id, None, ledger.state_of(bulk_id), alive=False, gone=0, rows=0)
    return format_of_bulk(warehouse / bulk.table, bulk).abandon(ledger, bulk, warehouse)
