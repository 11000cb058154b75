"""Designation by limits: a type's row cap (`[types.X] max_rows`) and the warehouse's free-space floor
(`[purge] min_free_disk`), beside the retention's age (the seed's "designate by the storage left and
by the number of messages held").

The rules, in the order a purge applies them (`mqbridge purge` without `--older-than`/`--where`,
and the scheduled purge):

1. a type's `retention`: its rows older than that age;
2. a type's `max_rows`: its oldest rows beyond the cap, in each of its tables (the rows of other types
   sharing a table do not count);
3. `[purge] min_free_disk`, once 1 and 2 have run and the free space is measured again: while the
   warehouse's file system has less free space than that, the oldest rows of every type purged, across
   its tables, until the bytes they take (estimated from each table's bytes per row) make up the
   difference. A Delta table's purged files are deleted only by VACUUM after `[purge]
   vacuum_retention`: the bytes already out of the tables and still on disk count as freed, so that a
   round does not purge again what the last one is about to give back.

Every rule designates by the same age as the retention: the later of a row's put and its receipt
(`AGE_MICROS`), oldest first; a rule's designation is a cutoff (every row older than it goes) and the
rules of a type in one run make one designation with the latest of their cutoffs, so the cost model
still chooses drop, delete or copy once per container. Rules 2 and 3 never designate a row younger
than `[purge] keep_younger_than`: a burst that fills the cap or the disk does not purge fresh data
(the table then stays above its cap, or the disk below its floor, and the log says so).

The cutoff is found from the table's row counts by age, refined from days to seconds to single
microseconds (`AGE_LEVELS`): one Spark job per level counts, in the bucket where the level above
reached the amount, the rows of each smaller bucket, so no job returns more than a day's seconds;
`oldest_until` is the pure step. A row cap's cutoff is exact (rows of the same age go together);
the free-space rule's is a whole second.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from mqbridge.config.warehouse import Location
from mqbridge.maintenance.purge.designation import AGE_MICROS, Designation, micros, moment

if TYPE_CHECKING:
    from mqbridge.config import BridgeConfig, TypeConfig
    from mqbridge.table_formats import TableFormat



class TableSource(Protocol):
    """What the rules read of the purge's tables (`PurgeFactory`): the configuration, the warehouse and
    each table's format."""

    config: BridgeConfig
    warehouse: Location

    def format_of(self, table: Location) -> TableFormat: ...


log = logging.getLogger("mqbridge.purge.limits")  # the name operators configure

DAY = 86_400_000_000
SECOND = 1_000_000
#: The widths (microseconds) of the age buckets counted, one Spark job each, coarsest first.
AGE_LEVELS = (DAY, SECOND, 1)


@dataclass(frozen=True)
class AgeBucket:
    """The rows whose age (`AGE_MICROS`) is in [start, start + width) of some width, and the bytes
    they are estimated to take."""

    start: int
    rows: int
    bytes: float = 0.0


def oldest_until(buckets: Iterable[AgeBucket], amount: float,
                 measure: Callable[[AgeBucket], float]) -> tuple[AgeBucket, float] | None:
    """Walking `buckets` oldest first, the one in which the rows taken reach `amount` (of rows or
    bytes, as `measure` counts a bucket), with the amount still wanted when it is reached. When all of
    them together do not reach it: the last bucket, with everything it holds (every row goes). None
    when nothing is wanted or there are no rows."""
    if amount <= 0:
        return None
    last = None
    for bucket in sorted(buckets, key=lambda b: b.start):
        size = measure(bucket)
        if size <= 0:
            continue
        if size >= amount:
            return bucket, amount
        amount -= size
        last = (bucket, size)
    return last


def merge(groups: Iterable[Iterable[AgeBucket]]) -> list[AgeBucket]:
    """Buckets of the same start (from several tables) added together, oldest first."""
    merged: dict[int, AgeBucket] = {}
    for group in groups:
        for b in group:
            have = merged.get(b.start)
            merged[b.start] = b if have is None else AgeBucket(b.start, have.rows + b.rows, have.bytes + b.bytes)
    return [merged[start] for start in sorted(merged)]


@dataclass
class AgeSource:
    """The rows of one table a limit may designate (its types' rows only, where other types land
    too): counted by age with Spark; each row estimated at the table's bytes per row."""

    table: Location
    frame: Any  # a DataFrame of the rows
    bytes_per_row: float = 0.0

    def buckets(self, width: int, lo: int | None = None, hi: int | None = None) -> list[AgeBucket]:
        """The rows by age in buckets of `width` microseconds, those aged in [lo, hi) when given."""
        from pyspark.sql import functions as F

        age = F.expr(AGE_MICROS)
        rows = self.frame.where(age.isNotNull())
        if lo is not None and hi is not None:
            rows = rows.where((age >= F.lit(lo)) & (age < F.lit(hi)))
        counted = rows.groupBy(F.expr(f"{AGE_MICROS} div {width}").alias("bucket")).count().collect()
        return [AgeBucket(int(r["bucket"]) * width, int(r["count"]), int(r["count"]) * self.bytes_per_row)
                for r in counted]

    def count_before(self, cutoff: int) -> int:
        """Rows aged before `cutoff` (microseconds)."""
        from pyspark.sql import functions as F

        return int(self.frame.where(F.expr(AGE_MICROS) < F.lit(cutoff)).count())


def find_cutoff(sources: Sequence[AgeSource], wanted: Callable[[list[AgeBucket]], float], *,
                by_bytes: bool = False, levels: Sequence[int] = AGE_LEVELS) -> tuple[int, int] | None:
    """The cutoff (microseconds, exclusive) that designates the oldest rows of `sources` until the
    amount `wanted` (given the coarsest buckets: rows, or bytes with `by_bytes`) is taken, and the rows
    it designates; None when nothing is wanted. Refined level by level (`AGE_LEVELS`)."""
    def measure(bucket: AgeBucket) -> float:
        return bucket.bytes if by_bytes else bucket.rows

    lo: int | None = None
    hi: int | None = None
    amount = 0.0
    taken = 0
    for n, width in enumerate(levels):
        merged = merge(source.buckets(width, lo, hi) for source in sources)
        if n == 0:
            amount = wanted(merged)
        found = oldest_until(merged, amount, measure)
        if found is None:
            return None
        bucket, amount = found
        taken += sum(b.rows for b in merged if b.start < bucket.start)
        lo, hi = bucket.start, bucket.start + width
        if n == len(levels) - 1:
            taken += bucket.rows
    assert hi is not None
    return hi, taken


@dataclass(frozen=True)
class Limited:
    """One rule's cutoff for one type's rows of one table, and what it designates in words."""

    cutoff: int  # microseconds, exclusive
    rule: str


class Limits:
    """The row caps and the free-space floor of one configuration, on one Spark session, at `now`."""

    def __init__(self, factory: TableSource, spark: Any, *, now: datetime) -> None:
        self.factory = factory
        self.config: BridgeConfig = factory.config
        self.spark = spark
        self.now = now
        self.floor = micros(now - timedelta(seconds=self.config.purge.keep_younger_than))

    # -- rules 1 and 2: each table's retentions and row caps ------------------------------------------
    def designations(self, types: Mapping[str, TypeConfig]) -> Iterator[tuple[Location, list[Designation]]]:
        """Each table `types` land in, with the designations of their retentions and row caps: one per
        cutoff, restricted to its types' rows where the table holds, or may hold, other types' rows."""
        from mqbridge.landing.tables import holders, type_tables

        warehouse = self.factory.warehouse
        for table, names in type_tables(warehouse, types).items():
            table_format = self.factory.format_of(table)
            if not table_format.holds(table):
                yield table, []
                continue
            shared = holders(warehouse, table, self.config.types)
            by_cutoff: dict[int, list[tuple[str, list[str]]]] = {}
            for name in names:
                restrict = set(shared) - {name}
                limited = self._type_rules(table, table_format, name, types[name], bool(restrict))
                if limited:
                    cutoff = max(rule.cutoff for rule in limited)
                    by_cutoff.setdefault(cutoff, []).append((name, [rule.rule for rule in limited]))
            designations = []
            for cutoff, group in sorted(by_cutoff.items()):
                group_names = sorted(name for name, _ in group)
                restrict_to = tuple(group_names) if set(shared) - set(group_names) else ()
                rules = tuple(f"{name} {rule}" if len(shared) > 1 else rule for name, texts in group for rule in texts)
                designations.append(Designation(cutoff=moment(cutoff), message_types=restrict_to, rules=rules))
            yield table, designations

    def _type_rules(self, table: Location, table_format: TableFormat, name: str, type_cfg: TypeConfig,
                    restrict: bool) -> list[Limited]:
        rules = []
        if type_cfg.retention is not None:
            cutoff = micros(self.now - timedelta(seconds=type_cfg.retention))
            rules.append(Limited(cutoff, f"retention {age_text(type_cfg.retention)}: put and received before "
                                         f"{when(cutoff)}"))
        if type_cfg.max_rows is not None:
            cap = type_cfg.max_rows
            source = self.source(table, table_format, (name,) if restrict else ())
            found = find_cutoff([source], lambda buckets: sum(b.rows for b in buckets) - cap)
            if found is not None:
                rules.append(self._held_back(source, *found, f"max_rows {cap:,}", "the table stays above its cap"))
        return rules

    def _held_back(self, source: AgeSource, cutoff: int, rows: int, rule: str, consequence: str) -> Limited:
        """A limit's cutoff, or the floor (`keep_younger_than`) where the cutoff would pass it."""
        if cutoff <= self.floor:
            return Limited(cutoff, f"{rule}: the {rows:,} oldest rows, put and received before {when(cutoff)}")
        kept = self.floor
        rows = source.count_before(kept)
        log.warning("purge %s: %s would designate rows younger than keep_younger_than %s: only the %d rows "
                    "before %s; %s", Path(str(source.table)).name, rule,
                    age_text(self.config.purge.keep_younger_than), rows, when(kept), consequence)
        return Limited(kept, f"{rule}: the {rows:,} oldest rows, put and received before {when(kept)} (held back by "
                             f"keep_younger_than {age_text(self.config.purge.keep_younger_than)}: {consequence})")

    def source(self, table: Location, table_format: TableFormat, message_types: Sequence[str]) -> AgeSource:
        """The rows of `table` (of `message_types` only, when given) for counting by age."""
        from pyspark.sql import functions as F

        frame = table_format.read(self.spark, table).select("put_timestamp", "received_timestamp", "message_type")
        if message_types:
            frame = frame.where(F.col("message_type").isin(list(message_types)))
        containers = table_format.containers(table)
        rows = sum(c.rows for c in containers)
        return AgeSource(table, frame, sum(c.bytes for c in containers) / rows if rows else 0.0)

    # -- rule 3: the free-space floor ------------------------------------------------------------------
    def free_space_designations(self, types: Mapping[str, TypeConfig]) -> list[tuple[Location, Designation]]:
        """Where the warehouse's free space is below `[purge] min_free_disk`: the tables of `types` with
        the designation of their oldest rows to purge until it is not (none younger than
        `keep_younger_than`). Empty when the floor is not set, or kept."""
        floor = self.config.purge.min_free_disk
        if floor is None:
            return []
        from mqbridge.landing.tables import holders, type_tables
        from mqbridge.maintenance.engine.free_space import free_bytes

        warehouse = self.factory.warehouse
        tables: list[tuple[Location, TableFormat, tuple[str, ...]]] = []
        for table, names in type_tables(warehouse, types).items():
            table_format = self.factory.format_of(table)
            if table_format.holds(table):
                others = set(holders(warehouse, table, self.config.types)) - set(names)
                restrict = tuple(sorted(names)) if others else ()
                tables.append((table, table_format, restrict))
        free = free_bytes(Path(str(warehouse)))
        pending = sum(unvacuumed_bytes(Path(str(t)), f) for t, f, _ in tables)
        need = floor - free - pending
        said = (f"min_free_disk {size_text(floor)} (free {size_text(free)}"
                f"{f', {size_text(pending)} awaiting VACUUM' if pending else ''})")
        if need <= 0 or not tables:
            log.info("purge: %s: nothing designated", said)
            return []
        sources = [self.source(t, f, restrict) for t, f, restrict in tables]
        found = find_cutoff(sources, lambda _buckets: float(need), by_bytes=True, levels=AGE_LEVELS[:2])
        if found is None:
            return []
        cutoff, _rows = found
        rule = f"{said}: {size_text(need)} to free"
        if cutoff > self.floor:
            log.warning("purge: %s would designate rows younger than keep_younger_than %s: only rows before %s; "
                        "the disk stays below its floor", rule, age_text(self.config.purge.keep_younger_than),
                        when(self.floor))
            cutoff = self.floor
            rule += f" (held back by keep_younger_than {age_text(self.config.purge.keep_younger_than)})"
        designations = []
        for source, (table, _, restrict) in zip(sources, tables, strict=True):
            rows = source.count_before(cutoff)
            if rows:
                text = f"{rule}: the {rows:,} oldest rows, put and received before {when(cutoff)}"
                designations.append((table, Designation(cutoff=moment(cutoff), message_types=restrict,
                                                        rules=(text,))))
        return designations


def unvacuumed_bytes(table: Path, table_format: TableFormat) -> int:
    """A local Delta table's data files on disk that its current version no longer holds (removed by a
    purge or compaction, deleted by VACUUM later): the space the table gives back without another
    purge. 0 for other formats, whose purges delete the files they replace at once."""
    if table_format.name != "delta":
        return 0
    live = {Path(str(f)).name for c in table_format.containers(table) for f in c.files}
    on_disk = 0
    for root, dirs, files in os.walk(table):
        dirs[:] = [d for d in dirs if not d.startswith("_")]  # _delta_log, and no data of a reader's
        on_disk += sum(os.path.getsize(os.path.join(root, f)) for f in files
                       if f.endswith(".parquet") and f not in live)
    return on_disk


def when(cutoff: int) -> str:
    """A cutoff in microseconds as the output says it (ISO 8601, UTC, to the microsecond when it has one)."""
    return moment(cutoff).isoformat(timespec="microseconds" if cutoff % SECOND else "seconds")


def age_text(seconds: float) -> str:
    """A duration as the configuration writes it: "30d", "12h", "90s"."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def size_text(size: float) -> str:
    """A byte count as the configuration writes sizes: "5.0GB", "512.0MB", "900B"."""
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if abs(size) >= scale:
            return f"{size / scale:.1f}{unit}"
    return f"{size:.0f}B"
