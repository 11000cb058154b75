"""Benchmark: SparkExecutor.execute() on bulks of 1 KB messages, raw and JSON-typed.

    .venv/bin/python bench/spark_write.py [--master local[2]] [--sizes 1000,10000,50000] [--repeat 3]

Warms Spark up with a few small bulks first, then prints, per format and bulk size, the median
execute() time and rows/s over `--repeat` runs. Tables go to a temporary directory, removed at
the end.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mqbridge.config import TypeConfig  # noqa: E402
from mqbridge.landing.executor import SparkExecutor
from mqbridge.landing.session import create_spark_session  # noqa: E402
from mqbridge.message import Bulk, Message  # noqa: E402

SCHEMA = "order_id STRING, amount DECIMAL(12,2), qty INT, note STRING"


def body(i: int, fmt: str, size: int) -> bytes:
    if fmt == "raw":
        return (b"%08d" % i + b"x" * size)[:size]
    doc = {"order_id": f"A-{i}", "amount": "12.50", "qty": i % 100, "note": ""}
    pad = size - len(json.dumps(doc))
    doc["note"] = "n" * max(pad, 0)
    return json.dumps(doc).encode()


def make_bulk(n: int, fmt: str, size: int) -> Bulk:
    bulk = Bulk("bench")
    for i in range(n):
        bulk.add(Message(msg_id=f"{i:010d}", body=body(i, fmt, size), source="bench", destination="/queue/bench",
                         headers={"type": "Order", "x-seq": str(i)}))
    return bulk


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--sizes", default="1000,10000,50000")
    parser.add_argument("--size", type=int, default=1024, help="body bytes")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    spark = create_spark_session(master=args.master, app_name="mqbridge-bench")
    warehouse = Path(tempfile.mkdtemp(prefix="mqbridge-bench-"))
    try:
        executors = {"raw": SparkExecutor(spark, warehouse, "bench", TypeConfig(table="raw")),
                     "json": SparkExecutor(spark, warehouse, "bench",
                                           TypeConfig(table="json", format="json", schema=SCHEMA))}
        start = time.perf_counter()
        for executor in executors.values():
            for _ in range(3):
                executor.execute(make_bulk(1000, executor.format, args.size))
        print(f"warm-up: {time.perf_counter() - start:.1f} s   master={args.master}   body={args.size} B")
        print(f"{'format':<6} {'rows':>7} {'median s':>9} {'rows/s':>9} {'MB/s':>7}")
        for fmt, executor in executors.items():
            for n in (int(s) for s in args.sizes.split(",")):
                bulk = make_bulk(n, fmt, args.size)
                times = []
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    results = executor.execute(bulk)
                    times.append(time.perf_counter() - t0)
                    assert all(r.ok for r in results), results[0]
                median = statistics.median(times)
                print(f"{fmt:<6} {n:>7} {median:>9.3f} {n / median:>9.0f} {n * args.size / median / 1e6:>7.1f}")
    finally:
        shutil.rmtree(warehouse, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
