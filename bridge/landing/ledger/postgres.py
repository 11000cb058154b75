"""The landing ledger in PostgreSQL (`[ledger] url`), for bridges on several hosts that share a
queue and a warehouse but no local disk. The same records, tables and statements as the embedded
SQLite ledger (`mqbridge.landing.ledger.base.Ledger`, `schema`); what differs is said here.

Durability. Every write is one transaction committed with PostgreSQL's defaults
(`synchronous_commit = on`: the commit returns once its WAL record is flushed on the server, and
on its synchronous standbys if the server has any). Writers serialise on one transaction-level
advisory lock (`pg_advisory_xact_lock`), as SQLite's `BEGIN IMMEDIATE` serialises them, so a
`prepare`'s check for published identities and its inserts are never interleaved with another
bridge's.

Owners on other hosts. A process id means nothing across hosts, so each bridge writes a heartbeat
(`owners.last_seen`, the server's clock) when it opens the ledger and at every control tick; an
owner on another host whose heartbeat is older than `[ledger] lease` is taken for dead, and the
bulks it left prepared are finished by whichever bridge meets their messages first (or by its own
next start). Owners on this host are judged by their pid, as with SQLite. A bridge that stalls for
longer than the lease while holding a prepared bulk can thus see another bridge finish it: rolling
forward is idempotent; a roll-back (another bridge landed the same messages first) makes the
stalled bridge's publication fail and retry until it is restarted, never land twice.

psycopg (`pip install "mqbridge[postgresql]"`) is imported when a PostgreSQL ledger is opened.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from contextlib import suppress
from typing import Any
from urllib.parse import parse_qsl

from mqbridge.errors import LedgerError
from mqbridge.landing.ledger.base import Ledger
from mqbridge.landing.ledger.schema import initialise_counters, schema_statements

#: The advisory lock key every writer of one database takes ("mqbr" as a number).
WRITE_LOCK = 0x6D716272
#: A bridge that goes silent inside a write transaction (its host cut off, frozen, or its process
#: stopped between two statements) would hold the write lock, and so every other bridge's `prepare`,
#: until the server noticed the dead client: with the kernel's TCP keepalive defaults, about two hours.
#: So each session asks the server to end it when it stays inside a transaction this long without a
#: statement (`idle_in_transaction_session_timeout`), which releases its locks: far longer than the
#: gaps between the statements of the bridge's own transactions (milliseconds). The session that was
#: ended finds out at its next statement (an outage: its transaction recorded nothing) and reconnects.
IDLE_IN_TRANSACTION_SECONDS = 15
#: TCP keepalives on both ends (libpq's `keepalives_*`, the server's `tcp_keepalives_*`): a silent
#: peer is taken for gone after 10 s idle + 3 probes 5 s apart, whichever end it is. Settings the URL
#: gives win.
KEEPALIVES = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 3}
#: The tables, in the configured schema; heartbeats by the server's clock, one for every host.
_STATEMENTS = schema_statements(seconds="DOUBLE PRECISION", heartbeat="TIMESTAMPTZ")
_PASSWORD = re.compile(r"(^[a-z]+://[^:/@]*:)([^@/]+)(@)|(password\s*=\s*)(\S+)", re.IGNORECASE)


def shown_url(url: str) -> str:
    """`url` with its password replaced by `***`."""
    return _PASSWORD.sub(lambda m: f"{m[1]}***{m[3]}" if m[1] else f"{m[4]}***", url)


class PostgresLedger(Ledger):
    """The ledger in a PostgreSQL schema; see the module docstring."""

    HOLDING_ANY = ("FROM unnest(?::text[]) AS j(value) JOIN identities AS i ON i.identity = j.value "
                   "JOIN bulks AS b ON b.bulk_id = i.bulk_id")
    HOLDING = HOLDING_ANY + " WHERE b.state = ?"
    shared_across_hosts = True
    INSERT_IDENTITIES = ("INSERT INTO identities (identity, bulk_id) "
                         "SELECT j.value, ? FROM unnest(?::text[]) AS j(value)")
    COUNT_PRUNE = ("INSERT INTO meta (key, value) VALUES ('prune_runs', '1') "
                   "ON CONFLICT (key) DO UPDATE SET value = (CAST(meta.value AS INTEGER) + 1)::text")
    #: The database server's clock, as the owners' heartbeats are judged by.
    CLOCK = "CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)"

    def __init__(self, url: str, schema: str, lease: float, owner: str, connection: Any, created: bool) -> None:
        super().__init__(shown_url(url), owner, connection, created)
        self._url, self._schema, self.lease = url, schema, lease
        import psycopg

        self.ERRORS = (psycopg.Error,)
        # A dropped connection, a server that is down or restarting, or a session the server ended
        # (`IDLE_IN_TRANSACTION_SECONDS`): an outage, retried with a new connection (`_usable`); any
        # other error (a constraint, a missing table) is not.
        self.TRANSIENT = (psycopg.OperationalError, psycopg.InterfaceError,
                          psycopg.errors.IdleInTransactionSessionTimeout)

    @classmethod
    def open_url(cls, url: str, *, owner: str, schema: str = "mqbridge", lease: float = 60.0) -> PostgresLedger:
        """Connect, create the schema and tables on first use, and write this owner's heartbeat.
        Raises LedgerError (naming the server, never the password) when it cannot."""
        try:
            import psycopg
        except ImportError as exc:
            raise LedgerError('[ledger] url needs psycopg: pip install "mqbridge[postgresql]"') from exc
        try:
            db = _connect(url, schema)
        except psycopg.Error as exc:
            raise LedgerError(f"ledger {shown_url(url)}: cannot connect: {_one_line(exc, url)}"
                              f"{_certificate_hint(exc, url)}") from None
        try:
            db.execute("SELECT pg_advisory_lock(%s)", (WRITE_LOCK,))  # first use by several bridges at once
            try:
                db.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')  # the name is checked by the configuration
                created = db.execute("SELECT to_regclass('bulks') IS NULL").fetchone()[0]
                for statement in _STATEMENTS:
                    db.execute(statement)
                with db.transaction():  # under the lock every writer takes: no bulk moves meanwhile
                    initialise_counters(db, lambda statement: statement.replace("?", "%s"))
            finally:
                db.execute("SELECT pg_advisory_unlock(%s)", (WRITE_LOCK,))
            ledger = cls(url, schema, lease, owner, db, bool(created))
            ledger.heartbeat()
        except psycopg.Error as exc:
            db.close()
            raise LedgerError(f"ledger {shown_url(url)}: {_one_line(exc, url)}") from None
        return ledger

    # -- the backend hooks of Ledger ------------------------------------------------------------
    def _sql(self, statement: str) -> str:
        return statement.replace("?", "%s")

    def _identities_parameter(self, identities: Sequence[str]) -> Any:
        return list(dict.fromkeys(identities))

    def _begin_write(self, db: Any) -> None:
        db.execute("BEGIN")
        db.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))

    def _open_reader(self) -> Any:
        return _connect(self._url, self._schema)

    def _usable(self, db: Any) -> Any:
        """A new connection in place of one the server dropped (a restart, a network cut): the
        ledger's records live on the server, so a new session continues where the old one was."""
        if not (db.closed or db.broken):
            return db
        with suppress(Exception):
            db.close()
        return _connect(self._url, self._schema)

    def _size_bytes(self) -> int:
        with self._read() as db:
            row = db.execute("SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                             "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'",
                             (self._schema,)).fetchone()
        return int(row[0])

    def _heartbeat_fresh(self, owner: str) -> bool:
        """An owner that never wrote a heartbeat is dead: every bridge with a PostgreSQL ledger writes one."""
        with self._read() as db:
            row = db.execute("SELECT last_seen > now() - make_interval(secs => %s) FROM owners WHERE owner = %s",
                             (self.lease, owner)).fetchone()
        return bool(row and row[0])

    def heartbeat(self) -> None:
        """The heartbeat needs no write lock: one autocommitted statement."""
        with self._read() as db:
            self._touch_owner(db)

    def _touch_owner(self, db: Any) -> None:
        """The heartbeat by the server's clock, one for every host."""
        db.execute("INSERT INTO owners (owner, last_seen) VALUES (%s, now()) "
                   "ON CONFLICT (owner) DO UPDATE SET last_seen = now()", (self.owner,))


def _connect(url: str, schema: str) -> Any:
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    given = conninfo_to_dict(url)
    keepalives = {k: v for k, v in KEEPALIVES.items() if k not in given}
    db = psycopg.connect(make_conninfo(url, **keepalives), autocommit=True, connect_timeout=10,
                         application_name="mqbridge-ledger")
    db.execute(f'SET search_path TO "{schema}"')  # the name is checked by the configuration
    db.execute(f"SET idle_in_transaction_session_timeout = '{IDLE_IN_TRANSACTION_SECONDS}s'")
    for key in ("idle", "interval", "count"):
        seconds = int(str(given.get(f"keepalives_{key}", KEEPALIVES[f"keepalives_{key}"])))
        db.execute(f"SET tcp_keepalives_{key} = {seconds}")
    return db


def _certificate_hint(exc: BaseException, url: str) -> str:
    """What libpq leaves unsaid when it refuses the server's certificate: which root certificates
    it was checked against, and the usual reasons (OpenSSL's own reason does not reach libpq's
    message). A host name that does not match is already named by libpq."""
    if "certificate verify failed" not in str(exc):
        return ""
    roots = dict(parse_qsl(url.partition("?")[2])).get("sslrootcert")
    where = f"sslrootcert={roots}" if roots else "the default root certificate file (no sslrootcert in the URL)"
    return f" (usually: the server's certificate is not signed by a CA in {where}, or has expired or is not yet valid)"


def _one_line(exc: BaseException, url: str) -> str:
    text = " ".join(str(exc).split())
    password = _PASSWORD.search(url)
    if password and (password[2] or password[5]):
        text = text.replace(password[2] or password[5], "***")
    return text
