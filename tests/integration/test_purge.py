"""Purge on a real local Spark: the strategy the cost model picks, the survivors it leaves
(byte-identical, still ordered by put_timestamp), learning, and `mqbridge purge` itself."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from mqbridge.counters import Counters
from mqbridge.landing.containers import containers
from mqbridge.landing.rows import LANDED_COLUMNS
from mqbridge.maintenance.engine.costs import CostModel
from mqbridge.maintenance.engine.swap import WORK
from mqbridge.maintenance.purge import Designation, Purger, PurgeScheduler, due
from tests.support.processes import mqbridge
from tests.support.purge import BULKS, ROWS, T0, land_container, purge_bridge

pytestmark = pytest.mark.integration

#: Every tenth message survives, the rest is designated, spread over every file.
NINETY_PERCENT = "cast(substring(msg_id, 2) AS INT) % 10 != 0"


def rows_of(spark: Any, table: Path) -> dict[str, tuple[Any, ...]]:
    """Every row as a reader sees it, all columns, by msg_id."""
    return {r.msg_id: tuple(r) for r in spark.read.parquet(str(table)).collect()} if table.exists() else {}


def files_state(table: Path) -> list[tuple[str, int, int]]:
    return sorted((str(p.relative_to(table)), p.stat().st_size, p.stat().st_mtime_ns)
                  for p in table.rglob("*") if p.is_file())


def fixed_costs(tmp_path: Path) -> CostModel:
    """An operator's coefficients: equal per-row costs, no fixed container cost (a container of
    1,000 rows is far below the size where a real container cost stops mattering)."""
    return CostModel(tmp_path / "state" / "purge_costs.json", delete_row_seconds=1e-5, copy_row_seconds=1e-5,
                     container_seconds=0.0)


@pytest.mark.parametrize(("designation", "designated", "strategy"), [
    (Designation(where=NINETY_PERCENT), 900, "copy"),
    (Designation(cutoff=T0 + timedelta(minutes=50)), 50, "delete"),
    (Designation(cutoff=T0 + timedelta(days=1)), 1000, "drop"),
    (Designation(cutoff=T0 + timedelta(days=1)), 1000, "drop the last"),
])
def test_the_cost_model_picks_the_strategy_and_only_survivors_remain(
        spark: Any, tmp_path: Path, designation: Designation, designated: int, strategy: str) -> None:
    # Given a container of 1,000 rows in 10 files
    last = strategy == "drop the last"
    strategy = strategy.removesuffix(" the last")
    table = land_container(spark, tmp_path / "landing", tmp_path / "state",
                           next_day=5 if strategy == "drop" and not last else 0)
    before = rows_of(spark, table)
    files_before = files_state(table)
    purger = Purger(spark, fixed_costs(tmp_path), counters=Counters())

    # When the purge is planned, nothing changes (what --dry-run prints)
    [plan] = purger.plan(table, designation)
    assert (plan.designated, plan.rows, plan.estimate.strategy) == (designated, ROWS, strategy)
    assert files_state(table) == files_before

    # When it runs
    [result] = list(purger.run([plan], designation))

    # Then exactly the survivors remain, every column byte-identical
    after = rows_of(spark, table)
    survivors = {k: v for k, v in before.items() if not _designated(k, designation)}
    assert len(survivors) == len(before) - designated
    assert after == survivors
    assert result.strategy == strategy and result.rows_deleted == designated
    # rows still ordered by put_timestamp in every file; nothing of the purge left behind
    for c in containers(table):
        for path in c.files:
            stamps = pq.read_table(path, columns=["put_timestamp"]).column(0).to_pylist()
            assert stamps == sorted(stamps)
    assert not (table / WORK).exists()
    if strategy == "drop" and not last:
        assert not (table / "put_date=2024-06-01").exists()
    if strategy == "drop" and last:  # an empty container stays: readers still get the table's schema
        assert [c.rows for c in containers(table)] == [0]
        assert spark.read.parquet(str(table)).columns == list(LANDED_COLUMNS)
    if strategy == "drop":
        assert purger.counters.total("purge_containers_dropped") == 1
    if strategy == "delete":  # only the one file holding designated rows was rewritten
        assert len(containers(table)[0].files) == BULKS
    if strategy == "copy":  # the survivors were compacted into one file
        assert len(containers(table)[0].files) == 1
    assert purger.counters.total("purge_rows_deleted", strategy=strategy) == designated


def _designated(msg_id: str, designation: Designation) -> bool:
    if msg_id.startswith("d"):  # the next day's rows
        return False
    n = int(msg_id[1:])
    if designation.where == NINETY_PERCENT:
        return n % 10 != 0
    assert designation.cutoff is not None
    return T0 + timedelta(minutes=n) < designation.cutoff


def test_learned_costs_move_towards_the_measured_ones_and_an_operator_value_overrides(
        spark: Any, tmp_path: Path) -> None:
    # Given a container and a cost model with nothing learned yet
    table = land_container(spark, tmp_path / "landing", tmp_path / "state")
    costs = tmp_path / "state" / "purge_costs.json"
    model = CostModel(costs)
    purger = Purger(spark, model)
    designation = Designation(where=NINETY_PERCENT)

    for _ in range(2):
        # When a copy runs
        [plan] = purger.plan(table, designation, "copy")
        before = plan.estimate.copy_seconds
        [result] = list(purger.run([plan], designation))
        # Then the same container's estimate is closer to what was measured than before
        again = model.estimate(plan.rows, plan.designated, 0).copy_seconds
        assert abs(again - result.seconds) < abs(before - result.seconds)
        designation = Designation(where="false OR msg_id = 'm10'")  # next round: one row of the rest
    # and the learned coefficients are kept in state_dir, for the next process
    saved = json.loads(costs.read_text())
    assert saved["runs"] == 2
    assert CostModel(costs).coefficients == model.coefficients

    # Given an operator's per-row copy cost: it is used as given, the learned fixed cost is kept
    operator = CostModel(costs, copy_row_seconds=0.5)
    estimate = operator.estimate(rows=11, designated=1, rows_rewritten=0)
    assert estimate.copy_seconds == pytest.approx(0.5 * 10 + model.coefficients.container_seconds)


def test_purge_command_dry_run_changes_nothing_then_purges_by_retention(spark: Any, tmp_path: Path) -> None:
    # Given a landed container and a configuration whose type keeps 1 day... of 2024
    land_container(spark, tmp_path / "landing", tmp_path / "state")
    table = tmp_path / "landing" / "orders"
    config = (purge_bridge()
              .set("purge", delete_row_seconds=0.00001, copy_row_seconds=0.00001, container_seconds=0)
              .set("types.orders", retention="1d")
              .write(tmp_path / "bridge.toml"))
    files_before = files_state(table)

    # When `mqbridge purge --dry-run` runs
    proc = mqbridge("purge", "--config", str(config), "--dry-run")
    out, _ = proc.communicate(timeout=120)

    # Then it prints the plan (every row is older than a day: the container would be dropped) and
    # changes nothing
    assert proc.returncode == 0, out
    assert re.search(r"put_date=2024-06-01  designated 1000/1000  estimated delete \d+\.\d{3}s  "
                     r"copy-and-drop \d+\.\d{3}s  strategy drop$", out, re.M), out
    assert files_state(table) == files_before
    assert not (tmp_path / "state" / "purge_costs.json").exists()

    # When it runs for real with --where: every tenth row survives
    proc = mqbridge("purge", "--config", str(config), "--type", "orders", "--where", NINETY_PERCENT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert re.search(r"designated 900/1000 .* strategy copy  measured \d+\.\d{3}s$", out, re.M), out
    assert sorted(rows_of(spark, table)) == sorted(f"m{n}" for n in range(0, ROWS, 10))

    # and the ledger's check knows the landed files it no longer finds were removed by that purge
    assert verify_ledger(config) == ("verify: OK (10 published bulks, 10 files; "
                                     "10 removed since by purges of their containers)")

    # and a --where that is not valid SQL for the table is refused with the reason
    proc = mqbridge("purge", "--config", str(config), "--where", "no_such_column = 1")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1 and "cannot designate rows" in out and "no_such_column" in out, out


PURGE_CONFIG = purge_bridge().set("purge").set("types.orders")


@pytest.mark.parametrize(("failpoint", "args", "survive"), [
    ("purge_before_swap", ["--where", NINETY_PERCENT, "--strategy", "copy"], 100),
    ("purge_after_swap", ["--where", NINETY_PERCENT, "--strategy", "copy"], 100),
    ("purge_after_swap", ["--where", NINETY_PERCENT, "--strategy", "delete"], 100),
    ("purge_after_swap", ["--older-than", "1d"], 5),  # drop
])
def test_a_purge_killed_mid_run_leaves_a_readable_table_and_is_finished_at_the_next_start(
        spark: Any, tmp_path: Path, failpoint: str, args: list[str], survive: int) -> None:
    # Given a container of 1,000 rows (for the drop: and 5 rows of the next day, which survive)
    table = land_container(spark, tmp_path / "landing", tmp_path / "state", next_day=5 if survive == 5 else 0)
    config = PURGE_CONFIG.write(tmp_path / "bridge.toml")
    before = rows_of(spark, table)

    # When `mqbridge purge` is killed (SIGKILL) at the failpoint
    proc = mqbridge("purge", "--config", str(config), *args, failpoint=failpoint)
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == -9 and f"failpoint {failpoint} reached" in out, out

    # Then the table is readable at once: the old container before the swap, the new one after
    seen = rows_of(spark, table)
    expected = {k: v for k, v in before.items()
                if k.startswith("d") or (survive == 100 and int(k[1:]) % 10 == 0)}
    assert seen == (before if failpoint == "purge_before_swap" else expected)
    assert (table / WORK).is_dir()  # what the killed run left, hidden from readers

    # When the next purge starts (recovery first), with nothing designated
    proc = mqbridge("purge", "--config", str(config), "--where", "false")
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, out

    # Then the killed run was rolled back (before the swap) or finished (after); nothing is left over
    assert rows_of(spark, table) == (before if failpoint == "purge_before_swap" else expected)
    assert not (table / WORK).exists()
    assert [p.name for p in table.rglob("_mqbridge_purge_*")] == []
    if failpoint == "purge_before_swap":  # and purging again now leaves exactly the survivors
        proc = mqbridge("purge", "--config", str(config), *args)
        out, _ = proc.communicate(timeout=180)
        assert proc.returncode == 0, out
        assert rows_of(spark, table) == expected
    # and the ledger's check knows which landed files the purge removed
    assert verify_ledger(config).startswith("verify: OK ("), verify_ledger(config)


def verify_ledger(config: Path) -> str:
    """`mqbridge ledger --verify`'s verdict line (the command must succeed)."""
    proc = mqbridge("ledger", "--config", str(config), "--verify")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    return next(line for line in out.splitlines() if line.startswith("verify:"))


def scheduler(tmp_path: Path, spark: Any, cutoff: datetime, threshold: float) -> PurgeScheduler:
    """The bridge's scheduled purge for a type whose retention ends at `cutoff` now."""
    retention = int((datetime.now(timezone.utc) - cutoff).total_seconds())
    config = (purge_bridge(queue="/queue/unused")
              .set("bridge", name="purge-threshold", state_dir=tmp_path / "state", plugin_dirs=None)
              .set("monitoring", listen="").set("spark", master=None, warehouse=tmp_path / "landing")
              .set("types.orders", retention=f"{retention}s")
              .set("purge", interval="1h", threshold=threshold, delete_row_seconds=1e-5,
                   copy_row_seconds=1e-5, container_seconds=0.0)
              .set("sources.amq", host="127.0.0.1").parse())
    return PurgeScheduler(config, lambda: spark, Counters())


def test_the_scheduled_retention_purges_a_container_only_past_the_threshold(spark: Any, tmp_path: Path) -> None:
    # Given one container of 1,000 rows put one a minute from midnight on, and a retention that
    # designates the first 240 (put before 04:00): 24% of the container
    table = land_container(spark, tmp_path / "landing", tmp_path / "state")
    before = files_state(table)
    cutoff = T0 + timedelta(hours=4, seconds=-30)  # (whole seconds of retention from now: a margin)
    # When a scheduled round runs with the default threshold (more designated than not)
    default = scheduler(tmp_path, spark, cutoff, 0.5)
    default.run_round()
    # Then the container is left for a later round, untouched, and the skip is counted
    assert files_state(table) == before
    assert default.counters.total("purge_containers_skipped") == 1
    assert default.counters.total("purge_containers") == 0
    # When the threshold is below the designated share
    low = scheduler(tmp_path, spark, cutoff, 0.2)
    low.run_round()
    # Then the designated rows are purged and every other row is kept
    assert sorted(rows_of(spark, table)) == sorted(f"m{n}" for n in range(240, ROWS))
    assert low.counters.total("purge_containers_skipped") == 0 and low.counters.total("purge_containers") == 1


def test_a_container_is_due_past_the_threshold_or_when_every_row_is_designated() -> None:
    assert not due(0, 10, 0.0)
    assert not due(5, 10, 0.5) and due(6, 10, 0.5)
    assert due(10, 10, 0.99) and due(1, 1, 0.5)
    assert due(1, 10, 0.0)
