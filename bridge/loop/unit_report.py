"""What a committed unit of work reports: its counters (messages committed, deduplicated, moved
aside, put-to-commit and receipt-to-commit latency) and its log lines."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from mqbridge.counters import Counters
from mqbridge.loop.unit_plan import Unit, UnitPlan
from mqbridge.message import Message
from mqbridge.resend.replay.rows import REPLAY_KEY_HEADERS
from mqbridge.tracing.backout_log import BackoutLog

log = logging.getLogger("mqbridge.listener")


def put_to_commit(message: Message, now_monotonic: float) -> float:
    """Seconds from the message's put (its receipt when the source gives no put time) to now."""
    if message.put_timestamp is None:
        return now_monotonic - message.received_monotonic
    age = (message.received_timestamp - message.put_timestamp).total_seconds()
    return max(0.0, age) + (now_monotonic - message.received_monotonic)


def report_committed(counters: Counters, labels: Mapping[str, str], name: str, unit: Unit, plan: UnitPlan,
                     backout_log: BackoutLog | None = None, default_queue: str | None = None) -> None:
    """Counters and log lines of a committed unit of work of the listener `name`; its moves in
    `backout_log` too (`default_queue`: where a move without a queue of its own went)."""
    returned_ids = {m.msg_id for m in plan.returns}
    now = time.monotonic()
    committed_now = [m for m in unit.submitted if m.msg_id not in returned_ids]
    counters.observe_many("put_to_commit_seconds", [put_to_commit(m, now) for m in committed_now], **labels)
    # From the listener's receipt: without the time in the broker and in the connection's prefetch.
    counters.observe_many("receipt_to_commit_seconds", [now - m.received_monotonic for m in committed_now], **labels)
    committed = len(unit.batch) - len(plan.returns) - len(plan.moves)
    counters.inc("messages_committed", committed, **labels)
    if unit.consumed:
        counters.inc("messages_consumed_by_preprocessors", unit.consumed, **labels)
    if unit.deduplicated:
        counters.inc("messages_deduplicated", len(unit.deduplicated), **labels)
        replayed = sum(1 for m in unit.deduplicated if any(h in m.headers for h in REPLAY_KEY_HEADERS))
        if replayed:  # a replay meant them to land: that they do not is news for the operator
            log.warning("%s: %d replayed messages (header mqbridge-replay-key) were already landed; committed "
                        "without landing them again (mqbridge replay --new-identity lands them as new messages)",
                        name, replayed)
        if len(unit.deduplicated) > replayed:
            log.info("%s: %d redelivered messages were already landed; committed without landing them again",
                     name, len(unit.deduplicated) - replayed)
    if unit.repeated:
        counters.inc("messages_deduplicated", len(unit.repeated), **labels)
        log.info("%s: %d messages repeated an identity another message of their unit has (a producer's "
                 "re-send); committed once, landed once", name, len(unit.repeated))
    if plan.moves:
        counters.inc("messages_moved_to_backout", len(plan.moves), **labels)
        for move in plan.moves:
            queue = move.queue or "(source default)"
            log.warning("%s: moved message %s to backout queue %s: %s", name, move.message.msg_id, queue, move.reason)
            counters.record("backout_moves", listener=name, msg_id=move.message.msg_id, queue=queue,
                            reason=move.reason)
        if backout_log is not None:
            backout_log.record_moves(plan.moves, listener=name, queue=labels.get("queue", ""),
                                     default_queue=default_queue)
