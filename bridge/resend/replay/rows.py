"""The landed rows a replay sends, read through Spark in `put_timestamp` order, each with the key the
replay ledger records it by.

A table is read as its format reads it (`mqbridge.table_formats`, `read`): the rows of its newest
version, or, with an `as_of` version or timestamp, of an older one where the format keeps them (Delta's
time travel reads the rows a purge deleted since, for as long as VACUUM has not removed that version's
files; a Parquet table refuses it). The session needs what the format needs on its class path
(`mqbridge replay` starts its own with the format's `session_conf`)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from mqbridge.config.warehouse import Location


@dataclass(frozen=True)
class Selection:
    """Which rows of a table: a Spark SQL condition, and put times older / newer than a cut."""

    where: str | None = None
    older_than: datetime | None = None  # put_timestamp before this
    newer_than: datetime | None = None  # put_timestamp at or after this
    as_of_version: int | None = None  # a Delta table's version (time travel), None: the newest
    as_of_timestamp: str | None = None  # or the version current at this time (Spark's timestamp syntax)
    bulks: tuple[str, ...] | None = None  # only rows these bulks landed (`mqbridge follow`)
    senders: tuple[str, ...] | None = None  # only rows read from these destinations (the `destination` column)

    @classmethod
    def of(cls, where: str | None, older: float | None, newer: float | None, now: datetime) -> Selection:
        """The selection of `--where`, `--older-than` and `--newer-than` (seconds) at `now`."""
        return cls(where, now - timedelta(seconds=older) if older is not None else None,
                   now - timedelta(seconds=newer) if newer is not None else None)


@dataclass(frozen=True)
class ReplayRow:
    """One landed row as a message to send again: body byte-exact, its headers, its ids."""

    key: str  # what the replay ledger records (bulk, message id, occurrence)
    msg_id: str
    body: bytes
    correlation_id: str | None
    put_timestamp: datetime | None
    headers: dict[str, str] = field(default_factory=dict)


#: The header (STOMP) and message property (IBM MQ) by which every replayed message names its row.
REPLAY_KEY_HEADERS = ("mqbridge-replay-key", "mqbridge_replay_key")


def provenance(row: ReplayRow, replay_id: str, separator: str) -> dict[str, str]:
    """Where a replayed message comes from, as headers (`separator` "-") or IBM MQ property names
    ("_"): the replay, the row's key, its original message id and put time."""
    names = ("replay_id", "replay_key", "replayed_message_id", "replayed_put_timestamp")
    values = (replay_id, row.key, row.msg_id, row.put_timestamp.isoformat() if row.put_timestamp else None)
    return {f"mqbridge_{n}".replace("_", separator): v for n, v in zip(names, values, strict=True) if v is not None}


def read_rows(spark: Any, table: Location, selection: Selection) -> Iterator[ReplayRow]:
    """The rows of `table` that `selection` designates, oldest `put_timestamp` first (ties: by bulk,
    message id and body, so that every run of the same replay sees the same order), streamed to
    the driver a partition at a time."""
    from pyspark.sql import functions as f

    df = _table_frame(spark, table, selection)
    if selection.where:
        df = df.where(selection.where)
    if selection.older_than is not None:
        df = df.where(f.col("put_timestamp") < f.lit(selection.older_than))
    if selection.newer_than is not None:
        df = df.where(f.col("put_timestamp") >= f.lit(selection.newer_than))
    if selection.bulks is not None:
        df = df.where(f.col("bulk_id").isin(list(selection.bulks)))
    if selection.senders is not None:
        df = df.where(f.col("destination").isin(list(selection.senders)))
    df = df.select("msg_id", "bulk_id", "body", "correlation_id", "put_timestamp", "headers")
    df = df.orderBy("put_timestamp", "bulk_id", "msg_id", "body")
    seen: dict[str, int] = {}
    for row in df.toLocalIterator():
        body = bytes(row.body) if row.body is not None else b""
        # A unit may land two messages with one id (IBM MQ allows it): the body's digest and an
        # occurrence number keep their keys apart.
        base = f"{row.bulk_id}/{row.msg_id}/{hashlib.sha256(body).hexdigest()[:16]}"
        seen[base] = seen.get(base, 0) + 1
        yield ReplayRow(key=f"{base}/{seen[base]}", msg_id=row.msg_id, body=body, correlation_id=row.correlation_id,
                        put_timestamp=row.put_timestamp, headers=dict(row.headers or {}))


def _table_frame(spark: Any, table: Location, selection: Selection) -> Any:
    """The rows of `table` as its format reads them, at the selection's version or time if any
    (ConfigError where the format keeps no older versions, or the session cannot read it)."""
    from mqbridge.table_formats import format_of

    return format_of(table).read(spark, table, as_of_version=selection.as_of_version,
                                 as_of_timestamp=selection.as_of_timestamp)
