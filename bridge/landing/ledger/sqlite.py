"""The landing ledger: which bulks were prepared and published, and which message identities
each one holds (the exactly-once record of `ARCHITECTURE.md`, "Landing protocol").

One embedded SQLite file, `ledger_path(state_dir)`, shared by every bridge process using that
`state_dir` (each `Ledger` is one process's handle; `owner` names the process).

Durability. Every connection sets `journal_mode=WAL`, `synchronous=FULL` and a `busy_timeout`
(`BUSY_TIMEOUT_MS`). With WAL and synchronous=FULL SQLite fsyncs the write-ahead log at every
commit, so a transaction that `prepare`, `mark_published`, `forget` or `prune` committed (the
method returned) survives both a `kill -9` of the process and a power loss of the machine; one
that had not committed is rolled back as if it never began. Writers take the lock up front
(`BEGIN IMMEDIATE`), so two processes never interleave a read-then-write.

Identities. An identity (the string the listener's rule gives, see `mqbridge.identity`) appears
in at most one *published* bulk. The identities table is keyed by (identity, bulk_id), so one
identity may sit in several *prepared* bulks: a bulk whose process died between prepare and
publish keeps its rows until recovery decides its fate, and a redelivered message may be prepared
again meanwhile. `prepare` refuses (`DuplicateIdentityError`) an identity a published bulk holds;
recovery (`mqbridge.landing.publication.recover`) rolls a dead bulk back, not forward, when another bulk
published one of its identities first. What remains open is two *live* processes preparing the
same identity at once (only after the source redelivered a message a live bridge still held, i.e.
its connection was lost): both may publish.

A file that is corrupt, unreadable or not a ledger raises `LedgerError` (never an empty start); a
missing file is created and `Ledger.created` says so, so that the caller can warn that landings
before it cannot be recognised.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from mqbridge.errors import DuplicateIdentityError, LedgerError, LedgerUnavailableError

log = logging.getLogger(__name__)

#: The ledger's file name under `[bridge] state_dir`.
LEDGER_FILE = "ledger.sqlite3"
#: How long a statement waits for another process's write lock before failing (milliseconds).
BUSY_TIMEOUT_MS = 30_000
#: Written to the file's header, so that another SQLite database is never taken for a ledger.
APPLICATION_ID = 0x6D716272  # "mqbr"
SCHEMA_VERSION = 1
#: Which of a JSON list of identities (the statement's one parameter) a bulk in a given state holds.
#: The CROSS JOINs fix the plan: each identity is looked up by the primary key, then its bulk by
#: its key, so the cost grows with the list, not with the ledger. Left to itself, SQLite's planner
#: walks every published bulk through `bulks_by_state` (measured: 25 ms per 1,000 identities with 60
#: bulks in the ledger, rising with every bulk of the dedupe window; 1.3 ms this way).
_HOLDING = ("FROM json_each(?) AS j CROSS JOIN identities AS i ON i.identity = j.value "
            "CROSS JOIN bulks AS b ON b.bulk_id = i.bulk_id WHERE b.state = ?")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS bulks (
    bulk_id      TEXT PRIMARY KEY,
    table_name   TEXT NOT NULL,
    moves        TEXT NOT NULL,  -- JSON list of [staged path, final path]
    owner        TEXT NOT NULL,
    state        TEXT NOT NULL CHECK (state IN ('prepared', 'published')),
    prepared_at  REAL NOT NULL,
    published_at REAL,
    identities   INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS bulks_by_state ON bulks (state, published_at);
CREATE INDEX IF NOT EXISTS bulks_by_prepared ON bulks (prepared_at);
CREATE TABLE IF NOT EXISTS identities (
    identity TEXT NOT NULL,
    bulk_id  TEXT NOT NULL,
    PRIMARY KEY (identity, bulk_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS identities_by_bulk ON identities (bulk_id);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS owners (owner TEXT PRIMARY KEY, last_seen REAL NOT NULL);
"""

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
_ADD_COUNTS = ("UPDATE meta SET value = CAST(CAST(value AS BIGINT) + CASE key WHEN 'count_identities' THEN ? "
               "WHEN 'count_prepared' THEN ? ELSE ? END AS TEXT) "
               "WHERE key IN ('count_identities', 'count_prepared', 'count_published')")
#: A prune deletes at most this many identities (of at most PRUNE_BATCH_BULKS bulks) per write
#: transaction, and pauses between two (`Ledger.prune`), so that landings interleave with it.
PRUNE_BATCH_IDENTITIES = 5_000
PRUNE_BATCH_BULKS = 50


def initialise_counters(db: Any, sql: Callable[[str], str] = str) -> None:
    """Count, inside the caller's write transaction on `db`, each of `COUNTERS` that `meta` lacks
    (once, on a ledger from before the counters); `sql` puts a statement in the driver's style."""
    present = {row[0] for row in db.execute(sql("SELECT key FROM meta WHERE key IN (?, ?, ?)"), tuple(COUNTERS))}
    for key, query in COUNTERS.items():
        if key not in present:
            count = db.execute(query).fetchone()[0]
            db.execute(sql("INSERT INTO meta (key, value) VALUES (?, ?)"), (key, str(count)))


def ledger_path(state_dir: Path) -> Path:
    """Where the ledger of a `[bridge] state_dir` lives."""
    return Path(state_dir) / LEDGER_FILE


def open_ledger(config: Any, *, owner: str) -> Ledger:
    """The ledger a configuration names: PostgreSQL when `[ledger] url` is set, else the SQLite
    file under `[bridge] state_dir` (created on first use)."""
    section = config.ledger
    if section.url is not None:
        from mqbridge.landing.ledger.postgres import PostgresLedger  # psycopg only for a PostgreSQL ledger

        return PostgresLedger.open_url(section.url.get_secret_value(), owner=owner,
                                       schema=section.database_schema, lease=section.lease)
    ledger = Ledger.open(ledger_path(config.resolve_path(config.bridge.state_dir)), owner=owner)
    ledger.lease = section.lease
    try:
        ledger.heartbeat()  # bridges in other pid namespaces on this state_dir judge this one by it
    except LedgerUnavailableError as exc:
        ledger.close()
        raise LedgerError(f"{exc} (at start-up)") from exc
    return ledger


# -- owners -----------------------------------------------------------------------------------
def _pid_namespace() -> str:
    """This process's pid namespace (the inode of /proc/self/ns/pid), "" where there is none."""
    try:
        link = os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]"
    except OSError:
        return ""
    return link.partition("[")[2].rstrip("]")


def this_host() -> str:
    """Where pids mean what they mean to this process: "hostname/pid-namespace" (just the host
    name without pid namespaces). Two containers with one host name have separate pid namespaces,
    so neither judges the other's processes by a pid it cannot see."""
    namespace = _pid_namespace()
    return f"{socket.gethostname()}/{namespace}" if namespace else socket.gethostname()


def owner_id() -> str:
    """This process as a ledger owner: "host:pid:create_time", host as `this_host` gives it (create
    time with two decimals, so that a later process reusing the pid is a different owner)."""
    pid = os.getpid()
    return f"{this_host()}:{pid}:{psutil.Process(pid).create_time():.2f}"


def judged_by_pid(owner: str) -> bool:
    """Whether `owner`'s pid can be checked from here: same host and same pid namespace (an owner
    written before pid namespaces were recorded: same host name)."""
    host = owner.rsplit(":", 2)[0]
    return host == (this_host() if "/" in host else socket.gethostname())


def owner_alive(owner: str) -> bool:
    """Whether the process named by `owner` (see `owner_id`) may still be running.

    Where its pid can be checked (`judged_by_pid`): its pid exists and started at the recorded time
    (within a second: the boot time psutil adds to the start ticks can move by a second). Elsewhere
    nothing can be checked here, so the owner is assumed alive (`Ledger.owner_alive` asks its
    heartbeat instead). An owner string that cannot be parsed is treated as alive too.
    """
    try:
        _host, pid_text, created_text = owner.rsplit(":", 2)
        pid, created = int(pid_text), float(created_text)
    except ValueError:
        return True
    if not judged_by_pid(owner):
        return True
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False  # killed, not yet reaped by its parent: it will never write again
        return abs(process.create_time() - created) < 1.0
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied:
        return True  # it exists; we just may not look at it


def _is_busy(exc: sqlite3.Error) -> bool:
    """SQLITE_BUSY or SQLITE_LOCKED, in any of their extended forms."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(exc) or "busy" in str(exc)


# -- records ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class PreparedBulk:
    """A bulk recorded as prepared: its files are staged, none or some already published.

    `files` holds the (staged path, final path) pairs given to `Ledger.prepare`, absolute.
    """

    bulk_id: str
    table: str
    files: tuple[tuple[str, str], ...]
    owner: str
    prepared_at: float
    identities: int


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


# -- the ledger -------------------------------------------------------------------------------
class Ledger:
    """One process's handle on the ledger file. Thread-safe: one connection behind a lock for
    writes and most reads (the statements are short; SQLite would serialise the writers anyway),
    and a second one for `published`, the question every listener asks once per unit of work: in
    WAL mode a reader never waits for a writer, so listeners do not queue behind a bulk's
    `prepare` and its fsync.

    The statements are written once, with `?` parameters; a subclass for another database
    (`mqbridge.landing.ledger.postgres.PostgresLedger`) supplies its connections, its `_HOLDING` clause and
    identity-list parameter, how a writer takes the lock, and how owners are judged alive.
    """

    #: See `_HOLDING`: the clause selecting the rows that hold the identities of one parameter.
    HOLDING = _HOLDING
    #: The exceptions of the database driver (wrapped in LedgerError).
    ERRORS: tuple[type[BaseException], ...] = (sqlite3.Error,)
    #: Those of them that say the ledger cannot be used *now* (a full or read-only disk, a lock held
    #: past the busy timeout, a lost connection), not that its records are in doubt: wrapped in
    #: LedgerUnavailableError, an outage of the sinks, from which the bridge resumes.
    TRANSIENT: tuple[type[BaseException], ...] = (sqlite3.OperationalError,)
    #: Increments the prune-run counter in `meta`.
    COUNT_PRUNE = ("INSERT INTO meta (key, value) VALUES ('prune_runs', '1') "
                   "ON CONFLICT (key) DO UPDATE SET value = CAST(value AS INTEGER) + 1")

    def __init__(self, path: Path | str, owner: str, connection: Any, created: bool) -> None:
        self.path = path  # a file, or a database URL without its password
        self.owner = owner
        #: True when the ledger did not exist and was created by `open`.
        self.created = created
        self._db = connection
        self._lock = threading.Lock()
        self._reader: Any = None  # for `published`, opened on first use
        self._reader_lock = threading.Lock()

    # -- what a database backend supplies -------------------------------------------------------
    def _sql(self, statement: str) -> str:
        """`statement` in the driver's parameter style."""
        return statement

    def _identities_parameter(self, identities: Sequence[str]) -> Any:
        return _json_list(identities)

    def _begin_write(self, db: Any) -> None:
        db.execute("BEGIN IMMEDIATE")

    def _open_reader(self) -> Any:
        reader = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                                 check_same_thread=False)
        reader.execute("PRAGMA query_only = ON")
        return reader

    def _size_bytes(self) -> int:
        path = Path(self.path)
        return sum(p.stat().st_size for p in (path, path.with_name(path.name + "-wal")) if p.exists())

    #: An owner whose pid cannot be checked from here (another host or pid namespace) is alive
    #: while its last heartbeat is younger than this (`[ledger] lease`).
    lease: float = 60.0

    def owner_alive(self, owner: str) -> bool:
        """Whether the process `owner` may still be running: by its pid where that can be checked
        (`owner_alive`), else by its heartbeat within `lease` (an owner that never wrote one, from
        an mqbridge before heartbeats, is taken for alive)."""
        if judged_by_pid(owner):
            return owner_alive(owner)
        with self._read() as db:
            row = self._execute(db, "SELECT last_seen FROM owners WHERE owner = ?", (owner,)).fetchone()
        return row is None or self._now(db) - float(row[0]) < self.lease

    def _now(self, db: Any) -> float:
        """The clock heartbeats are written with (PostgreSQL: the server's, one for every host)."""
        return time.time()

    def heartbeat(self) -> None:
        """Tell other processes (other hosts, other pid namespaces) that this owner is alive."""
        with self._write() as db:
            self._touch_owner(db)

    def _touch_owner(self, db: Any) -> None:
        """This owner's heartbeat, in the transaction of `db` (each `prepare` writes one too: a bulk
        is never younger than its owner's last heartbeat, whatever the control thread was doing)."""
        self._execute(db, "INSERT INTO owners (owner, last_seen) VALUES (?, ?) "
                          "ON CONFLICT (owner) DO UPDATE SET last_seen = excluded.last_seen",
                      (self.owner, self._now(db)))

    def _execute(self, db: Any, statement: str, parameters: Sequence[Any] = ()) -> Any:
        return db.execute(self._sql(statement), tuple(parameters))

    @classmethod
    def open(cls, path: Path, *, owner: str) -> Ledger:
        """Open (or create, with its directory) the ledger at `path`. Raises LedgerError when the
        file is corrupt, unreadable or another kind of SQLite database."""
        path = Path(path)
        created = not path.exists()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # isolation_level=None: no implicit transactions; every write says BEGIN IMMEDIATE.
            db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                                 check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            raise LedgerError(f"ledger {path}: cannot open: {exc}") from exc
        try:
            cls._setup_when_free(db, path)
        except sqlite3.Error as exc:
            db.close()
            if _is_busy(exc):
                raise LedgerError(f"ledger {path}: locked by another process for more than "
                                  f"{BUSY_TIMEOUT_MS // 1000} s ({exc})") from exc
            raise LedgerError(f"ledger {path}: unreadable or corrupt ({exc}); move it aside only if "
                              "you accept that earlier landings will not be recognised") from exc
        except LedgerError:
            db.close()
            raise
        return cls(path, owner, db, created)

    @classmethod
    def _setup_when_free(cls, db: sqlite3.Connection, path: Path) -> None:
        """`_setup`, tried again while another process holds the file: switching a new file to
        write-ahead logging returns SQLITE_BUSY at once, without the busy handler, when a second
        process opens it at the same moment (two bridges started together on one `state_dir`).
        Every step of `_setup` may be repeated."""
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        pause = 0.005
        while True:
            try:
                cls._setup(db, path)
                return
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc) or time.monotonic() >= deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.2)

    @staticmethod
    def _setup(db: sqlite3.Connection, path: Path) -> None:
        db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
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
            for statement in _SCHEMA.split(";"):
                if statement.strip():
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

    def _wrapped(self, exc: BaseException) -> LedgerError | LedgerUnavailableError:
        """A driver error as the bridge's: unavailable (an outage) or untrustworthy (fatal)."""
        if isinstance(exc, self.TRANSIENT):
            return LedgerUnavailableError(f"ledger {self.path} unavailable: {' '.join(str(exc).split())}")
        return LedgerError(f"ledger {self.path}: {exc}")

    def _usable(self, db: Any) -> Any:
        """The connection `db`, or a new one if the backend can tell it is broken (SQLite: as is)."""
        return db

    @contextmanager
    def _read(self) -> Iterator[Any]:
        with self._lock:
            try:
                self._db = self._usable(self._db)
                yield self._db
            except self.ERRORS as exc:
                raise self._wrapped(exc) from exc

    @contextmanager
    def _write(self) -> Iterator[Any]:
        """One transaction holding the write lock from its first statement."""
        with self._lock:
            try:
                self._db = self._usable(self._db)
                self._begin_write(self._db)
                try:
                    yield self._db
                except BaseException:
                    with suppress(*self.ERRORS):  # a lost connection has rolled back already
                        self._db.execute("ROLLBACK")
                    raise
                self._db.execute("COMMIT")
            except self.ERRORS as exc:
                raise self._wrapped(exc) from exc

    @contextmanager
    def _read_concurrently(self) -> Iterator[Any]:
        with self._reader_lock:
            try:
                if self._reader is not None:
                    self._reader = self._usable(self._reader)
                if self._reader is None:
                    self._reader = self._open_reader()
                yield self._reader
            except self.ERRORS as exc:
                raise self._wrapped(exc) from exc

    def probe_write(self) -> None:
        """One small write transaction, as a bulk's `prepare` makes: raises LedgerUnavailableError
        when the ledger cannot take writes now (the breaker's probe, `Landing.probe`)."""
        with self._write() as db:
            self._execute(db, "INSERT INTO meta (key, value) VALUES ('last_probe', ?) "
                              "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (str(time.time()),))

    def published(self, identities: Sequence[str]) -> set[str]:
        """Which of `identities` a published bulk holds."""
        found: set[str] = set()
        with self._read_concurrently() as db:
            found.update(row[0] for row in self._execute(db, f"SELECT DISTINCT i.identity {self.HOLDING}",
                                                         (self._identities_parameter(identities), "published")))
        return found

    def landed_in(self, identities: Sequence[str]) -> dict[str, tuple[str, str]]:
        """For each of `identities` a published bulk holds: (that bulk's id, its table)."""
        with self._read_concurrently() as db:
            rows = self._execute(db, f"SELECT DISTINCT i.identity, b.bulk_id, b.table_name {self.HOLDING}",
                                 (self._identities_parameter(identities), "published"))
            return {row[0]: (row[1], row[2]) for row in rows}

    def prepare(self, bulk_id: str, table: str, moves: Sequence[tuple[str, str]],
                identities: Sequence[str]) -> None:
        """Record `bulk_id` as prepared, with its file moves and identities, in one transaction.
        Raises DuplicateIdentityError (and records nothing) if a published bulk holds any of the
        identities."""
        unique = list(dict.fromkeys(identities))
        with self._write() as db:
            taken = [row[0] for row in self._execute(db, f"SELECT DISTINCT i.identity {self.HOLDING}",
                                                     (self._identities_parameter(unique), "published"))]
            if taken:
                raise DuplicateIdentityError(f"bulk {bulk_id}: {len(taken)} identities already published "
                                             f"(e.g. {taken[0]!r})", taken)
            self._execute(db, "INSERT INTO bulks (bulk_id, table_name, moves, owner, state, prepared_at, identities) "
                          "VALUES (?, ?, ?, ?, 'prepared', ?, ?)",
                          (bulk_id, table, json.dumps([list(m) for m in moves]), self.owner, time.time(),
                           len(unique)))
            db.cursor().executemany(self._sql("INSERT INTO identities (identity, bulk_id) VALUES (?, ?)"),
                                    [(identity, bulk_id) for identity in unique])
            self._add_counts(db, identities=len(unique), prepared=1)
            self._touch_owner(db)

    def _add_counts(self, db: Any, *, identities: int = 0, prepared: int = 0, published: int = 0) -> None:
        """Move the counters of `COUNTERS` by these amounts, in the caller's write transaction."""
        self._execute(db, _ADD_COUNTS, (identities, prepared, published))

    def prepared_holding(self, identities: Sequence[str]) -> list[PreparedBulk]:
        """The prepared (not yet published) bulks that hold any of `identities`."""
        found: dict[str, PreparedBulk] = {}
        with self._read() as db:
            for bulk_id, table, moves, owner, prepared_at, count in self._execute(
                    db, f"SELECT DISTINCT b.bulk_id, b.table_name, b.moves, b.owner, b.prepared_at, b.identities "
                    f"{self.HOLDING}", (self._identities_parameter(identities), "prepared")):
                found[bulk_id] = PreparedBulk(bulk_id, table, _moves(moves), owner, prepared_at, count)
        return sorted(found.values(), key=lambda b: (b.prepared_at, b.bulk_id))

    def mark_published(self, bulk_id: str) -> None:
        """Record that every file of `bulk_id` is in place. Raises LedgerError for an unknown bulk."""
        with self._write() as db:
            row = self._execute(db, "SELECT state FROM bulks WHERE bulk_id = ?", (bulk_id,)).fetchone()
            if row is None:
                raise LedgerError(f"ledger {self.path}: no bulk {bulk_id!r} to mark published")
            self._execute(db, "UPDATE bulks SET state = 'published', published_at = ? WHERE bulk_id = ?",
                          (time.time(), bulk_id))
            if row[0] == "prepared":  # marking a published bulk again changes no count
                self._add_counts(db, prepared=-1, published=1)

    def forget(self, bulk_id: str) -> None:
        """Delete a rolled-back bulk and its identities (nothing of it was published)."""
        with self._write() as db:
            row = self._execute(db, "SELECT state FROM bulks WHERE bulk_id = ?", (bulk_id,)).fetchone()
            removed = self._execute(db, "DELETE FROM identities WHERE bulk_id = ?", (bulk_id,)).rowcount
            self._execute(db, "DELETE FROM bulks WHERE bulk_id = ?", (bulk_id,))
            state = row[0] if row is not None else None
            self._add_counts(db, identities=-removed, prepared=-(state == "prepared"),
                             published=-(state == "published"))

    def in_progress(self) -> list[PreparedBulk]:
        """Every bulk in state prepared (of any owner), oldest first."""
        with self._read() as db:
            rows = db.execute("SELECT bulk_id, table_name, moves, owner, prepared_at, identities FROM bulks "
                              "WHERE state = 'prepared' ORDER BY prepared_at, bulk_id").fetchall()
        return [PreparedBulk(bulk_id, table, _moves(moves), owner, prepared_at, count)
                for bulk_id, table, moves, owner, prepared_at, count in rows]

    def published_bulks(self) -> list[PublishedBulk]:
        """Every published bulk, oldest first (for `mqbridge ledger --verify`)."""
        with self._read() as db:
            rows = db.execute("SELECT bulk_id, table_name, moves, published_at FROM bulks "
                              "WHERE state = 'published' ORDER BY published_at, bulk_id").fetchall()
        return [PublishedBulk(bulk_id, table, _moves(moves), at) for bulk_id, table, moves, at in rows]

    def identities_of(self, bulk_id: str) -> list[str]:
        """The identities recorded for `bulk_id`."""
        with self._read() as db:
            return [row[0] for row in self._execute(db, "SELECT identity FROM identities WHERE bulk_id = ?",
                                                    (bulk_id,))]

    def bulk_sizes(self) -> dict[str, int]:
        """Each published bulk's identity count, by bulk_id: the number of rows a reader must see
        for it (one row per identity). Read-only; prepared bulks are not included."""
        with self._read() as db:
            rows = db.execute("SELECT bulk_id, identities FROM bulks WHERE state = 'published'").fetchall()
        return {bulk_id: count for bulk_id, count in rows}

    def prune(self, older_than: float, *, stop: threading.Event | None = None) -> int:
        """Delete published bulks published more than `older_than` seconds ago, with their
        identities (the dedupe window has passed for them). Returns the identities removed.

        In batches (`_prune_batch`), each one short write transaction, oldest bulks first; between
        two the lock is free for as long as the batch held it (at least a millisecond), so that
        landings in this process and others interleave. `stop`, when set, ends it after a batch;
        what is left is pruned by the next call (a bulk half pruned is still published)."""
        cutoff = time.time() - older_than
        bulks = removed = 0
        while stop is None or not stop.is_set():
            started = time.monotonic()
            gone, identities = self._prune_batch(cutoff)
            bulks, removed = bulks + gone, removed + identities
            if not (gone or identities):
                break
            pause = max(time.monotonic() - started, 0.001)
            if stop is not None:
                stop.wait(pause)
            else:
                time.sleep(pause)
        with self._write() as db:
            self._execute(db, self.COUNT_PRUNE)
            self._execute(db, "INSERT INTO meta (key, value) VALUES ('last_prune', ?) "
                              "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (str(time.time()),))
        if bulks:
            log.info("ledger pruned %d bulks (%d identities) published before the dedupe window", bulks, removed)
        return removed

    def _prune_batch(self, cutoff: float) -> tuple[int, int]:
        """One write transaction of `prune`: the identities of the oldest published bulks before
        `cutoff`, at most PRUNE_BATCH_IDENTITIES of them, and each bulk left without identities.
        Returns (bulks removed, identities removed)."""
        bulks = removed = 0
        with self._write() as db:
            rows = self._execute(db, "SELECT bulk_id FROM bulks WHERE state = 'published' AND published_at < ? "
                                 "ORDER BY published_at LIMIT ?", (cutoff, PRUNE_BATCH_BULKS)).fetchall()
            for (bulk_id,) in rows:
                room = PRUNE_BATCH_IDENTITIES - removed
                if room <= 0:
                    break
                gone = self._execute(db, "DELETE FROM identities WHERE bulk_id = ? AND identity IN "
                                     "(SELECT identity FROM identities WHERE bulk_id = ? LIMIT ?)",
                                     (bulk_id, bulk_id, room)).rowcount
                removed += gone
                if gone < room:  # none of its identities is left
                    self._execute(db, "DELETE FROM bulks WHERE bulk_id = ?", (bulk_id,))
                    bulks += 1
            self._add_counts(db, identities=-removed, published=-bulks)
        return bulks, removed

    def stats(self) -> LedgerStats:
        """Counts and sizes of the ledger, from the counters of `COUNTERS` (no row is counted, and
        on the reader connection: a landing's or a prune's write transaction is not waited for)."""
        with self._read_concurrently() as db:
            self._execute(db, "BEGIN")
            try:
                oldest = self._execute(db, "SELECT MIN(prepared_at) FROM bulks").fetchone()[0]  # bulks_by_prepared
                meta = dict(self._execute(db, "SELECT key, value FROM meta").fetchall())
            finally:
                self._execute(db, "COMMIT")
        size = self._size_bytes()
        last_prune = meta.get("last_prune")
        bulks = {"prepared": int(meta.get("count_prepared", 0)), "published": int(meta.get("count_published", 0))}
        return LedgerStats(self.path, bulks, int(meta.get("count_identities", 0)), size, oldest,
                           int(meta.get("prune_runs", 0)), float(last_prune) if last_prune is not None else None)

    def close(self) -> None:
        """Close the connections (committed transactions are already durable)."""
        with self._reader_lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
        with self._lock:
            self._db.close()


def _json_list(identities: Sequence[str]) -> str:
    return json.dumps(list(dict.fromkeys(identities)))


def _moves(text: str) -> tuple[tuple[str, str], ...]:
    return tuple((staged, final) for staged, final in json.loads(text))
