"""The replay ledger: which landed rows a replay has sent, so that a killed replay resumes without
sending any row twice. A small SQLite file in `state_dir` (0600), one per bridge.

Per replay id: its batches, each `intent` (recorded before its unit of work at the target) or
`sent` (after the target committed it), and the key of every row of each batch. A batch left in
`intent` by a kill is in doubt; the target says whether its unit committed (it carries a marker: the
sender its source kind's driver declares, `mqbridge.drivers.Driver.replay`), and the batch is then
marked sent, or forgotten so its rows go again.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Collection, Sequence
from pathlib import Path

from mqbridge.strict_modes import check_trusted, private_dir, private_file

#: The ledger's file name under `[bridge] state_dir`.
REPLAY_LEDGER_FILE = "replay.sqlite3"

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS batches (replay_id TEXT NOT NULL, batch_id TEXT NOT NULL, state TEXT NOT NULL, "
    "rows INTEGER NOT NULL, at REAL NOT NULL, PRIMARY KEY (replay_id, batch_id))",
    "CREATE TABLE IF NOT EXISTS sent_rows (replay_id TEXT NOT NULL, row_key TEXT NOT NULL, batch_id TEXT NOT NULL, "
    "PRIMARY KEY (replay_id, row_key))",
)


class ReplayLedger:
    """The replay ledger file at `path` (created 0600 in a private directory)."""

    def __init__(self, path: Path) -> None:
        private_dir(path.parent)
        check_trusted(path.parent, "state_dir")
        private_file(path)
        self.path = path
        # isolation_level=None: every write says BEGIN IMMEDIATE itself, and is durable at COMMIT.
        self._db = sqlite3.connect(path, timeout=30, isolation_level=None)
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute("PRAGMA synchronous = FULL")  # a batch recorded sent survives a power cut
        for statement in _SCHEMA:
            self._db.execute(statement)

    @classmethod
    def in_state_dir(cls, state_dir: Path) -> ReplayLedger:
        """The ledger of the bridge whose `state_dir` this is."""
        return cls(state_dir / REPLAY_LEDGER_FILE)

    def close(self) -> None:
        """Close the file."""
        self._db.close()

    def keys(self, replay_id: str) -> set[str]:
        """The keys of the rows of every batch of `replay_id` (sent, or in doubt)."""
        return {key for (key,) in self._db.execute("SELECT row_key FROM sent_rows WHERE replay_id = ?", (replay_id,))}

    def in_doubt(self, replay_id: str) -> list[str]:
        """The batches of `replay_id` recorded but not known to be sent."""
        return [b for (b,) in self._db.execute(
            "SELECT batch_id FROM batches WHERE replay_id = ? AND state = 'intent' ORDER BY at", (replay_id,))]

    def sent(self, replay_id: str) -> tuple[int, int]:
        """(batches, rows) of `replay_id` that are sent."""
        row = self._db.execute("SELECT count(*), coalesce(sum(rows), 0) FROM batches WHERE replay_id = ? "
                               "AND state = 'sent'", (replay_id,)).fetchone()
        return int(row[0]), int(row[1])

    def intend(self, replay_id: str, batch_id: str, keys: Sequence[str]) -> None:
        """Record a batch before its unit of work at the target begins."""
        with self._transaction():
            self._db.execute("INSERT INTO batches VALUES (?, ?, 'intent', ?, ?)",
                             (replay_id, batch_id, len(keys), time.time()))
            self._db.executemany("INSERT INTO sent_rows VALUES (?, ?, ?)", [(replay_id, k, batch_id) for k in keys])

    def mark_sent(self, replay_id: str, batch_id: str) -> None:
        """The target committed the batch's unit of work."""
        with self._transaction():
            self._db.execute("UPDATE batches SET state = 'sent', at = ? WHERE replay_id = ? AND batch_id = ?",
                             (time.time(), replay_id, batch_id))

    def keep_sent(self, replay_id: str, batch_id: str, arrived: Collection[str]) -> None:
        """The target confirmed only the rows of the batch whose keys are `arrived` (it stopped
        part-way): those are sent, the batch with them; the other rows are to be sent again."""
        if not arrived:
            self.forget(replay_id, batch_id)
            return
        keys = set(arrived)
        with self._transaction():
            rows = [key for (key,) in self._db.execute(
                "SELECT row_key FROM sent_rows WHERE replay_id = ? AND batch_id = ?", (replay_id, batch_id))]
            self._db.executemany("DELETE FROM sent_rows WHERE replay_id = ? AND row_key = ?",
                                 [(replay_id, key) for key in rows if key not in keys])
            self._db.execute("UPDATE batches SET state = 'sent', rows = ?, at = ? WHERE replay_id = ? AND batch_id = ?",
                             (sum(1 for key in rows if key in keys), time.time(), replay_id, batch_id))

    def forget(self, replay_id: str, batch_id: str) -> None:
        """The batch's unit of work never committed: its rows are to be sent again."""
        with self._transaction():
            self._db.execute("DELETE FROM sent_rows WHERE replay_id = ? AND batch_id = ?", (replay_id, batch_id))
            self._db.execute("DELETE FROM batches WHERE replay_id = ? AND batch_id = ?", (replay_id, batch_id))

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT (ROLLBACK on an exception)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, *_rest: object) -> None:
        self._db.execute("ROLLBACK" if kind is not None else "COMMIT")
