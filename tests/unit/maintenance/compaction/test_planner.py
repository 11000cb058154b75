"""The per-container plan (a pure decision) and the cost model's compaction terms."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mqbridge.maintenance.compaction.planner import Facts, Policy, decide
from mqbridge.maintenance.engine.costs import DEFAULT_COMPACT_ROW_SECONDS, CostModel

POLICY = Policy(small_files=100)


def model(tmp_path: Path) -> CostModel:
    return CostModel(tmp_path / "purge_costs.json", delete_row_seconds=1e-4, copy_row_seconds=1e-4,
                     container_seconds=1.0, compact_row_seconds=2e-4)


def facts(files: int = 2000, small: int = 2000, rows: int = 200_000, designated: int = 0,
          rewritten: int = 0) -> Facts:
    return Facts("2024-06-01", files, small, rows, rows * 1000, designated, rewritten)


def test_many_small_files_are_compacted_at_the_cost_the_model_estimates(tmp_path: Path) -> None:
    plan = decide(facts(), POLICY, model(tmp_path))
    assert plan.action == "compact" and plan.estimated_seconds == pytest.approx(2e-4 * 200_000 + 1.0)
    assert "2000 small files" in plan.reason


@pytest.mark.parametrize(("f", "policy", "reason"), [
    (facts(small=99), POLICY, "99 small files, under 100"),
    (facts(files=1, small=1), Policy(small_files=1), "one file: nothing to merge"),
    (facts(), Policy(small_files=100, low_disk=True), "the disk is low: compaction waits"),
    (facts(files=0, small=0, rows=0), POLICY, "empty"),
])
def test_nothing_is_done_under_the_threshold_with_a_single_file_on_a_low_disk_or_empty(
        tmp_path: Path, f: Facts, policy: Policy, reason: str) -> None:
    plan = decide(f, policy, model(tmp_path))
    assert plan.action == "none" and reason in plan.reason and plan.estimated_seconds == 0


def test_a_container_whose_every_row_is_designated_is_dropped_even_with_many_small_files(tmp_path: Path) -> None:
    assert decide(facts(designated=200_000), POLICY, model(tmp_path)).action == "drop"


def test_retention_chooses_delete_or_copy_by_cost_and_copy_when_it_also_compacts(tmp_path: Path) -> None:
    m = model(tmp_path)
    # 60% designated in one partial file of 1,000 rows: delete (0.1 s) beats copy (9 s)
    few = facts(files=10, small=10, designated=120_000, rewritten=1_000)
    plan = decide(few, POLICY, m)
    assert plan.action == "delete" and plan.estimated_seconds == pytest.approx(0.1)
    # the same with 2,000 small files: copy, which writes them into few files as it purges
    plan = decide(facts(designated=120_000, rewritten=1_000), POLICY, m)
    assert plan.action == "copy" and "copy compacts them too" in plan.reason
    assert plan.estimated_seconds == pytest.approx(1e-4 * 80_000 + 1.0)
    # spread over every file: copy by cost
    assert decide(facts(files=10, small=10, designated=180_000, rewritten=200_000), POLICY, m).action == "copy"


def test_retention_under_the_purge_threshold_waits_unless_the_disk_is_low(tmp_path: Path) -> None:
    m = model(tmp_path)
    some = facts(files=10, small=10, designated=1_000, rewritten=1_000)  # 0.5% designated
    assert decide(some, POLICY, m).action == "none"
    plan = decide(some, Policy(small_files=100, low_disk=True), m)
    assert plan.action == "delete" and plan.reason.startswith("low disk, retention")
    # with many small files, under the threshold: compacted, the designated rows kept for later
    assert decide(facts(designated=1_000, rewritten=1_000), POLICY, m).action == "compact"


def test_a_container_holding_a_bulk_not_yet_published_is_not_purged_but_may_be_compacted(tmp_path: Path) -> None:
    # Its bulk's owner (or the recovery that finishes it) needs its files where they are: a purge would
    # drop or rewrite them; a compaction carries them by name (mqbridge.maintenance.compaction.compactor)
    m = model(tmp_path)
    held = ("orders-ab12cd34-00000007",)
    for designated in (200_000, 120_000):  # drop; delete or copy
        plan = decide(Facts("2024-06-01", 2000, 2000, 200_000, 1, designated, 1_000, held), POLICY, m)
        assert plan.action == "none" and "holds files of bulk orders-ab12cd34-00000007" in plan.reason
        assert plan.reason.startswith("retention")  # what it would have done, and why it waits
    assert decide(Facts("2024-06-01", 2000, 2000, 200_000, 1, unpublished=held), POLICY, m).action == "compact"


def test_compaction_learns_its_own_row_cost_and_reads_older_cost_files(tmp_path: Path) -> None:
    path = tmp_path / "purge_costs.json"
    # a cost file written before compaction existed
    path.write_text(json.dumps({"delete_row_seconds": 1e-4, "copy_row_seconds": 1e-4, "container_seconds": 1.0,
                                "runs": 3}))
    m = CostModel(path)
    assert m.coefficients.compact_row_seconds == DEFAULT_COMPACT_ROW_SECONDS
    estimate = m.compact_seconds(100_000)
    m.learn("compact", estimate * 3, rows_copied=100_000)  # took three times the estimate
    learned = json.loads(path.read_text())
    assert learned["compact_row_seconds"] > DEFAULT_COMPACT_ROW_SECONDS and learned["copy_row_seconds"] == 1e-4
    assert learned["runs"] == 4 and estimate < CostModel(path).compact_seconds(100_000) < estimate * 3
