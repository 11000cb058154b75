"""Rules of a `[[listeners]]` entry that depend on its source: `identity` and `selector`.

`identity = "auto"` becomes the rule for the source (see `resolve_identity`); `"stamp"` is refused
(`STAMP_REFUSED`). A selector is the broker's own SQL-92 subset (JMS message selectors): ActiveMQ
and Artemis take it as the STOMP SUBSCRIBE header `selector`, IBM MQ as the MQOD `SelectionString`
of MQOPEN. RabbitMQ has no
selectors at all: its STOMP adapter ignores the header, so the listener would silently take every
message; it is refused here instead, with what to do.
"""

from __future__ import annotations

from typing import Protocol

from mqbridge.config.sources import SourceConfig, StompSourceConfig
from mqbridge.errors import Loc


class ListenerKeys(Protocol):
    """What these rules read of a `[[listeners]]` entry (`mqbridge.config.schema.ListenerConfig`,
    which imports this module)."""

    queue: str
    identity: str
    topic: str | None

#: IBM MQ: a selection string may be up to 10,240 bytes (MQOD SelectionString).
MQ_MAX_SELECTION = 10240


IDENTITY_RULES = ("auto", "msg_id", "body-sha256")

#: Why `identity = "stamp"` (earlier builds' default on RabbitMQ: the bridge stamped a copy of each
#: message) is refused, and what to write instead.
STAMP_REFUSED = (
    '"stamp" is no longer supported: stamping SENT a copy of each message and ACKed the original in one '
    "STOMP transaction, and RabbitMQ does not apply a transaction atomically (measured on 3.10: a SEND the "
    "queue or the broker refuses stops neither the ACK after it), so a message could be lost; write "
    'identity = "header:NAME" (an id the producer sets, e.g. amqp-message-id) for exactly-once, or leave '
    "identity unset (RabbitMQ: at-least-once where a crash falls between landing and the source commit, "
    "counted in mqbridge_possible_duplicates_total)")


def resolve_identity(listener: ListenerKeys) -> None:
    """Turn `identity = "auto"` into the rule for the listener's source: "msg_id" everywhere. On
    RabbitMQ the STOMP message-id is new on every delivery, so "msg_id" recognises no redelivery there:
    at-least-once where a crash falls between landing and the source commit (`per_delivery_note`)."""
    if listener.identity == "auto":
        listener.identity = "msg_id"


def ids_per_delivery(source: SourceConfig | None, identity: str) -> bool:
    """Whether a listener's identities are per delivery: RabbitMQ's STOMP message-id with `msg_id`,
    so the landing ledger cannot recognise a redelivery of a message that landed."""
    return isinstance(source, StompSourceConfig) and source.broker == "rabbitmq" and identity == "msg_id"


def per_delivery_note(listener: str) -> tuple[str, str]:
    """What `run` logs at start and `check-config` warns (one text) about a listener whose identities
    are per delivery (`ids_per_delivery`), and what to write instead: (problem, fix)."""
    return (f"{listener}: RabbitMQ gives no stable message id; without a producer id a crash between landing "
            "and the source commit lands the unit again (at-least-once, counted in "
            "mqbridge_possible_duplicates_total)", 'set identity = "header:NAME" for exactly-once')


def selector_problems(selector: str | None, source: SourceConfig | None, where: Loc) -> list[tuple[Loc, str]]:
    """What is wrong with a listener's `selector` for its source (none when unset or fine)."""
    if selector is None or source is None:
        return []
    loc: Loc = (*where, "selector")
    if not selector.strip():
        return [(loc, "empty; remove the key to take every message")]
    if isinstance(source, StompSourceConfig) and source.broker == "rabbitmq":
        return [(loc, "RabbitMQ has no message selectors (its STOMP adapter ignores the header, so this "
                      "listener would take every message): route with a headers or topic exchange into one "
                      "queue per share instead, and give each queue its own listener")]
    if source.kind == "memory":
        return [(loc, "the memory source has no selectors")]
    if source.kind == "mq" and len(selector.encode()) > MQ_MAX_SELECTION:
        return [(loc, f"longer than {MQ_MAX_SELECTION} bytes, IBM MQ's longest selection string")]
    return []
