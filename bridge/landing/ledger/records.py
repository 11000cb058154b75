"""What the landing ledger records of a bulk (`PreparedBulk`, `PublishedBulk`) and of itself
(`LedgerStats`), and how a bulk's `moves` column holds its files or its table transaction (JSON):
the records every backend reads back, apart from the statements that write them (`base`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mqbridge.landing.ledger.transactions import TableTransaction


@dataclass(frozen=True)
class PreparedBulk:
    """A bulk recorded as prepared: its files are staged, none or some already published.

    `files` holds the (staged path, final path) pairs given to `Ledger.prepare`, absolute; a bulk
    committed by its table's own transaction has none and its `transaction` instead.
    """

    bulk_id: str
    table: str
    files: tuple[tuple[str, str], ...]
    owner: str
    prepared_at: float
    identities: int
    transaction: TableTransaction | None = None


@dataclass(frozen=True)
class LedgerStats:
    """What `Ledger.stats` reports (and `mqbridge ledger` prints)."""

    path: Path | str  # the file, or the database URL without its password
    bulks: dict[str, int]  # by state: "prepared", "published"
    identities: int
    file_bytes: int  # the database file plus its write-ahead log (PostgreSQL: the tables' size)
    oldest: float | None  # epoch seconds of the oldest bulk's preparation, None when empty
    prune_runs: int
    last_prune: float | None


@dataclass(frozen=True)
class PublishedBulk:
    """A published bulk as `--verify` checks it."""

    bulk_id: str
    table: str
    files: tuple[tuple[str, str], ...]
    published_at: float
    transaction: TableTransaction | None = None



# -- the `moves` column ---------------------------------------------------------------------
def moves_column(moves: Sequence[tuple[str, str]], transaction: TableTransaction | None) -> str:
    """The `moves` column of a bulk: a JSON list of [staged path, final path], or for a bulk that its
    table commits by its own transaction a JSON object {"transaction": [app id, version]}."""
    if transaction is not None:
        return json.dumps({"transaction": [transaction.app_id, transaction.version]})
    return json.dumps([list(m) for m in moves])


def files_of(text: str) -> tuple[tuple[str, str], ...]:
    """The file moves of a `moves` column (none for a transaction)."""
    value = json.loads(text)
    return () if isinstance(value, dict) else tuple((staged, final) for staged, final in value)


def transaction_of(text: str) -> TableTransaction | None:
    value = json.loads(text)
    if isinstance(value, dict) and "transaction" in value:
        app_id, version = value["transaction"]
        return TableTransaction(str(app_id), int(version))
    return None


def prepared_bulk(bulk_id: str, table: str, moves: str, owner: str, prepared_at: float, count: int) -> PreparedBulk:
    return PreparedBulk(bulk_id, table, files_of(moves), owner, prepared_at, count, transaction_of(moves))
