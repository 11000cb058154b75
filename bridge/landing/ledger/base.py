"""The statements every backend of the landing ledger shares: which bulks were prepared and
published, and which message identities each one holds (the exactly-once record of
`ARCHITECTURE.md`, "Landing protocol"); the records they read back are `records`'.

`Ledger` is the interface the landing uses and the behaviour both backends inherit: the statements
are written once, with `?` parameters; `mqbridge.landing.ledger.sqlite.SqliteLedger` (one embedded
file per `state_dir`) and `mqbridge.landing.ledger.postgres.PostgresLedger` (`[ledger] url`) supply
connections, the clause that looks identities up, how a writer takes the lock and how an owner's
heartbeat is written and read. Each handle is one process's (`owner` names the process).

Identities. An identity (the string the listener's rule gives, see `mqbridge.identity`) appears
in at most one *published* bulk. The identities table is keyed by (identity, bulk_id), so one
identity may sit in several *prepared* bulks: a bulk whose process died between prepare and
publish keeps its rows until recovery decides its fate, and a redelivered message may be prepared
again meanwhile. `prepare` refuses an identity a published bulk holds (`DuplicateIdentityError`)
and one another prepared bulk holds (`IdentityClaimedError`): at most one bulk at a time may be on
its way to publishing an identity, so two live processes that both read a redelivered message (the
source gave it again after the first one's connection was lost) never both publish it. Whichever
prepares second gives the message back; the first one's bulk is published by it, or decided by
recovery once its owner is dead or its lease expired (`Landing.published`), and a process whose
bulk was decided so can no longer publish it (`BulkFencedError`). Recovery
(`mqbridge.landing.publication.recover`) rolls a dead bulk back, not forward, when another bulk
published one of its identities first (a bulk prepared before this check existed).

A ledger that is corrupt, unreadable or not a ledger raises `LedgerError` (never an empty start); a
missing one is created and `Ledger.created` says so, so that the caller can warn that landings
before it cannot be recognised.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from mqbridge.errors import (
    BulkFencedError,
    DuplicateIdentityError,
    IdentityClaimedError,
    LedgerError,
    LedgerUnavailableError,
)
from mqbridge.landing.ledger.owners import judged_by_pid, owner_alive
from mqbridge.landing.ledger.records import (
    LedgerStats,
    PreparedBulk,
    PublishedBulk,
    files_of,
    moves_column,
    prepared_bulk,
    transaction_of,
)
from mqbridge.landing.ledger.schema import ADD_COUNTS
from mqbridge.landing.ledger.transactions import TableTransaction

log = logging.getLogger(__name__)

#: A prune deletes at most this many identities (of at most PRUNE_BATCH_BULKS bulks) per write
#: transaction, and pauses between two (`Ledger.prune`), so that landings interleave with it.
PRUNE_BATCH_IDENTITIES = 5_000
PRUNE_BATCH_BULKS = 50


# -- the ledger -------------------------------------------------------------------------------
class Ledger(ABC):
    """One process's handle on the ledger. Thread-safe: one connection behind a lock for writes and
    most reads (the statements are short; the database would serialise the writers anyway), and a
    second one for `published`, the question every listener asks once per unit of work, so that
    listeners do not queue behind a bulk's `prepare` and its commit.
    """

    #: The clause selecting the rows that hold the identities of one parameter, in bulks of any state.
    HOLDING_ANY: str
    #: The same, of one state (a second parameter).
    HOLDING: str
    #: Records the identities of one parameter (`_identities_parameter`) for a bulk (the first
    #: parameter): one statement, not one per identity. SQLite's driver lets go of the GIL around
    #: each step of a statement, and in a busy bridge each time it takes the GIL back it may wait a
    #: whole switch interval: `executemany` of 10,000 identities took 0.25-0.34 s inside the steady
    #: benchmark against 0.05 s alone (docs/performance.md).
    INSERT_IDENTITIES: str
    #: The exceptions of the database driver (wrapped in LedgerError).
    ERRORS: tuple[type[BaseException], ...]
    #: Those of them that say the ledger cannot be used *now* (a full or read-only disk, a lock held
    #: past the busy timeout, a lost connection), not that its records are in doubt: wrapped in
    #: LedgerUnavailableError, an outage of the sinks, from which the bridge resumes.
    TRANSIENT: tuple[type[BaseException], ...]
    #: Increments the prune-run counter in `meta`.
    COUNT_PRUNE: str
    #: The ledger's clock, as an SQL expression of epoch seconds: what a bulk's `prepared_at` and
    #: `published_at` are stamped with and what a prune's cutoff is judged by. A shared ledger's
    #: bridges run on hosts whose clocks differ; stamped by each bridge's own clock, a bridge 10 minutes
    #: ahead would publish "in the future", and `mqbridge follow`, which moves its mark to the newest
    #: publication it forwarded and looks back only `MARGIN` from it, would pass over the bulks the
    #: other bridges publish meanwhile. One clock, the database's, orders every publication.
    CLOCK: str
    #: An owner whose pid cannot be checked from here (another host or pid namespace) is alive
    #: while its last heartbeat is younger than this (`[ledger] lease`).
    lease: float = 60.0
    #: Whether bridges on other hosts may share this ledger (and decide this process's bulks once its
    #: lease expires): a server's ledger (PostgreSQL), not a file in this host's state_dir.
    shared_across_hosts: bool = False

    def __init__(self, path: Path | str, owner: str, connection: Any, created: bool) -> None:
        self.path = path  # a file, or a database URL without its password
        self.owner = owner
        #: True when the ledger did not exist and was created when it was opened.
        self.created = created
        self._db = connection
        self._lock = threading.Lock()
        self._reader: Any = None  # for `published`, opened on first use
        self._reader_lock = threading.Lock()

    # -- what a database backend supplies -------------------------------------------------------
    def _sql(self, statement: str) -> str:
        """`statement` in the driver's parameter style."""
        return statement

    @abstractmethod
    def _identities_parameter(self, identities: Sequence[str]) -> Any:
        """`identities`, without repeats, as the one parameter of `HOLDING`."""

    @abstractmethod
    def _begin_write(self, db: Any) -> None:
        """Begin a transaction on `db` that holds the write lock from its first statement."""

    @abstractmethod
    def _open_reader(self) -> Any:
        """A second connection, for the reads of `_read_concurrently`."""

    @abstractmethod
    def _size_bytes(self) -> int:
        """The space the ledger takes."""

    @abstractmethod
    def _heartbeat_fresh(self, owner: str) -> bool:
        """Whether `owner`'s last heartbeat is younger than `lease`."""

    @abstractmethod
    def _touch_owner(self, db: Any) -> None:
        """This owner's heartbeat, in the transaction of `db` (each `prepare` writes one too: a bulk
        is never younger than its owner's last heartbeat, whatever the control thread was doing)."""

    def _usable(self, db: Any) -> Any:
        """The connection `db`, or a new one if the backend can tell it is broken (SQLite: as is)."""
        return db

    # -- owners ---------------------------------------------------------------------------------
    def owner_alive(self, owner: str) -> bool:
        """Whether the process `owner` may still be running: by its pid where that can be checked
        (`owners.owner_alive`), else by its heartbeat within `lease` (`_heartbeat_fresh`)."""
        if judged_by_pid(owner):
            return owner_alive(owner)
        return self._heartbeat_fresh(owner)

    def clock(self) -> float:
        """The ledger's clock now (`CLOCK`), in epoch seconds: where a new forward of `mqbridge follow`
        starts, and what the ages of its bulks are judged against."""
        with self._read() as db:
            return float(self._execute(db, f"SELECT {self.CLOCK}").fetchone()[0])

    def heartbeat(self) -> None:
        """Tell other processes (other hosts, other pid namespaces) that this owner is alive."""
        with self._write() as db:
            self._touch_owner(db)

    # -- transactions ---------------------------------------------------------------------------
    def _execute(self, db: Any, statement: str, parameters: Sequence[Any] = ()) -> Any:
        return db.execute(self._sql(statement), tuple(parameters))

    def _wrapped(self, exc: BaseException) -> LedgerError | LedgerUnavailableError:
        """A driver error as the bridge's: unavailable (an outage) or untrustworthy (fatal)."""
        if isinstance(exc, self.TRANSIENT):
            return LedgerUnavailableError(f"ledger {self.path} unavailable: {' '.join(str(exc).split())}")
        return LedgerError(f"ledger {self.path}: {exc}")

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

    def landing_of(self, identity: str) -> PublishedBulk | None:
        """The published bulk that holds `identity` (at most one does; `mqbridge where`), or None.
        On the reader connection, by the identities' key: one short read, whatever the ledger's size."""
        with self._read_concurrently() as db:
            row = self._execute(db, f"SELECT b.bulk_id, b.table_name, b.moves, b.published_at {self.HOLDING}",
                                (self._identities_parameter([identity]), "published")).fetchone()
        if row is None:
            return None
        return PublishedBulk(row[0], row[1], files_of(row[2]), row[3], transaction_of(row[2]))

    def prepare(self, bulk_id: str, table: str, moves: Sequence[tuple[str, str]],
                identities: Sequence[str], *, transaction: TableTransaction | None = None) -> None:
        """Record `bulk_id` as prepared, with its file moves (or, for a table that commits by its
        own transaction, that `transaction`) and identities, in one transaction.
        Records nothing and raises DuplicateIdentityError if a published bulk holds any of the
        identities, IdentityClaimedError if another prepared bulk does (see the module docstring)."""
        unique = list(dict.fromkeys(identities))
        with self._write() as db:
            holders = self._execute(db, f"SELECT DISTINCT i.identity, b.state, b.bulk_id, b.owner {self.HOLDING_ANY}",
                                    (self._identities_parameter(unique),)).fetchall()
            taken = sorted({row[0] for row in holders if row[1] == "published"})
            if taken:
                raise DuplicateIdentityError(f"bulk {bulk_id}: {len(taken)} identities already published "
                                             f"(e.g. {taken[0]!r})", taken)
            claimed = sorted({row[0] for row in holders})
            if claimed:
                _identity, _state, holder, owner = holders[0]
                raise IdentityClaimedError(f"bulk {bulk_id}: {len(claimed)} identities are in bulk {holder} of "
                                           f"{owner}, prepared and not yet published (e.g. {claimed[0]!r})", claimed)
            self._execute(db, "INSERT INTO bulks (bulk_id, table_name, moves, owner, state, prepared_at, identities) "
                          f"VALUES (?, ?, ?, ?, 'prepared', {self.CLOCK}, ?)",
                          (bulk_id, table, moves_column(moves, transaction), self.owner, len(unique)))
            self._execute(db, self.INSERT_IDENTITIES, (bulk_id, self._identities_parameter(unique)))
            self._add_counts(db, identities=len(unique), prepared=1)
            self._touch_owner(db)

    def adopt(self, bulk_id: str, table: str, identities: Sequence[str], published_at: float) -> bool:
        """Record `bulk_id`, found in `table` with these identities, as published at `published_at`
        (a ledger rebuilt from the tables, `mqbridge.landing.delta_ledger`); False, and nothing
        recorded, when the ledger already holds that bulk."""
        unique = list(dict.fromkeys(identities))
        with self._write() as db:
            if self._execute(db, "SELECT 1 FROM bulks WHERE bulk_id = ?", (bulk_id,)).fetchone() is not None:
                return False
            self._execute(db, "INSERT INTO bulks (bulk_id, table_name, moves, owner, state, prepared_at, published_at, "
                          "identities) VALUES (?, ?, ?, ?, 'published', ?, ?, ?)",
                          (bulk_id, table, json.dumps({"rebuilt": table}), self.owner, published_at, published_at,
                           len(unique)))
            self._execute(db, self.INSERT_IDENTITIES, (bulk_id, self._identities_parameter(unique)))
            self._add_counts(db, identities=len(unique), published=1)
        return True

    def _add_counts(self, db: Any, *, identities: int = 0, prepared: int = 0, published: int = 0) -> None:
        """Move the counters of `COUNTERS` by these amounts, in the caller's write transaction."""
        self._execute(db, ADD_COUNTS, (identities, prepared, published))

    def prepared_holding(self, identities: Sequence[str]) -> list[PreparedBulk]:
        """The prepared (not yet published) bulks that hold any of `identities`."""
        found: dict[str, PreparedBulk] = {}
        with self._read() as db:
            for bulk_id, table, moves, owner, prepared_at, count in self._execute(
                    db, f"SELECT DISTINCT b.bulk_id, b.table_name, b.moves, b.owner, b.prepared_at, b.identities "
                    f"{self.HOLDING}", (self._identities_parameter(identities), "prepared")):
                found[bulk_id] = prepared_bulk(bulk_id, table, moves, owner, prepared_at, count)
        return sorted(found.values(), key=lambda b: (b.prepared_at, b.bulk_id))

    def mark_published(self, bulk_id: str, *, owner: str | None = None) -> None:
        """Record that every file of `bulk_id` is in place. Raises LedgerError for an unknown bulk. With
        `owner` (a process recording its own bulk), BulkFencedError when another process has taken the
        still-prepared bulk over to decide it (`take_over`: its owner's lease had expired, a stalled or
        cut-off host): that process may have fenced the bulk's commit already, and recording it published
        now would commit its messages at their source without their rows in the table."""
        with self._write() as db:
            row = self._execute(db, "SELECT state, owner FROM bulks WHERE bulk_id = ?", (bulk_id,)).fetchone()
            if row is None:
                raise LedgerError(f"ledger {self.path}: no bulk {bulk_id!r} to mark published")
            if owner is not None and row[0] == "prepared" and row[1] != owner:
                raise BulkFencedError(f"bulk {bulk_id} was taken over by {row[1]} to be decided (its owner's lease had "
                                      "expired): not recorded published by its owner")
            self._execute(db, f"UPDATE bulks SET state = 'published', published_at = {self.CLOCK} WHERE bulk_id = ?",
                          (bulk_id,))
            if row[0] == "prepared":  # marking a published bulk again changes no count
                self._add_counts(db, prepared=-1, published=1)

    def take_over(self, bulk_id: str) -> bool:
        """Make this ledger's owner the owner of the prepared bulk `bulk_id` before deciding it for a
        process that is dead or whose lease expired (it may only have stalled): from then on that process
        cannot record the bulk published (`mark_published(owner=...)`), whatever it does once it resumes,
        and the other processes leave the bulk to this one while it lives. False when the bulk is not
        prepared any more (decided meanwhile)."""
        with self._write() as db:
            taken = self._execute(db, "UPDATE bulks SET owner = ? WHERE bulk_id = ? AND state = 'prepared'",
                                  (self.owner, bulk_id)).rowcount
        return bool(taken == 1)

    def forget(self, bulk_id: str, *, owner: str | None = None) -> bool:
        """Delete a rolled-back bulk and its identities (nothing of it was published). With `owner` (a
        process forgetting its own bulk), only while `owner` still owns it: False, and nothing deleted,
        once another process has taken it over (`take_over`) or it is gone."""
        with self._write() as db:
            row = self._execute(db, "SELECT state, owner FROM bulks WHERE bulk_id = ?", (bulk_id,)).fetchone()
            if owner is not None and (row is None or row[1] != owner):
                return False
            removed = self._execute(db, "DELETE FROM identities WHERE bulk_id = ?", (bulk_id,)).rowcount
            self._execute(db, "DELETE FROM bulks WHERE bulk_id = ?", (bulk_id,))
            state = row[0] if row is not None else None
            self._add_counts(db, identities=-removed, prepared=-(state == "prepared"),
                             published=-(state == "published"))
        return True

    def in_progress(self) -> list[PreparedBulk]:
        """Every bulk in state prepared (of any owner), oldest first."""
        with self._read() as db:
            rows = db.execute("SELECT bulk_id, table_name, moves, owner, prepared_at, identities FROM bulks "
                              "WHERE state = 'prepared' ORDER BY prepared_at, bulk_id").fetchall()
        return [prepared_bulk(bulk_id, table, moves, owner, prepared_at, count)
                for bulk_id, table, moves, owner, prepared_at, count in rows]

    def state_of(self, bulk_id: str) -> str | None:
        """"prepared" or "published" for a bulk this ledger holds, None for one it does not (never
        prepared, rolled back, abandoned, or pruned)."""
        with self._read() as db:
            row = self._execute(db, "SELECT state FROM bulks WHERE bulk_id = ?", (bulk_id,)).fetchone()
        return str(row[0]) if row is not None else None

    def knows_owner(self, owner: str) -> bool:
        """Whether process `owner` ever wrote to this ledger (every bridge writes its heartbeat when it
        opens the ledger): the staging directories of an owner this ledger does not know belong to a
        bridge with another ledger (another `state_dir` on the same warehouse), whose recovery they are."""
        with self._read() as db:
            return self._execute(db, "SELECT 1 FROM owners WHERE owner = ?", (owner,)).fetchone() is not None

    def published_bulks(self) -> list[PublishedBulk]:
        """Every published bulk, oldest first (for `mqbridge ledger --verify`)."""
        with self._read() as db:
            rows = db.execute("SELECT bulk_id, table_name, moves, published_at FROM bulks "
                              "WHERE state = 'published' ORDER BY published_at, bulk_id").fetchall()
        return [PublishedBulk(bulk_id, table, files_of(moves), at, transaction_of(moves))
                for bulk_id, table, moves, at in rows]

    def published_since(self, table: str, since: float, limit: int) -> list[tuple[str, float, int]]:
        """(bulk id, published at, identities) of up to `limit` bulks of `table` published at or after
        `since`, oldest first (`mqbridge follow`: by the index on state and publication time)."""
        with self._read_concurrently() as db:
            rows = self._execute(db, "SELECT bulk_id, published_at, identities FROM bulks WHERE state = ? "
                                     "AND published_at >= ? AND table_name = ? ORDER BY published_at, bulk_id "
                                     "LIMIT ?", ("published", since, table, limit)).fetchall()
        return [(bulk_id, float(at), int(count)) for bulk_id, at, count in rows]

    def newest_publication(self) -> float | None:
        """When the newest bulk was published (None: none is): where a new forward starts."""
        with self._read_concurrently() as db:
            row = self._execute(db, "SELECT MAX(published_at) FROM bulks WHERE state = ?", ("published",)).fetchone()
        return float(row[0]) if row is not None and row[0] is not None else None

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
        cutoff = self.clock() - older_than
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
