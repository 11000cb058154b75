"""Exactly-once on the listener loop's side: the landing ledger as the loop sees it
(`Deduplicator`), and the two lookups of a unit of work in it — which of its messages landed
already (committed without landing again), and where (for their producers)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from mqbridge.errors import IdentityError
from mqbridge.identity import identity_of, scoped
from mqbridge.message import Message
from mqbridge.source import BackoutMove, Landed


class Deduplicator(Protocol):
    """The landing ledger as the listener loop sees it (`mqbridge.landing.Landing`)."""

    def published(self, identities: Sequence[str]) -> set[str]:
        """Which of these identities are already landed."""

    def landed_in(self, identities: Sequence[str]) -> dict[str, tuple[str, str]]:
        """(bulk id, table) of each of these identities that is landed."""


def landed_before(dedupe: Deduplicator | None, batch: list[Message], rule: str, backout_queue: str | None,
                  moves: list[BackoutMove], scope: str = "") -> set[int]:
    """Give each message its identity by `rule` (from the original, before preprocessing) and return
    the deliveries the ledger shows as landed already: a redelivery after a crash or a lost
    commit, which is committed without landing again. Every message is checked, not only those
    flagged redelivered: ActiveMQ does not always flag prefetched messages of a dead consumer.
    Deliveries are named by `id()`, not msg_id: an MQ unit may hold two messages with one MsgId.
    A message without its identity (a missing header) is moved to `backout_queue` (`moves`).
    `scope` (a topic listener's subscription) is part of each identity (`mqbridge.identity.scoped`)."""
    if dedupe is None:
        return set()
    for message in batch:
        try:
            message.identity = scoped(identity_of(message, rule), scope)
        except IdentityError as exc:
            moves.append(BackoutMove(message, str(exc), backout_queue))
    known = [m for m in batch if m.identity]
    landed = dedupe.published([m.identity for m in known])
    return {id(m) for m in known if m.identity in landed}


def landed_where(dedupe: Deduplicator | None, recognised: Sequence[Message]) -> list[Landed]:
    """Where the ledger says each of these (already landed) messages is, for their producers."""
    if not recognised or dedupe is None:
        return []
    where = dedupe.landed_in([m.identity for m in recognised if m.identity])
    found = [(m, where.get(m.identity or "", ("", ""))) for m in recognised]
    return [Landed(m, table=table, bulk_id=bulk_id) for m, (bulk_id, table) in found]
