"""The Delta purge's choice of strategy per partition (drop, delete or copy) from the learned cost
model, with and without deletion vectors; what Delta tables may now configure (a retention,
`[compaction] interval`, `[purge] vacuum_retention`: the refusals of the first two are lifted); and
the small helpers the Delta purge and compaction stand on (a conflict is recognised, a path is
quoted, VACUUM's retention in hours)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mqbridge.config.base import parse_duration
from mqbridge.maintenance.delta.purger import conflict
from mqbridge.maintenance.delta.strategy import choose, delete_rows
from mqbridge.maintenance.delta.table import RETENTION_CHECK, sql_name, vacuum
from mqbridge.maintenance.engine.costs import CostModel
from tests.support.configs import orders


def model(tmp_path: Path, **costs: float) -> CostModel:
    """An operator's coefficients (nothing learnt): per-row costs equal unless given, no margin."""
    settings = {"delete_row_seconds": 1e-4, "copy_row_seconds": 1e-4, "container_seconds": 0.5, **costs}
    return CostModel(tmp_path / "purge_costs.json", **settings)


def test_a_partition_whose_rows_are_all_designated_is_dropped_whatever_is_forced(tmp_path: Path) -> None:
    for forced in ("auto", "delete", "copy"):
        assert choose(model(tmp_path), 500, 500, 500, deletion_vectors=False, forced=forced).strategy == "drop"


def test_without_deletion_vectors_delete_costs_the_rows_of_the_files_it_rewrites(tmp_path: Path) -> None:
    # Given 10,000 rows of which 9,000 are designated, spread over every file: delete rewrites all
    # 10,000 rows (1.0 s), copy writes the 1,000 survivors (0.1 s) plus a partition (0.5 s)
    estimate = choose(model(tmp_path), 10_000, 9_000, 10_000, deletion_vectors=False)
    assert (estimate.strategy, estimate.delete_seconds, estimate.copy_seconds) == ("copy", 1.0, pytest.approx(0.6))
    # When the designated rows sit in a few files only (1,000 rows rewritten): delete is cheaper
    assert choose(model(tmp_path), 10_000, 900, 1_000, deletion_vectors=False).strategy == "delete"


def test_with_deletion_vectors_delete_costs_the_designated_rows_only(tmp_path: Path) -> None:
    # Given 2,000 of 10,000 rows designated, spread over every file, and a cheap partition (0.1 s)
    costs = model(tmp_path, container_seconds=0.1)
    assert delete_rows(2_000, 10_000, deletion_vectors=True) == 2_000
    # Then without deletion vectors delete rewrites all 10,000 rows (1.0 s): copy (0.8 + 0.1 s) wins
    assert choose(costs, 10_000, 2_000, 10_000, deletion_vectors=False).strategy == "copy"
    # and with them delete writes vectors for the 2,000 rows (0.2 s): delete wins
    assert choose(costs, 10_000, 2_000, 10_000, deletion_vectors=True).strategy == "delete"
    # and with 9,000 designated copy (0.1 + 0.1 s) is cheaper than marking them (0.9 s)
    assert choose(costs, 10_000, 9_000, 10_000, deletion_vectors=True).strategy == "copy"


def test_the_choice_follows_what_the_model_learnt(tmp_path: Path) -> None:
    # Given a model without operator values (the defaults): 90,000 of 100,000 rows designated over
    # every file, copy is cheaper
    learnt = CostModel(tmp_path / "purge_costs.json")
    before = choose(learnt, 100_000, 90_000, 100_000, deletion_vectors=False).strategy
    # When copies turn out to be very slow (0.1 s per surviving row)
    for _ in range(8):
        learnt.learn("copy", 400.0, rows_copied=4_000)
    # Then delete is chosen for the same partition
    assert (before, choose(learnt, 100_000, 90_000, 100_000, deletion_vectors=False).strategy) == ("copy", "delete")


def test_a_forced_strategy_is_used_and_an_unknown_one_refused(tmp_path: Path) -> None:
    assert choose(model(tmp_path), 10_000, 9_000, 10_000, deletion_vectors=False, forced="delete").strategy == "delete"
    with pytest.raises(ValueError, match="one of auto, delete, copy"):
        choose(model(tmp_path), 10, 1, 1, deletion_vectors=False, forced="drop")


def delta_orders() -> Any:
    return orders().set("spark", table_format="delta")


def test_a_delta_type_may_have_a_retention_and_scheduled_compaction() -> None:
    config = (delta_orders().set("types.orders", retention="30d").set("compaction", interval="1h")
              .set("purge", vacuum_retention="1d").parse())
    assert config.types["orders"].retention == parse_duration("30d")
    assert config.compaction.interval == parse_duration("1h")
    assert config.purge.vacuum_retention == parse_duration("1d")


def test_vacuum_retention_defaults_to_deltas_seven_days() -> None:
    assert orders().parse().purge.vacuum_retention == 7 * 86400


def test_a_conflict_between_commits_is_recognised_and_nothing_else() -> None:
    class ConcurrentAppendException(Exception):
        pass

    assert conflict(ConcurrentAppendException("Files were added to partition [put_date=2024-06-01]"))
    assert conflict(RuntimeError("[DELTA_CONCURRENT_DELETE_READ] This transaction attempted to read ..."))
    assert not conflict(RuntimeError("[PATH_NOT_FOUND] Path does not exist"))


def test_a_table_path_is_quoted_for_spark_sql() -> None:
    assert sql_name(Path("/w/odd`name")) == "delta.`/w/odd``name`"


class RecordingSpark:
    """What `vacuum` asks of a session: SQL statements and the settings around them."""

    def __init__(self) -> None:
        self.statements: list[tuple[str, str | None]] = []
        self.settings: dict[str, str] = {}
        self.conf = self

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.settings.get(key, default)

    def set(self, key: str, value: str) -> None:
        self.settings[key] = value

    def unset(self, key: str) -> None:
        self.settings.pop(key, None)

    def sql(self, statement: str) -> Any:
        self.statements.append((statement, self.settings.get(RETENTION_CHECK)))
        return self

    def collect(self) -> list[Any]:
        return []


def test_vacuum_below_deltas_default_turns_its_safety_check_off_for_that_command_only() -> None:
    spark = RecordingSpark()
    vacuum(spark, Path("/w/t"), 0)
    vacuum(spark, Path("/w/t"), 1800)
    vacuum(spark, Path("/w/t"), 7 * 86400)
    assert spark.statements == [("VACUUM delta.`/w/t` RETAIN 0 HOURS", "false"),
                                ("VACUUM delta.`/w/t` RETAIN 0.500000 HOURS", "false"),
                                ("VACUUM delta.`/w/t` RETAIN 168 HOURS", None)]
    assert RETENTION_CHECK not in spark.settings
