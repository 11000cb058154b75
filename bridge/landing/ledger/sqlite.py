"""The embedded ledger: one SQLite file, `ledger_path(state_dir)`, shared by every bridge process
using that `state_dir` (each `SqliteLedger` is one process's handle; `owner` names the process).
The records and statements are `mqbridge.landing.ledger.base.Ledger`'s; what is SQLite's is here.

Durability. Every connection sets `journal_mode=WAL`, `synchronous=FULL` and a `busy_timeout`
(`[ledger] busy_timeout`, `BUSY_TIMEOUT_MS` by default). With WAL and synchronous=FULL SQLite fsyncs
the write-ahead log at every commit, so a transaction that `prepare`, `mark_published`, `forget` or
`prune` committed (the method returned) survives both a `kill -9` of the process and a power loss of
the machine; one that had not committed is rolled back as if it never began. Writers take the lock
up front (`BEGIN IMMEDIATE`), so two processes never interleave a read-then-write. In WAL mode a
reader never waits for a writer, so the second connection (`published`) does not queue behind a
`prepare`.

A file that is corrupt, unreadable or another kind of SQLite database raises `LedgerError`; a
missing file is created (`Ledger.created`), 0600 in a 0700 directory whatever the umask (SQLite
gives its `-wal` and `-shm` files the database's mode). A `state_dir` or ledger file that another
user owns or may write raises ConfigError (`mqbridge.strict_modes`): it is never opened.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mqbridge.errors import LedgerError
from mqbridge.landing.ledger.base import Ledger
from mqbridge.landing.ledger.schema import SCHEMA_VERSION, initialise_counters, schema_statements
from mqbridge.strict_modes import check_trusted, private_dir, private_file

#: The ledger's file name under `[bridge] state_dir`.
LEDGER_FILE = "ledger.sqlite3"
#: How long a statement waits for another process's write lock before failing (milliseconds), unless
#: `[ledger] busy_timeout` says otherwise.
BUSY_TIMEOUT_MS = 30_000
#: Written to the file's header, so that another SQLite database is never taken for a ledger.
APPLICATION_ID = 0x6D716272  # "mqbr"
#: Which of a JSON list of identities (the statement's one parameter) a bulk in a given state holds.
#: The CROSS JOINs fix the plan: each identity is looked up by the primary key, then its bulk by
#: its key, so the cost grows with the list, not with the ledger. Left to itself, SQLite's planner
#: walks every published bulk through `bulks_by_state` (measured: 25 ms per 1,000 identities with 60
#: bulks in the ledger, rising with every bulk of the dedupe window; 1.3 ms this way).
_HOLDING_ANY = ("FROM json_each(?) AS j CROSS JOIN identities AS i ON i.identity = j.value "
                "CROSS JOIN bulks AS b ON b.bulk_id = i.bulk_id")
#: The tables in SQLite's types (heartbeats by this host's clock, in epoch seconds).
_STATEMENTS = schema_statements(seconds="REAL", heartbeat="REAL", identities_options=" WITHOUT ROWID")


def ledger_path(state_dir: Path) -> Path:
    """Where the ledger of a `[bridge] state_dir` lives."""
    return Path(state_dir) / LEDGER_FILE


def _is_busy(exc: sqlite3.Error) -> bool:
    """SQLITE_BUSY or SQLITE_LOCKED, in any of their extended forms."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(exc) or "busy" in str(exc)


#: The SQL function of this process's clock on the ledger's connections (`SqliteLedger.CLOCK`).
_CLOCK_FUNCTION = "mqbridge_clock"


def _connect(database: str | Path, timeout: float, *, uri: bool = False) -> sqlite3.Connection:
    """A connection without implicit transactions (every write says BEGIN IMMEDIATE), usable from any
    thread (the ledger's lock serialises it), with the ledger's clock (`SqliteLedger.CLOCK`)."""
    db = sqlite3.connect(database, timeout=timeout, isolation_level=None, check_same_thread=False, uri=uri)
    db.create_function(_CLOCK_FUNCTION, 0, time.time)
    return db


def _connect_read_only(path: Path) -> sqlite3.Connection:
    """A connection that cannot write `path` (nor create it): a `file:` URI with `mode=ro`."""
    return _connect(f"{path.absolute().as_uri()}?mode=ro", BUSY_TIMEOUT_MS / 1000, uri=True)


class SqliteLedger(Ledger):
    """The ledger in one SQLite file; see the module docstring."""

    HOLDING_ANY = _HOLDING_ANY
    HOLDING = _HOLDING_ANY + " WHERE b.state = ?"
    INSERT_IDENTITIES = "INSERT INTO identities (identity, bulk_id) SELECT j.value, ? FROM json_each(?) AS j"
    ERRORS: tuple[type[BaseException], ...] = (sqlite3.Error,)
    TRANSIENT: tuple[type[BaseException], ...] = (sqlite3.OperationalError,)
    COUNT_PRUNE = ("INSERT INTO meta (key, value) VALUES ('prune_runs', '1') "
                   "ON CONFLICT (key) DO UPDATE SET value = CAST(value AS INTEGER) + 1")
    #: This host's clock (one host's ledger): Python's `time.time`, registered on each connection.
    CLOCK = f"{_CLOCK_FUNCTION}()"

    # -- the backend hooks of Ledger ------------------------------------------------------------
    def _identities_parameter(self, identities: Sequence[str]) -> Any:
        return json.dumps(list(dict.fromkeys(identities)))

    def _begin_write(self, db: Any) -> None:
        db.execute("BEGIN IMMEDIATE")

    #: Opened by `open_read_only`: every connection is `mode=ro`.
    read_only = False
    #: How long a statement waits for another process's write lock (milliseconds; `open`'s `busy_timeout`).
    busy_timeout_ms = BUSY_TIMEOUT_MS

    def _open_reader(self) -> Any:
        if self.read_only:
            return _connect_read_only(Path(self.path))
        reader = _connect(self.path, self.busy_timeout_ms / 1000)
        reader.execute("PRAGMA query_only = ON")
        return reader

    def _size_bytes(self) -> int:
        path = Path(self.path)
        return sum(p.stat().st_size for p in (path, path.with_name(path.name + "-wal")) if p.exists())

    def _heartbeat_fresh(self, owner: str) -> bool:
        """An owner that never wrote a heartbeat (from an mqbridge before heartbeats) is taken for alive."""
        with self._read() as db:
            row = self._execute(db, "SELECT last_seen FROM owners WHERE owner = ?", (owner,)).fetchone()
        return row is None or time.time() - float(row[0]) < self.lease

    def _touch_owner(self, db: Any) -> None:
        self._execute(db, "INSERT INTO owners (owner, last_seen) VALUES (?, ?) "
                          "ON CONFLICT (owner) DO UPDATE SET last_seen = excluded.last_seen",
                      (self.owner, time.time()))

    # -- opening --------------------------------------------------------------------------------
    @classmethod
    def open(cls, path: Path, *, owner: str, busy_timeout: float | None = None) -> SqliteLedger:
        """Open (or create, with its directory) the ledger at `path`; its statements wait up to
        `busy_timeout` seconds (None: `BUSY_TIMEOUT_MS`) for another process's write lock. Raises LedgerError when the
        file is corrupt, unreadable or another kind of SQLite database, ConfigError when it or its
        directory can be changed by another user."""
        path = Path(path)
        busy_ms = BUSY_TIMEOUT_MS if busy_timeout is None else max(1, round(busy_timeout * 1000))
        # Whoever can write the ledger decides what counts as landed and what recovery renames.
        check_trusted(path.parent, "state_dir")
        check_trusted(path, "ledger")
        try:
            private_dir(path.parent)
            created = private_file(path) or path.stat().st_size == 0  # empty: never set up
            db = _connect(path, busy_ms / 1000)
        except (OSError, sqlite3.Error) as exc:
            raise LedgerError(f"ledger {path}: cannot open: {exc}") from exc
        try:
            cls._setup_when_free(db, path, busy_ms)
        except sqlite3.Error as exc:
            db.close()
            if _is_busy(exc):
                raise LedgerError(f"ledger {path}: locked by another process for more than "
                                  f"{busy_ms / 1000:g} s ({exc})") from exc
            raise LedgerError(f"ledger {path}: unreadable or corrupt ({exc}); move it aside only if "
                              "you accept that earlier landings will not be recognised") from exc
        except LedgerError:
            db.close()
            raise
        ledger = cls(path, owner, db, created)
        ledger.busy_timeout_ms = busy_ms
        return ledger

    @classmethod
    def open_read_only(cls, path: Path, *, owner: str) -> SqliteLedger:
        """The existing ledger at `path`, for reading only (SQLite `mode=ro`): nothing is created,
        set up or written, not even a heartbeat, so `mqbridge ledger` beside a running bridge
        changes nothing and needs no write permission. LedgerError when it cannot be read."""
        try:
            db = _connect_read_only(Path(path))
            db.execute("SELECT 1 FROM meta LIMIT 1")
        except sqlite3.Error as exc:
            raise LedgerError(f"ledger {path}: cannot open read-only: {exc}") from exc
        ledger = cls(path, owner, db, created=False)
        ledger.read_only = True
        return ledger

    @classmethod
    def _setup_when_free(cls, db: sqlite3.Connection, path: Path, busy_ms: int) -> None:
        """`_setup`, tried again while another process holds the file: switching a new file to
        write-ahead logging returns SQLITE_BUSY at once, without the busy handler, when a second
        process opens it at the same moment (two bridges started together on one `state_dir`).
        Every step of `_setup` may be repeated."""
        deadline = time.monotonic() + busy_ms / 1000
        pause = 0.005
        while True:
            try:
                cls._setup(db, path, busy_ms)
                return
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc) or time.monotonic() >= deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.2)

    @staticmethod
    def _setup(db: sqlite3.Connection, path: Path, busy_ms: int) -> None:
        db.execute(f"PRAGMA busy_timeout = {int(busy_ms)}")
        # Reading the schema first: a file that is not a database fails here, before any write.
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        app_id = db.execute("PRAGMA application_id").fetchone()[0]
        if tables and app_id != APPLICATION_ID:
            raise LedgerError(f"ledger {path}: an SQLite database that is not an mqbridge ledger")
        if tables:
            # Catches damaged pages too, at the cost of one read of the file at start-up.
            problems = [row[0] for row in db.execute("PRAGMA quick_check")]
            if problems != ["ok"]:
                raise LedgerError(f"ledger {path}: corrupt: {'; '.join(problems[:3])}")
        if db.execute("PRAGMA journal_mode = WAL").fetchone()[0].lower() != "wal":
            raise LedgerError(f"ledger {path}: cannot use write-ahead logging (a network file system?)")
        db.execute("PRAGMA synchronous = FULL")
        try:
            db.execute("SELECT value FROM json_each('[]')").fetchall()
        except sqlite3.OperationalError as exc:
            raise LedgerError(f"ledger {path}: this Python's SQLite ({sqlite3.sqlite_version}) has no JSON "
                              "functions (SQLite 3.38 or later, or one built with JSON1, is needed)") from exc
        db.execute("BEGIN IMMEDIATE")
        try:
            for statement in _STATEMENTS:
                db.execute(statement)
            db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, SCHEMA_VERSION):
                raise LedgerError(f"ledger {path}: schema version {version}, this mqbridge knows "
                                  f"{SCHEMA_VERSION}")
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            initialise_counters(db)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
