"""Replay: landed rows back onto a queue (`mqbridge replay`), each sent once across kills.

`rows` reads the rows through Spark in `put_timestamp` order; `ledger` records what was sent;
`runner` drives the batches; a source kind's sender (its driver's `replay`, imported when used by
`mqbridge.drivers.replay_target`) sends each batch in one unit of work at the target, with a marker
that tells a resumed replay whether a batch left in doubt by a kill committed.
"""

from __future__ import annotations

from mqbridge.drivers import replay_target
from mqbridge.resend.replay.ledger import REPLAY_LEDGER_FILE, ReplayLedger
from mqbridge.resend.replay.rows import ReplayRow, Selection, read_rows
from mqbridge.resend.replay.runner import ReplayReport, ReplayTarget, ReplayTargetFactory, replay

__all__ = ["REPLAY_LEDGER_FILE", "ReplayLedger", "ReplayReport", "ReplayRow", "ReplayTarget", "ReplayTargetFactory",
           "Selection", "read_rows", "replay", "replay_target"]
