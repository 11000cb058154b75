"""A replay's target on STOMP: each batch of rows is sent with a marker SENT to the replay's marker
queue (`/queue/mqbridge.replay.<replay id>`, one message naming the batch) after the rows, so that
after a kill the marker says whether the batch's rows were sent.

On ActiveMQ a batch is one STOMP transaction: the rows SENT to the destination (persistent, each
with a receipt), the marker, then COMMIT with a receipt. The transaction makes the rows and the
marker visible together or not at all (a transaction dies with its connection): each row is sent
once across kills.

On RabbitMQ, which applies a transaction frame by frame (a row the target refuses, e.g. a full queue
with `overflow = reject-publish`, would be dropped while the marker is applied, and the batch taken
for sent), the rows are SENT outside any transaction on a connection of their own, each confirmed by
its receipt (`publish.ConfirmedSender`), and the marker only once every row is confirmed. A row not
confirmed (refused: RabbitMQ closes the connection, with ERROR for a foreign `user-id`, without one
for a full queue) stops the replay (PartlySentError, exit 1) with the reason; the rows confirmed
before it are recorded as sent, the others not, so a run after the cause is gone sends exactly the
rest. The limit: a kill (or a lost connection) between a batch's first row and its marker's receipt
leaves rows at the target without a marker, and the resumed run sends the whole batch again (up to
`--batch` rows twice). A `user-id` header of another user than the source's login is sent as
`mqbridge-original-user-id` (RabbitMQ refuses it otherwise).

The target's connection subscribes to the marker queue (client-individual acks): markers of
committed batches, old and new, arrive there; `committed` collects them for up to `in_doubt_wait`
(on a resumed run only), `release` acknowledges those whose batches the ledger has marked sent.

A marker not seen within `in_doubt_wait` counts as not committed, and its batch goes again: the
other case where a row could arrive twice (the broker being slower than `in_doubt_wait` to hand
over a stored message); every row carries `mqbridge-replay-key` for a consumer to recognise it
(`identity = "header:mqbridge-replay-key"` in a bridge).

A destination that does not exist is refused before anything is sent (`check_destination`).
RabbitMQ answers a SEND to `/amq/queue/NAME` of a queue that does not exist with its receipt, and
drops the message (so does a SEND to an exchange no binding routes): the SEND's receipt proves
nothing there. `/amq/queue/NAME` is checked with a subscription of its own (RabbitMQ answers ERROR
`not_found` for a missing queue) with a prefetch of 1, closed as soon as the broker has answered:
at most one message of a queue that has some is delivered to it and given back at once, flagged
`redelivered` (a quorum queue counts the delivery). An `/exchange/NAME/...` is checked
the same way (the subscription's queue is the broker's temporary one), and the output says that the
replay cannot tell whether a binding routed the rows. `/queue/NAME` needs no check: RabbitMQ declares
the queue on SEND, as ActiveMQ creates a queue on its first SEND. A `/topic/` reaches the subscribers
present (and durable subscriptions) only: said in the output. Verified with a bare STOMP client:
tests/integration/test_replay_destinations.py.

With `--new-identity` (`renewal`) the headers that are the identity of a bridge reading the
destination get new values, the old ones kept in `mqbridge-replayed-NAME`
(`mqbridge.resend.replay.identities`).
"""

from __future__ import annotations

import queue
import time
import uuid
from collections.abc import Sequence
from typing import Any

from mqbridge import failpoints
from mqbridge.config import SourceConfig, StompSourceConfig
from mqbridge.errors import ConfigError, PartlySentError, SourceConnectionError, SourceRefusedError
from mqbridge.listeners.stomp.connection import Connection
from mqbridge.listeners.stomp.publish import ConfirmedSender, Outgoing, Sent
from mqbridge.resend.replay.identities import AS_LANDED, REPLAYED_PREFIX, Delivered, Renewal, renew_headers
from mqbridge.resend.replay.rows import ReplayRow, provenance

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


def replay_headers(row: ReplayRow, replay_id: str, renewal: Renewal = AS_LANDED) -> dict[str, str]:
    """The headers a landed row is sent with: its own (less `_NOT_SENT`), its correlation id, where
    it comes from, and the headers of `renewal` with new values."""
    headers = {k: v for k, v in row.headers.items() if k not in _NOT_SENT}
    headers["persistent"] = "true"  # ActiveMQ SENDs are non-persistent unless asked
    if row.correlation_id:
        headers["correlation-id"] = row.correlation_id
    headers.update(provenance(row, replay_id, "-"))
    renew_headers(headers, [(name, REPLAYED_PREFIX + name) for name in sorted(renewal.headers)], replay_id, row.key)
    return headers


def check_destination(source_name: str, config: StompSourceConfig, destination: str) -> list[str]:
    """Refuse (ConfigError) a RabbitMQ queue or exchange that does not exist; return what is worth
    saying about a destination the replay cannot check further (module docstring)."""
    notes = []
    rabbitmq = config.broker == "rabbitmq"
    if rabbitmq and destination.startswith("/amq/queue/"):
        name = destination[len("/amq/queue/"):]
        _must_exist(source_name, config, destination, destination, f"the queue {name}",
                    "which would confirm every SEND to it and drop the message; declare it, or send to "
                    f"/queue/{name} (RabbitMQ declares that queue on SEND)")
    elif rabbitmq and destination.startswith("/exchange/"):
        exchange = destination[len("/exchange/"):].split("/", 1)[0]
        _must_exist(source_name, config, f"/exchange/{exchange}", destination, f"the exchange {exchange}",
                    "which would refuse the first SEND (ERROR not_found) and close the connection; declare it")
        notes.append(f"RabbitMQ drops a message that no binding of exchange {exchange} routes, and confirms its "
                     "SEND all the same: this replay cannot tell whether the rows reached a queue (check the "
                     f"exchange's bindings: rabbitmqctl list_bindings)")
    if destination.startswith("/topic/"):
        notes.append(f"a message sent to {destination} reaches only the subscribers present when it is sent "
                     "(and durable subscriptions): the replay cannot tell whether anyone got the rows")
    return notes


def _must_exist(source_name: str, config: StompSourceConfig, probe_at: str, destination: str, what: str,
                why: str) -> None:
    """Subscribe to `probe_at` and close at once: RabbitMQ answers ERROR not_found when `what` (the
    queue or exchange of `destination`) does not exist (module docstring); `why` says what a replay
    to it would meet, and the fix."""
    probe = Connection(source_name, config.model_copy(update={"ack_mode": "individual"}), probe_at, prefetch=1,
                       client_name="mqbridge-replay-check")
    try:
        probe.open()
    except SourceRefusedError as exc:
        if "not_found" not in str(exc):
            raise
        raise ConfigError(f"--to {destination}: {what} does not exist on RabbitMQ (source {source_name!r}), {why}. "
                          "Nothing was sent.") from exc
    finally:
        probe.close()


#: What a kill or a refused row can do, for the command's output: ActiveMQ, and RabbitMQ.
TRANSACTIONAL_GUARANTEE = ("each row is sent once across kills, in one transaction per batch with a marker; a row is "
                           "sent twice only if a resumed run does not see a committed batch's marker within "
                           "--in-doubt-wait")
CONFIRMED_GUARANTEE = ("RabbitMQ: each row confirmed by its receipt before its batch's marker; a row the target "
                       "refuses stops the replay and is not recorded as sent; a kill between a batch's first row and "
                       "its marker sends that batch again when resumed (up to --batch rows twice, told apart by "
                       "mqbridge-replay-key)")


class StompReplayTarget:
    """A STOMP destination a replay sends to (module docstring)."""

    def __init__(self, source_name: str, config: SourceConfig, destination: str, replay_id: str,
                 in_doubt_wait: float, *, renewal: Renewal = AS_LANDED) -> None:
        assert isinstance(config, StompSourceConfig), "the stomp driver's replay"
        self.destination = destination
        self.replay_id = replay_id
        self.in_doubt_wait = in_doubt_wait
        self.renewal = renewal
        self.notes = check_destination(source_name, config, destination)
        individual = config.model_copy(update={"ack_mode": "individual"})
        self._connection = Connection(source_name, individual, marker_queue(replay_id), prefetch=MARKER_PREFETCH,
                                      client_name="mqbridge-replay")
        # RabbitMQ: rows and markers on a connection of their own, each confirmed (module docstring).
        self._sender = (ConfirmedSender(source_name, individual, destination, client_name="mqbridge-replay-send")
                        if config.broker == "rabbitmq" else None)
        self._connection.open()
        self._markers: dict[str, Any] = {}  # batch id -> its marker frame, not yet acknowledged
        self.guarantee = TRANSACTIONAL_GUARANTEE if self._sender is None else CONFIRMED_GUARANTEE

    def delivered(self, row: ReplayRow) -> Delivered:
        """The row's headers as sent; its message id is the broker's new one."""
        return Delivered(replay_headers(row, self.replay_id, self.renewal), None)

    def committed(self, batch_ids: Sequence[str]) -> set[str]:
        """Which of these batches have a marker on the marker queue: wait up to `in_doubt_wait`."""
        wanted = set(batch_ids)
        deadline = time.monotonic() + self.in_doubt_wait
        while not wanted <= set(self._markers) and time.monotonic() < deadline:
            self._collect(deadline - time.monotonic())
        return wanted & set(self._markers)

    def send(self, batch_id: str, rows: Sequence[ReplayRow]) -> None:
        """The rows and the batch's marker: in one transaction, or on RabbitMQ each confirmed, the marker
        last (module docstring). A row not confirmed raises PartlySentError naming the rows that were."""
        if self._sender is not None:
            self._send_confirmed(self._sender, batch_id, rows)
            return
        connection = self._connection
        tx = f"tx-replay-{uuid.uuid4().hex}"
        errors_before = len(connection.frames.errors)
        connection.guard(lambda: connection.conn.begin(transaction=tx), "begin")
        receipts = [connection.send(self.destination, row.body, replay_headers(row, self.replay_id, self.renewal), tx,
                                    "send a replayed row") for row in rows]
        receipts.append(connection.send(connection.destination, b"", {MARKER_HEADER: batch_id, "persistent": "true"},
                                        tx, "send the batch's marker"))
        self._confirm(receipts, errors_before, "the rows' SENDs")
        failpoints.hit("replay_before_commit")
        commit = f"rc-{tx}"
        connection.guard(lambda: connection.conn.commit(transaction=tx, headers={"receipt": commit}), "commit")
        self._confirm([commit], errors_before, "the COMMIT")

    def _send_confirmed(self, sender: ConfirmedSender, batch_id: str, rows: Sequence[ReplayRow]) -> None:
        """RabbitMQ: the rows, each confirmed; then the marker (module docstring)."""
        sent = sender.send([Outgoing(self.destination, row.body, replay_headers(row, self.replay_id, self.renewal))
                            for row in rows], "send a replayed row")
        arrived = frozenset(row.key for row in rows[:sent.confirmed])
        if sent.problem:
            raise PartlySentError(f"replay stopped: {self.destination} did not take row {rows[sent.confirmed].key} "
                                  f"({_why(sent)}). {len(arrived)} of the batch's {len(rows)} rows arrived and are "
                                  f"recorded as sent; the other {len(rows) - len(arrived)} are not: "
                                  f"{_fix(sent, self.destination)}", arrived)
        failpoints.hit("replay_before_commit")
        marker = sender.send([Outgoing(self._connection.destination, b"", {MARKER_HEADER: batch_id})],
                             "send the batch's marker")
        if marker.problem:
            raise PartlySentError(f"replay stopped: the marker of batch {batch_id} was not confirmed "
                                  f"({marker.problem}); its {len(rows)} rows all arrived and are recorded as sent: "
                                  "run the same replay again", arrived)

    def release(self) -> None:
        """Acknowledge the markers received so far: their batches are marked sent in the ledger
        (`replay` calls this only then), so they are no longer needed."""
        self._collect(0.0)
        connection = self._connection
        for frame in self._markers.values():
            connection.guard(lambda f=frame: connection.conn.ack(f.headers["ack"]), "ack a marker")
        self._markers.clear()

    def close(self) -> None:
        """Close the connections (unacknowledged markers stay on the marker queue)."""
        self._connection.close()
        if self._sender is not None:
            self._sender.close()

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


def _why(sent: Sent) -> str:
    if "ERROR" in sent.problem:
        return sent.problem
    return (f"{sent.problem}; RabbitMQ closes the connection without a reason when the queue refuses a message "
            "(max-length with overflow = reject-publish)")


def _fix(sent: Sent, destination: str) -> str:
    if "ERROR" in sent.problem:
        return ("remove the cause and run the same replay again (the same options, or the same --replay-id): it "
                "sends exactly the rows not sent")
    return (f"make room on {destination} (let its consumer drain it) and run the same replay again (the same "
            "options, or the same --replay-id): it sends exactly the rows not sent")
