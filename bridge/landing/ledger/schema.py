"""The ledger's tables and counters, written once for every backend.

`SCHEMA` names the columns; `schema_statements` renders it with a backend's column types (SQLite:
seconds as REAL, the identities table WITHOUT ROWID; PostgreSQL: DOUBLE PRECISION, and heartbeats as
TIMESTAMPTZ by the server's clock). `COUNTERS` are the counts `Ledger.stats` reports, kept as rows of
`meta`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

SCHEMA_VERSION = 1

#: The tables. `{seconds}`: a column of epoch seconds; `{heartbeat}`: the type of `owners.last_seen`;
#: `{identities_options}`: what follows the identities table's column list.
SCHEMA = """
CREATE TABLE IF NOT EXISTS bulks (
    bulk_id      TEXT PRIMARY KEY,
    table_name   TEXT NOT NULL,
    moves        TEXT NOT NULL,  -- JSON list of [staged path, final path]
    owner        TEXT NOT NULL,
    state        TEXT NOT NULL CHECK (state IN ('prepared', 'published')),
    prepared_at  {seconds} NOT NULL,
    published_at {seconds},
    identities   INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS bulks_by_state ON bulks (state, published_at);
CREATE INDEX IF NOT EXISTS bulks_by_prepared ON bulks (prepared_at);
CREATE TABLE IF NOT EXISTS identities (
    identity TEXT NOT NULL,
    bulk_id  TEXT NOT NULL,
    PRIMARY KEY (identity, bulk_id)
){identities_options};
CREATE INDEX IF NOT EXISTS identities_by_bulk ON identities (bulk_id);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS owners (owner TEXT PRIMARY KEY, last_seen {heartbeat} NOT NULL);
"""


def schema_statements(*, seconds: str, heartbeat: str, identities_options: str = "") -> list[str]:
    """The statements of `SCHEMA` with a backend's column types, one by one (every one may be run
    again on an existing ledger)."""
    text = SCHEMA.format(seconds=seconds, heartbeat=heartbeat, identities_options=identities_options)
    return [statement for statement in text.split(";") if statement.strip()]


#: The counts `Ledger.stats` reports, kept as rows of `meta` by every transaction that changes what
#: they count (`prepare`, `mark_published`, `forget`, `prune`), so that no hot path (a control tick,
#: `/metrics`, `/status`) counts the rows of a ledger that grows with the dedupe window. Each query
#: counts once, when a ledger is opened without its counter (a ledger written before counters).
COUNTERS = {
    "count_identities": "SELECT COUNT(*) FROM identities",
    "count_prepared": "SELECT COUNT(*) FROM bulks WHERE state = 'prepared'",
    "count_published": "SELECT COUNT(*) FROM bulks WHERE state = 'published'",
}
#: Adds its three parameters to the identities, prepared and published counters (in one statement;
#: the same text in SQLite and PostgreSQL, BIGINT as a 7-day window may pass 2**31 identities).
ADD_COUNTS = ("UPDATE meta SET value = CAST(CAST(value AS BIGINT) + CASE key WHEN 'count_identities' THEN ? "
              "WHEN 'count_prepared' THEN ? ELSE ? END AS TEXT) "
              "WHERE key IN ('count_identities', 'count_prepared', 'count_published')")


def initialise_counters(db: Any, sql: Callable[[str], str] = str) -> None:
    """Count, inside the caller's write transaction on `db`, each of `COUNTERS` that `meta` lacks
    (once, on a ledger from before the counters); `sql` puts a statement in the driver's style."""
    present = {row[0] for row in db.execute(sql("SELECT key FROM meta WHERE key IN (?, ?, ?)"), tuple(COUNTERS))}
    for key, query in COUNTERS.items():
        if key not in present:
            count = db.execute(query).fetchone()[0]
            db.execute(sql("INSERT INTO meta (key, value) VALUES (?, ?)"), (key, str(count)))
