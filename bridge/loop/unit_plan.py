"""What the results of one unit of work mean, decided before anything is done about them.

    the unit's results + the queue's delivery records (`DeliveryRecords`)
      → plan_unit(...) → UnitPlan: moves to the backout queue (with reasons), messages given back,
        outages (given back uncounted), culprits (suspects if the unit is backed out whole),
        message failures to count (the halt policy), what landed, commit or back out whole
      → the listener thread carries the plan out against its source (`ListenerThread._finish`).

`plan_unit` is pure: it reads its arguments and returns a plan; counting, committing, rolling back,
logging are the listener's. (The shape of `mqbridge.bulks.triage.settle -> Verdict`.) `UnitResults`
collects a unit's results from the collector's workers as they come back.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from mqbridge.errors import PoisonLoopError
from mqbridge.loop.bookkeeping import DeliveryRecords
from mqbridge.message import Message, MessageResult, Outcome
from mqbridge.source import BackoutMove, Landed


@dataclass(frozen=True)
class UnitPolicy:
    """How a listener treats failures: its configuration and what its source can do."""

    queue: str
    backout_threshold: int  # the listener's own (0: the loop moves nothing for being delivered often)
    backout_queue: str | None
    halt_after_failures: int
    partial_commit: bool  # `Source.supports_partial_commit`
    source_moves: bool  # `Source.applies_backout_threshold`
    #: The delivery count at which a failing message is moved aside (ours, or the source's); 0: never.
    moving_threshold: int
    ledger: bool  # the landing ledger recognises redelivered messages (exactly-once)


class UnitResults:
    """Collects the per-message results of one unit of work from the collector's workers.

    Keyed per delivery (the Message object submitted), not per msg_id: two deliveries of one
    message can be in flight at once (a redelivery after a lost connection, taken by another
    listener thread while the first copy is still in a bulk), and one's result must not settle
    the other. A result for a delivery of another unit is ignored; a delivery left without its
    own result counts as retryable (`plan_unit`)."""

    def __init__(self, submitted: Sequence[Message]) -> None:
        self._mine = {id(m) for m in submitted}
        self._expected = len(self._mine)
        self._results: dict[int, MessageResult] = {}
        self._done = threading.Event()
        self._lock = threading.Lock()
        if self._expected == 0:
            self._done.set()

    def __call__(self, message: Message, result: MessageResult) -> None:
        self.many(((message, result),))

    def many(self, results: Sequence[tuple[Message, MessageResult]]) -> None:
        """Several results at once (one lock round: the collector hands a unit its results of a bulk so)."""
        with self._lock:
            for message, result in results:
                if id(message) in self._mine:  # else the same msg_id, delivered to another unit
                    self._results[id(message)] = result
            if len(self._results) >= self._expected:
                self._done.set()

    def wait(self, timeout: float) -> bool:
        return self._done.wait(timeout)

    def get(self, message: Message) -> MessageResult | None:
        with self._lock:
            return self._results.get(id(message))

    def pairs(self, messages: Sequence[Message]) -> tuple[tuple[Message, MessageResult | None], ...]:
        """Each of `messages` with its result (None: none came), in one lock round (`Unit.results`)."""
        with self._lock:
            found = self._results.get
            return tuple((m, found(id(m))) for m in messages)


@dataclass(frozen=True)
class Unit:
    """One unit of work as it ends: what was read, and what became of each message so far."""

    batch: tuple[Message, ...]
    #: Each message submitted to the collector with its result (None: no result came back).
    results: tuple[tuple[Message, MessageResult | None], ...] = ()
    #: Decided before preprocessing: no identity, or delivered too often already.
    moves: tuple[BackoutMove, ...] = ()
    #: Messages a preprocessor failed on, with the reason.
    failed: tuple[tuple[Message, str], ...] = ()
    #: Landed before (the ledger knows them): committed without landing again.
    deduplicated: tuple[Message, ...] = ()
    consumed: int = 0  # messages a preprocessor consumed
    #: Copies of a message this unit holds already (one identity): committed without landing, no result.
    repeated: tuple[Message, ...] = ()

    @property
    def submitted(self) -> list[Message]:
        return [m for m, _ in self.results]


@dataclass(frozen=True)
class Failure:
    """A failure of a message on its own account, to be counted (`DeliveryBook.blamed`).
    `noted`: the book already has its reason (a preprocessor failure is noted when it happens)."""

    message: Message
    reason: str
    noted: bool = False


@dataclass(frozen=True)
class UnitPlan:
    """What to do with one unit of work.

    Whether to halt is `halt(failure, failures)`, asked with the count the book returns as it
    counts each of `failures`: the counts are shared by the queue's listener threads, so the
    decision is taken on the count that counting returned, not on one read before.
    """

    policy: UnitPolicy
    moves: tuple[BackoutMove, ...] = ()  # to the backout queue, in the commit
    returns: tuple[Message, ...] = ()  # back to the source (in the commit, or by backing out whole)
    reason: str = ""  # why the first of `returns` goes back
    outages: tuple[Message, ...] = ()  # returned because their sink is down: their delivery does not count
    culprits: tuple[Message, ...] = ()  # returned for a failure of their own: suspects of a whole back-out
    failures: tuple[Failure, ...] = ()  # in the order they are counted
    landed: tuple[Landed, ...] = ()  # submitted and landed
    left: tuple[Message, ...] = ()  # leave the queue with the commit (landed, moved, consumed, deduplicated)
    #: The source cannot commit in part and something goes back: back the whole unit out.
    back_out: bool = False

    @property
    def outage_only(self) -> bool:
        """Everything given back goes back because of an outage: no delivery of the unit counts."""
        return len(self.outages) == len(self.returns)

    @property
    def duplicated_risk(self) -> int:
        """Messages that landed but go back with their whole unit, with no ledger to recognise
        them when they come back: they will land again."""
        return len(self.landed) if self.back_out and not self.policy.ledger else 0

    def halt(self, failure: Failure, failures: int) -> PoisonLoopError | None:
        """Whether `failure`, the message's `failures`-th (`DeliveryBook.blamed`), halts the listener."""
        return halting_error(self.policy, failure.message, failures, failure.reason)


@dataclass
class _Draft:
    """The decisions of `plan_unit` as they are taken, message by message."""

    moves: list[BackoutMove]
    retry: list[tuple[Message, str]] = field(default_factory=list)  # given back, with the reason
    culprits: list[Message] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    outages: list[Message] = field(default_factory=list)


def plan_unit(unit: Unit, policy: UnitPolicy, records: DeliveryRecords) -> UnitPlan:
    """Decide what a unit's results mean: which messages are moved to the backout queue (and
    why), given back, or commit; which failures count; whether the unit is backed out whole.

    Where nothing can be moved aside (no backout queue, and the source moves nothing), the moves
    are given back as failures, so the halt policy stops a message that can never land from going
    round forever.
    """
    draft = _decide(unit, policy, records)
    moves, retry, failures = draft.moves, draft.retry, draft.failures
    if moves and policy.backout_queue is None and not policy.source_moves:
        # Nowhere to move them (threshold 0 needs no backout queue): give them back as failures.
        for move in moves:
            reason = f"{move.reason} (it cannot be moved aside: the listener has no backout_queue)"
            failures.append(Failure(move.message, reason))
            retry.append((move.message, reason))
        moves = []
    returns = tuple(m for m, _ in retry)
    returned_ids = {m.msg_id for m in returns}  # (returns are preprocessed copies of `batch`)
    return UnitPlan(
        policy, moves=tuple(moves), returns=returns, reason=retry[0][1] if retry else "",
        outages=tuple(draft.outages), culprits=tuple(draft.culprits), failures=tuple(failures),
        landed=tuple(Landed(m, r.table, r.bulk_id) for m, r in unit.results
                     if r is not None and r.outcome is Outcome.SUCCESS),  # `ok`, for every message of a unit
        left=tuple(m for m in unit.batch if m.msg_id not in returned_ids),
        back_out=bool(returns) and not policy.partial_commit)


def _decide(unit: Unit, policy: UnitPolicy, records: DeliveryRecords) -> _Draft:
    """Each failed message and each result on its own. A permanent result is moved aside. A
    retryable one is given back, unless it reached the backout threshold on a source that commits
    in part; an outage result is given back without counting."""
    draft = _Draft(list(unit.moves))
    threshold = policy.backout_threshold
    for message, reason in unit.failed:
        draft.failures.append(Failure(message, reason, noted=True))
        if threshold and records.counted(message) >= threshold:
            last = reason or records.last_reason(message.msg_id)
            draft.moves.append(BackoutMove(message, exhausted_reason(message, threshold, last),
                                           policy.backout_queue))
        else:
            draft.retry.append((message, reason))
            draft.culprits.append(message)
    for message, result in unit.results:
        result = result or MessageResult.retryable(message.msg_id, "no result")
        if result.outcome is Outcome.PERMANENT:
            draft.moves.append(BackoutMove(message, result.reason, policy.backout_queue))
        elif result.outage:  # the sink is down, not the message: give it back, uncounted
            draft.outages.append(message)
            draft.retry.append((message, result.reason))
        elif result.outcome is Outcome.RETRYABLE:
            # The listener notes this reason as it counts the failure: the book's last reason is this one.
            draft.failures.append(Failure(message, result.reason))
            if policy.partial_commit and threshold and records.counted(message) >= threshold:
                draft.moves.append(BackoutMove(message, exhausted_reason(message, threshold, result.reason),
                                               policy.backout_queue))
            else:
                draft.retry.append((message, result.reason))
                draft.culprits.append(message)  # the write failed for it, not for the sink (triage)
    return draft


def exhausted_reason(message: Message, threshold: int, last: str | None) -> str:
    """The reason a message delivered too often is moved aside with (`last`: its last failure)."""
    return (f"delivered {message.delivery_count} times, backout threshold is "
            f"{threshold}; last failure: {last or 'unknown'}")


def halting_error(policy: UnitPolicy, message: Message, failures: int, reason: str) -> PoisonLoopError | None:
    """When no backout threshold will ever move `message` and it failed `halt_after_failures`
    times, the error that halts its listener (raised once the unit of work is ended)."""
    limit = policy.halt_after_failures
    if failures < limit or policy.moving_threshold > 0:
        return None
    where = "BOTHRESH is 0" if policy.source_moves else "backout_threshold is 0"
    return PoisonLoopError(
        f"message {message.msg_id} on {policy.queue} failed {failures} times and no backout threshold "
        f"will move it ({where}); halted after halt_after_failures = {limit} attempts, the message stays on "
        f"the queue. Last failure: {reason}. Fix the cause (or set a backout threshold and backout "
        "queue) and restart the bridge")


__all__ = ["Failure", "Unit", "UnitPlan", "UnitPolicy", "UnitResults", "exhausted_reason", "halting_error",
           "plan_unit"]
