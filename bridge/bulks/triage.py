"""Outage or poison? Decided once, for a bulk whose write failed, before any listener sees a result.

    bulk write failed (some messages RETRYABLE)
      ├─ the executor already called it an outage (JVM gone, write timeout)  → outage for all
      ├─ probe write for the sink fails                                      → outage for all
      └─ probe write succeeds: the failure is in the messages → bisect:
            each half is written on its own, as a new bulk (its own bulk id, the normal
            exactly-once path), recursively; the neighbours land, and a message that fails on its
            own while a probe write succeeds is the culprit: RETRYABLE (it counts towards its
            backout threshold, nothing else does).

An outage result (`MessageResult.sink_outage`) never counts towards a backout threshold: the
collector also opens the sink's circuit breaker (`mqbridge.bulks.breaker`).

Bisecting costs writes: at most `MAX_BISECT_WRITES` per failed bulk. Suspects left when they are
spent (a bulk with many bad messages) come back as ordinary RETRYABLE results, as before triage
existed, and are bisected again when they are redelivered.

`match_results` pairs an executor's answer with the bulk's messages (a message without a result
of its own is RETRYABLE), the first step for every bulk written.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from mqbridge.message import Bulk, Message, MessageResult, Outcome

log = logging.getLogger("mqbridge.triage")  # the name operators configure

#: Most extra writes (halves and probes) spent isolating the culprits of one failed bulk.
MAX_BISECT_WRITES = 64

Pairs = list[tuple[Message, MessageResult]]


class _Outage(Exception):
    """Raised inside bisection when a half or a probe shows that the sink itself is down."""


@dataclass
class Verdict:
    """What triage decided for one failed bulk: the results, and the outage reason if it was one."""

    pairs: Pairs
    outage: str = ""  # why the sink is unavailable; "" when it was (also) not an outage
    bisect_writes: int = 0
    culprits: int = 0


def _text(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]


def settle(message_type: str, pairs: Pairs, *, run: Callable[[Bulk], Pairs],
           probe: Callable[[], None] | None) -> Verdict:
    """Turn the RETRYABLE results of a failed bulk into outage results or isolated culprits.

    `run(bulk)` writes a bulk and pairs each of its messages with its result (it never raises);
    `probe()` does one probe write for the sink and raises if the sink cannot be written to. Without
    a probe (an executor that has none) the results stay as they are.
    """
    # Messages given back because the ledger holds them elsewhere (`MessageResult.claimed`) are
    # neither the sink's failure nor their own: nothing to decide.
    failed = [i for i, (_m, r) in enumerate(pairs) if r.outcome is Outcome.RETRYABLE and not r.claimed]
    if not failed:
        return Verdict(pairs)
    outage = next((r.reason for _m, r in pairs if r.outage and not r.claimed), "")
    if not outage and probe is not None:
        try:
            probe()
        except Exception as exc:
            outage = f"probe write failed: {_text(exc)} (bulk write: {pairs[failed[0]][1].reason})"
    if outage:
        return Verdict(_as_outage(pairs, failed, outage), outage=outage)
    if probe is None:
        return Verdict(pairs)
    budget = _Budget(MAX_BISECT_WRITES)
    decided: dict[int, MessageResult] = {}
    suspects = [(i, pairs[i][0]) for i in failed]
    first_reason = pairs[failed[0]][1].reason
    try:
        _bisect(message_type, suspects, first_reason, decided, run, probe, budget, alone=len(pairs) == 1)
    except _Outage as exc:
        reason = str(exc)
        undecided = [i for i in failed if i not in decided or decided[i].outcome is Outcome.RETRYABLE]
        out = [(m, decided.get(i, r)) for i, (m, r) in enumerate(pairs)]
        return Verdict(_as_outage(out, undecided, reason), outage=reason, bisect_writes=budget.used)
    out = [(m, decided.get(i, r)) for i, (m, r) in enumerate(pairs)]
    culprits = sum(1 for i in failed if decided.get(i, pairs[i][1]).outcome is Outcome.RETRYABLE)
    log.warning("type %s: bulk write failed while the sink takes probe writes: %d of %d failed messages "
                "isolated as the cause in %d extra writes; the others landed", message_type, culprits,
                len(failed), budget.used)
    return Verdict(out, bisect_writes=budget.used, culprits=culprits)


class _Budget:
    def __init__(self, writes: int) -> None:
        self.left = writes
        self.used = 0

    def take(self) -> bool:
        if self.left <= 0:
            return False
        self.left -= 1
        self.used += 1
        return True


def _bisect(message_type: str, suspects: list[tuple[int, Message]], reason: str,
            decided: dict[int, MessageResult], run: Callable[[Bulk], Pairs], probe: Callable[[], None],
            budget: _Budget, *, alone: bool = False) -> None:
    """Find which of `suspects` (that failed together with `reason`) fail on their own."""
    if len(suspects) == 1:
        index, message = suspects[0]
        if not alone:  # it failed in a bulk written since the last probe: is the sink still fine?
            if not budget.take():
                decided[index] = MessageResult.retryable(message.msg_id, reason)
                return
            try:
                probe()
            except Exception as exc:
                raise _Outage(f"probe write failed: {_text(exc)}") from exc
        decided[index] = MessageResult.retryable(
            message.msg_id, f"failed on its own while the sink takes writes: {reason}")
        return
    middle = len(suspects) // 2
    for half in (suspects[:middle], suspects[middle:]):
        if not budget.take():
            for index, message in half:
                decided[index] = MessageResult.retryable(
                    message.msg_id, f"{reason} (not isolated: {MAX_BISECT_WRITES} bisect writes spent)")
            continue
        bulk = Bulk(message_type, flush_reason="bisect")
        for _index, message in half:
            bulk.add(message)
        results = run(bulk)
        failed: list[tuple[int, Message]] = []
        half_reason = reason
        for (index, message), (_m, result) in zip(half, results, strict=True):
            if result.outage and not result.claimed:
                raise _Outage(result.reason)
            if result.outcome is Outcome.RETRYABLE and not result.claimed:
                failed.append((index, message))
                half_reason = result.reason
            else:
                decided[index] = result
        if failed:
            _bisect(message_type, failed, half_reason, decided, run, probe, budget)


def _as_outage(pairs: Pairs, indexes: list[int], reason: str) -> Pairs:
    out = list(pairs)
    for i in indexes:
        message, result = out[i]
        if result.outcome is Outcome.RETRYABLE:
            out[i] = (message, MessageResult.sink_outage(message.msg_id, reason, result.bulk_id))
    return out


def match_results(bulk: Bulk, messages: list[Message], results: list[MessageResult],
                  error: Exception | None) -> list[tuple[Message, MessageResult]]:
    """Pair each message with its result by msg_id; a message without one gets a retryable
    result (the executor raised, or returned too few / unknown results). Messages sharing a msg_id
    take that id's results in order: executors report in the bulk's order."""
    if error is None and len(results) == len(messages) and all(
            r.msg_id == m.msg_id and r.bulk_id for r, m in zip(results, messages, strict=True)):
        return list(zip(messages, results, strict=True))  # the usual answer: one result per message, in order
    by_id: dict[str, list[MessageResult]] = defaultdict(list)
    for result in results:
        by_id[result.msg_id].append(result)
    if error is not None:
        reason = f"{type(error).__name__}: {error}"
    else:
        reason = f"executor returned no result for this message ({len(results)} results for {len(messages)} messages)"
    pairs = []
    for message in messages:
        found = by_id.get(message.msg_id)
        if found:
            result = found.pop(0)
            if not result.bulk_id:  # executors may leave it to us
                result = dataclasses.replace(result, bulk_id=bulk.bulk_id)
        else:
            result = MessageResult.retryable(message.msg_id, reason, bulk.bulk_id)
        pairs.append((message, result))
    extra = sum(len(rest) for rest in by_id.values())
    if error is None and (extra or len(results) != len(messages)):
        log.error("executor for %r returned %d results for %d messages of bulk %s (%d unknown); "
                  "messages without a result are retryable", bulk.message_type, len(results),
                  len(messages), bulk.bulk_id, extra)
    return pairs
