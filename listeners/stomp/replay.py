"""A replay's target on STOMP: each batch of rows is one STOMP transaction — the rows SENT to the
destination (persistent, each with a receipt) and a marker SENT to the replay's marker queue
(`/queue/mqbridge.replay.<replay id>`, one message naming the batch), then COMMIT with a receipt.
The transaction makes the rows and the marker visible together or not at all (a transaction dies
with its connection), so after a kill the marker says whether the batch's rows were sent.

The target's connection subscribes to the marker queue (client-individual acks): markers of
committed batches, old and new, arrive there; `committed` collects them for up to `in_doubt_wait`
(on a resumed run only), `release` acknowledges those whose batches the ledger has marked sent.

A marker not seen within `in_doubt_wait` counts as not committed, and its batch goes again: the
one case where a row could arrive twice (the broker being slower than `in_doubt_wait` to hand over
a stored message); every row carries `mqbridge-replay-key` for a consumer to recognise it
(`identity = "header:mqbridge-replay-key"` in a bridge).
"""

from __future__ import annotations

import queue
import time
import uuid
from collections.abc import Sequence
from typing import Any

from mqbridge import failpoints
from mqbridge.config import StompSourceConfig
from mqbridge.errors import SourceConnectionError
from mqbridge.listeners.stomp.connection import Connection
from mqbridge.replay.rows import ReplayRow, provenance

MARKER_HEADER = "mqbridge-replay-batch"
#: Headers of a landed row not sent again: frame plumbing, and `expires` (an absolute time that has
#: usually passed: the broker would drop the message).
_NOT_SENT = {"message-id", "destination", "timestamp", "ack", "subscription", "content-length", "redelivered",
             "transaction", "receipt", "x-delivery-count", "expires", "persistent"}
#: Most markers held unacknowledged (a replay acknowledges them after every batch).
MARKER_PREFETCH = 1000


def marker_queue(replay_id: str) -> str:
    """The marker queue of a replay."""
    return f"/queue/mqbridge.replay.{replay_id}"


def replay_headers(row: ReplayRow, replay_id: str) -> dict[str, str]:
    """The headers a landed row is sent with: its own (less `_NOT_SENT`), its correlation id, and
    where it comes from."""
    headers = {k: v for k, v in row.headers.items() if k not in _NOT_SENT}
    headers["persistent"] = "true"  # ActiveMQ SENDs are non-persistent unless asked
    if row.correlation_id:
        headers["correlation-id"] = row.correlation_id
    headers.update(provenance(row, replay_id, "-"))
    return headers


class StompReplayTarget:
    """A STOMP destination a replay sends to (module docstring)."""

    guarantee = ("each row is sent once across kills, in one transaction per batch with a marker; a row is sent "
                 "twice only if a resumed run does not see a committed batch's marker within --in-doubt-wait")

    def __init__(self, source_name: str, config: StompSourceConfig, destination: str, replay_id: str,
                 in_doubt_wait: float) -> None:
        self.destination = destination
        self.replay_id = replay_id
        self.in_doubt_wait = in_doubt_wait
        individual = config.model_copy(update={"ack_mode": "individual"})
        self._connection = Connection(source_name, individual, marker_queue(replay_id), prefetch=MARKER_PREFETCH,
                                      client_name="mqbridge-replay")
        self._connection.open()
        self._markers: dict[str, Any] = {}  # batch id -> its marker frame, not yet acknowledged

    def committed(self, batch_ids: Sequence[str]) -> set[str]:
        """Which of these batches have a marker on the marker queue: wait up to `in_doubt_wait`."""
        wanted = set(batch_ids)
        deadline = time.monotonic() + self.in_doubt_wait
        while not wanted <= set(self._markers) and time.monotonic() < deadline:
            self._collect(deadline - time.monotonic())
        return wanted & set(self._markers)

    def send(self, batch_id: str, rows: Sequence[ReplayRow]) -> None:
        """One transaction: the rows, the batch's marker, COMMIT (module docstring)."""
        connection = self._connection
        tx = f"tx-replay-{uuid.uuid4().hex}"
        errors_before = len(connection.frames.errors)
        deferred = connection.config.broker == "rabbitmq"  # RabbitMQ answers a transaction's frames at COMMIT
        connection.guard(lambda: connection.conn.begin(transaction=tx), "begin")
        receipts = [connection.send(self.destination, row.body, replay_headers(row, self.replay_id), tx,
                                    "send a replayed row") for row in rows]
        receipts.append(connection.send(connection.destination, b"", {MARKER_HEADER: batch_id, "persistent": "true"},
                                        tx, "send the batch's marker"))
        if not deferred:
            self._confirm(receipts, errors_before, "the rows' SENDs")
        failpoints.hit("replay_before_commit")
        commit = f"rc-{tx}"
        connection.guard(lambda: connection.conn.commit(transaction=tx, headers={"receipt": commit}), "commit")
        self._confirm([commit, *(receipts if deferred else [])], errors_before, "the COMMIT")

    def release(self) -> None:
        """Acknowledge the markers received so far: their batches are marked sent in the ledger
        (`replay` calls this only then), so they are no longer needed."""
        self._collect(0.0)
        connection = self._connection
        for frame in self._markers.values():
            connection.guard(lambda f=frame: connection.conn.ack(f.headers["ack"]), "ack a marker")
        self._markers.clear()

    def close(self) -> None:
        """Close the connection (unacknowledged markers stay on the marker queue)."""
        self._connection.close()

    def _collect(self, wait: float) -> None:
        """Take the markers that arrived, waiting up to `wait` for the first."""
        frames = self._connection.frames.frames
        timeout: float | None = max(0.0, wait)
        while True:
            try:
                frame = frames.get(timeout=timeout) if timeout else frames.get_nowait()
            except queue.Empty:
                return
            if frame is None:
                raise SourceConnectionError(f"the connection to the marker queue {self._connection.destination} "
                                            "dropped")
            self._markers[frame.headers.get(MARKER_HEADER, "")] = frame
            timeout = None  # the rest without waiting

    def _confirm(self, receipts: list[str], errors_before: int, what: str) -> None:
        problem = self._connection.frames.await_receipts(receipts, errors_before, self._connection.receipt_timeout)
        if problem:
            self._connection.fail(f"replay: {what} not confirmed ({problem}); run the replay again: a batch in doubt "
                                  "is resolved from its marker")
