"""The Iceberg purge's pure parts (`mqbridge.maintenance.iceberg.purger`): the strategy of one partition
from the learned cost model (a merge-on-read DELETE counted in the designated rows: position deletes
rewrite nothing), a forced strategy, and which failures are Iceberg's commit conflicts (tried again)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqbridge.maintenance.engine.costs import CostModel
from mqbridge.maintenance.iceberg.purger import choose, conflict


def model(tmp_path: Path, **costs: float) -> CostModel:
    return CostModel(tmp_path / "costs.json", **costs)


def test_a_delete_is_counted_in_the_designated_rows_alone(tmp_path: Path) -> None:
    # 10 of 1,000 rows designated: position deletes for 10 rows against a copy of 990
    estimate = choose(model(tmp_path, delete_row_seconds=1e-3, copy_row_seconds=1e-3, container_seconds=0), 1000, 10)
    assert estimate.strategy == "delete"
    assert estimate.delete_seconds == pytest.approx(0.01) and estimate.copy_seconds == pytest.approx(0.99)


def test_a_copy_is_chosen_when_few_rows_survive(tmp_path: Path) -> None:
    estimate = choose(model(tmp_path, delete_row_seconds=1e-3, copy_row_seconds=1e-3, container_seconds=0), 1000, 900)
    assert estimate.strategy == "copy"


def test_every_row_designated_is_a_drop_even_when_a_strategy_is_forced(tmp_path: Path) -> None:
    assert choose(model(tmp_path), 50, 50, "delete").strategy == "drop"
    assert choose(model(tmp_path), 50, 50, "copy").strategy == "drop"


@pytest.mark.parametrize("forced", ["delete", "copy"])
def test_a_forced_strategy_wins_over_the_model(tmp_path: Path, forced: str) -> None:
    assert choose(model(tmp_path), 1000, 500, forced).strategy == forced


def test_an_unknown_strategy_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="one of auto, delete, copy"):
        choose(model(tmp_path), 10, 1, "drop")


@pytest.mark.parametrize(("text", "expected"), [
    ("org.apache.iceberg.exceptions.ValidationException: Found conflicting files that can contain records", True),
    ("CommitFailedException: Table metadata refresh is required", True),
    ("AnalysisException: [UNRESOLVED_COLUMN] nope", False),
])
def test_commit_conflicts_are_told_from_other_failures(text: str, expected: bool) -> None:
    assert conflict(RuntimeError(text)) is expected
