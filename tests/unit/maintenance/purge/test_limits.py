"""Designation by limits (`mqbridge.maintenance.purge.limits`): the cutoff a row cap or the free-space
floor chooses from a table's row counts by age, oldest rows first, refined from days to seconds to
microseconds (rows of one age go together); several tables merged for the free space, each at its
bytes per row; an exact cutoff in the designation's SQL; the configuration keys (`[types.X] max_rows`,
`[purge] min_free_disk`, `keep_younger_than` and its default)."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from mqbridge.errors import ConfigError
from mqbridge.maintenance.purge.designation import Designation, micros, moment
from mqbridge.maintenance.purge.limits import (
    DAY,
    SECOND,
    AgeBucket,
    AgeSource,
    age_text,
    find_cutoff,
    merge,
    oldest_until,
    size_text,
)
from tests.support.configs import orders

T0 = micros(datetime(2026, 11, 1, tzinfo=timezone.utc))


class ListedAges(AgeSource):
    """A table's rows given as their ages (microseconds): the counts Spark's `buckets` would return."""

    def __init__(self, ages: list[int], bytes_per_row: float = 100.0) -> None:
        super().__init__(Path("t"), None, bytes_per_row)
        self.ages = ages
        self.jobs = 0

    def buckets(self, width: int, lo: int | None = None, hi: int | None = None) -> list[AgeBucket]:
        self.jobs += 1
        counts = Counter(a // width for a in self.ages if lo is None or hi is None or lo <= a < hi)
        return [AgeBucket(b * width, n, n * self.bytes_per_row) for b, n in counts.items()]

    def count_before(self, cutoff: int) -> int:
        return sum(1 for a in self.ages if a < cutoff)


def rows(bucket: AgeBucket) -> float:
    return bucket.rows


def test_oldest_until_walks_the_buckets_oldest_first() -> None:
    buckets = [AgeBucket(30, 5), AgeBucket(10, 4), AgeBucket(20, 3)]
    assert oldest_until(buckets, 4, rows) == (AgeBucket(10, 4), 4)  # the oldest bucket holds all 4
    assert oldest_until(buckets, 6, rows) == (AgeBucket(20, 3), 2)  # 4 of the oldest, 2 of the next
    assert oldest_until(buckets, 100, rows) == (AgeBucket(30, 5), 5)  # not enough: every row
    assert oldest_until(buckets, 0, rows) is None
    assert oldest_until([], 3, rows) is None


def test_merge_adds_the_buckets_of_several_tables_by_start() -> None:
    merged = merge([[AgeBucket(10, 1, 10.0), AgeBucket(20, 2, 20.0)], [AgeBucket(10, 3, 300.0)]])
    assert merged == [AgeBucket(10, 4, 310.0), AgeBucket(20, 2, 20.0)]


def test_a_row_cap_designates_exactly_the_oldest_rows_beyond_it() -> None:
    # Given 10 rows over three days, several in one second and two of exactly the same age
    ages = [T0 + d * DAY + s * SECOND + u for d, s, u in
            [(0, 0, 5), (0, 0, 9), (0, 7, 0), (1, 0, 0), (1, 0, 1), (1, 0, 1), (1, 3, 0), (2, 0, 0), (2, 1, 0),
             (2, 2, 0)]]
    table = ListedAges(ages)
    for cap in range(1, 10):
        # When the cap is `cap`: the oldest len - cap rows go
        found = find_cutoff([table], lambda buckets, cap=cap: sum(b.rows for b in buckets) - cap)
        assert found is not None
        cutoff, taken = found
        gone = sorted(a for a in ages if a < cutoff)
        # Then exactly the oldest ones, and rows of the same age as the last one go with it
        assert gone == sorted(ages)[:len(gone)] and taken == len(gone)
        assert len(gone) == len(ages) - cap or (cap == 5 and len(gone) == 6)  # the two of one age go together
    # and a table within its cap designates nothing
    assert find_cutoff([table], lambda buckets: sum(b.rows for b in buckets) - 10) is None


def test_the_cutoff_is_refined_from_days_to_microseconds_in_three_counts() -> None:
    table = ListedAges([T0 + n * 3_600_000_123 for n in range(500)])  # one row every hour and a bit
    found = find_cutoff([table], lambda buckets: 123)
    assert found is not None and table.jobs == 3
    assert found == (sorted(table.ages)[122] + 1, 123)


def test_free_space_takes_the_oldest_rows_of_every_table_by_their_bytes() -> None:
    # Given two tables: "big" rows of 1000 bytes, "small" rows of 10 bytes, interleaved in age
    big = ListedAges([T0 + n * 2 * SECOND for n in range(10)], bytes_per_row=1000.0)
    small = ListedAges([T0 + (n * 2 + 1) * SECOND for n in range(10)], bytes_per_row=10.0)
    # When 2,500 bytes must be freed
    found = find_cutoff([big, small], lambda _buckets: 2500.0, by_bytes=True, levels=(DAY, SECOND))
    # Then rows of both tables go, oldest first, until they make up 2,500 bytes: 3 big ones and the
    # 2 small ones between them (the cutoff is the end of the third big row's second)
    assert found is not None
    cutoff, taken = found
    assert cutoff == T0 + 5 * SECOND and taken == 5
    assert big.count_before(cutoff) == 3 and small.count_before(cutoff) == 2


def test_the_designations_sql_holds_the_exact_microsecond() -> None:
    # A float timestamp of 2026 loses the last microsecond; the designation must not
    cutoff = moment(T0 + 999_999)
    assert micros(cutoff) == T0 + 999_999
    assert f"< {T0 + 999_999}" in Designation(cutoff=cutoff).sql
    said = Designation(cutoff=cutoff, rules=("max_rows 1,000: the 5 oldest rows",)).describe()
    assert said == "max_rows 1,000: the 5 oldest rows"


def test_the_words_of_the_rules() -> None:
    assert [age_text(s) for s in (86400, 7200, 90, 1.5)] == ["1d", "2h", "90s", "1.5s"]
    assert [size_text(s) for s in (5 << 30, 512 << 20, 900)] == ["5.0GB", "512.0MB", "900B"]


# -- the configuration ---------------------------------------------------------------------------------
def test_max_rows_min_free_disk_and_keep_younger_than_are_read_with_their_defaults() -> None:
    cfg = orders().parse()
    assert cfg.types["orders"].max_rows is None and cfg.purge.min_free_disk is None
    assert cfg.purge.keep_younger_than == timedelta(days=1).total_seconds()
    cfg = (orders().set("types.orders", max_rows=1000).set("purge", min_free_disk="2GB", keep_younger_than="6h")
           .parse())
    assert cfg.types["orders"].max_rows == 1000 and cfg.purge.min_free_disk == 2 << 30
    assert cfg.purge.keep_younger_than == 6 * 3600


@pytest.mark.parametrize(("table", "keys", "said"), [
    ("types.orders", {"max_rows": 0}, "types.orders.max_rows"),
    ("purge", {"keep_younger_than": "-1s"}, "purge.keep_younger_than"),
    ("purge", {"min_free_disk": "0B"}, "purge.min_free_disk"),
])
def test_a_wrong_limit_is_refused_naming_its_key(table: str, keys: dict[str, object], said: str) -> None:
    with pytest.raises(ConfigError, match=said.replace(".", r"\.")):
        orders().set(table, **keys).parse()
