"""What the bridge accepts but says at start, as findings: each weakens a guarantee or is likely
not what was meant. `start_warnings` is the one list: `run` logs each at start (`Finding.text`),
`check-config` reports each on its key's line as a warning (`--strict`: an error), so both say the
same thing. `check-config` adds what only the file system shows before a start (`advice`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from mqbridge.config import (
    BridgeConfig,
    StompSourceConfig,
    ids_per_delivery,
    is_loopback,
    per_delivery_note,
    plaintext_notes,
)
from mqbridge.errors import Loc
from mqbridge.landing import shared_tables
from mqbridge.landing.ledger import ledger_path
from mqbridge.lint.findings import Finding

#: RabbitMQ's STOMP prefix for a queue that must already exist: a SEND to a missing one is dropped.
_AMQ_QUEUE = "/amq/queue/"


def advice(config: BridgeConfig) -> list[Finding]:
    """Every warning `run` would give at start for `config`: its start warnings, and a ledger it
    would create beside tables landed without it (`run` says so when it creates the ledger)."""
    return [*start_warnings(config), *_unrecognised_landings(config)]


def start_warnings(config: BridgeConfig) -> Iterator[Finding]:
    """The warnings `run` logs at start for `config`, each with its key path: passwords that travel
    without TLS, at-least-once delivery and what it disables, RabbitMQ pitfalls, shared tables."""
    yield from _plaintext(config)
    yield from _delivery(config)
    yield from broker_advice(config)
    yield from _tables(config)


def broker_advice(config: BridgeConfig) -> list[Finding]:
    """RabbitMQ settings that work in a demo and fail or lose messages in production, and what a
    RabbitMQ listener without a producer id promises (at-least-once where a crash falls between
    landing and the source commit: `mqbridge.config.per_delivery_note`)."""
    found: list[Finding] = []
    for name, source in config.sources.items():
        if not (isinstance(source, StompSourceConfig) and source.broker == "rabbitmq"):
            continue
        if source.user in (None, "guest"):
            # RabbitMQ's loopback_users refuses guest from any other host; where it is allowed,
            # guest may read and write every queue of the vhost.
            where = ("" if is_loopback(source.host)
                     else f" (by default RabbitMQ accepts guest over loopback only; {source.host} is not loopback)")
            found.append(Finding(("sources", name, "user"), f"RabbitMQ's default guest identity{where}",
                                 'create a user for the bridge and set user = "mqbridge", '
                                 'password = "${ENV:MQBRIDGE_PASSWORD}"', "warning"))
    for index, listener in enumerate(config.listeners):
        on = config.sources.get(listener.source)
        queue = listener.backout_queue or ""
        if isinstance(on, StompSourceConfig) and on.broker == "rabbitmq" and queue.startswith(_AMQ_QUEUE):
            found.append(Finding(("listeners", index, "backout_queue"),
                                 f"{queue!r}: RabbitMQ drops a message sent to an /amq/queue/ queue that does not "
                                 "exist, so a move to the backout queue can be lost",
                                 f"write /queue/{queue[len(_AMQ_QUEUE):]} (declared durable on first use)", "warning"))
        if ids_per_delivery(on, listener.identity):
            problem, fix = per_delivery_note(f"{listener.source}:{listener.queue}")
            found.append(Finding(("listeners", index, "identity"), problem, fix, "warning"))
    return found


def _plaintext(config: BridgeConfig) -> Iterator[Finding]:
    for note in plaintext_notes(config):
        head, _, rest = note.partition(": ")
        loc: Loc = (("sources", head.split(".", 1)[1], "password") if head.startswith("sources.")
                    else ("ledger", "url") if head.startswith("[ledger]")
                    else ("spark", "conf") if head.startswith("[spark.conf]") else ("monitoring", "token"))
        yield Finding(loc, rest if head.startswith("sources.") else note.split(": ", 1)[1], severity="warning")


def _delivery(config: BridgeConfig) -> Iterator[Finding]:
    if not config.bridge.exactly_once:
        yield Finding(("bridge", "exactly_once"), "no landing ledger: a message redelivered after a crash or a "
                      "lost commit lands again (at-least-once: readers must de-duplicate by msg_id)",
                      "remove exactly_once = false", "warning")
        if config.purge.interval is not None:
            yield Finding(("purge", "interval"), "ignored with exactly_once = false (a purge's swap needs the "
                          "ledger's lock)", "remove it, and run `mqbridge purge` with the bridge stopped", "warning")
        if config.compaction.interval is not None:  # the same swap under the same lock as the purge's
            yield Finding(("compaction", "interval"), "ignored with exactly_once = false (a compaction's swap "
                          "needs the ledger's lock)", "remove it, and run `mqbridge compact` with the bridge stopped",
                          "warning")


def _unrecognised_landings(config: BridgeConfig) -> Iterator[Finding]:
    if not config.bridge.exactly_once:
        return
    warehouse = config.resolve_warehouse()
    if config.ledger.url is None and not ledger_path(config.resolve_path(config.bridge.state_dir)).exists() \
            and isinstance(warehouse, Path) and warehouse.is_dir() and any(warehouse.iterdir()):
        yield Finding(("bridge", "state_dir"), f"no landing ledger there, but {warehouse} already holds tables: "
                      "messages landed before the ledger existed are not recognised if delivered again",
                      "point state_dir at the directory of the ledger that landed them", "warning")


def _tables(config: BridgeConfig) -> Iterator[Finding]:
    for a, b, table in shared_tables(config.types):  # legal: a purge of one designates its rows by message_type
        yield Finding(("types", a, "table"), f"types {a} and {b} can land in the same table {table!r}",
                      "give each type its own table unless they are meant to share it", "warning")
