"""The purge cost model's arithmetic: estimates, the margin, operator values, learning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mqbridge.maintenance.engine.costs import Coefficients, CostModel


def model(tmp_path: Path, **settings: float) -> CostModel:
    return CostModel(tmp_path / "purge_costs.json", **settings)  # type: ignore[arg-type]


def test_estimates_and_the_choice(tmp_path: Path) -> None:
    m = model(tmp_path, delete_row_seconds=1e-4, copy_row_seconds=1e-4, container_seconds=1.0)
    # 90% of 100,000 rows spread over every file: delete rewrites them all, copy only the survivors
    spread = m.estimate(rows=100_000, designated=90_000, rows_rewritten=100_000)
    assert (spread.delete_seconds, spread.copy_seconds, spread.strategy) == pytest.approx((10.0, 2.0, "copy"))
    # 5% by age: one partial file of 1,000 rows
    old = m.estimate(rows=100_000, designated=5_000, rows_rewritten=1_000)
    assert old.strategy == "delete" and old.delete_seconds == pytest.approx(0.1)
    assert m.estimate(rows=10, designated=10, rows_rewritten=0).strategy == "drop"


def test_the_margin_favours_delete(tmp_path: Path) -> None:
    settings = {"delete_row_seconds": 1e-4, "copy_row_seconds": 1e-4, "container_seconds": 0.0}
    # copy 0.95 s against delete 1.0 s: copy without a margin, delete with 10%
    assert model(tmp_path, **settings).estimate(10_000, 500, 10_000).strategy == "copy"
    assert model(tmp_path, margin=0.1, **settings).estimate(10_000, 500, 10_000).strategy == "delete"


def test_learning_moves_the_estimate_towards_the_measurement_and_is_kept(tmp_path: Path) -> None:
    m = model(tmp_path)
    for measured in (5.0, 5.0, 5.0):
        before = m.estimate(20_000, 18_000, 20_000)
        m.learn("copy", measured, rows_copied=2_000)
        m.learn("delete", measured, rows_rewritten=20_000)
        after = m.estimate(20_000, 18_000, 20_000)
        assert abs(after.copy_seconds - measured) < abs(before.copy_seconds - measured)
        assert abs(after.delete_seconds - measured) < abs(before.delete_seconds - measured)
    assert json.loads((tmp_path / "purge_costs.json").read_text())["runs"] == 6
    assert model(tmp_path).coefficients == m.coefficients


def test_an_operator_value_overrides_the_learned_one(tmp_path: Path) -> None:
    m = model(tmp_path)
    m.learn("delete", 10.0, rows_rewritten=1_000)
    operator = model(tmp_path, delete_row_seconds=1e-6)
    assert operator.coefficients.delete_row_seconds == 1e-6
    assert operator.learned.delete_row_seconds == m.learned.delete_row_seconds != Coefficients().delete_row_seconds


def test_an_unreadable_cost_file_starts_from_the_defaults(tmp_path: Path) -> None:
    (tmp_path / "purge_costs.json").write_text("{not json")
    assert model(tmp_path).coefficients == Coefficients()
