"""Re-drive on STOMP: move messages from a listener's backout queue back to its source queue, each
as a copy that keeps the identity the landing ledger knows it by (`mqbridge redrive`).

A message the bridge moved aside carries `mqbridge-original-message-id` (its msg_id) and
`mqbridge-original-timestamp`. The copy sent back carries them as `mqbridge-requeue-id` /
`mqbridge-requeue-timestamp`, the headers by which the adapter turns a copy back into the original
message (`mapping.to_message`): so its msg_id, put time and every header are the original's, and a
message that had in fact landed (a crash in `commit_mode = "receipted"` can leave a moved message
on both queues) is recognised by the ledger and committed without landing again. One header may
differ: a `user-id` the move set aside (`mqbridge-original-user-id`) goes back as `user-id` only if
it is the source's login (`publish.sendable_headers`; RabbitMQ refuses another user's). Its delivery
count starts again (a re-drive is a new chance). Why it was moved is kept as history:
`mqbridge-redriven-reason` (earlier re-drives' reasons after it, separated by " | "),
`mqbridge-redriven-at`; the other `mqbridge-*` move headers are dropped.

On ActiveMQ each batch moves in one STOMP transaction: messages received with `client-individual`
acks, the copies SENT (persistent, each with a receipt), the ACKs, COMMIT with a receipt. A kill
anywhere before the COMMIT drops the transaction with the connection: the copies are never seen and
the broker gives the backout messages back. Never NACK: ActiveMQ dead-letters on NACK. Not on
Artemis, whose ACK frames are not transactional (the command refuses it).

RabbitMQ applies a transaction frame by frame (a refused SEND does not stop the ACK after it: the
message would be lost), so there the copies are SENT outside any transaction on a connection of
their own, one at a time, each confirmed by its receipt before the next (`publish.ConfirmedSender`),
and only the originals whose copies were confirmed are ACKed (the last ACK with a receipt). A copy
the source queue refuses (full, `overflow = reject-publish`: RabbitMQ closes the connection without
a reason) or the broker refuses stops the re-drive (PartlySentError, exit 1) with the reason: its
original and every one after it stay on the backout queue, the ones confirmed before it are moved.
A kill (or a lost connection) between a copy's receipt and its original's ACK leaves the message on
both queues: run again, and the source gets a second copy with the same `mqbridge-requeue-id`. The
two copies are the same message (msg_id, headers, body): once the first has landed, the ledger
recognises the second (while `dedupe_window` keeps the first) and the bridge lands it once; two
copies taken into one bulk both land. Where per-delivery ids (RabbitMQ's `identity = "auto"`)
cannot help: a message the bridge did not move there (no `mqbridge-original-message-id`) goes back
as a new message, so both copies land; and a message that landed after its move was confirmed (a
crash of the bridge between the move and its ACK) is in the table under a later delivery's id, so
its copy lands again. With `identity = "header:NAME"` the producer's id tells them apart.
"""

from __future__ import annotations

import queue
import time
import uuid
from collections.abc import Callable
from typing import Any

from mqbridge import failpoints
from mqbridge.config import ListenerConfig, SourceConfig, StompSourceConfig
from mqbridge.errors import ConfigError, PartlySentError, SourceConnectionError
from mqbridge.listeners.stomp.connection import Connection
from mqbridge.listeners.stomp.frames import one_line
from mqbridge.listeners.stomp.mapping import REQUEUE_COUNT, REQUEUE_ID, REQUEUE_TIMESTAMP
from mqbridge.listeners.stomp.publish import ConfirmedSender, Outgoing
from mqbridge.message import utcnow
from mqbridge.resend.redrive import RedriveReport, RedriveRequest

#: Headers of the backout message that are frame plumbing or set anew by the broker on SEND.
_DROPPED = {"message-id", "destination", "timestamp", "ack", "subscription", "content-length", "redelivered",
            "transaction", "receipt", "x-delivery-count", "expires"}
#: The move's headers (`mapping.backout_headers`): replaced by the identity and history headers.
_MOVE_HEADERS = {"mqbridge-reason", "mqbridge-original-message-id", "mqbridge-original-destination",
                 "mqbridge-delivery-count", "mqbridge-moved-at", "mqbridge-original-timestamp"}
REDRIVEN_REASON = "mqbridge-redriven-reason"
REDRIVEN_AT = "mqbridge-redriven-at"


def redrive_headers(headers: dict[str, str]) -> tuple[dict[str, str], bool]:
    """The headers of the copy of a backout message (its `headers`) sent back to its source, and
    whether it keeps an identity (False: not moved by the bridge; it goes back as a new message)."""
    out = {k: v for k, v in headers.items() if k not in _DROPPED and k not in _MOVE_HEADERS}
    out["persistent"] = "true"  # ActiveMQ SENDs are non-persistent unless asked
    original = headers.get("mqbridge-original-message-id")
    if original:
        out[REQUEUE_ID] = original
        out[REQUEUE_COUNT] = "0"
        if headers.get("mqbridge-original-timestamp"):
            out[REQUEUE_TIMESTAMP] = headers["mqbridge-original-timestamp"]
    reason = one_line(headers.get("mqbridge-reason", ""))
    if reason:
        earlier = headers.get(REDRIVEN_REASON)
        out[REDRIVEN_REASON] = f"{reason} | {earlier}" if earlier else reason
    out[REDRIVEN_AT] = utcnow().isoformat()
    return out, bool(original)


def redrive(source_name: str, config: SourceConfig, listener: ListenerConfig, request: RedriveRequest,
            say: Callable[[str], None]) -> RedriveReport:
    """Move up to `request.limit` messages from the listener's backout queue to its queue (module
    docstring); with `request.dry_run`, list them and give them back untouched."""
    assert isinstance(config, StompSourceConfig), "the stomp driver's re-drive"
    if config.broker == "artemis":
        raise ConfigError(f"source {source_name!r}: Artemis does not make STOMP ACKs part of a transaction, so a "
                          "re-drive could lose or duplicate messages; move them with Artemis' own tools")
    if listener.topic is not None:
        # A copy sent to the topic would reach every subscription, not only this listener's.
        raise ConfigError(f"listener {source_name}:{listener.queue} reads a topic: re-drive sends to the queue a "
                          "listener reads, and a topic has none of its own; publish the backout queue's messages "
                          "to the topic again with the broker's tools (every subscription gets them)")
    backout = listener.backout_queue
    assert backout, "checked by the command"
    individual = config.model_copy(update={"ack_mode": "individual"})
    connection = Connection(source_name, individual, backout, prefetch=request.batch,
                            client_name="mqbridge-redrive")
    # RabbitMQ: the copies go on a connection of their own, each confirmed (module docstring).
    sender = (ConfirmedSender(source_name, individual, listener.queue, client_name="mqbridge-redrive-send")
              if config.broker == "rabbitmq" and not request.dry_run else None)
    connection.open()
    report = RedriveReport(backout=backout, target=listener.queue)
    try:
        while report.moved + report.listed < request.limit:
            frames = _take(connection, min(request.batch, request.limit - report.moved - report.listed),
                           request.wait)
            if not frames:
                break
            if request.dry_run:
                for frame in frames:
                    say(_describe(frame))
                report.listed += len(frames)
                continue
            if sender is None:
                _move(connection, frames, listener.queue, report)
            else:
                _move_confirmed(connection, sender, frames, listener.queue, report)
            say(f"moved {report.moved} so far ({report.without_identity} without an identity)")
    finally:
        connection.close()  # in a dry run: the broker gives every received message back
        if sender is not None:
            sender.close()
    return report


def _take(connection: Connection, most: int, wait: float) -> list[Any]:
    """Up to `most` MESSAGE frames: the first within `wait`, the next ones while they keep coming."""
    frames: list[Any] = []
    deadline = time.monotonic() + wait
    while len(frames) < most:
        timeout = deadline - time.monotonic() if not frames else 0.2
        try:
            frame = connection.frames.frames.get(timeout=max(0.0, timeout))
        except queue.Empty:
            break
        if frame is None:
            raise SourceConnectionError(f"the connection to the backout queue {connection.destination} dropped")
        frames.append(frame)
    return frames


def _move(connection: Connection, frames: list[Any], target: str, report: RedriveReport) -> None:
    """ActiveMQ: one transaction: SEND a copy of each frame to `target`, ACK the frames, COMMIT."""
    tx = f"tx-redrive-{uuid.uuid4().hex}"
    errors_before = len(connection.frames.errors)
    connection.guard(lambda: connection.conn.begin(transaction=tx), "begin")
    receipts, kept = [], 0
    for frame in frames:
        headers, identity = redrive_headers(dict(frame.headers))
        kept += identity
        receipts.append(connection.send(target, _body(frame), headers, tx, "re-drive to the source queue"))
    _confirm(connection, receipts, errors_before)
    for frame in frames:
        connection.guard(lambda f=frame: connection.conn.ack(f.headers["ack"], transaction=tx), "ack")
    failpoints.hit("redrive_before_commit")
    commit = f"rc-{tx}"
    connection.guard(lambda: connection.conn.commit(transaction=tx, headers={"receipt": commit}), "commit")
    _confirm(connection, [commit], errors_before)
    report.moved += len(frames)
    report.without_identity += len(frames) - kept
    failpoints.hit("redrive_after_commit")


def _move_confirmed(connection: Connection, sender: ConfirmedSender, frames: list[Any], target: str,
                    report: RedriveReport) -> None:
    """RabbitMQ: SEND a copy of each frame to `target` on `sender`, each confirmed by its receipt; ACK
    the frames whose copies were confirmed (the last ACK with a receipt); then, if a copy was not
    confirmed, stop with the reason (module docstring)."""
    copies = [redrive_headers(dict(frame.headers)) for frame in frames]
    sent = sender.send([Outgoing(target, _body(frame), headers) for frame, (headers, _) in zip(frames, copies,
                                                                                               strict=True)],
                       "re-drive to the source queue")
    moved = frames[:sent.confirmed]
    failpoints.hit("redrive_before_commit")
    if moved:
        receipt = f"redrive-ack-{uuid.uuid4().hex}"
        errors_before = len(connection.frames.errors)
        connection.ack([frame.headers["ack"] for frame in moved], None, receipt)
        problem = connection.frames.await_receipts([receipt], errors_before, connection.receipt_timeout)
        if problem:
            connection.fail(f"the ACKs of {len(moved)} re-driven messages were not confirmed ({problem}): their "
                            f"copies are on {target}, and the originals may be back on {connection.destination}. "
                            "Run the command again: a second copy has the identity of the first, and the bridge "
                            "lands it once (docs/operations.md, Re-drive)")
    report.moved += len(moved)
    report.without_identity += sum(1 for _, identity in copies[:sent.confirmed] if not identity)
    failpoints.hit("redrive_after_commit")
    if sent.problem:
        raise PartlySentError(_refusal(frames[sent.confirmed], target, connection.destination, sent.problem, report),
                              frozenset(_original_id(frame) for frame in moved))


def _refusal(frame: Any, target: str, backout: str, problem: str, report: RedriveReport) -> str:
    """Why the re-drive stopped at `frame`, what it moved, and what to do."""
    if "ERROR" in problem:
        why, fix = problem, "remove the cause and run the command again"
    else:
        why = (f"{problem}; RabbitMQ closes the connection without a reason when the queue refuses a message "
               "(max-length with overflow = reject-publish)")
        fix = f"make room on {target} (let the bridge drain it) and run the command again"
    return (f"re-drive stopped: {target} did not take the copy of {_original_id(frame)} ({why}). {report.moved} "
            f"messages were moved; it and every message after it stay on {backout}: {fix}")


def _original_id(frame: Any) -> str:
    h = frame.headers
    return str(h.get("mqbridge-original-message-id") or f"message-id {h.get('message-id')}")


def _body(frame: Any) -> bytes:
    return frame.body if isinstance(frame.body, bytes) else str(frame.body or "").encode()


def _confirm(connection: Connection, receipts: list[str], errors_before: int) -> None:
    problem = connection.frames.await_receipts(receipts, errors_before, connection.receipt_timeout)
    if problem:
        connection.fail(f"re-drive not confirmed ({problem}); nothing of this batch moved unless the COMMIT was "
                        "already applied: run the command again to move what is left")


def _describe(frame: Any) -> str:
    h = frame.headers
    original = h.get("mqbridge-original-message-id") or f"(no identity; message-id {h.get('message-id')})"
    return f"  {original}  moved {h.get('mqbridge-moved-at', '?')}  reason: {one_line(h.get('mqbridge-reason', ''))}"
