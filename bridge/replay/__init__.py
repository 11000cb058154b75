"""Replay: landed rows back onto a queue (`mqbridge replay`), each sent once across kills.

`rows` reads the rows through Spark in `put_timestamp` order; `ledger` records what was sent;
`runner` drives the batches; a source kind's sender (`REPLAY_KINDS`, imported when used) sends each
batch in one unit of work at the target, with a marker that tells a resumed replay whether a batch
left in doubt by a kill committed.
"""

from __future__ import annotations

from mqbridge.replay.ledger import REPLAY_LEDGER_FILE, ReplayLedger
from mqbridge.replay.rows import ReplayRow, Selection, read_rows
from mqbridge.replay.runner import REPLAY_KINDS, ReplayReport, ReplayTarget, replay, replay_target

__all__ = ["REPLAY_KINDS", "REPLAY_LEDGER_FILE", "ReplayLedger", "ReplayReport", "ReplayRow", "ReplayTarget",
           "Selection", "read_rows", "replay", "replay_target"]
