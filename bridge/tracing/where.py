"""Where is message X? The answer of `mqbridge where` and of `GET /messages/<id>`.

    in_flight  the running bridge holds it: which listener thread and what its unit of work is doing,
               which bulk and what the bulk is doing, since when (`Bridge.holding`); or the landing
               ledger holds it in a bulk prepared and not yet published (a bridge sharing the
               ledger is publishing it, or one that was killed left it to recovery)
    landed     the landing ledger holds it in a published bulk: the table, the put_date partition
               (from the bulk's files), the bulk, when it was published; and, from the table's swap
               history (`mqbridge.maintenance.engine.swap`), each rewrite of that put_date container since
               (`rewritten`: a compaction merged its files, a purge copied or deleted rows of it) or
               `purged`: when a purge dropped the container, with the message's row. A bulk its table
               committed by its own transaction is asked of the table (its format's `landing_of`,
               `mqbridge.table_formats`): a Delta table's answer names the commit's version
               (`delta_version`, found in the table's log by the bulk id), the put_date of the message's
               row, and, when the row is no longer in the newest version (a purge deleted it), that it
               is not (`in_table`: false) and that the commit's version still reads it until VACUUM
    moved      the backout log (`mqbridge.tracing.backout_log`) has its move: the backout queue, the reason
    unknown    none of them knows it

X is the source's message id or the identity the ledger knows the message by (the listener's
`identity` rule): the running bridge and the backout log know both. The ledger stores identities
only: for a listener whose rule is "msg_id" (the default) the identity is the message id the bridge
sees (on RabbitMQ one delivery's: a redelivery has another); for "header:NAME" or "body-sha256" a landing is found by
that identity only (the answer says which listeners this concerns). The ledger forgets a landing
after `dedupe_window`; the backout log keeps the newest moves of the last 30 days.

A message both landed and moved (put on its queue again from the backout queue and landed then,
or the reverse) is in the state of the later event, with the other given too. One found in flight
is in flight, whatever else is known of it (a redelivery of a landed message is committed without
landing again).
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from mqbridge.config.warehouse import Location
from mqbridge.errors import BridgeError, ConfigError
from mqbridge.identity import listener_scope, scoped
from mqbridge.maintenance.engine.swap import swap_history, swaps_since
from mqbridge.tracing.backout_log import BackoutLog, MovedMessage

if TYPE_CHECKING:
    from mqbridge.config import ListenerConfig
    from mqbridge.landing.ledger.records import PreparedBulk, PublishedBulk
    from mqbridge.loop.in_flight import Held

log = logging.getLogger("mqbridge.where")  # the name operators configure

STATES = ("in_flight", "landed", "moved", "unknown")
#: What an answer says of landings without a ledger.
NO_LEDGER = "exactly_once = false: there is no landing ledger, so where a message landed is not recorded"
#: The longest id asked for (a message id, a header value, a SHA-256 in hex are far shorter).
MAX_ID_CHARS = 1_024
_PARTITION = re.compile(r"(?:^|[\\/])put_date=(\d{4}-\d{2}-\d{2})(?=[\\/]|$)")


class LedgerLookup(Protocol):
    """The landing ledger as the lookup reads it (`mqbridge.landing.ledger.Ledger`)."""

    def landing_of(self, identity: str) -> PublishedBulk | None: ...

    def prepared_holding(self, identities: Sequence[str]) -> list[PreparedBulk]: ...


def check_id(key: str) -> str | None:
    """Why `key` cannot be looked up, or None."""
    if not key.strip():
        return "the message id is empty"
    if len(key) > MAX_ID_CHARS:
        return f"the message id is longer than {MAX_ID_CHARS} characters"
    return None


@dataclass
class Locator:
    """Answers where a message is from what it is given: the running bridge's `holding` (None: no
    bridge runs in this process), the landing ledger (None: `ledger_note` says why) and the backout
    log. Every part that fails is named in the answer's notes; the others still answer. Of the
    configuration it needs the listeners (by which identity each keeps its landings) and `[bridge]
    dedupe_window` (how long the ledger remembers one)."""

    listeners: Sequence[ListenerConfig]
    dedupe_window: float
    ledger: LedgerLookup | None = None
    backout_log: BackoutLog | None = None
    holding: Callable[[str], Sequence[Held]] | None = None
    ledger_note: str = ""
    #: The root of the landed tables (`[spark] warehouse`): where a Delta table's bulk is looked up in
    #: the table itself (a directory, or an object store's or HDFS's URI carrying what delta-rs needs
    #: to reach it, `BridgeConfig.tables_warehouse`); None: only what the ledger holds is said.
    warehouse: Location | None = None

    def locate(self, key: str) -> dict[str, Any]:
        """The answer for `key`, a JSON-able document: id, state (one of STATES), what each part
        found (in_flight, landed, moved), searched (the parts asked) and notes."""
        problem = check_id(key)
        if problem is not None:
            raise ValueError(problem)
        searched: list[str] = []
        notes: list[str] = []
        doc: dict[str, Any] = {"id": key}
        held = self._held(key, searched, notes)
        found = self._landed(key, searched, notes)
        landed = found[1] if found is not None else None
        prepared = self._prepared(key, notes) if not held and landed is None else []
        moved = self._moved(key, searched, notes)
        if held or prepared:
            now = self._ledger_now(notes) if prepared else time.time()
            doc["in_flight"] = [_held(h) for h in held] + [_prepared(b, now) for b in prepared]
        if found is not None:
            doc["landed"] = _landed(key, found[1])
            if found[1].transaction is not None:  # the table's own commit published it: the table says where
                doc["landed"].update(self._in_table(found[0], found[1], notes))
        if moved is not None:
            doc["moved"] = _moved(moved)
        doc["state"] = _state(bool(held or prepared), landed, moved)
        if doc["state"] == "unknown":
            notes += self._unknown_notes(key)
        doc["searched"] = searched
        doc["notes"] = notes
        return doc

    def _held(self, key: str, searched: list[str], notes: list[str]) -> list[Held]:
        if self.holding is None:
            return []
        try:
            held = list(self.holding(key))
        except Exception as exc:  # never fail the answer for one part
            log.exception("where %r: the running bridge's units and bulks could not be read", key)
            notes.append(f"the running bridge's units and bulks could not be read: {exc}")
            return []
        searched.append("the running bridge")
        return held

    def _landed(self, key: str, searched: list[str], notes: list[str]) -> tuple[str, PublishedBulk] | None:
        """The identity the ledger knows `key` by and its published bulk, or None."""
        if self.ledger is None:
            if self.ledger_note:
                notes.append(self.ledger_note)
            return None
        try:
            found = next(((k, f) for k in self._ledger_keys(key) for f in [self.ledger.landing_of(k)] if f), None)
        except BridgeError as exc:  # LedgerError, LedgerUnavailableError
            notes.append(f"the landing ledger could not be read: {exc}")
            return None
        searched.append("the landing ledger")
        return found

    def _in_table(self, identity: str, bulk: PublishedBulk, notes: list[str]) -> dict[str, Any]:
        """What the table says of a landing (its format's `landing_of`); a table that cannot be read is
        named in the notes, and the ledger's answer stands."""
        from mqbridge.landing.delta_read import error_text
        from mqbridge.table_formats import format_of_bulk

        if self.warehouse is None:
            return {}
        table = self.warehouse / bulk.table
        table_format = format_of_bulk(table, bulk)
        try:
            return table_format.landing_of(table, identity, bulk)
        except (OSError, ConfigError, ValueError) as exc:  # a store down or refusing: delta-rs's OSError
            notes.append(f"the {table_format.title} table {table} could not be read: {error_text(exc)}")
        except Exception as exc:  # the format's reader's own errors (delta-rs: a corrupt log, an unsupported feature)
            log.exception("where %r: the %s table %s could not be read", identity, table_format.title, table)
            notes.append(f"the {table_format.title} table {table} could not be read: "
                         f"{' '.join(str(exc).split())[:300]}")
        return {}

    def _ledger_keys(self, key: str) -> list[str]:
        """`key` as the ledger may keep it: as given, and scoped by each listener whose identities
        are (a topic's subscription, a queue's producer-given ids: `mqbridge.identity.listener_scope`)."""
        scopes = {listener_scope(cfg.source, cfg.queue, cfg.subscription, cfg.identity).prefix
                  for cfg in self.listeners}
        return [key] + [scoped(key, prefix) for prefix in sorted(scopes) if prefix]

    def _prepared(self, key: str, notes: list[str]) -> list[PreparedBulk]:
        if self.ledger is None:
            return []
        try:
            return self.ledger.prepared_holding(self._ledger_keys(key))
        except BridgeError as exc:
            notes.append(f"the landing ledger's prepared bulks could not be read: {exc}")
            return []

    def _ledger_now(self, notes: list[str]) -> float:
        """The ledger's clock now (`Ledger.clock`), which stamped its bulks' `prepared_at`: a shared ledger's
        is its database server's, and a host whose clock is ahead or behind would misjudge a bulk's age by
        its own. This host's clock, with a note, when the ledger cannot say."""
        clock = getattr(self.ledger, "clock", None)
        try:
            return float(clock()) if clock is not None else time.time()
        except BridgeError as exc:
            notes.append(f"a prepared bulk's time in flight is judged by this host's clock: the ledger's could not be "
                         f"read: {exc}")
            return time.time()

    def _moved(self, key: str, searched: list[str], notes: list[str]) -> MovedMessage | None:
        if self.backout_log is None:
            return None
        try:
            found = self.backout_log.find(key)
        except OSError as exc:
            notes.append(f"the backout log {self.backout_log.path} could not be read: {exc.strerror or exc}")
            return None
        searched.append("the backout log")
        return found

    def _unknown_notes(self, key: str) -> list[str]:
        """What an unknown answer cannot rule out."""
        notes = []
        by_identity = sorted({f"{cfg.source}:{cfg.queue} ({cfg.identity})" for cfg in self.listeners
                              if cfg.identity.startswith("header:") or cfg.identity == "body-sha256"})
        if by_identity and self.ledger is not None:
            notes.append("the landing ledger knows the messages of " + ", ".join(by_identity) + " by that "
                         "identity, not by their message id: give the identity to find their landings")
        if self.ledger is not None:
            notes.append(f"the landing ledger forgets a landing after dedupe_window "
                         f"({_duration(self.dedupe_window)})")
        if self.backout_log is not None:
            days = self.backout_log.max_age / 86_400
            notes.append(f"the backout log keeps the newest {self.backout_log.max_entries:,} to "
                         f"{2 * self.backout_log.max_entries:,} moves of the last {days:.0f} days")
        return notes


def _state(in_flight: bool, landed: PublishedBulk | None, moved: MovedMessage | None) -> str:
    if in_flight:
        return "in_flight"
    if landed is not None and moved is not None:
        return "landed" if (landed.published_at or 0.0) >= moved.time else "moved"
    return "landed" if landed is not None else "moved" if moved is not None else "unknown"


def _duration(seconds: float) -> str:
    """"7d", "36h", "90s": the largest unit that divides `seconds`."""
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:g}s"


def iso(epoch: float | None) -> str | None:
    """Epoch seconds as ISO 8601 in UTC, to the millisecond."""
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="milliseconds") if epoch else None


def put_dates(files: Sequence[tuple[str, str]]) -> list[str]:
    """The put_date partitions the final paths of a bulk's files are in."""
    return sorted({m[1] for _, final in files for m in [_PARTITION.search(final)] if m})


def _held(held: Held) -> dict[str, Any]:
    m = held.message
    received = m.received_timestamp.timestamp()
    return {"listener": held.listener or None, "unit": held.unit or None, "bulk": held.bulk_id or None,
            "bulk_state": held.bulk_state or None, "msg_id": m.msg_id, "identity": m.identity or None,
            "message_type": m.message_type or None, "source": m.source, "queue": m.destination,
            "received": iso(received), "seconds_in_flight": round(max(0.0, time.time() - received), 1),
            "delivery_count": m.delivery_count}


def _prepared(bulk: PreparedBulk, now: float) -> dict[str, Any]:
    """A prepared bulk in flight, its age judged at `now` by the clock that stamped it (the ledger's)."""
    dates = put_dates(bulk.files)
    return {"bulk": bulk.bulk_id, "bulk_state": "prepared", "table": bulk.table,
            "put_date": dates[0] if len(dates) == 1 else None, "owner": bulk.owner, "prepared": iso(bulk.prepared_at),
            "seconds_in_flight": round(max(0.0, now - bulk.prepared_at), 1)}


def _landed(key: str, bulk: PublishedBulk) -> dict[str, Any]:
    dates = put_dates(bulk.files)
    found: dict[str, Any] = {"identity": key, "table": bulk.table, "put_date": dates[0] if len(dates) == 1 else None,
                             "bulk": bulk.bulk_id, "published": iso(bulk.published_at)}
    if len(dates) > 1:  # a bulk across midnight (UTC): its message is in one of them
        found["put_dates"] = dates
    rewritten, purged = _swapped_since(bulk)
    if rewritten:
        found["rewritten"] = rewritten
    if purged:
        found["purged"] = purged
    return found


#: What each swap (`mqbridge.maintenance.engine.swap.record_purge`'s strategy) did to the bulk's rows.
_SWAP_MEANS = {"compact": "a compaction merged the container's files: the rows are in other files of it",
               "drop": "a purge dropped the container: its rows are gone"}
_REWROTE = "a purge rewrote the container: its rows are in other files, except those the purge designated"


def _swapped_since(bulk: PublishedBulk) -> tuple[list[dict[str, Any]], str | None]:
    """The swaps of the bulk's put_date containers since its publication (the ledger's file paths no
    longer say where its rows are), and when the rows were purged: the last swap of every one of its
    containers dropped it and it is not there now. Reads the tables' swap history files only."""
    histories: dict[str, dict[str, list[tuple[float, str]]]] = {}
    rewritten: list[dict[str, Any]] = []
    dropped: dict[str, float] = {}
    containers = sorted({os.path.dirname(final) for _, final in bulk.files})
    for container in containers:
        table, name = os.path.split(container)
        if table not in histories:
            histories[table] = swap_history(Path(table))
        swaps = swaps_since(histories[table], name, bulk.published_at)
        date = _PARTITION.search(container)
        for at, by in swaps:
            rewritten.append({"put_date": date[1] if date else name, "at": iso(at), "by": by,
                              "means": _SWAP_MEANS.get(by, _REWROTE)})
        if swaps and swaps[-1][1] == "drop" and not os.path.isdir(container):
            dropped[container] = swaps[-1][0]
    purged = iso(max(dropped.values())) if containers and len(dropped) == len(containers) else None
    return rewritten, purged


def _moved(moved: MovedMessage) -> dict[str, Any]:
    return {"time": iso(moved.time), "listener": moved.listener, "queue": moved.queue,
            "backout_queue": moved.backout_queue or None, "msg_id": moved.msg_id, "identity": moved.identity or None,
            "message_type": moved.message_type or None, "delivery_count": moved.delivery_count or None,
            "reason": moved.reason}
