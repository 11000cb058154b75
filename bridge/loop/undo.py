"""Undo on every rollback: which deliveries of a unit of work its chain's `on_submit_error` is told
about, with which `Rollback`, and when. The listener thread reports each way a unit of work ends
to its `UnitUndo`; nothing else calls the hook.

    every message the chain processed in this delivery (not those the ledger recognised or that
    were moved before preprocessing) ends in one of two ways:
      committed as landed, or consumed by a preprocessor, in a commit that succeeds → not told
      anything else                                                               → told once:
        a preprocessor raised on it                           preprocessor   (moved: at its threshold)
        its bulk write failed for it (retryable, permanent)   write_failed   (moved: permanent, threshold)
        its sink was unavailable                              outage
        its unit went back whole because of other messages    unit_backout   (landed: it is in its table)
          (IBM MQ, which cannot commit in part; a type chosen that is not configured; a unit left
          unfinished by an error), or the source commit failed and the unit comes back
        the source commit's outcome is unknown                in_doubt       (landed: it is in its table)

A message's own failure is told before its unit is committed or backed out, so its undo has run
before the message can be delivered again. A failed commit is known only after it: its messages
not told yet (those that landed, or were consumed) are told then. Once a delivery is told it is
never told again, whatever happens next to its unit; a unit that committed tells nothing more.
A unit preprocessed again on the last good plugin generation (a new one failed on all of it)
tells the new generation's chain about each message it raised on at once, as a preprocessor failure
(`abandon`); the last good chain is told like any other.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from mqbridge.errors import (
    InDoubtError,
    PreprocessorError,
    SinkOutageError,
    UnitBackedOutError,
    WriteFailedError,
)
from mqbridge.loop.preprocess import Chain, Preprocessed
from mqbridge.loop.unit_plan import Unit, UnitPlan, UnitResults
from mqbridge.message import Message, MessageResult, Outcome, Rollback, RollbackKind

log = logging.getLogger("mqbridge.listener")


def of_result(result: MessageResult | None) -> tuple[RollbackKind, BaseException] | None:
    """What a message's write result tells its chain; None: it landed."""
    if result is None:
        return RollbackKind.WRITE_FAILED, WriteFailedError("no result came back for it")
    if result.outcome is Outcome.SUCCESS:
        return None
    if result.outage:
        return RollbackKind.OUTAGE, SinkOutageError(result.reason)
    return RollbackKind.WRITE_FAILED, WriteFailedError(result.reason)


def tell(chain: Chain, message: Message, reason: Rollback, listener: str) -> None:
    """Call the chain's undo hook; an exception is logged, never passed on."""
    try:
        chain.on_submit_error(message, reason)
    except Exception:
        log.exception("%s: on_submit_error failed for message %s (%s)", listener, message.msg_id, reason.kind.value)


def abandon(chain: Chain, failed: Iterable[tuple[Message, PreprocessorError]], listener: str) -> None:
    """A new generation's chain that raised on every message of a unit, which goes on with the last
    good one: tell it about each message it raised on."""
    for message, exc in failed:
        tell(chain, message, Rollback(RollbackKind.PREPROCESSOR, exc), listener)


class UnitUndo:
    """The undo calls of one unit of work: each delivery its chain processed is told at most once.

    Messages may be given as received or as the chain made them (a submitted copy): either way the
    hook gets the message as received."""

    def __init__(self, chain: Chain, processed: Iterable[Message], pre: Preprocessed, listener: str) -> None:
        self.chain = chain
        self.listener = listener
        self.results: UnitResults | None = None  # once submitted: whether each copy landed
        self._processed = {id(m): m for m in processed}
        self._origins = pre.origins  # id(submitted copy) -> message as received
        self._copies = {id(original): copy for copy, original in
                        ((m, pre.origins.get(id(m), m)) for m in pre.submitted)}
        self._failed = list(pre.failed)
        self._told: set[int] = set()
        self._settled = False  # committed, or every delivery told: nothing more to say

    def _tell(self, message: Message, kind: RollbackKind, error: BaseException, *, moved: bool = False) -> None:
        original = self._origins.get(id(message), message)
        key = id(original)
        if self._settled or key not in self._processed or key in self._told:
            return
        self._told.add(key)
        tell(self.chain, original, Rollback(kind, error, landed=self._landed(original), moved=moved), self.listener)

    def _landed(self, original: Message) -> bool:
        copy = self._copies.get(id(original))
        if copy is None or self.results is None:
            return False
        result = self.results.get(copy)
        return result is not None and result.ok

    def _everything_else(self, kind: RollbackKind, error: BaseException) -> None:
        for message in list(self._processed.values()):
            self._tell(message, kind, error)
        self._settled = True

    # -- how a unit of work ends ----------------------------------------------------------------
    def land_nothing(self) -> None:
        """A preprocessor failed in a unit backed out whole before anything was submitted: each
        failure is told as such, every other message as backed out with the first failure."""
        for message, exc in self._failed:
            self._tell(message, RollbackKind.PREPROCESSOR, exc)
        self._everything_else(RollbackKind.UNIT_BACKOUT, self._failed[0][1])

    def planned(self, unit: Unit, plan: UnitPlan) -> None:
        """Before `plan` is carried out: each message's own failure (moved: `plan.moves` takes it
        to the backout queue in the commit); if the unit is backed out whole, every other message."""
        moving = set() if plan.back_out else {id(self._origins.get(id(m.message), m.message)) for m in plan.moves}
        for message, exc in self._failed:
            self._tell(message, RollbackKind.PREPROCESSOR, exc, moved=id(message) in moving)
        for message, result in unit.results:
            failure = of_result(result)
            if failure is not None:
                self._tell(message, *failure, moved=id(self._origins.get(id(message), message)) in moving)
        if plan.back_out:
            self._everything_else(RollbackKind.UNIT_BACKOUT, UnitBackedOutError(
                f"its unit of work of {len(unit.batch)} messages is backed out whole (the source cannot commit "
                f"part of it): {plan.reason}"))

    def committed(self) -> None:
        """The source committed the unit: whatever was not told left the queue as landed or consumed."""
        self._settled = True

    def not_committed(self, error: BaseException) -> None:
        """The unit ends without a commit (the error is why), or its commit failed: every message not
        told yet goes back with it — in doubt if the source cannot say whether its commit happened."""
        if self._settled:
            return
        kind = RollbackKind.IN_DOUBT if isinstance(error, InDoubtError) else RollbackKind.UNIT_BACKOUT
        self._everything_else(kind, error)


__all__ = ["UnitUndo", "abandon", "of_result", "tell"]
