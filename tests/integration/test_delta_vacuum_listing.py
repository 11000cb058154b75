"""Delta's VACUUM (the Delta purge's and compaction's last step) lists a table's files in one Spark job
of `spark.sql.sources.parallelPartitionDiscovery.parallelism` tasks, 10,000 by default: most of every
purge or compaction round's time on a small machine (75 s of a round on 2 cores; 5 s with 2 tasks).
Checked with the session's shared Delta driver (`delta_spark`) and Spark's own status tracker: with the
value the bridge's driver starts with (`mqbridge.landing.delta.DEFAULT_CONF`: the driver host's cores,
under `[spark] conf`) the listing runs that many tasks, not 10,000 (Spark's default, not run here: it
costs a minute).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from mqbridge.landing.delta import DEFAULT_CONF
from tests.support.delta_tables import vacuum_listing_tasks
from tests.support.object_stores import DeltaSpark

pytestmark = pytest.mark.integration

KEY = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
SPARK_DEFAULT = 10_000


def _tasks(delta_spark: DeltaSpark, tmp_path: Path, parallelism: str | None) -> list[int]:
    outcome = delta_spark.run(vacuum_listing_tasks, str(tmp_path / f"t-{uuid.uuid4().hex[:8]}"), parallelism)
    assert outcome["ok"], outcome.get("traceback")
    tasks: list[int] = outcome["value"]
    print(f"{KEY} = {parallelism}: VACUUM in {outcome['seconds']:.1f} s (with the table's writes), stages' tasks "
          f"{tasks}")
    return tasks


def test_vacuum_lists_files_in_as_many_tasks_as_the_bridge_sets_not_10000(
        delta_spark: DeltaSpark, tmp_path: Path) -> None:
    # The bridge's value, and one no other stage of a small table's VACUUM has (its shuffles and
    # snapshots run 1, 2 or 50 tasks), so that the listing's stage is told apart.
    for value in (DEFAULT_CONF[KEY], "3"):
        tasks = _tasks(delta_spark, tmp_path, value)
        assert int(value) in tasks and SPARK_DEFAULT not in tasks, tasks
