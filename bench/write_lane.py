"""Benchmark: the collector's write lane for one raw type, exactly-once, split into its steps.

    .venv/bin/python bench/write_lane.py [--sizes 2000,10000,20000] [--repeat 3] [--busy-threads 2]
                                         [--one-task] [--warm 100]

A real `local[2]` driver (its JIT C1 only, as `mqbridge run` starts it) and a real SQLite landing ledger.
After `--warm` writes of 2,000 rows (the JVM's JIT compiles the write path meanwhile), each size is
written `--repeat` times; each write prints its wall time, the CPU its thread and the JVM used, and the
wall time of its steps: the Arrow table, the handoff file, the job's plan (py4j), the Spark job, and
the ledger (prepare and publish). Then the median of each per size.

`--busy-threads K` runs K Python threads that never block beside the writes: the GIL is then as
contended as in a bridge whose listener threads keep it busy, and every step that lets go of the GIL
and takes it back pays for it. `--one-task` writes each bulk in one Spark task, as before the handoff
file was written in a row group per core (`mqbridge.landing.handoff.row_groups`).
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mqbridge.config import TypeConfig  # noqa: E402
from mqbridge.counters import Counters  # noqa: E402
from mqbridge.landing import handoff  # noqa: E402
from mqbridge.landing.executor import SparkExecutor  # noqa: E402
from mqbridge.landing.landing import Landing  # noqa: E402
from mqbridge.landing.ledger.sqlite import SqliteLedger  # noqa: E402
from mqbridge.landing.session import create_spark_session  # noqa: E402
from mqbridge.landing.writes import frames  # noqa: E402
from mqbridge.landing.writes import parquet as parquet_writes  # noqa: E402
from mqbridge.message import Bulk, Message, utcnow  # noqa: E402

STEPS = ("arrow", "handoff", "plan", "job", "ledger")
_spent: dict[str, float] = {}


def timed(step: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """`function`, adding its wall time to `_spent[step]`."""
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            _spent[step] = _spent.get(step, 0.0) + time.perf_counter() - start
    return wrapper


def instrument(one_task: bool) -> None:
    """Time the write's steps where the Parquet writer calls them (module attributes it looks up per call)."""
    for module, name, step in ((parquet_writes, "arrow_table", "arrow"), (handoff, "handoff_file", "handoff"),
                               (parquet_writes, "raw_write", "plan"), (parquet_writes, "spark_guarded", "job"),
                               (Landing, "land", "ledger")):
        setattr(module, name, timed(step, getattr(module, name)))
    if one_task:
        setattr(frames, "row_groups", lambda nbytes, cores: 1)  # noqa: B010


def make_bulk(n: int, first: int) -> Bulk:
    """`n` messages of 1 KB with ActiveMQ-like ids and headers, each body distinct."""
    bulk = Bulk("bench")
    for i in range(first, first + n):
        msg_id = f"ID:bench-host-40000-1700000000000-1:1:1:1:{i}"
        bulk.add(Message(msg_id=msg_id, body=os.urandom(512).hex().encode(), source="bench",
                         destination="/queue/bench", put_timestamp=utcnow(), received_timestamp=utcnow(),
                         delivery_count=1, token=msg_id,
                         headers={"persistent": "true", "priority": "4", "expires": "0", "subscription": "sub-1",
                                  "ack": msg_id}))
    return bulk


def busy(stop: threading.Event) -> None:
    count = 0
    while not stop.is_set():
        count += 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="2000,10000,20000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--warm", type=int, default=100, help="writes of 2,000 rows first")
    parser.add_argument("--busy-threads", type=int, default=0)
    parser.add_argument("--one-task", action="store_true", help="one Spark task per bulk")
    args = parser.parse_args()

    instrument(args.one_task)
    spark = create_spark_session(master="local[2]", app_name="mqbridge-write-lane")  # C1 only, as the bridge
    jvm = next(p for p in psutil.Process().children(recursive=True) if "java" in p.name())
    warehouse = Path(tempfile.mkdtemp(prefix="mqbridge-lane-"))
    ledger = SqliteLedger.open(warehouse / "ledger.db", owner="bench")
    landing = Landing(ledger=ledger, owner="bench", counters=Counters(), dedupe_window=3600.0, warehouse=warehouse)
    executor = SparkExecutor(spark, warehouse, "bench", TypeConfig(table="raw"), landing=landing)
    stop = threading.Event()
    threads = [threading.Thread(target=busy, args=(stop,), daemon=True) for _ in range(args.busy_threads)]
    first = 0
    try:
        for _ in range(args.warm):
            executor.execute(make_bulk(2000, first))
            first += 2000
        for thread in threads:
            thread.start()
        print(f"local[2], {args.warm} warm writes, {args.busy_threads} busy threads, "
              f"{'one task' if args.one_task else 'a task per row group'} per write")
        print(f"{'rows':>6} {'wall':>6} {'py cpu':>6} {'jvm cpu':>7} | " + " ".join(f"{s:>7}" for s in STEPS))
        for n in (int(s) for s in args.sizes.split(",")):
            walls: list[float] = []
            for _ in range(args.repeat):
                bulk = make_bulk(n, first)
                first += n
                _spent.clear()
                jvm_before, py_before, start = sum(jvm.cpu_times()[:2]), time.thread_time(), time.perf_counter()
                results = executor.execute(bulk)
                wall = time.perf_counter() - start
                assert all(r.ok for r in results), results[0]
                walls.append(wall)
                print(f"{n:>6} {wall:>6.3f} {time.thread_time() - py_before:>6.3f} "
                      f"{sum(jvm.cpu_times()[:2]) - jvm_before:>7.3f} | "
                      + " ".join(f"{_spent.get(s, 0.0):>7.3f}" for s in STEPS), flush=True)
            print(f"{n:>6} median wall {statistics.median(walls):.3f} s, {n / statistics.median(walls):,.0f} rows/s")
    finally:
        stop.set()
        spark.stop()
        shutil.rmtree(warehouse, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
