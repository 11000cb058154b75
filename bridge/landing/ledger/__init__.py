"""The landing ledger: which bulks were prepared and published, and which message identities each
one holds (the exactly-once record of `ARCHITECTURE.md`, "Landing protocol").

The modules: `base` (the `Ledger` every backend is: the statements they share), `records` (what it
records of a bulk, and the JSON of a bulk's files or table transaction), `schema`
(the tables, written once, and the counters), `owners` (which process wrote a bulk, and whether it
may still run), and the backends: `sqlite` (one embedded SQLite file per `state_dir`) and
`postgres` (`[ledger] url`, for bridges on several hosts; it and its driver, psycopg, are imported
only when such a ledger is opened). `open_ledger` picks one from the configuration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mqbridge.errors import LedgerError, LedgerUnavailableError
from mqbridge.landing.ledger.base import Ledger
from mqbridge.landing.ledger.owners import owner_alive, owner_id, this_host
from mqbridge.landing.ledger.records import LedgerStats, PreparedBulk, PublishedBulk
from mqbridge.landing.ledger.sqlite import SqliteLedger, ledger_path
from mqbridge.landing.ledger.transactions import TableTransaction, Versions, app_id

if TYPE_CHECKING:
    from mqbridge.config import BridgeConfig

__all__ = ["Ledger", "LedgerStats", "PreparedBulk", "PublishedBulk", "TableTransaction", "Versions", "app_id",
           "SqliteLedger", "ledger_path", "open_ledger", "open_ledger_for_reading", "owner_alive", "owner_id",
           "this_host"]


def open_ledger(config: BridgeConfig, *, owner: str) -> Ledger:
    """The ledger a configuration names: PostgreSQL when `[ledger] url` is set, else the SQLite
    file under `[bridge] state_dir` (created on first use)."""
    section = config.ledger
    if section.url is not None:
        from mqbridge.landing.ledger.postgres import PostgresLedger  # psycopg only for a PostgreSQL ledger

        return PostgresLedger.open_url(section.url.get_secret_value(), owner=owner,
                                       schema=section.database_schema, lease=section.lease)
    ledger = SqliteLedger.open(ledger_path(config.resolve_path(config.bridge.state_dir)), owner=owner,
                               busy_timeout=section.busy_timeout)
    ledger.lease = section.lease
    try:
        ledger.heartbeat()  # bridges in other pid namespaces on this state_dir judge this one by it
    except LedgerUnavailableError as exc:
        ledger.close()
        raise LedgerError(f"{exc} (at start-up)") from exc
    return ledger


def open_ledger_for_reading(config: BridgeConfig, *, owner: str) -> Ledger:
    """The ledger a configuration names, for a command that only reads it (`mqbridge ledger`): the
    SQLite file read-only (it must exist; no heartbeat is written), a PostgreSQL ledger as
    `open_ledger` opens it."""
    if config.ledger.url is not None:
        return open_ledger(config, owner=owner)
    return SqliteLedger.open_read_only(ledger_path(config.resolve_path(config.bridge.state_dir)), owner=owner)
