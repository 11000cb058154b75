"""The landing ledger: which bulks were prepared and published, and which message identities each
one holds (the exactly-once record of `ARCHITECTURE.md`, "Landing protocol").

`sqlite` is the embedded ledger (one SQLite file per `state_dir`, also the statements and records
every ledger shares); `postgres` is the ledger in PostgreSQL (`[ledger] url`) for bridges on several
hosts, its driver (psycopg) imported only when such a ledger is opened. `open_ledger` picks one from
the configuration.
"""

from __future__ import annotations

from mqbridge.landing.ledger.sqlite import (
    Ledger,
    LedgerStats,
    PreparedBulk,
    PublishedBulk,
    ledger_path,
    open_ledger,
    owner_alive,
    owner_id,
    this_host,
)

__all__ = ["Ledger", "LedgerStats", "PreparedBulk", "PublishedBulk", "ledger_path", "open_ledger",
           "owner_alive", "owner_id", "this_host"]
