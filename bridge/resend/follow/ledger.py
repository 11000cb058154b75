"""The follow ledger: what `mqbridge follow` has sent, per lane (a forward and one of its
destinations), so that a killed follower resumes without sending a row twice or skipping one.

It is the replay ledger's file format (`mqbridge.resend.replay.ledger`: batches recorded `intent`
before their unit of work at the target, `sent` after; the keys of their rows) in a file of its own,
`follow.sqlite3` in `state_dir`, with two more tables:

- `lane_bulks`: the bulks a lane has finished (every row sent). A finished bulk's row keys and
  batches are deleted in the same transaction, and a finished bulk is forgotten once its forward no
  longer looks back to its publication: the file holds a margin's worth of bulks, not the rows.
- `forward_marks`: per forward, the publication time from which it looks for bulks in the landing
  ledger (`mqbridge.resend.follow.runner` reads a margin before it), and the floor it never looks
  before (where a forward that starts with the new bulks started).
"""

from __future__ import annotations

import time
from collections.abc import Collection
from pathlib import Path

from mqbridge.resend.replay.ledger import ReplayLedger

#: The ledger's file name under `[bridge] state_dir`.
FOLLOW_LEDGER_FILE = "follow.sqlite3"

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS lane_bulks (lane TEXT NOT NULL, bulk_id TEXT NOT NULL, rows INTEGER NOT NULL, "
    "published_at REAL NOT NULL, at REAL NOT NULL, PRIMARY KEY (lane, bulk_id))",
    "CREATE TABLE IF NOT EXISTS forward_marks (forward TEXT PRIMARY KEY, since REAL NOT NULL, floor REAL NOT NULL)",
)


def _key_range(bulk_id: str) -> tuple[str, str]:
    """The row keys of a bulk's rows lie in [bulk/, bulk0): a key starts with its bulk id and '/'
    (`mqbridge.resend.replay.rows.read_rows`), and '0' follows '/'."""
    return f"{bulk_id}/", f"{bulk_id}0"


class FollowLedger(ReplayLedger):
    """The follow ledger file at `path` (created 0600 in a private directory)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        for statement in _SCHEMA:
            self._db.execute(statement)

    @classmethod
    def in_state_dir(cls, state_dir: Path) -> FollowLedger:
        """The follow ledger of the bridge whose `state_dir` this is."""
        return cls(state_dir / FOLLOW_LEDGER_FILE)

    def since(self, forward: str) -> float | None:
        """The publication time `forward` looks for bulks from (None: it never ran)."""
        row = self._db.execute("SELECT since FROM forward_marks WHERE forward = ?", (forward,)).fetchone()
        return float(row[0]) if row is not None else None

    def floor(self, forward: str) -> float:
        """The publication time before which `forward` sends nothing (where it started)."""
        row = self._db.execute("SELECT floor FROM forward_marks WHERE forward = ?", (forward,)).fetchone()
        return float(row[0]) if row is not None else 0.0

    def set_since(self, forward: str, since: float, *, floor: float | None = None) -> None:
        """`forward` has sent every bulk published before `since` to each of its destinations (and,
        the first time, sends none published before `floor`)."""
        with self._transaction():
            self._db.execute("INSERT INTO forward_marks VALUES (?, ?, ?) ON CONFLICT (forward) DO UPDATE SET "
                             "since = excluded.since", (forward, since, since if floor is None else floor))

    def finished(self, lane: str, bulk_ids: Collection[str]) -> set[str]:
        """Which of `bulk_ids` `lane` has finished."""
        found: set[str] = set()
        ids = list(bulk_ids)
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            marks = ",".join("?" * len(chunk))
            found.update(b for (b,) in self._db.execute(
                f"SELECT bulk_id FROM lane_bulks WHERE lane = ? AND bulk_id IN ({marks})", (lane, *chunk)))
        return found

    def bulk_keys(self, lane: str, bulk_id: str) -> set[str]:
        """The keys of the rows carrying `bulk_id` that `lane` has sent (or holds in doubt)."""
        low, high = _key_range(bulk_id)
        return {k for (k,) in self._db.execute(
            "SELECT row_key FROM sent_rows WHERE replay_id = ? AND row_key >= ? AND row_key < ?", (lane, low, high))}

    def finish(self, lane: str, bulk_id: str, rows_bulk_id: str, rows: int, published_at: float) -> None:
        """Every row of `bulk_id` that `lane` sends is sent: the bulk is recorded finished, and its rows'
        keys (under `rows_bulk_id`, the id its rows carry) and batches are deleted (no batch of it is in
        doubt: each was marked sent)."""
        low, high = _key_range(rows_bulk_id)
        with self._transaction():
            self._db.execute("INSERT OR IGNORE INTO lane_bulks VALUES (?, ?, ?, ?, ?)",
                             (lane, bulk_id, rows, published_at, time.time()))
            self._db.execute("DELETE FROM batches WHERE replay_id = ? AND batch_id IN (SELECT batch_id FROM sent_rows "
                             "WHERE replay_id = ? AND row_key >= ? AND row_key < ?)", (lane, lane, low, high))
            self._db.execute("DELETE FROM sent_rows WHERE replay_id = ? AND row_key >= ? AND row_key < ?",
                             (lane, low, high))

    def lane_totals(self, lane: str) -> tuple[int, int]:
        """(bulks, rows) `lane` has finished."""
        row = self._db.execute("SELECT count(*), coalesce(sum(rows), 0) FROM lane_bulks WHERE lane = ?",
                               (lane,)).fetchone()
        return int(row[0]), int(row[1])

    def forget_before(self, lane: str, before: float) -> int:
        """Forget the finished bulks of `lane` published before `before` (the forward no longer looks
        that far back); how many."""
        with self._transaction():
            cursor = self._db.execute("DELETE FROM lane_bulks WHERE lane = ? AND published_at < ?", (lane, before))
        return int(cursor.rowcount)
