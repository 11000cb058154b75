"""Benchmark: a minimal stomp.py consumer (the ceiling) against mqbridge end to end, on the same
broker, in the same run.

    .venv/bin/python bench/throughput.py [--messages 50000] [--size 1024]

(a) puts N messages, drains them with client-individual acks (ack per message, no Spark);
(b) warms up first, as a bridge that has run for a while is (`--warmup-writes` Spark writes of 200 rows,
    over which the JVM compiles Spark's driver code and the fixed cost of a write falls about 4x;
    then `--warmup` messages through the bridge), then puts N messages and runs the bridge until
    they are all committed: with the landing ledger (exactly-once) and without it (at-least-once),
    alternately, `--rounds` times each, on the same warm JVM; prints each rate, the mean of each
    mode, what the ledger costs (rate and time per bulk, time per ledger lookup);
(c) latency: puts messages at a steady rate while the bridge runs, and reports the
    put-to-commit latency percentiles the bridge measured.
Prints the rates, their ratio, and p50/p99 latency. Needs ActiveMQ on 127.0.0.1:61613.
"""

from __future__ import annotations

import argparse
import logging
import os
import queue
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import stomp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import steady  # noqa: E402
from bench.spark_write import make_bulk  # noqa: E402
from mqbridge.app import build_app  # noqa: E402
from mqbridge.config import TypeConfig, parse_config  # noqa: E402
from mqbridge.landing.executor import SparkExecutor  # noqa: E402
from mqbridge.supervision.supervisor import Bridge  # noqa: E402
from tests.support.amq import AmqClient, unique_queue  # noqa: E402


def put(queue_name: str, n: int, size: int, port: int) -> float:
    body = os.urandom(size // 2).hex().encode()[:size]
    start = time.perf_counter()
    with AmqClient(port=port) as client:
        client.put_many(queue_name, [body] * n)
    return n / (time.perf_counter() - start)


def ceiling(queue_name: str, n: int, prefetch: int, port: int) -> float:
    """Minimal consumer: client-individual acks, one ACK frame per message."""
    frames: queue.Queue = queue.Queue()

    class Listener(stomp.ConnectionListener):
        def on_message(self, frame):  # type: ignore[no-untyped-def]
            frames.put(frame)

    conn = stomp.Connection12([("127.0.0.1", port)], auto_decode=False)
    conn.set_listener("l", Listener())
    conn.connect(wait=True)
    start = time.perf_counter()
    conn.subscribe(queue_name, id="bench", ack="client-individual",
                   headers={"activemq.prefetchSize": str(prefetch)})
    for _ in range(n):
        frame = frames.get(timeout=60)
        conn.ack(frame.headers["ack"])
    elapsed = time.perf_counter() - start
    conn.disconnect()
    return n / elapsed


def broker_process(port: int) -> psutil.Process | None:
    """The process listening on the broker's STOMP port (None if it cannot be seen)."""
    try:
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
                return psutil.Process(conn.pid)
    except (psutil.Error, OSError):
        pass
    return None


def cpu_seconds(broker: psutil.Process | None) -> dict[str, float]:
    """CPU seconds (user + system) so far of the broker, this process, and its children (the
    Spark JVM): where a 2-core machine's time goes during a run."""
    me = psutil.Process()

    def used(proc: psutil.Process) -> float:
        try:
            times = proc.cpu_times()
            return times.user + times.system
        except psutil.Error:
            return 0.0

    return {"broker": used(broker) if broker is not None else float("nan"), "bridge (python)": used(me),
            "spark jvm": sum(used(child) for child in me.children(recursive=True))}


def bridge_config(warehouse: Path, queue_name: str, args: argparse.Namespace) -> object:
    text = f"""
[bridge]
control_interval = "1s"
plugin_dirs = []
state_dir = "{warehouse}/_state"
exactly_once = {"false" if args.exactly_once is False else "true"}
[monitoring]
listen = ""
[spark]
master = "local[2]"
warehouse = "{warehouse}"
[collector]
memory = "256MB"
workers = 2
[types.bench]
bulk_size = "{args.bulk_size}"
bulk_timeout = "2s"
[sources.amq]
kind = "stomp"
port = {args.port}
ack_mode = "{args.ack_mode}"
[[listeners]]
source = "amq"
queue = "{queue_name}"
threads = {args.threads}
batch = {args.batch}
wait = "200ms"
message_type = "bench"
backout_queue = "{queue_name}.backout"
"""
    return parse_config(text, "<bench>")


def warm_spark(spark: object, table_dir: Path, writes: int, size: int) -> None:
    """Append `writes` bulks of 200 rows. The JVM's JIT compiles Spark's driver code (analysis,
    planning, commit) over the first ~150 writes: the fixed CPU cost of one write falls from about
    0.45 to 0.10 CPU-s. The rows (30,000 with the default) make the per-row code hot too. A bridge
    that has run for a while is past that point."""
    executor = SparkExecutor(spark, table_dir, "warmup", TypeConfig(table="warmup"))  # type: ignore[arg-type]
    for _ in range(writes):
        executor.execute(make_bulk(200, "raw", size))


def run_bridge(cfg: object, spark: object, until: callable) -> tuple[Bridge, float, float]:  # type: ignore[valid-type]
    bridge = build_app(cfg, spark=spark).bridge  # type: ignore[arg-type]
    bridge.start()
    runner = threading.Thread(target=bridge.run, name="bench-bridge", daemon=True)
    start = time.perf_counter()
    runner.start()
    first = None
    while not until(bridge):
        if first is None and bridge.counters.total("messages_received") > 0:
            first = time.perf_counter()
        time.sleep(0.02)
    end = time.perf_counter()
    bridge.stop()
    runner.join(120)
    return bridge, (first or start), end


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=6)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--bulk-size", default="16MB")
    parser.add_argument("--warmup-writes", type=int, default=150,
                        help="Spark writes of 200 rows before (b), after which the JVM's JIT has compiled Spark's "
                             "driver code (a long-running bridge's steady state); 0 measures a cold JVM")
    parser.add_argument("--warmup", type=int, default=20_000, help="messages bridged before (b)")
    parser.add_argument("--ack-mode", default="cumulative", choices=("cumulative", "individual"),
                        help="the bridge's STOMP ack_mode")
    parser.add_argument("--port", type=int, default=61613, help="the broker's STOMP port on 127.0.0.1")
    parser.add_argument("--exactly-once", action=argparse.BooleanOptionalAction, default=None,
                        help="measure (b) and (c) only with the ledger (--exactly-once) or only without it "
                             "(--no-exactly-once); default: (b) in both modes, (c) with the ledger")
    parser.add_argument("--rounds", type=int, default=2, help="(b) runs per mode")
    parser.add_argument("--latency-rate", type=int, default=2000, help="messages/s in the latency phase")
    parser.add_argument("--latency-seconds", type=float, default=10.0)
    parser.add_argument("--mode", default="inprocess", choices=("inprocess", "steady"),
                        help="inprocess: (a)-(c) above, the bridge as an object of this process; steady: one real "
                             "`mqbridge run` process read through its /metrics (bench/steady.py)")
    steady.add_arguments(parser)
    args = parser.parse_args()
    if args.mode == "steady":
        steady.run(args)
        return
    logging.basicConfig(level=logging.WARNING)
    n = args.messages

    from mqbridge.landing.session import create_spark_session

    workdir = Path(tempfile.mkdtemp(prefix="mqbridge-bench-"))
    try:
        print(f"messages: {n} x {args.size} B; "
              f"bridge: {args.threads} threads, batch {args.batch}, bulk {args.bulk_size}, {args.ack_mode} acks")
        q1 = unique_queue("bench-ceiling")
        print(f"put rate:                     {put(q1, n, args.size, args.port):>9,.0f} msg/s")
        ceiling_rate = ceiling(q1, n, prefetch=min(args.batch, 1000), port=args.port)
        print(f"(a) stomp.py consumer:        {ceiling_rate:>9,.0f} msg/s  (client-individual acks)")

        spark = create_spark_session(master="local[2]", app_name="mqbridge-bench")
        warm_spark(spark, workdir / "warm-spark", args.warmup_writes, args.size)
        q0 = unique_queue("bench-warmup")
        put(q0, args.warmup, args.size, args.port)
        run_bridge(bridge_config(workdir / "warm", q0, args), spark,
                   lambda b: b.counters.total("messages_committed") >= args.warmup)

        modes = [args.exactly_once] if args.exactly_once is not None else [True, False]
        rates: dict[bool, list[float]] = {mode: [] for mode in modes}
        land_seconds: list[float] = []
        lookup_seconds: list[float] = []
        for round_no in range(args.rounds):
            for mode in modes:
                args.exactly_once = mode
                q2 = unique_queue("bench-bridge")
                put(q2, n, args.size, args.port)
                broker = broker_process(args.port)
                cpu_before, wall_before = cpu_seconds(broker), time.perf_counter()
                bridge, first, end = run_bridge(bridge_config(workdir / f"landing-{round_no}-{mode}", q2, args), spark,
                                                lambda b: b.counters.total("messages_committed") >= n)
                cpu_after, wall = cpu_seconds(broker), time.perf_counter() - wall_before
                bridge_rate = n / (end - first)
                rates[mode].append(bridge_rate)
                stats = bridge.collector.stats()
                label = "with ledger" if mode else "no ledger"
                print(f"(b) mqbridge end to end, {label:11}: {bridge_rate:>9,.0f} msg/s  "
                      f"ratio {bridge_rate / ceiling_rate:.2f}"
                      f"  ({stats.executed_bulks} Spark writes, {stats.execute_seconds_total:.1f}s writing)")
                used = {name: cpu_after[name] - cpu_before[name] for name in cpu_after}
                print(f"    CPU seconds, {wall:.1f}s wall on {psutil.cpu_count()} cores: "
                      + ", ".join(f"{name} {value:.1f}" for name, value in used.items()))
                for name, into in (("ledger_land_seconds", land_seconds), ("ledger_lookup_seconds", lookup_seconds)):
                    hist = bridge.counters.histogram(name)
                    if hist is not None and hist.count:
                        into.extend(hist.recent)
        for mode in modes:
            label = "with ledger" if mode else "no ledger"
            print(f"(b) mean {label:11}:          {statistics.mean(rates[mode]):>9,.0f} msg/s  "
                  f"ratio {statistics.mean(rates[mode]) / ceiling_rate:.2f}")
        if len(modes) == 2:
            change = statistics.mean(rates[True]) / statistics.mean(rates[False]) - 1
            print(f"    the ledger changes the rate by {change:+.1%}")
        if land_seconds:
            print(f"    ledger per bulk (prepare, publish, mark published): "
                  f"mean {statistics.mean(land_seconds) * 1000:.1f} ms, "
                  f"max {max(land_seconds) * 1000:.1f} ms over {len(land_seconds)} bulks; per unit of work lookup: "
                  f"mean {statistics.mean(lookup_seconds) * 1000:.1f} ms over {len(lookup_seconds)} units")
        args.exactly_once = modes[0]

        q3 = unique_queue("bench-latency")
        total = int(args.latency_rate * args.latency_seconds)
        producer_done = threading.Event()

        def paced_producer() -> None:
            body = b"x" * args.size
            with AmqClient(port=args.port) as client:
                start = time.perf_counter()
                for i in range(total):
                    delay = start + i / args.latency_rate - time.perf_counter()
                    if delay > 0:
                        time.sleep(delay)
                    client.put(q3, body)
            producer_done.set()

        threading.Thread(target=paced_producer, daemon=True).start()
        bridge, _, _ = run_bridge(bridge_config(workdir / "latency", q3, args), spark,
                                  lambda b: b.counters.total("messages_committed") >= total)
        hist = bridge.counters.histogram("put_to_commit_seconds")
        assert hist is not None
        p50, p99 = hist.quantile(0.5), hist.quantile(0.99)
        print(f"(c) put-to-commit latency at {args.latency_rate} msg/s: p50 {p50 * 1000:,.0f} ms, "
              f"p99 {p99 * 1000:,.0f} ms ({hist.count} messages)")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
