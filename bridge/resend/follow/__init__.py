"""Follow: the standing reverse path (`mqbridge follow`, `[[forwards]]`). `runner` tails each forward's
table through the landing ledger's published bulks and sends their rows on, by the replay's protocol
(`mqbridge.resend.replay`); `ledger` records what each destination has been sent."""

from __future__ import annotations

from mqbridge.resend.follow.ledger import FOLLOW_LEDGER_FILE, FollowLedger
from mqbridge.resend.follow.runner import Follower, Lane, lane_id

__all__ = ["FOLLOW_LEDGER_FILE", "FollowLedger", "Follower", "Lane", "lane_id"]
