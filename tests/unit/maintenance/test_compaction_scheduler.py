"""What a bridge with `[compaction] interval` shows of its compaction: the /status object and the
`mqbridge_compaction_*` series that exist from the start."""

from __future__ import annotations

from pathlib import Path

from mqbridge.counters import Counters
from mqbridge.maintenance.compaction_scheduler import CompactionScheduler
from mqbridge.monitoring.metrics import HELP, counter_families, initialize_series
from tests.support.purge import purge_bridge


def test_status_and_metrics_of_the_scheduled_compaction(tmp_path: Path) -> None:
    config = (purge_bridge().set("bridge", state_dir=tmp_path / "state").set("spark", warehouse=tmp_path / "w")
              .set("types.orders").set("compaction", interval="1h", small_files=50, min_free_disk="1GB")
              .set("sources.amq", host="127.0.0.1").parse())
    counters = Counters()
    initialize_series(counters, [], ledger=True, compaction=True)
    scheduler = CompactionScheduler(config, lambda: None, counters)

    status = scheduler.status_fields()["compaction"]
    assert status == {"interval": 3600.0, "rounds": 0, "last_error": None, "low_disk": False, "last_round": {},
                      "small_files": 50, "small_file_size": 16 << 20, "target_file_size": 128 << 20,
                      "min_free_disk": 1 << 30}
    names = {family.name for family in counter_families(counters)}
    assert {"mqbridge_compaction_runs", "mqbridge_compaction_failures", "mqbridge_compaction_low_disk"} <= names
    # every compaction series a run can create has its help text
    assert {"compaction_containers", "compaction_files_removed", "compaction_files_written", "compaction_rows",
            "compaction_files_carried", "compaction_purged", "compaction_seconds"} <= set(HELP)
