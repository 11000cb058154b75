"""Times the steps of each bulk write inside a `mqbridge run` started by `bench/steady.py --time-steps`.

Python imports this module at start-up when `bench/steps` is on PYTHONPATH; it does nothing unless
MQBRIDGE_BENCH_STEPS names a file prefix. Then it wraps the functions the write lane calls (looked
up per call as module attributes) and appends one line per call to `<prefix>.<pid>`:
`step start seconds thread-cpu-seconds thread`, start on `time.perf_counter` (the same clock in
every process of this host). Benchmarks only: never installed with the bridge.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any


def _install(prefix: str) -> None:
    import mqbridge.landing.executor as executor
    import mqbridge.landing.handoff as handoff
    import mqbridge.landing.landing as landing
    import mqbridge.landing.ledger.sqlite as sqlite

    out = open(f"{prefix}.{os.getpid()}", "w", buffering=1)  # noqa: SIM115 (open for the process's life)

    def timed(step: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start, cpu = time.perf_counter(), time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                out.write(f"{step} {start:.4f} {time.perf_counter() - start:.4f} {time.thread_time() - cpu:.4f} "
                          f"{threading.current_thread().name.replace(' ', '_')}\n")
        return wrapper

    for owner, name, step in (
            (executor.SparkExecutor, "execute", "write"), (executor, "arrow_table", "arrow"),
            (handoff, "handoff_file", "handoff"), (executor, "raw_write", "plan"), (executor, "spark_guarded", "job"),
            (landing.Landing, "land", "land"), (landing, "verify_staged", "footers"),
            (sqlite.SqliteLedger, "prepare", "prepare"), (landing, "publish", "publish"),
            (sqlite.SqliteLedger, "mark_published", "mark")):
        setattr(owner, name, timed(step, getattr(owner, name)))


if os.environ.get("MQBRIDGE_BENCH_STEPS"):
    try:
        _install(os.environ["MQBRIDGE_BENCH_STEPS"])
    except Exception as exc:  # a benchmark aid must not stop the bridge
        print(f"bench/steps: not timing the write's steps: {exc}", file=sys.stderr)
