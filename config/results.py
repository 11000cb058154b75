"""`[types.<name>] results_to`: where every final result of a message type also goes (an
intermediate station: a router, an auditor), and the checks that need the whole file.

A result is sent by the listener connection that removes the message, in the same unit of work
(`mqbridge.outbound.stations`), so the destination must be one that connection can reach: a STOMP destination
on the listener's broker, or a queue of the listener's IBM MQ queue manager. The checks below hold
for the listeners whose `message_type` is the type; a message a classify hook routes to the type from
another listener gets its result only if that listener's source can send it (else it is counted in
`results_failed` and logged once).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Protocol

from mqbridge.config.sources import SourceConfig
from mqbridge.errors import Loc


class TypeConfig(Protocol):
    """What these checks read of a `[types.<name>]` (config.schema.TypeConfig; no import: no cycle)."""

    @property
    def results_to(self) -> str | None: ...


class ListenerConfig(Protocol):
    """What these checks read of a `[[listeners]]` entry (config.schema.ListenerConfig)."""

    @property
    def source(self) -> str: ...
    @property
    def queue(self) -> str: ...
    @property
    def message_type(self) -> str: ...
    @property
    def backout_queue(self) -> str | None: ...

#: STOMP destinations that live only as long as one connection: nobody else could read a result there.
STOMP_NOT_ALLOWED = ("/temp-queue/", "/temp-topic/", "/reply-queue/")
#: An IBM MQ object name: 1 to 48 characters of A-Z a-z 0-9 . / _ % (MQ_Q_NAME_LENGTH).
_MQ_QUEUE = re.compile(r"[A-Za-z0-9._/%]{1,48}")


def destination_problem(destination: str, source: SourceConfig) -> str | None:
    """Why a listener on `source` cannot send results to `destination` (None: it can)."""
    problem = reachable_problem(destination, source, "no station could read the results there", "sends no results")
    if (problem is None and source.kind == "stomp" and getattr(source, "commit_mode", None) == "receipted"
            and getattr(source, "broker", None) != "rabbitmq"):
        # RabbitMQ: confirmed before the ACK (no atomic transaction there), sent twice if the bridge dies between.
        return ('needs commit_mode = "transactional": a result sent outside the ACKs\' transaction could be '
                "sent twice for one message")
    return problem


def reachable_problem(destination: str, source: SourceConfig, gone: str, cannot: str) -> str | None:
    """Why nothing can be sent to `destination` through `source` for others to read (None: it can): not a
    destination of the source's kind, or one that lives only as long as one connection (`gone` says
    what that means for the sender); `cannot` ends the sentence for a kind that cannot be sent to."""
    if source.kind == "stomp":
        if not destination.startswith("/"):
            return ("a STOMP destination starts with /queue/, /topic/ (or RabbitMQ's /exchange/, /amq/queue/); "
                    f"{destination!r} looks like an IBM MQ queue name")
        if destination.startswith(STOMP_NOT_ALLOWED):
            return (f"{destination!r} is not allowed: a temporary or reply destination lives only as long as one "
                    f"connection, so {gone}")
        return None
    if source.kind == "mq":
        if destination.startswith("/"):
            return (f"{destination!r} looks like a STOMP destination; an IBM MQ source puts to a queue of "
                    "its queue manager (a local, alias or remote queue name)")
        if not _MQ_QUEUE.fullmatch(destination):
            return f"{destination!r} is not an IBM MQ queue name (1 to 48 characters of A-Z a-z 0-9 . _ / %)"
        return None
    return f"a {source.kind} source {cannot}"


def results_to_problems(types: Mapping[str, TypeConfig], sources: Mapping[str, SourceConfig],
                        listeners: Sequence[ListenerConfig]) -> list[tuple[Loc, str]]:
    """Every `results_to` a listener of its type cannot send to, and every results destination
    that a listener consumes while its own type sends results again (each result would make
    another result: a loop)."""
    problems: list[tuple[Loc, str]] = []
    for name, type_cfg in types.items():
        destination = type_cfg.results_to
        if destination is None:
            continue
        where: Loc = ("types", name, "results_to")
        feeding = {listener.source for listener in listeners if listener.message_type == name}
        for index, listener in enumerate(listeners):
            source = sources.get(listener.source)
            if source is None:
                continue  # reported with the listener
            if listener.message_type == name:
                problem = destination_problem(destination, source)
                if problem:
                    problems.append((where, f"listeners[{index}] ({listener.source}:{listener.queue}): {problem}"))
            if listener.source not in feeding:
                continue
            if listener.backout_queue == destination:
                problems.append((where, f"{destination!r} is the backout queue of listeners[{index}]: results "
                                        "and poison messages would mix"))
            own = types.get(listener.message_type)
            if listener.queue == destination and own is not None and own.results_to is not None:
                problems.append((where, f"listeners[{index}] consumes {destination!r} as type "
                                        f"{listener.message_type!r}, which has results_to too: each result would "
                                        "produce another result (a loop)"))
    return problems
