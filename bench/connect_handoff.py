"""Benchmark: how a bulk reaches a Spark Connect server — Arrow over gRPC (`createDataFrame`) or the
Parquet handoff file the bridge writes (`mqbridge.landing.handoff`) — in server JVM CPU and wall
seconds per write.

    .venv/bin/python bench/connect_handoff.py [--rows 8000] [--writes 10] [--rounds 2]

Starts a Spark Connect server from pyspark's `sbin/` (local[2]), builds one bulk of 1 KB messages
with the bridge's own `arrow_table`, and writes it `--writes` times each way after 5 warm-up writes,
alternating the two ways `--rounds` times.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mqbridge.landing.rows import SPARK_SCHEMA, arrow_table  # noqa: E402
from mqbridge.landing.session import create_spark_session  # noqa: E402
from mqbridge.message import Bulk, Message  # noqa: E402
from tests.support.spark_servers import SparkConnectServer  # noqa: E402


def bulk_table(rows: int) -> pa.Table:
    bulk = Bulk("bench")
    for i in range(rows):
        bulk.add(Message(msg_id=f"ID:{i:010d}", body=b"%08d" % i + b"x" * 1016, source="bench",
                         destination="/queue/bench", headers={"type": "Order"}))
    return arrow_table(bulk, list(range(rows)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=8000)
    parser.add_argument("--writes", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="mqbridge-connect-bench-"))
    server = SparkConnectServer(base / "connect")
    server.start()
    try:
        spark = create_spark_session(remote=server.url)
        jvm = psutil.Process(server.pid())
        table = bulk_table(args.rows)

        def by_arrow(i: int) -> None:
            (spark.createDataFrame(table).drop("_row", "_identity").coalesce(1).write.mode("append")
             .partitionBy("put_date").parquet(str(base / "by_arrow")))

        def by_file(i: int) -> None:
            handoff = base / f"handoff-{i}"
            handoff.mkdir()
            pq.write_table(table, handoff / "rows.parquet", compression="none", use_dictionary=False,
                           store_schema=False)
            (spark.read.schema(SPARK_SCHEMA).parquet(str(handoff / "rows.parquet")).drop("_row", "_identity")
             .coalesce(1)
             .write.mode("append").partitionBy("put_date").parquet(str(base / "by_file")))
            shutil.rmtree(handoff)

        ways: list[tuple[str, Callable[[int], None]]] = [("arrow over gRPC", by_arrow), ("handoff file", by_file)]
        for n, (name, write) in enumerate(ways * args.rounds):
            for i in range(5):
                write(n * 1000 + i)
            cpu0, t0 = sum(jvm.cpu_times()[:2]), time.perf_counter()
            for i in range(args.writes):
                write(n * 1000 + 100 + i)
            cpu, wall = sum(jvm.cpu_times()[:2]) - cpu0, time.perf_counter() - t0
            print(f"{name:<16} {args.rows:,} rows of 1 KB: {wall / args.writes:.3f} s per write, "
                  f"server JVM {cpu / args.writes:.3f} CPU-s per write", flush=True)
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
