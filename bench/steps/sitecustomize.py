"""Times the steps of each bulk write and each unit of work inside a `mqbridge run` started by
`bench/steady.py --time-steps`.

Python imports this module at start-up when `bench/steps` is on PYTHONPATH; it does nothing unless
MQBRIDGE_BENCH_STEPS names a file prefix. Then it wraps the functions the write lane and the listener
loop call (looked up per call as class or module attributes) and appends one line per call to
`<prefix>.<pid>`: `step start seconds thread-cpu-seconds thread [detail...]`, start on
`time.perf_counter` (the same clock in every process of this host). A unit's lines carry the id of
its results object (`submit`, `ready`, `finish`); a bulk's `close` line its reason, rows and the age
of its oldest message. Benchmarks only: never installed with the bridge.

MQBRIDGE_BENCH_DELTA (a file prefix, `bench/steady.py --table-format delta`) on its own times only
each Delta write (the `write` that `mqbridge.landing.landing.Landing.commit` runs: the one Spark job that
writes the bulk's rows and commits them) in
`<prefix>.<pid>`: `delta start seconds thread-cpu-seconds thread bulk-id wall-start wall-end`, the wall
clock (`time.time`, the clock of file modification times) to place the table's files in it.
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
    import mqbridge.landing.writes.delta as delta_writes  # and a Delta table's: its staging job and its commit
    import mqbridge.landing.writes.parquet as parquet_writes  # a Parquet table's writer calls the steps below

    out = open(f"{prefix}.{os.getpid()}", "w", buffering=1)  # noqa: SIM115 (open for the process's life)

    def line(step: str, start: float, cpu: float, *detail: object) -> None:
        out.write(f"{step} {start:.4f} {time.perf_counter() - start:.4f} {time.thread_time() - cpu:.4f} "
                  f"{threading.current_thread().name.replace(' ', '_')}"
                  + "".join(f" {d}" for d in detail) + "\n")

    Detail = Callable[[tuple[Any, ...], Any], tuple[object, ...]]

    def timed(step: str, function: Callable[..., Any], detail: Detail = lambda args, result: ()) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start, cpu = time.perf_counter(), time.thread_time()
            result = None
            try:
                result = function(*args, **kwargs)
                return result
            finally:
                line(step, start, cpu, *detail(args, result))
        return wrapper

    for owner, name, step in (
            (executor.SparkExecutor, "execute", "write"), (parquet_writes, "arrow_table", "arrow"),
            (handoff, "handoff_file", "handoff"), (parquet_writes, "raw_write", "plan"),
            (parquet_writes, "spark_guarded", "job"),
            (delta_writes, "arrow_table", "arrow"), (delta_writes, "spark_guarded", "job"),
            (landing.Landing, "land", "land"), (landing.Landing, "land_transaction", "land"),
            (landing, "verify_staged", "footers"),
            (sqlite.SqliteLedger, "prepare", "prepare"), (landing, "publish", "publish"),
            (sqlite.SqliteLedger, "mark_published", "mark")):
        if hasattr(owner, name):  # land_transaction: Delta's landing, while it is apart from land
            setattr(owner, name, timed(step, getattr(owner, name)))

    # The listener loop: one unit of work is read (receive), handed over (process; submit names its
    # results object), its last result arrives (ready), and the listener waits for it and commits or
    # gives it back (finish = await + plan and commit).
    import mqbridge.bulks.collector as collector
    import mqbridge.loop.in_flight as in_flight
    import mqbridge.loop.listener as listener
    import mqbridge.loop.unit_plan as unit_plan

    def received(args: tuple[Any, ...], result: Any) -> tuple[object, ...]:
        return (len(result or ()),)

    def named(args: tuple[Any, ...], result: Any) -> tuple[object, ...]:
        return (id(result),)

    def finished(args: tuple[Any, ...], result: Any) -> tuple[object, ...]:
        return (id(args[1].results),)

    loop: list[tuple[object, str, str, Detail]] = [
        (listener.ListenerThread, "_receive_batch", "receive", received),
        (listener.ListenerThread, "_process", "process", lambda args, result: ()),
        (listener.ListenerThread, "_submit", "submit", named),
        (listener.ListenerThread, "_await", "await", lambda args, result: ()),
        (in_flight.Connections, "finish", "finish", finished)]
    try:
        import mqbridge.listeners.stomp.source as stomp_source
        loop.append((stomp_source.StompSource, "commit", "commit", lambda args, result: ()))
    except ImportError:
        pass
    for target, name, step, detail in loop:
        setattr(target, name, timed(step, getattr(target, name), detail))

    many = unit_plan.UnitResults.many

    def ready(self: Any, results: Any) -> None:
        was = self._done.is_set()
        many(self, results)
        if not was and self._done.is_set():
            line("ready", time.perf_counter(), time.thread_time(), id(self))

    forward = collector.BulkCollector._forward_locked

    def close(self: Any, bulk: Any, reason: str) -> None:
        age = time.monotonic() - bulk.oldest
        line("close", time.perf_counter(), time.thread_time(), reason, len(bulk), f"{age:.4f}")
        forward(self, bulk, reason)
    for patched, name, wrapped in ((unit_plan.UnitResults, "many", ready),
                                   (collector.BulkCollector, "_forward_locked", close)):
        setattr(patched, name, wrapped)


def _install_delta(prefix: str) -> None:
    import mqbridge.landing.landing as landing

    out = open(f"{prefix}.{os.getpid()}", "w", buffering=1)  # noqa: SIM115 (open for the process's life)
    commit = landing.Landing.commit

    def timed_commit(self: Any, bulk_id: str, table: str, identities: Any, write: Callable[[Any], None]) -> None:
        def timed_write(transaction: Any) -> None:
            start, cpu, wall = time.perf_counter(), time.thread_time(), time.time()
            try:
                write(transaction)
            finally:
                out.write(f"delta {start:.4f} {time.perf_counter() - start:.4f} {time.thread_time() - cpu:.4f} "
                          f"{threading.current_thread().name.replace(' ', '_')} {bulk_id} {wall:.6f} "
                          f"{time.time():.6f}\n")

        commit(self, bulk_id, table, identities, timed_write)

    # the executor calls it as `self.landing.commit(...)`: looked up on the class at each call
    landing.Landing.commit = timed_commit  # type: ignore[method-assign]


if os.environ.get("MQBRIDGE_BENCH_DELTA"):
    try:
        _install_delta(os.environ["MQBRIDGE_BENCH_DELTA"])
    except Exception as exc:  # a benchmark aid must not stop the bridge
        print(f"bench/steps: not timing the Delta commits: {exc}", file=sys.stderr)

if os.environ.get("MQBRIDGE_BENCH_STEPS"):
    try:
        _install(os.environ["MQBRIDGE_BENCH_STEPS"])
    except Exception as exc:  # a benchmark aid must not stop the bridge
        print(f"bench/steps: not timing the write's steps: {exc}", file=sys.stderr)
