"""SENDs each confirmed by its receipt, on a connection of their own (`ConfirmedSender`): how the
maintenance commands (`mqbridge redrive`, `mqbridge replay`) send on RabbitMQ, where a STOMP
transaction cannot make a SEND and what follows it all or nothing.

RabbitMQ 3.10 applies a transaction's frames one by one at COMMIT: a SEND the queue refuses
(`max-length` with `overflow = reject-publish`) or the broker refuses (a `user-id` header of another
user) undoes nothing before it and stops nothing after it (tests/integration/test_rabbitmq_facts.py).
Outside a transaction, a persistent SEND's receipt means the queue took the message, and a refused
SEND gets none: the broker closes the connection (with ERROR `precondition_failed` for a `user-id`,
with no ERROR at all for a full queue; so even for the first SEND of a connection:
tests/integration/test_rabbitmq_maintenance.py). So a command SENDs what it moves or replays here,
learns which SENDs the broker confirmed, and only then acts on them (acknowledges the originals,
records the rows as sent).

One SEND at a time, each only once the one before it is confirmed: closing the connection over a
refused SEND, RabbitMQ drops the receipts it had not sent yet for the SENDs before it (measured: of
five SENDs sent without waiting to a queue that holds three, the third was queued and its receipt
never came). Sent one at a time, the only SEND without a receipt is the refused one (or, after a
timeout or a lost connection, the last one: in doubt). About 0.8 ms a SEND on the test machine.

The connection is its own, subscribed to nothing: the broker closing it
over a refused SEND leaves the command's consuming connection, and what it holds unacknowledged,
as it was.

A header the broker refuses on SEND travels under `mqbridge-original-<name>` as a move does
(`mapping.backout_headers`): a `user-id` that is not the login's (`sendable_headers`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from mqbridge.config import StompSourceConfig
from mqbridge.errors import SourceConnectionError
from mqbridge.listeners.stomp.connection import Connection
from mqbridge.listeners.stomp.mapping import ORIGINAL_PREFIX

#: RabbitMQ refuses a SEND whose `user-id` is not the connection's login (ERROR precondition_failed).
USER_ID = "user-id"


def sendable_headers(headers: dict[str, str], login: str | None) -> dict[str, str]:
    """`headers` as a SEND of user `login` may carry them: a `user-id` of another user under
    `mqbridge-original-user-id`; one set aside earlier (by a move) that is the login's own put
    back as `user-id`, so that a copy of the login's own message is the original again."""
    out = dict(headers)
    aside = ORIGINAL_PREFIX + USER_ID
    if USER_ID in out and out[USER_ID] != login:
        out[aside] = out.pop(USER_ID)
    elif USER_ID not in out and login is not None and out.get(aside) == login:
        out[USER_ID] = out.pop(aside)
    return out


@dataclass(frozen=True)
class Outgoing:
    """One SEND: where to, its body and headers (persistent unless they say otherwise)."""

    destination: str
    body: bytes
    headers: dict[str, str]


@dataclass(frozen=True)
class Sent:
    """What came of a run of SENDs: how many the broker confirmed (the first ones, in order: the
    next one, if any, was refused or is in doubt, and the rest were not made), and why the run
    ended there ("" when every SEND was confirmed)."""

    confirmed: int
    problem: str = ""


class _SendOnly(Connection):
    """A `Connection` that subscribes to nothing: it only SENDs (its `destination` names it in
    messages). Opening it connects, within `connect_timeout`, and stops there."""

    def subscribe(self, deadline: float | None = None) -> None:
        self.subscription = ""


class ConfirmedSender:
    """SENDs confirmed by their receipts, on a connection of its own to source `name` (module
    docstring); the connection is reopened when the broker closed it after an earlier run."""

    def __init__(self, name: str, config: StompSourceConfig, what: str, *, client_name: str) -> None:
        self.config = config
        self._connection = _SendOnly(name, config, what, prefetch=1, client_name=client_name)

    def send(self, outgoing: Sequence[Outgoing], what: str) -> Sent:
        """SEND each of `outgoing` (no transaction, asking a receipt), one at a time: each only once
        the one before it is confirmed (module docstring). The first SEND not confirmed within
        `receipt_timeout` ends the run (the connection is closed); the SENDs after it are not made.
        Never raises for the broker's refusal: `Sent` says what was confirmed and why the rest was not."""
        connection = self._connection
        if connection.lost:
            connection.close()
            connection.open()
        frames = connection.frames
        errors_before = len(frames.errors)
        for index, item in enumerate(outgoing):
            headers = sendable_headers({"persistent": "true", **item.headers}, self.config.user)
            try:
                receipt = connection.send(item.destination, item.body, headers, None, what)
            except SourceConnectionError as exc:
                problem = str(exc)
            else:
                problem = frames.await_receipts([receipt], errors_before, connection.receipt_timeout)
            if problem:
                # Wait briefly for the close, so that an ERROR that says why (precondition_failed) has arrived.
                frames.wait_for(frames.disconnected.is_set, time.monotonic() + min(connection.receipt_timeout, 2.0))
                errors = [text for _, text in frames.errors[errors_before:]]
                connection.close()
                return Sent(index, "the broker answered with ERROR: " + "; ".join(errors) if errors else problem)
        return Sent(len(outgoing))

    def close(self) -> None:
        """Close the connection."""
        self._connection.close()

