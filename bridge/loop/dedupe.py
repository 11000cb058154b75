"""Exactly-once on the listener loop's side: the landing ledger as the loop sees it
(`Deduplicator`), and the two lookups of a unit of work in it — which of its messages landed
already (committed without landing again), and where (for their producers)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from mqbridge.errors import IdentityError
from mqbridge.identity import UNSCOPED, Scope, identity_of, scoped, unscoped
from mqbridge.message import Message
from mqbridge.source import BackoutMove, Landed


class Deduplicator(Protocol):
    """The landing ledger as the listener loop sees it (`mqbridge.landing.Landing`)."""

    def published(self, identities: Sequence[str]) -> set[str]:
        """Which of these identities are already landed."""

    def landed_in(self, identities: Sequence[str]) -> dict[str, tuple[str, str]]:
        """(bulk id, table) of each of these identities that is landed."""


def landed_before(dedupe: Deduplicator | None, batch: list[Message], rule: str, backout_queue: str | None,
                  moves: list[BackoutMove], scope: Scope = UNSCOPED) -> set[int]:
    """Give each message its identity by `rule` (from the original, before preprocessing) and return
    the deliveries the ledger shows as landed already: a redelivery after a crash or a lost
    commit, which is committed without landing again. Every message is checked, not only those
    flagged redelivered: ActiveMQ does not always flag prefetched messages of a dead consumer.
    Deliveries are named by `id()`, not msg_id: an MQ unit may hold two messages with one MsgId.
    A message without its identity (a missing header) is moved to `backout_queue` (`moves`).
    `scope` is part of each identity (`mqbridge.identity.listener_scope`); where an earlier version
    kept them unscoped, the unscoped form is looked up too."""
    if dedupe is None:
        return set()
    plain: dict[int, str] = {}
    for message in batch:
        try:
            plain[id(message)] = identity_of(message, rule)
        except IdentityError as exc:
            moves.append(BackoutMove(message, str(exc), backout_queue))
            continue
        message.identity = scoped(plain[id(message)], scope.prefix)
    known = [m for m in batch if id(m) in plain]
    asked = [m.identity for m in known if m.identity]
    if scope.unscoped_too:
        asked += [plain[id(m)] for m in known]
    landed = dedupe.published(asked)
    return {id(m) for m in known
            if m.identity in landed or (scope.unscoped_too and plain[id(m)] in landed)}


def repeated_in_unit(batch: Sequence[Message], recognised: set[int]) -> set[int]:
    """The deliveries of `batch` whose identity (given by `landed_before`) an earlier message of the
    same unit has: a producer's re-send of a message whose receipt it missed, or the same MsgId put
    twice. Only the first copy lands; the others leave the queue with the unit's commit, as one
    message. Safe whatever becomes of the first: it lands, moves or goes back to the queue (and lands
    later) in the same commit that removes its copies. Copies in two units of work are found by the
    ledger once the first has landed (not while both are in flight)."""
    seen: set[str] = set()
    repeated: set[int] = set()
    for message in batch:
        if message.identity is None or id(message) in recognised:
            continue
        if message.identity in seen:
            repeated.add(id(message))
        seen.add(message.identity)
    return repeated


def landed_where(dedupe: Deduplicator | None, recognised: Sequence[Message]) -> list[Landed]:
    """Where the ledger says each of these (already landed) messages is, for their producers: by
    its identity, or by the unscoped form an earlier version landed it under."""
    if not recognised or dedupe is None:
        return []
    identities = [m.identity for m in recognised if m.identity]
    where = dedupe.landed_in(identities + [unscoped(i) for i in identities if unscoped(i) != i])
    found = [(m, where.get(m.identity or "") or where.get(unscoped(m.identity or ""), ("", "")))
             for m in recognised]
    return [Landed(m, table=table, bulk_id=bulk_id) for m, (bulk_id, table) in found]

