"""Compaction on a real local Spark: a container of small files landed by the real landing becomes a
few files sorted by put_timestamp across the container, every row kept (and a bulk landed during the
compaction carried over), the ledger's check still passes; and `mqbridge compact` killed inside the
swap loses and duplicates nothing and is finished by the next run."""

from __future__ import annotations

import collections
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from mqbridge.counters import Counters
from mqbridge.landing.containers import data_files
from mqbridge.maintenance import Compaction, CompactionScheduler, Compactor
from mqbridge.maintenance.engine.swap import WORK
from mqbridge.table_formats import format_named
from tests.support.compaction import (
    T0,
    bulk_of,
    compact_bridge,
    files_overlapping,
    land_small_files,
    lander,
    sorted_across_files,
)
from tests.support.processes import mqbridge

pytestmark = pytest.mark.integration

FILES, PER_FILE = 30, 40


def rows_of(spark: Any, table: Path) -> collections.Counter[tuple[Any, ...]]:
    """Every row as a reader sees it, all columns, counted (a duplicate counts twice)."""
    return collections.Counter(tuple(tuple(sorted(v.items())) if isinstance(v, dict) else v for v in r)
                               for r in spark.read.parquet(str(table)).collect())


def verify_ledger(config: Path, bulks: int) -> None:
    """`mqbridge ledger --verify` succeeds and has compared the rows of all `bulks` published bulks,
    those in compacted containers too (by bulk_id)."""
    proc = mqbridge("ledger", "--config", str(config), "--verify")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert f"row counts   {bulks} bulks hold one row per identity\n" in out and "verify: OK (" in out, out


def test_a_container_of_small_files_becomes_few_files_sorted_across_it_and_keeps_every_row(
        spark: Any, tmp_path: Path) -> None:
    # Given a container of 30 small files landed bulk by bulk, each spanning the whole day
    with lander(spark, tmp_path / "landing", tmp_path / "state") as executor:
        land_small_files(executor, FILES, PER_FILE)
        table = tmp_path / "landing" / "orders"
        container = table / "put_date=2024-06-01"
        before = rows_of(spark, table)
        hour = (T0 + timedelta(minutes=5), T0 + timedelta(minutes=6))
        assert files_overlapping(container, *hour) == FILES  # a time-range read reads every file
        config_file = (compact_bridge(small_files=10).set("compaction", target_file_size="16KB", interval="1h")
                       .write(tmp_path / "bridge.toml"))
        from mqbridge.config import load_config

        compaction = Compaction(load_config(config_file, secrets=False), spark)

        # When it is planned: compact, estimated by the cost model; nothing changes
        [(path, types)] = compaction.tables().items()
        planned = compaction.plan(path, types, low_disk=False)
        [plan] = planned.plans
        assert (plan.action, plan.facts.files, plan.facts.small_files, plan.facts.rows) == \
            ("compact", FILES, FILES, FILES * PER_FILE)
        assert plan.estimated_seconds > 0 and len(data_files(container)) == FILES
        # and with the disk low it waits (it needs room for a second copy until the swap)
        assert compaction.plan(path, types, low_disk=True).plans[0].action == "none"

        # When it runs while a bulk lands into the container after Spark read it
        landed_during = bulk_of(range(500, 510), prefix="late")  # put inside the day

        class LandingMeanwhile(Compactor):
            def _write(self, *args: Any) -> list[Path]:
                written = super()._write(*args)
                executor.execute(landed_during)  # the real publication, under the table's lock
                return written

        parquet = compaction.table_compaction(format_named("parquet"))  # the format's part of the round
        parquet.compactor = LandingMeanwhile(spark, compaction.factory.model, 16 << 10)  # type: ignore[attr-defined]
        [done] = list(compaction.carry_out(planned))

    # Then every row is there once, the late bulk's too, and nothing of the run is left
    after = rows_of(spark, table)
    late = [r for r in after if r[0].startswith("late")]
    assert len(late) == 10 and sum(after.values()) == sum(before.values()) + 10
    assert after - collections.Counter({r: 1 for r in late}) == before  # lost 0, duplicated 0, unchanged
    assert not (table / WORK).exists() and not list(table.rglob("_mqbridge_purge_*"))
    # a few files sorted by put_timestamp across the container, the late bulk's file carried as it was
    files = data_files(container)
    carried = [p for p in files if pq.read_table(p, columns=["msg_id"]).column(0)[0].as_py().startswith("late")]
    assert done.files_after == len(files) and 2 <= len(files) < 10 and len(carried) == 1
    assert sorted_across_files([p for p in files if p not in carried])
    # a read of one minute now reads the rows of one file (plus the carried one), not of all 30
    assert files_overlapping(container, *hour) <= 2

    # When the bridge's scheduled round runs after twelve more bulks landed on the next day
    with lander(spark, tmp_path / "landing", tmp_path / "state") as executor:
        for b in range(12):
            executor.execute(bulk_of(range(86_400 + 10 * b, 86_400 + 10 * b + 10), prefix="next"))
    counters = Counters()
    scheduler = CompactionScheduler(compaction.config, lambda: spark, counters)
    scheduler.run_round()
    # Then the next day's container is compacted, the first one (under 10 files now) left alone, and it shows
    next_day = data_files(table / "put_date=2024-06-02")
    assert len(next_day) < 12 and sorted_across_files(next_day) and data_files(container) == files
    assert scheduler.status_fields()["compaction"]["last_round"] == {"compact": 1}
    assert [counters.total(n) for n in ("compaction_runs", "compaction_containers", "compaction_files_removed",
                                        "compaction_rows")] == [1, 1, 12, 120]
    assert counters.gauge("compaction_low_disk") == 0
    # and the ledger's check accounts for the files the compactions replaced
    verify_ledger(config_file, FILES + 1 + 12)


def test_compact_killed_inside_the_swap_loses_nothing_and_the_next_run_finishes(spark: Any, tmp_path: Path) -> None:
    # Given a container of 30 small files landed by the real landing
    with lander(spark, tmp_path / "landing", tmp_path / "state") as executor:
        land_small_files(executor, FILES, PER_FILE)
    table = tmp_path / "landing" / "orders"
    before = rows_of(spark, table)
    config = compact_bridge().write(tmp_path / "bridge.toml")

    # When `mqbridge compact --dry-run` runs: the plan per container, nothing changed
    proc = mqbridge("compact", "--config", str(config), "--dry-run")
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, out
    assert f"put_date=2024-06-01     {FILES} files ({FILES} small)" in out and "action compact" in out, out
    assert len(data_files(table / "put_date=2024-06-01")) == FILES

    # When `mqbridge compact` is killed (SIGKILL) inside the swap
    proc = mqbridge("compact", "--config", str(config), failpoint="compact_mid_swap")
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == -9 and "failpoint compact_mid_swap reached" in out, out

    # Then the table reads the new container at once: lost 0, duplicated 0
    assert rows_of(spark, table) == before
    assert (table / WORK).is_dir()  # what the killed run left, hidden from readers

    # When it runs again: it finishes the killed run (rolled forward) and completes
    proc = mqbridge("compact", "--config", str(config))
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, out
    assert rows_of(spark, table) == before
    assert not (table / WORK).exists() and not list(table.rglob("_mqbridge_purge_*"))
    assert len(data_files(table / "put_date=2024-06-01")) == 1  # 30 small files became one
    verify_ledger(config, FILES)
    shutil.rmtree(tmp_path / "landing")
