"""Benchmark: Delta commits of raw bulks one after another against pipelined (issue 48), in one
`local[2]` driver as `mqbridge run` starts it for a Delta type, the modes alternated by round.

    .venv/bin/python bench/delta_pipelined.py [--rows 8000] [--bulks 10] [--rounds 4]

  serial  each bulk's whole commit in turn (`delta_commit.raw_job`): its Spark job, then its commit
  pipe    one Spark job at a time (`delta_commit.stage_raw`), each bulk's commit (`StagedCommit.commit`,
          in version order) overlapping the next bulk's job: the bridge's default (`Bulk.files_written`
          frees the type's one write slot once the files are written)
  pipe2   two Spark jobs at a time (`[collector] writes_per_type = 2`), commits in version order

Two threads write in pipe and pipe2, as the collector's two workers do. Each round writes `--bulks`
bulks of `--rows` rows of 1 KB per mode into the mode's own table (made by three serial commits
first); it prints rows/s per round and mode, the medians, and the rows and app id version delta-rs
reads back (every mode must hold every row once).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from delta_txn_commit import ROOT, make_bulk  # noqa: E402

from mqbridge.landing import delta, delta_commit  # noqa: E402
from mqbridge.landing.containers import SORT_COLUMNS  # noqa: E402
from mqbridge.landing.ledger import TableTransaction  # noqa: E402
from mqbridge.landing.rows import IDENTITY_COLUMN, arrow_table  # noqa: E402
from mqbridge.landing.session import create_spark_session  # noqa: E402
from mqbridge.landing.writes.frames import WRITE_OPTIONS  # noqa: E402

APP = "mqbridge:bench-host:1:1"
DAY = datetime(2026, 11, 1, 12, tzinfo=UTC)


class Bench:
    def __init__(self, spark: Any, work: Path, rows: int) -> None:
        self.spark, self.work, self.rows = spark, work, rows
        self._next_row = 0
        self._lock = threading.Lock()

    def bulk_rows(self) -> Any:
        with self._lock:
            first = self._next_row
            self._next_row += self.rows
        return arrow_table(make_bulk(self.rows, first, DAY), list(range(self.rows)))

    def serial(self, table: str, versions: range) -> None:
        for version in versions:
            handoff = self.work / "_staging" / f"s{version}"
            delta_commit.raw_job(self.spark, self.bulk_rows(), handoff, table, tasks=1, groups=1, sort=SORT_COLUMNS,
                                 writer_options=WRITE_OPTIONS, identity=IDENTITY_COLUMN, bulk_id=f"b{version}",
                                 transaction=TableTransaction(APP, version))()
            shutil.rmtree(handoff, ignore_errors=True)

    def pipelined(self, table: str, versions: range, jobs_at_once: int) -> None:
        todo = list(versions)
        taken = threading.Lock()
        jobs = threading.Semaphore(jobs_at_once)
        turn = threading.Condition()
        committed = [versions.start - 1]

        def worker() -> None:
            while True:
                with taken:
                    if not todo:
                        return
                    version = todo.pop(0)
                rows = self.bulk_rows()
                handoff = self.work / "_staging" / f"p{version}"
                with jobs:
                    staged = delta_commit.stage_raw(self.spark, rows, handoff, table, tasks=1, groups=1,
                                                    sort=SORT_COLUMNS, writer_options=WRITE_OPTIONS,
                                                    identity=IDENTITY_COLUMN, bulk_id=f"b{version}")
                assert staged is not None and not staged.changes_metadata
                with turn:
                    turn.wait_for(lambda v=version: committed[0] == v - 1)
                    staged.commit(TableTransaction(APP, version))
                    committed[0] = version
                    turn.notify_all()
                shutil.rmtree(handoff, ignore_errors=True)

        threads = [threading.Thread(target=worker) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=8000)
    parser.add_argument("--bulks", type=int, default=10, help="bulks per mode and round")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    settings = delta.session_conf(ROOT / "jars", {"spark.ui.enabled": "false"})
    print("load before:", os.getloadavg(), flush=True)
    spark = create_spark_session(master="local[2]", app_name="bench-delta-pipelined", conf=settings)
    work = Path(tempfile.mkdtemp(prefix="bench-delta-pipelined-"))
    bench = Bench(spark, work, args.rows)
    modes = {"serial": lambda t, v: bench.serial(t, v), "pipe": lambda t, v: bench.pipelined(t, v, 1),
             "pipe2": lambda t, v: bench.pipelined(t, v, 2)}
    tables = {mode: str(work / mode) for mode in modes}
    rates: dict[str, list[float]] = {mode: [] for mode in modes}
    try:
        for mode in modes:  # the table made, the JVM warm
            bench.serial(tables[mode], range(1, 4))
        first = 4
        for round_no in range(args.rounds):
            versions = range(first, first + args.bulks)
            for mode, write in modes.items():
                start = time.perf_counter()
                write(tables[mode], versions)
                seconds = time.perf_counter() - start
                rates[mode].append(args.bulks * args.rows / seconds)
                print(f"round {round_no} {mode:6s} {rates[mode][-1]:9,.0f} rows/s ({seconds:.1f} s)", flush=True)
            first += args.bulks
        for mode, values in rates.items():
            low, high = min(values), max(values)
            print(f"{mode:6s} median {statistics.median(values):9,.0f} rows/s  [{low:,.0f}, {high:,.0f}]")
        from deltalake import DeltaTable

        expected = (first - 1) * args.rows
        for mode, table in tables.items():
            read = DeltaTable(table)
            ids = read.to_pyarrow_table(columns=["msg_id"]).column("msg_id")
            print(f"{mode:6s} rows {len(ids):,} (distinct {len(set(ids.to_pylist())):,}, expected {expected:,}), "
                  f"app id version {read.transaction_version(APP)}")
        print("load after:", os.getloadavg())
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
