"""A day of bulks compacted: a container of many small files, as the bridge lands them bulk by bulk
(the real landing and ledger; pyarrow writes each bulk), becomes a few files sorted by
put_timestamp across the container, optionally while more bulks keep landing into it.

    .venv/bin/python bench/compaction.py [--files 2000] [--rows 50] [--target 128MB] [--landing] [--keep]

Prints: the time to land the day; the plan (files, action, the cost model's estimate); the
compaction's time, files before/after and files carried (landed during it); and for a time-range
query of one minute, before and after: the files Spark lists for it (`DataFrame.inputFiles`, which
prunes only by partition), the files whose put_timestamp statistics overlap the range (the files
whose rows Spark's Parquet filter must read; of the others it reads the footer only), and the
query's time. `mqbridge ledger --verify`'s verdict at the end. Not a test; numbers for
docs/compaction.md.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mqbridge.config import load_config  # noqa: E402
from mqbridge.landing.containers import data_files  # noqa: E402
from mqbridge.landing.session import create_spark_session  # noqa: E402
from mqbridge.maintenance.rounds import Compaction  # noqa: E402
from tests.support.compaction import T0, bulk_of, compact_bridge, files_overlapping, lander  # noqa: E402


def query(spark: Any, table: Path, low: Any, high: Any) -> tuple[int, int, float]:
    """(files listed, rows, seconds) of a read of put_timestamp in [low, high]."""
    from pyspark.sql import functions as F

    start = time.perf_counter()
    df = spark.read.parquet(str(table)).where(F.col("put_timestamp").between(low, high))
    rows = df.count()
    return len(df.inputFiles()), rows, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=2000, help="bulks (small files) in the day")
    parser.add_argument("--rows", type=int, default=50, help="rows per bulk")
    parser.add_argument("--target", default="128MB", help="[compaction] target_file_size")
    parser.add_argument("--landing", action="store_true", help="keep landing bulks while it compacts")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="mqbridge-bench-compaction-"))
    spark = create_spark_session(master="local[2]", app_name="bench-compaction",
                                 conf={"spark.sql.shuffle.partitions": "4"})
    try:
        config = (compact_bridge(small_files=min(100, args.files)).set("compaction", target_file_size=args.target)
                  .write(root / "bridge.toml"))
        table = root / "landing" / "orders"
        container = table / "put_date=2024-06-01"
        total = args.files * args.rows
        step = 86_000 / total  # seconds between two puts: the rows span the day
        with lander(spark, root / "landing", root / "state") as executor:
            start = time.perf_counter()
            for b in range(args.files):  # each bulk a slice of the day, interleaved with the others
                executor.execute(bulk_of(list(range(b, total, args.files)), body=bytes(200), step=step))
            took = time.perf_counter() - start
            print(f"landed {args.files} bulks of {args.rows} rows ({total} rows) in {took:.1f}s: "
                  f"{len(data_files(container))} files, {sum(p.stat().st_size for p in data_files(container))} bytes")
            low, high = T0 + timedelta(hours=12), T0 + timedelta(hours=12, minutes=1)
            query(spark, table, low, high)  # warm up
            before = (*query(spark, table, low, high), files_overlapping(container, low, high))
            compaction = Compaction(load_config(config, secrets=False), spark)
            [(path, types)] = compaction.tables().items()
            planned = compaction.plan(path, types, low_disk=False)
            [plan] = planned.plans
            print(f"plan: {plan.facts.files} files ({plan.facts.small_files} small), action {plan.action}, "
                  f"estimated {plan.estimated_seconds:.1f}s ({plan.reason})")
            stop, landed = threading.Event(), [0]

            def keep_landing() -> None:
                n = 0
                while not stop.is_set():
                    executor.execute(bulk_of(range(n, n + args.rows), prefix="live", body=bytes(200), step=step))
                    landed[0] += 1
                    n += args.rows
            landing = threading.Thread(target=keep_landing, daemon=True)
            if args.landing:
                landing.start()
            start = time.perf_counter()
            try:
                [done] = list(compaction.carry_out(planned))
            finally:
                seconds = time.perf_counter() - start
                stop.set()
                if args.landing:
                    landing.join()
        after = (*query(spark, table, low, high), files_overlapping(container, low, high))
        print(f"compacted in {seconds:.1f}s: {plan.facts.files} files -> {done.files_after} files at the swap; "
              f"{landed[0]} bulks landed during the run, {len(data_files(container))} files now")
        print(f"one-minute query, before: {before[0]} files listed, {before[3]} with rows in range, "
              f"{before[1]} rows, {before[2]:.2f}s")
        print(f"one-minute query, after:  {after[0]} files listed, {after[3]} with rows in range, "
              f"{after[1]} rows, {after[2]:.2f}s")
        proc = subprocess.run([sys.executable, "-m", "mqbridge", "ledger", "--config", str(config), "--verify"],
                              capture_output=True, text=True, check=False)
        print(next((line for line in proc.stdout.splitlines() if line.startswith("verify:")), proc.stdout))
    finally:
        spark.stop()
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
