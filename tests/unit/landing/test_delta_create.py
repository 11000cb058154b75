"""A Delta table made empty before its first bulk is prepared (`mqbridge.landing.delta_create`): the
decision alone, with the table's version and the creating commit as plain functions (what Delta does
when two writers make one table is checked with Spark in tests/integration/test_delta_commit.py); and
where a commit's first attempt starts to look for a fence of its version (`delta_commit.fence_scan_start`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from mqbridge.landing import delta_create
from mqbridge.landing.delta_commit import fence_scan_start
from mqbridge.landing.delta_create import Made, ensure_table, made, met_at

#: What Delta 4.4 said to one of two writers that made one table at once (tests/integration/test_delta_commit.py).
LOST = ("An error occurred while calling o125.save.\n: io.delta.exceptions.ProtocolChangedException: "
        "[DELTA_PROTOCOL_CHANGED] ProtocolChangedException: The protocol version of the Delta table has been "
        "changed by a concurrent update. This happens when multiple writers are writing to an empty directory.")


class Table:
    """A table's version as a writer sees it, and what a creating commit does to it."""

    def __init__(self, version: int = -1, *, made_meanwhile: bool = False, error: Exception | None = None) -> None:
        self.version, self.made_meanwhile, self.error = version, made_meanwhile, error
        self.asked = self.created = 0

    def current_version(self) -> int:
        self.asked += 1
        return self.version

    def create(self) -> None:
        if self.made_meanwhile:  # another writer's commit of version 0 came first
            self.version = 0
        if self.error is not None:
            raise self.error
        self.created += 1
        self.version = 0


def test_a_table_that_is_there_is_left_as_it_is() -> None:
    table = Table(version=7)
    assert made(table.current_version, table.create) == (Made.FOUND, 7)
    assert table.created == 0


def test_a_table_that_is_not_there_is_made() -> None:
    table = Table()
    assert made(table.current_version, table.create) == (Made.CREATED, 0)
    assert table.created == 1 and table.version == 0


def test_a_creating_write_that_failed_while_another_writer_made_the_table_counts_as_made() -> None:
    # Given two writers that both found no table; the other's commit of version 0 came first
    table = Table(made_meanwhile=True, error=RuntimeError(LOST))
    # When this one's write fails on it: the table is there, made by the other
    assert made(table.current_version, table.create) == (Made.CREATED_BY_ANOTHER, 0)
    assert table.asked == 2


def test_a_failed_write_with_still_no_table_to_be_seen_propagates() -> None:
    table = Table(error=OSError("the object store endpoint is unreachable"))
    with pytest.raises(OSError, match="unreachable"):
        made(table.current_version, table.create)
    assert table.asked == 2


def test_a_table_that_cannot_be_asked_after_a_failed_write_propagates_the_writes_error() -> None:
    answers = iter([-1])

    def current_version() -> int:
        try:
            return next(answers)
        except StopIteration:
            raise OSError("the store went away") from None

    with pytest.raises(RuntimeError, match="DELTA_PROTOCOL_CHANGED"):
        made(current_version, Table(error=RuntimeError(LOST)).create)


def test_a_table_is_asked_once_per_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(delta_create, "_known", {})
    table = Table()
    never: Callable[[], int] = lambda: pytest.fail("asked again")  # noqa: E731
    assert ensure_table(tmp_path / "orders", table.current_version, table.create) is Made.CREATED
    assert ensure_table(str(tmp_path / "orders"), never, table.create) is Made.KNOWN
    assert table.created == 1 and met_at(tmp_path / "orders") == 0
    assert ensure_table(tmp_path / "found", Table(version=12).current_version, table.create) is Made.FOUND
    assert met_at(tmp_path / "found") == 12 and met_at(tmp_path / "never") is None
    # A failure leaves the table unknown: the next bulk asks again
    failing = Table(error=OSError("down"))
    with pytest.raises(OSError):
        ensure_table(tmp_path / "invoices", failing.current_version, failing.create)
    assert ensure_table(tmp_path / "invoices", Table().current_version, lambda: None) is Made.CREATED


def test_a_commit_looks_for_a_fence_from_where_it_can_first_be() -> None:
    # The next version after this process's commit of version 4 at table version 30: from 31
    assert fence_scan_start((4, 30), 5, met=2) == 31
    # The process's first version of a table it made or found at version 2: from 3
    assert fence_scan_start(None, 1, met=2) == 3
    assert fence_scan_start(None, 3, met=2) == 3  # versions 1 and 2 never committed: still since it met it
    # A version after a gap (version 5 never committed), or a table the writer did not make first: in full
    assert fence_scan_start((4, 30), 6, met=2) is None
    assert fence_scan_start(None, 1, met=None) is None
