"""Rules of a `[[listeners]]` entry that depend on its source: `identity` and `selector`.

`identity = "auto"` becomes the rule for the source (see `resolve_identity`). A selector is the
broker's own SQL-92 subset (JMS message selectors): ActiveMQ and Artemis take it as the STOMP
SUBSCRIBE header `selector`, IBM MQ as the MQOD `SelectionString` of MQOPEN. RabbitMQ has no
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


IDENTITY_RULES = ("auto", "msg_id", "stamp", "body-sha256")
#: STOMP destinations that are not one queue (RabbitMQ's and ActiveMQ's prefixes).
_NOT_STAMPABLE = ("/topic/", "/exchange/", "/temp-queue/", "/temp-topic/", "/reply-queue/")


def resolve_identity(listener: ListenerKeys, source: SourceConfig | None, where: Loc) -> list[tuple[Loc, str]]:
    """Turn `identity = "auto"` into the rule for the listener's source: "stamp" on RabbitMQ (its
    STOMP message-id is new on every delivery, so nothing else recognises a redelivery without the
    producer's help), "msg_id" elsewhere; and check that "stamp" has what it needs."""
    # A stamped copy goes back to the destination: on a topic or exchange every subscriber would get it.
    rabbitmq = isinstance(source, StompSourceConfig) and source.broker == "rabbitmq"
    # ... except a RabbitMQ topic listener's copies, which go to its subscription's own queue.
    shared = listener.queue.startswith(_NOT_STAMPABLE) and not (rabbitmq and listener.topic is not None)
    if listener.identity == "auto":
        listener.identity = "stamp" if rabbitmq and not shared else "msg_id"
    if listener.identity != "stamp" or source is None:
        return []
    if shared:
        return [((*where, "identity"), f"stamp sends a copy of each message back to {listener.queue!r}, which "
                                       "every subscriber of a topic or exchange would get: only for queues")]
    if not isinstance(source, StompSourceConfig):
        return [((*where, "identity"), f"stamp is for STOMP sources; a {source.kind} source has stable message ids "
                                       "(use msg_id)")]
    if source.commit_mode != "transactional":
        return [((*where, "identity"), 'stamp needs commit_mode = "transactional": a stamped copy and the ACK of '
                                       "its original must be applied together")]
    return []


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
