"""Steady state and cold start as an operator runs the bridge: one `mqbridge run` process (the real
CLI), its progress read from its own /metrics.

    .venv/bin/python bench/throughput.py --mode steady [--warm 30000] [--measure 60000]

1. W + N messages are put on a queue; a minimal stomp.py consumer (client-individual acks, one
   ACK per message) drains them and the last N are timed: the raw consumer's rate. It is measured
   again on a fresh queue after the bridge has stopped (step 4), since it varies between runs.
2. W + N messages are put on another queue; `mqbridge run` starts against it (exactly-once, the
   default); /metrics is polled every 100 ms. The N after the first W committed are timed: the
   bridge's steady rate. The same run gives the cold start: seconds from the process's start to the
   first commit, to the first 1-second window at half the steady rate, and the rate over the first
   W messages (from the first commit).
3. While the same process keeps running, messages are put at half its steady rate for
   `--latency-seconds`; put-to-commit p50/p99 come from the /metrics histogram as Prometheus's
   `histogram_quantile` computes them (linear within a bucket), and receipt-to-commit the same way
   (from the listener taking the message: without its time in the broker and the client's prefetch).

Also printed: CPU seconds of the broker, the bridge's Python and its Spark JVM over the timed N,
Spark writes, their mean rows and time and why their bulks closed, receipt-to-commit over N, and the
peak resident memory of the bridge (Python and JVM apart). `--time-steps` also splits each write of
the N into its steps (Arrow table, plan and handoff file, Spark job, landing) inside the bridge, and
each unit of work into its read, hand-over, wait for results and commit, with each bulk's rows and
oldest message's age at closing (`--keep` keeps the step files: `steps.<pid>` in the work directory).

`--table-format delta` lands into a Delta table (`[spark] table_format`, the repo's `jars/`), and
prints what a Delta commit costs: each commit (the one Spark job of a Delta write, which writes the
bulk's rows and its log entry) is timed inside the bridge (bench/steps/sitecustomize.py,
MQBRIDGE_BENCH_DELTA), per write and per row, against the write's whole time (the Arrow table, the
ledger and the rest); the table's own files split each commit further by their
modification times: until its data files are written, until its log entry (`_delta_log/<v>.json`) is,
and after it (a checkpoint every `delta.checkpointInterval` commits, the new snapshot). Commits that
wrote a checkpoint are compared with the others.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from prometheus_client.parser import text_string_to_metric_families

from bench.references import Broker, acking_reference, auto_ack_consumer, put
from bench.steady_configs import bridge_toml
from bench.step_reports import delta_commits, delta_report, timed_delta_commits, unit_steps, write_steps

#: Seconds between two reads of /metrics. Each read costs the bridge a scrape (process figures
#: included): at 0.1 s that was a third of the bridge's Python time (py-spy), so reads are sparse
#: and the moments a count was crossed are interpolated between two reads.
POLL = 0.5


@dataclass
class Sample:
    """One reading of the bridge's /metrics."""

    at: float
    committed: float
    writes: float
    rows: float
    write_seconds: float  # the collector's write lane busy: the bulks' executor calls, summed
    latency_buckets: dict[float, float] = field(default_factory=dict)
    receipt_buckets: dict[float, float] = field(default_factory=dict)
    flushed: dict[str, float] = field(default_factory=dict)  # bulks closed, by the collector's reason


def read_metrics(url: str) -> Sample:
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    totals: dict[str, float] = {}
    buckets: dict[float, float] = {}
    receipt: dict[float, float] = {}
    flushed: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in ("mqbridge_put_to_commit_seconds_bucket", "mqbridge_receipt_to_commit_seconds_bucket"):
                into = buckets if sample.name.startswith("mqbridge_put") else receipt
                bound = float(sample.labels["le"])
                into[bound] = into.get(bound, 0.0) + sample.value
            elif sample.name == "mqbridge_bulks_flushed_total":
                flushed[sample.labels["reason"]] = sample.value
            else:
                totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return Sample(time.perf_counter(), totals.get("mqbridge_messages_committed_total", 0.0),
                  totals.get("mqbridge_bulks_written_total", 0.0), totals.get("mqbridge_bulk_rows_total", 0.0),
                  totals.get("mqbridge_bulk_write_seconds_sum", 0.0), buckets, receipt, flushed)


def histogram_quantile(q: float, before: dict[float, float], after: dict[float, float]) -> float | None:
    """Prometheus's histogram_quantile over the samples between two readings of cumulative buckets."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    if not counts or counts[-1] <= 0:
        return None
    rank = q * counts[-1]
    lower, below = 0.0, 0.0
    for bound, count in zip(bounds, counts, strict=True):
        if count >= rank:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * (rank - below) / max(count - below, 1e-9)
        lower, below = bound, count
    return None


class Usage:
    """CPU seconds and peak RSS of the broker, the bridge's Python and its JVM children."""

    def __init__(self, bridge: psutil.Process, broker: psutil.Process | None,
                 servers: Callable[[], list[psutil.Process]] | None = None) -> None:
        self.bridge, self.broker = bridge, broker
        #: A Spark Connect server's JVM (`--connect`) or a standalone cluster's master, worker and
        #: executors (`--cluster`, which start later): counted as the Spark JVM.
        self.servers = servers
        self.peak_python = self.peak_jvm = 0

    def _cpu(self, proc: psutil.Process | None) -> float:
        try:
            times = proc.cpu_times() if proc is not None else None
            return times.user + times.system if times else float("nan")
        except psutil.Error:
            return float("nan")

    def jvms(self) -> list[psutil.Process]:
        try:
            return self.bridge.children(recursive=True) + (self.servers() if self.servers is not None else [])
        except psutil.Error:
            return []

    def cpu(self) -> dict[str, float]:
        return {"broker": self._cpu(self.broker), "bridge (python)": self._cpu(self.bridge),
                "spark jvm": sum(self._cpu(p) for p in self.jvms())}

    def sample_memory(self) -> None:
        try:
            self.peak_python = max(self.peak_python, self.bridge.memory_info().rss)
            self.peak_jvm = max(self.peak_jvm, sum(p.memory_info().rss for p in self.jvms()))
        except psutil.Error:
            pass


def chosen_concurrency(port: int) -> str:
    """Each listener's thread count as /status shows it (adaptive: the last change and why)."""
    import json

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=5) as response:
        status = json.load(response)
    return "; ".join(f"{c['name']}: {c['threads']} threads ({c.get('threads_mode', 'fixed')}"
                     + (f", last change: {c['tuning']}" if c.get("tuning") else "") + ")"
                     for c in status.get("listener_controls", []))


#: `--time-steps`: the directory whose sitecustomize times the child's write steps.
STEPS_DIR = Path(__file__).resolve().parent / "steps"


def load() -> str:
    """The machine's load averages (1, 5, 15 minutes): it is shared with other engineers' tests."""
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def wait_for(condition: Callable[[], bool], timeout: float, what: str, tick: Callable[[], None]) -> None:
    deadline = time.perf_counter() + timeout
    while not condition():
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{what} not reached after {timeout:.0f}s")
        tick()
        time.sleep(POLL)


def crossing(samples: list[tuple[float, float]], count: float) -> float:
    """When (seconds since start) the committed count reached `count`, linear between two reads."""
    for (t0, c0), (t1, c1) in zip(samples, samples[1:], strict=False):
        if c0 < count <= c1:
            return t0 + (t1 - t0) * (count - c0) / (c1 - c0)
    raise ValueError(f"{count:,.0f} was never crossed")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(args: argparse.Namespace) -> None:
    broker = Broker(args.broker, args.port, args.user, args.password)
    warm, measure = args.warm, args.measure
    total = warm + measure
    print(f"steady state: W = {warm:,} then N = {measure:,} messages x {args.size} B on {args.broker} :{args.port}; "
          + ("bridge: the README's quick-start configuration, nothing tuned (adaptive threads), "
             if args.quick_start else
             f"bridge: {args.threads} threads x {args.in_flight} in flight x batch {args.batch}, "
             f"bulk {args.bulk_size}, {args.writes_per_type} writes at a time, ")
          + "exactly-once, "
          + f"writer {args.writer}, table format {args.table_format}, `mqbridge run`")
    raw = [acking_reference(broker, args, "before")]
    q0 = f"/queue/bench-auto-{uuid.uuid4().hex[:8]}"
    put(broker, q0, total, args.size)
    limit = auto_ack_consumer(broker, q0, warm, measure, prefetch=min(args.batch, 1000))
    print(f"(a0) auto-ack consumer (limit): {limit:>9,.0f} msg/s  (ack=auto, drops what it gets: the broker's "
          f"dispatch limit here)")
    # The acking consumer's rate varies from run to run on one machine (6,600-11,600 msg/s in the runs
    # of docs/performance.md), so it is measured again after each bridge run, and each run is compared
    # with the measurements before and after it and with their mean. `--repeat` alternates K runs.
    ratios = []
    for n in range(1, args.repeat + 1):
        if args.repeat > 1:
            print(f"-- round {n} of {args.repeat}")
        steady = bridge_run(broker, args, raw[-1], limit)
        raw.append(acking_reference(broker, args, "after"))
        mean = (raw[-2] + raw[-1]) / 2
        print(f"ratio (b)/(a) after:            {steady / raw[-1]:>9.2f}")
        print(f"ratio (b)/mean of (a):          {steady / mean:>9.2f}  (mean of (a) {mean:,.0f} msg/s)")
        ratios.append(steady / mean)
    if len(ratios) > 1:
        print(f"ratio (b)/mean of (a) over {len(ratios)} rounds: median {statistics.median(ratios):.2f} "
              f"(min {min(ratios):.2f}, max {max(ratios):.2f}; each: {', '.join(f'{r:.2f}' for r in ratios)})")


def archive_made_by_bridge(workdir: Path, broker: Broker, config: Path, queue: str, size: int) -> None:
    """A bridge of `config` that has run before: one of it, on a scratch queue of 2,000 messages, makes
    its driver's class-data archive itself (`[spark] class_archive_after` 1 s instead of 10 minutes:
    mqbridge.landing.archive_maker) in the state_dir the measured run then starts with."""
    scratch = f"/queue/bench-archive-{uuid.uuid4().hex[:8]}"
    put(broker, scratch, 2000, size)
    text = config.read_text().replace(queue, scratch).replace("[spark]\n", '[spark]\nclass_archive_after = "1s"\n', 1)
    copy = workdir / "archive-bridge.toml"
    copy.write_text(text)
    log = workdir / "archive-bridge.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "mqbridge", "run", "--config", str(copy)], cwd=workdir,
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: "class-data archive made in" in log.read_text() or proc.poll() is not None, 600,
                 "the bridge to make its class-data archive", lambda: time.sleep(0.5))
    finally:
        children = psutil.Process(proc.pid).children(recursive=True) if proc.poll() is None else []
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
        psutil.wait_procs(children, timeout=60)  # its Spark JVM too: nothing of it runs beside the measured bridge
    if "class-data archive made in" not in log.read_text():
        raise SystemExit(f"the bridge made no class-data archive; its log ({log}) ends:\n{log.read_text()[-2000:]}")


def bridge_run(broker: Broker, args: argparse.Namespace, raw_before: float, limit: float) -> float:
    """One `mqbridge run` on a fresh queue of W + N messages: (b) its steady rate (returned), (c) its
    cold start, (d) its latency at half that rate, compared with the acking consumer measured just
    before (`raw_before`) and the auto-ack limit."""
    warm, measure = args.warm, args.measure
    total = warm + measure
    workdir = Path(tempfile.mkdtemp(prefix="mqbridge-steady-"))
    server = None
    cluster = None
    args.remote = args.master = None
    if args.cluster:
        from tests.support.spark_servers import SparkStandalone

        cluster = SparkStandalone(workdir / "cluster", cores=args.cluster_cores)
        cluster.start()
        args.master = cluster.master_url
        print(f"Spark standalone cluster {cluster.master_url} (one worker, {args.cluster_cores} cores)")
    if args.connect:
        from tests.support.spark_servers import SparkConnectServer

        server = SparkConnectServer(workdir / "connect")
        server.start()
        args.remote = server.url
        print(f"Spark Connect server {server.url} (pid {server.pid()})")
    q2 = f"/queue/bench-bridge-{uuid.uuid4().hex[:8]}"
    put(broker, q2, total, args.size)
    port = free_port()
    config = bridge_toml(workdir, broker, q2, port, args)
    url = f"http://127.0.0.1:{port}/metrics"
    if args.class_archive and not args.connect:  # as the operator's install step does (docs/operations.md)
        made = time.perf_counter()
        subprocess.run([sys.executable, "-m", "mqbridge", "spark-archive", "--config", str(config)], cwd=workdir,
                       check=True, stdout=subprocess.DEVNULL)
        print(f"mqbridge spark-archive: {time.perf_counter() - made:.0f}s (before the run; not counted)")
    if args.bridge_archive and not args.connect:
        made = time.perf_counter()
        archive_made_by_bridge(workdir, broker, config, q2, args.size)
        print(f"class-data archive made by a bridge of this configuration: {time.perf_counter() - made:.0f}s "
              "(before the run; not counted)")
    env = dict(os.environ)
    if args.time_steps or args.table_format == "delta":  # bench/steps/sitecustomize.py times in the child
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(STEPS_DIR), env.get("PYTHONPATH", "")) if p)
    if args.time_steps:  # each write's steps
        env["MQBRIDGE_BENCH_STEPS"] = str(workdir / "steps")
    if args.table_format == "delta":  # each Delta commit
        env["MQBRIDGE_BENCH_DELTA"] = str(workdir / "delta")
    print(f"    load average before the bridge run: {load()}")
    started = time.perf_counter()
    with open(workdir / "bridge.log", "wb") as log:  # the child keeps its own descriptor
        proc = subprocess.Popen([sys.executable, "-m", "mqbridge", "run", "--config", str(config)], cwd=workdir,
                                stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        usage = Usage(psutil.Process(proc.pid), broker.process(),
                      (lambda: [psutil.Process(server.pid())]) if server is not None
                      else cluster.processes if cluster is not None else None)
        last: list[Sample] = []
        windows: list[tuple[float, float]] = []  # (seconds since start, committed)

        def poll() -> None:
            if proc.poll() is not None:
                raise RuntimeError(f"mqbridge run exited with {proc.returncode}; see {workdir / 'bridge.log'}")
            usage.sample_memory()
            try:
                sample = read_metrics(url)
            except OSError:
                return  # not listening yet
            last[:] = [sample]
            windows.append((sample.at - started, sample.committed))

        def committed() -> float:
            return last[0].committed if last else 0.0

        wait_for(lambda: committed() > 0, 300, "the first commit", poll)
        first_commit = last[0].at
        wait_for(lambda: committed() >= warm, 600, f"{warm:,} committed", poll)
        at_w, cpu_w = last[0], usage.cpu()
        wait_for(lambda: committed() >= total, 600, f"{total:,} committed", poll)
        at_end, cpu_end = last[0], usage.cpu()
        concurrency = chosen_concurrency(port)
        t_w, t_end = crossing(windows, warm) + started, crossing(windows, total) + started
        steady = measure / (t_end - t_w)
        print(f"(b) mqbridge run, steady:       {steady:>9,.0f} msg/s  (the N after the first W)")
        print(f"ratio (b)/(a) before:           {steady / raw_before:>9.2f}")
        print(f"ratio (b)/(a0):                 {steady / limit:>9.2f}")
        print(f"    concurrency at the end of N: {concurrency}")
        used = {k: cpu_end[k] - cpu_w[k] for k in cpu_end}
        print(f"    CPU seconds over N ({t_end - t_w:.1f}s wall, {psutil.cpu_count()} cores): "
              + ", ".join(f"{k} {v:.1f}" for k, v in used.items()))
        writes = at_end.writes - at_w.writes
        busy = at_end.write_seconds - at_w.write_seconds
        print(f"    bulk writes over N: {writes:.0f}, mean {(at_end.rows - at_w.rows) / max(writes, 1):,.0f} rows, "
              f"{busy / max(writes, 1):.2f} s each; writing {busy / max(at_end.at - at_w.at, 1e-9):.0%} of the time")
        closed = {k: v - at_w.flushed.get(k, 0.0) for k, v in at_end.flushed.items()}
        print("    bulks closed over N, by reason: "
              + (", ".join(f"{k} {v:.0f}" for k, v in sorted(closed.items()) if v) or "none"))
        if args.time_steps:
            print(write_steps(workdir, at_w.at, at_end.at))
            print(unit_steps(workdir, at_w.at, at_end.at))
        s50 = histogram_quantile(0.5, at_w.receipt_buckets, at_end.receipt_buckets)
        s99 = histogram_quantile(0.99, at_w.receipt_buckets, at_end.receipt_buckets)
        if s50 is not None and s99 is not None:  # Little's law: the messages in flight over this time
            print(f"    receipt-to-commit over N: p50 {s50 * 1000:,.0f} ms, p99 {s99 * 1000:,.0f} ms")
        # cold start, from the same fresh process
        half = next((t for (t0, c0), (t, c) in zip(windows, windows[2:], strict=False)
                     if (c - c0) / (t - t0) >= steady / 2), None)
        cold_rate = warm / (t_w - first_commit)
        print(f"(c) cold start: first commit {first_commit - started:.1f}s after start; half the steady rate "
              f"(1s window) at {half:.1f}s"
              if half is not None else "(c) cold start: never reached half the steady rate")
        print(f"    first W from the first commit: {cold_rate:,.0f} msg/s "
              f"({steady / cold_rate:.2f}x slower than steady); "
              f"from the process start: {warm / (t_w - started):,.0f} msg/s")

        # latency at half the steady rate, same process
        rate = max(1.0, steady / 2)
        n = int(rate * args.latency_seconds)
        before = read_metrics(url)
        body = b"x" * args.size
        conn = broker.connection()
        t0 = time.perf_counter()
        for i in range(n):
            delay = t0 + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            conn.send(q2, body, headers={"persistent": "true"})
        conn.disconnect()
        wait_for(lambda: committed() >= total + n, 300, "the latency phase committed", poll)
        after = last[0]
        p50 = histogram_quantile(0.5, before.latency_buckets, after.latency_buckets)
        p99 = histogram_quantile(0.99, before.latency_buckets, after.latency_buckets)
        print(f"(d) put-to-commit at {rate:,.0f} msg/s (half of steady): "
              f"p50 {p50 * 1000:,.0f} ms, p99 {p99 * 1000:,.0f} ms (histogram_quantile over {n:,} messages)"
              if p50 is not None and p99 is not None else "(d) no latency samples")
        r50 = histogram_quantile(0.5, before.receipt_buckets, after.receipt_buckets)
        r99 = histogram_quantile(0.99, before.receipt_buckets, after.receipt_buckets)
        if r50 is not None and r99 is not None:  # without the time in the broker and the prefetch
            print(f"    receipt-to-commit: p50 {r50 * 1000:,.0f} ms, p99 {r99 * 1000:,.0f} ms")
        print(f"    peak RSS: bridge python {usage.peak_python / 2**20:,.0f} MB, "
              f"Spark JVM {usage.peak_jvm / 2**20:,.0f} MB (collector memory {args.collector_memory})")
        if args.table_format == "delta" and not args.s3:  # the table's files read locally, by their times
            commits = delta_commits(timed_delta_commits(workdir), workdir / "landing" / "bench")
            print(delta_report(commits, at_w.at, at_end.at, at_end.writes - at_w.writes,
                               at_end.write_seconds - at_w.write_seconds))
        print(f"    load average after the bridge run: {load()}")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
        if server is not None:
            server.stop()
        if cluster is not None:
            cluster.stop()
        if args.keep:
            print(f"    kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return steady


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("--mode steady")
    group.add_argument("--repeat", type=int, default=1, metavar="K",
                       help="K bridge runs, each followed by the acking consumer again; prints the median ratio")
    group.add_argument("--warm", type=int, default=30_000, help="W: messages committed before timing starts")
    group.add_argument("--measure", type=int, default=60_000, help="N: messages timed after the first W")
    group.add_argument("--broker", default="activemq", choices=("activemq", "rabbitmq"))
    group.add_argument("--user", default=None, help="STOMP login (RabbitMQ: guest)")
    group.add_argument("--password", default=None, help="STOMP passcode (RabbitMQ: guest)")
    group.add_argument("--collector-memory", default="256MB")
    group.add_argument("--keep", action="store_true", help="keep the work directory (config, log, table)")
    group.add_argument("--identity", default="auto",
                       help="[[listeners]] identity: auto (RabbitMQ: stamp, a second pass through the broker), "
                            "msg_id, stamp, header:NAME")
    group.add_argument("--in-flight", type=int, default=2, help="[[listeners]] in_flight: units each thread holds")
    group.add_argument("--time-steps", action="store_true",
                       help="split each write and each unit of N into its steps, timed in the bridge (bench/steps)")
    group.add_argument("--prefetch", type=int, default=None,
                       help="[[listeners]] prefetch: messages the broker sends each connection ahead (default: batch)")
    group.add_argument("--type-latency", default=None, metavar="DURATION",
                       help="[types.bench] latency (the product's default when not given)")
    group.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                       help="a [spark.conf] setting of the bridge (repeatable)")
    group.add_argument("--connect", action="store_true",
                       help="start a Spark Connect server (tests.support.spark_servers, local[2]) and "
                            "have the bridge write through it; its JVM is counted as the Spark JVM")
    group.add_argument("--cluster", action="store_true",
                       help="start a standalone cluster (pyspark's bin/spark-class: a master and one worker) and "
                            "have the bridge's driver use it; its processes are counted as the Spark JVM")
    group.add_argument("--cluster-cores", type=int, default=2, help="the --cluster worker's cores")
    group.add_argument("--class-archive", action="store_true",
                       help="run `mqbridge spark-archive` first, as an installed bridge has (the driver JVM's start)")
    group.add_argument("--bridge-archive", action="store_true",
                       help="a bridge of the same configuration makes its own class-data archive first (on a "
                            "scratch queue; [spark] class_archive = \"auto\"): a restart of a bridge that ran before")
    group.add_argument("--writes-per-type", type=int, default=1,
                       help="[collector] writes_per_type: bulks of the type written at a time")
    group.add_argument("--writer", default="spark", choices=("auto", "arrow", "spark"),
                       help="[spark] writer: who writes the bulks' Parquet files")
    group.add_argument("--s3", action="store_true",
                       help="the warehouse in a new bucket of the project's S3-compatible server (scripts/s3.sh; "
                            "with --table-format delta): s3a://<bucket>/landing")
    group.add_argument("--quick-start", action="store_true",
                       help="the README's quick-start configuration: only its keys (threads, batch, in_flight, "
                            "bulk sizes, latency, collector at their defaults); the tuning flags are ignored")
    group.add_argument("--threads-max", type=int, default=None, metavar="N",
                       help="with --quick-start: another ceiling for the adaptive thread count (default: the "
                            "bridge's, 8)")
    group.add_argument("--listener-key", action="append", default=[], metavar="KEY=VALUE",
                       help="with --quick-start: one more [[listeners]] key as TOML (e.g. in_flight=4), to try a "
                            "default (repeatable)")
    group.add_argument("--table-format", default="parquet", choices=("parquet", "delta", "iceberg"),
                       help="[spark] table_format (with the repo's jars/ as jars_dir: `scripts/jars.sh delta` or "
                            "`iceberg`); delta also prints what a Delta commit costs; iceberg lands through the "
                            "embedded catalog (JDBC on SQLite), whose commit cost per catalog "
                            "bench/iceberg_commit_cost.py measures")
