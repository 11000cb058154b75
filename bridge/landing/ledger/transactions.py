"""The transactions of tables that commit by their own log (Delta Lake): the id a bulk's commit carries
(`TableTransaction`), made of this process's application id (`app_id`) and a version per table that only
grows (`Versions`). The ledger records it when it prepares a bulk (`mqbridge.landing.ledger.base`), the
landing gives it out (`mqbridge.landing.landing.Landing.commit`), and recovery asks the table for it:
what a transaction is lives here, how the ledger stores it there."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass(frozen=True)
class TableTransaction:
    """How a table format that commits by its own transaction (Delta Lake) recognises one bulk's
    commit: the writer's application id and a version, which the table's log keeps for every commit
    that carries them (Delta's `txnAppId` / `txnVersion`). Recorded by `Ledger.prepare` before the
    write, so that recovery asks the table whether that version committed instead of moving files."""

    app_id: str
    version: int
    #: Whether the commit must look its version up in the table's log even on its first attempt
    #: (`mqbridge.landing.delta_commit`): set when the ledger is shared with bridges on other hosts,
    #: which decide a bulk of this process once its lease expires and fence its version first. Such a
    #: fence may then come before this commit's transaction starts (this process only stalled). Not
    #: recorded: it concerns the writing process alone.
    check_fence: bool = field(default=False, compare=False)


def app_id(owner: str) -> str:
    """The `TableTransaction.app_id` of the bridge process `owner` ("host:pid:create_time"): one per
    process, so that two bridges writing one table never skip each other's versions."""
    return f"mqbridge:{owner}"


class Versions:
    """The next `TableTransaction.version` of each table for this process: 1, 2, 3... (the app id is
    new with every process, so nothing older can be in a table's log under it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[str, int] = {}

    def next(self, table: str) -> int:
        with self._lock:
            self._last[table] = version = self._last.get(table, 0) + 1
            return version
