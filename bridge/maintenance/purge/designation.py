"""What a purge designates: the purge policy's choice of the rows that go (a retention's age, and/or
a Spark SQL condition, restricted to a type's rows where several types share a table), as one Spark
SQL condition the purger counts the rows by and rewrites a container without.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from mqbridge.errors import PurgeError

#: A row's age as the purge reads it, in microseconds since the epoch: the later of its put and its
#: receipt (NULL, never designated, when both are NULL).
AGE_MICROS = "unix_micros(greatest(put_timestamp, received_timestamp))"
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class Designation:
    """What a purge designates: rows put and received before `cutoff`, and/or rows matching `where`
    (Spark SQL); of a table shared with other types, only rows whose `message_type` is one of
    `message_types` (empty: every row of the table). `rules`: the configured rules that chose the
    cutoff, in words (a retention, a row cap, the free-space floor: `mqbridge.maintenance.purge.limits`),
    said by `describe` instead of the bare cutoff."""

    cutoff: datetime | None = None
    where: str | None = None
    message_types: tuple[str, ...] = ()
    rules: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.cutoff is None and not self.where:
            raise PurgeError("nothing designated: give an age (--older-than, or [types.X] retention) or --where")

    @property
    def sql(self) -> str:
        """The condition as one Spark SQL expression (a NULL result does not designate)."""
        parts = []
        if self.cutoff is not None:
            # A row is as old as the later of its put and its receipt: a producer's clock (or a put
            # time read in the wrong unit) never makes a row received within the retention look old.
            # `greatest` skips NULLs; unix_micros: independent of the session time zone.
            parts.append(f"{AGE_MICROS} < {micros(self.cutoff)}")
        if self.where:
            parts.append(f"({self.where})")
        if self.message_types:
            names = ", ".join(sql_string(t) for t in self.message_types)
            parts.append(f"message_type IN ({names})")
        return f"coalesce({' AND '.join(parts)}, false)"

    def describe(self) -> str:
        """The designation in words, for the command's output and the logs."""
        cutoff = self.cutoff.isoformat(timespec="seconds") if self.cutoff else ""
        parts = list(self.rules) if self.rules else [f"put before {cutoff} (and received before it)"] if cutoff else []
        parts += [f"where {self.where}"] if self.where else []
        parts += [f"of type {', '.join(self.message_types)}"] if self.message_types else []
        return " and ".join(parts)


def micros(moment: datetime) -> int:
    """`moment` in microseconds since the epoch, exactly (a float timestamp loses the last digit)."""
    return (moment.astimezone(timezone.utc) - EPOCH) // timedelta(microseconds=1)


def moment(micros_since_epoch: int) -> datetime:
    """The UTC datetime of `micros_since_epoch` (the inverse of `micros`)."""
    return EPOCH + timedelta(microseconds=micros_since_epoch)


def sql_string(value: str) -> str:
    """`value` as a Spark SQL string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def type_designations(names: Sequence[str], ages: Mapping[str, float | None], holders: Collection[str], *,
                      now: datetime, where: str | None = None) -> list[Designation]:
    """The designations that purge the types `names` of one table: one per distinct age (a type's
    retention, or --older-than), each restricted to its types' rows (`message_type`) when the
    table holds, or may hold, rows of types not in it (`holders`: `mqbridge.landing.tables.holders`).
    A type without an age is skipped unless `where` designates."""
    groups: dict[float | None, list[str]] = {}
    for name in names:
        groups.setdefault(ages.get(name), []).append(name)
    designations = []
    for age, group in sorted(groups.items(), key=lambda item: (item[0] is None, item[0] or 0.0)):
        if age is None and not where:
            continue
        restrict = tuple(sorted(group)) if set(holders) - set(group) else ()
        designations.append(Designation(cutoff=now - timedelta(seconds=age) if age is not None else None,
                                        where=where, message_types=restrict))
    return designations
