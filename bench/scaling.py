"""Where N bridges saturate (issue 51, docs/scaling.md): N = 1, 2, 3 real `mqbridge run` processes on
one ActiveMQ queue, one shared PostgreSQL ledger (`[ledger] url`) and one Delta table, the inputs of the
capacity model (`bench/scaling_model.py`) measured at each N, and the model's prediction from the N = 1
inputs printed next to what N = 2 and 3 measured.

    .venv/bin/python bench/scaling.py [--bridges 1,2,3] [--warm 10000] [--measure 30000] [--quick]

The bridges are plain processes of this machine, each with its own working directory and state_dir
(not the network-namespace hosts of tests/support/hosts.py: their forwarders are Python processes that
would add their own CPU to every message). Their configuration is the product's defaults (adaptive
threads, latency 1s, exactly once) with a Delta table (`jars/delta`) in a local warehouse all of them
share: Delta on the S3-compatible server is not safe with several writers (S3SingleDriverLogStore makes
no conditional put, docs/guarantees.md), so the object store would measure a configuration the docs
advise against. The PostgreSQL server is this run's own (tests/support/postgres.py), with
pg_stat_statements loaded.

Per N: the N bridges start on an empty queue; small batches are put until every bridge has committed
(its JVM is up); then W + M + M/5 messages are put at once. The window runs from the first read of
/metrics (every 0.5 s) at or past W committed and after the put ended, to the first at or past W + M;
the last M/5 are a tail nobody times (the bridges run out unevenly). Over the window: each bridge's
committed rate, CPU seconds per message of every bridge's Python and Spark JVM, of the broker and of
PostgreSQL (psutil), the CPU the rest of the machine used, PostgreSQL's transactions (pg_stat_database)
and statements (pg_stat_statements) per message, the Delta commits into the table (its `_delta_log`
entries by their times) and rows per commit.

Once per run: the broker's dispatch (the auto-ack consumer of bench/references.py), the ledger's
capacity (a burst of the bridge's ledger cycle from 4 threads, after N = 1, with N = 1's rows per
bulk), and one table's commits per second (a burst of small commits from one driver, at the end).
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from bench.references import Broker, auto_ack_consumer, put  # noqa: E402
from bench.scaling_bursts import ledger_burst, pg_counts, table_burst, writers_burst  # noqa: E402
from bench.scaling_model import Inputs, error, predict, separate_hosts  # noqa: E402
from bench.steady import free_port, histogram_quantile, load  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
POLL = 0.5
#: `[[listeners]]` defaults (config/listener.py): in_flight x batch messages in flight per listener thread
#: (the adaptive law chooses the threads, up to threads_max 8).
IN_FLIGHT_PER_THREAD = 2 * 500
#: The standing CPU of an idle bridge is measured after the run, IDLE_SETTLE s after the tail is committed
#: (its last bulks' writes and commits end), over IDLE_SPAN s: a JVM just started compiles for tens of
#: seconds, which measured just after the start (0.4-0.6 cores) predicted no room at all for three bridges.
IDLE_SETTLE, IDLE_SPAN = 3.0, 6.0


def cpu(proc: psutil.Process) -> float:
    try:
        times = proc.cpu_times()
        return float(times.user + times.system)
    except psutil.Error:
        return 0.0


def tree_cpu(proc: psutil.Process) -> float:
    """CPU seconds of `proc`'s children (a bridge's Spark JVM; PostgreSQL's backends), living ones only."""
    try:
        return sum(cpu(child) for child in proc.children(recursive=True))
    except psutil.Error:
        return 0.0


def machine_busy() -> float:
    """CPU seconds the whole machine spent busy since boot (all cores)."""
    t = psutil.cpu_times()
    return float(t.user + t.nice + t.system + t.irq + t.softirq + getattr(t, "steal", 0.0))


@dataclass
class Reading:
    """One poll: every bridge's /metrics and every process's CPU at one moment."""

    at: float
    committed: list[float]
    writes: list[float]
    rows: list[float]
    write_seconds: list[float]  # time in the executor (the write lane's busy time), per bridge
    receipt: list[dict[float, float]]
    threads: list[float]
    python: list[float]
    jvm: list[float]
    broker: float
    postgres: float
    machine: float
    xacts: int
    statements: int
    polls: int  # this benchmark's own look-ups of PostgreSQL so far (each one transaction)

    @property
    def total(self) -> float:
        return sum(self.committed)


def metrics(port: int) -> tuple[float, float, float, dict[float, float], float, float]:
    """(committed, bulks written, bulk rows, receipt-to-commit buckets, listener threads alive, seconds
    spent in the executor)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    totals: dict[str, float] = {}
    buckets: dict[float, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "mqbridge_receipt_to_commit_seconds_bucket":
                bound = float(sample.labels["le"])
                buckets[bound] = buckets.get(bound, 0.0) + sample.value
            else:
                totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return (totals.get("mqbridge_messages_committed_total", 0.0), totals.get("mqbridge_bulks_written_total", 0.0),
            totals.get("mqbridge_bulk_rows_total", 0.0), buckets, totals.get("mqbridge_listener_threads_alive", 0.0),
            totals.get("mqbridge_spark_write_seconds_total", 0.0))


def bridge_toml(home: Path, warehouse: Path, queue: str, port: int, broker: Broker, ledger_url: str) -> Path:
    """The product's defaults (the README's quick start: nothing tuned) with a Delta table in the shared
    warehouse and the shared ledger."""
    path = home / "bridge.toml"
    path.write_text(f"""
[bridge]
state_dir = "state"
plugin_dirs = []
[monitoring]
listen = "127.0.0.1:{port}"
[ledger]
url = "{ledger_url}"
[spark]
warehouse = "{warehouse}"
table_format = "delta"
jars_dir = "{ROOT / 'jars'}"
[types.bench]
[sources.src]
{broker.source_toml()}
[[listeners]]
source = "src"
queue = "{queue}"
message_type = "bench"
backout_queue = "{queue}.backout"
""")
    return path


class Bridges:
    """N `mqbridge run` processes on one queue; `read()` polls all of them and the shared servers."""

    def __init__(self, work: Path, n: int, queue: str, broker: Broker, broker_proc: psutil.Process | None,
                 pg_url: str, pg_proc: psutil.Process, db: object) -> None:
        self.work, self.broker_proc, self.pg_proc, self.db = work, broker_proc, pg_proc, db
        self.ports = [free_port() for _ in range(n)]
        self.procs: list[subprocess.Popen[bytes]] = []
        self.polls = 0
        self.threads: list[tuple[float, float]] = []  # (at, listener threads of all bridges) of every reading
        for i, port in enumerate(self.ports):
            home = work / f"bridge-{i}"
            home.mkdir(parents=True)
            config = bridge_toml(home, work / "landing", queue, port, broker, pg_url)
            with open(home / "bridge.log", "wb") as log:
                self.procs.append(subprocess.Popen([sys.executable, "-m", "mqbridge", "run", "--config", str(config)],
                                                   cwd=home, stdout=log, stderr=subprocess.STDOUT))
        self.ps = [psutil.Process(p.pid) for p in self.procs]

    def read(self) -> Reading | None:
        """A reading, or None while some bridge does not answer yet; raises if one exited."""
        for i, proc in enumerate(self.procs):
            if proc.poll() is not None:
                raise RuntimeError(f"bridge {i} exited with {proc.returncode}: see {self.work}/bridge-{i}/bridge.log")
        try:
            seen = [metrics(port) for port in self.ports]
        except OSError:
            return None
        xacts, statements = pg_counts(self.db)
        self.polls += 2
        self.threads.append((time.perf_counter(), sum(s[4] for s in seen)))
        return Reading(time.perf_counter(), [s[0] for s in seen], [s[1] for s in seen], [s[2] for s in seen],
                       [s[5] for s in seen], [s[3] for s in seen], [s[4] for s in seen], [cpu(p) for p in self.ps],
                       [tree_cpu(p) for p in self.ps], cpu(self.broker_proc) if self.broker_proc else 0.0,
                       cpu(self.pg_proc) + tree_cpu(self.pg_proc), machine_busy(), xacts, statements, self.polls)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.kill()


def standing_cores(a: Reading, b: Reading, n: int) -> float:
    """Cores one bridge's Python and JVM used between two readings, on average over the `n` bridges."""
    return (sum(b.python) + sum(b.jvm) - sum(a.python) - sum(a.jvm)) / (n * (b.at - a.at))


def wait_reading(bridges: Bridges, condition, timeout: float, what: str) -> Reading:  # type: ignore[no-untyped-def]
    """Poll every POLL seconds until `condition(reading)`; a TimeoutError naming `what` otherwise."""
    deadline = time.perf_counter() + timeout
    last = None
    while True:
        reading = bridges.read()
        if reading is not None:
            last = reading
            if condition(reading):
                return reading
        if time.perf_counter() > deadline:
            seen = f"committed {last.committed}" if last else "no /metrics answered"
            raise TimeoutError(f"{what} not reached after {timeout:.0f}s ({seen})")
        time.sleep(POLL)


def delta_commits(table: Path, since: float, until: float) -> int:
    """Versions of the table's log written between two wall-clock times (time.time())."""
    log = table / "_delta_log"
    return sum(1 for f in log.glob("*.json") if since <= f.stat().st_mtime <= until)


@dataclass
class Measured:
    n: int
    rate: float
    each: list[float]
    inputs: Inputs
    commits_per_s: float
    statements: float
    load_during: str


def run_n(n: int, args: argparse.Namespace, broker: Broker, pg_url: str, pg_proc: psutil.Process, db: object,
          extra: dict[str, float]) -> Measured:
    work = Path(tempfile.mkdtemp(prefix=f"mqbridge-scaling-{n}-"))
    queue = f"/queue/bench-scaling-{n}-{uuid.uuid4().hex[:8]}"
    print(f"-- N = {n}: load average before {load()}", flush=True)
    started = time.perf_counter()
    bridges = Bridges(work, n, queue, broker, broker.process(), pg_url, pg_proc, db)
    try:
        # every bridge up and committing: small puts until each has committed something
        deadline = time.perf_counter() + 300
        while True:
            reading = bridges.read()
            if reading is not None and all(c > 0 for c in reading.committed):
                break
            if time.perf_counter() > deadline:
                raise TimeoutError(f"not every bridge committed within 300 s: {reading.committed if reading else ''}")
            put(broker, queue, 50 * n, args.size)
            time.sleep(2)
        print(f"   every bridge committing {time.perf_counter() - started:.0f}s after start", flush=True)
        # what the bridges ask PostgreSQL while idle, per read of this benchmark: each /metrics scrape
        # reads the ledger's counters (and each control tick writes a heartbeat), not a message's cost
        idle0 = wait_reading(bridges, lambda r: True, 60, "a reading")
        idle1 = wait_reading(bridges, lambda r: r.at >= idle0.at + 4, 60, "4 s of idle readings")
        reads = (idle1.polls - idle0.polls) / 2
        idle_xacts = (idle1.xacts - idle0.xacts - (idle1.polls - idle0.polls)) / reads
        idle_statements = (idle1.statements - idle0.statements) / reads
        print(f"   idle: {idle_xacts:.1f} transactions, {idle_statements:.1f} statements per read of every "
              f"bridge's /metrics; each bridge just started keeps {standing_cores(idle0, idle1, n):.2f} cores busy "
              "(Python and JVM: its JIT still compiling)", flush=True)
        base = idle1.total
        tail = args.measure // 5
        put_started = time.perf_counter()
        put_rate = put(broker, queue, args.warm + args.measure + tail, args.size)
        put_ended = time.perf_counter()
        print(f"   put {args.warm + args.measure + tail:,} at {put_rate:,.0f} msg/s "
              f"({put_ended - put_started:.1f}s)", flush=True)
        first = wait_reading(bridges, lambda r: r.total >= base + args.warm and r.at >= put_ended, 600,
                             f"{base + args.warm:,.0f} committed")
        wall0 = time.time()
        last = wait_reading(bridges, lambda r: r.total >= base + args.warm + args.measure, 600,
                            f"{base + args.warm + args.measure:,.0f} committed")
        wall1 = time.time()
        during = load()
        # an idle bridge's own CPU, measured warm: after the tail is committed, at the thread count the window ran
        drained = wait_reading(bridges, lambda r: r.total >= base + args.warm + args.measure + tail, 600,
                               f"{base + args.warm + args.measure + tail:,.0f} committed (the tail)")
        idle2 = wait_reading(bridges, lambda r: r.at >= drained.at + IDLE_SETTLE, 60, "the bridges' last commits")
        idle3 = wait_reading(bridges, lambda r: r.at >= idle2.at + IDLE_SPAN, 60, f"{IDLE_SPAN:g} s of idle readings")
        standing = standing_cores(idle2, idle3, n)
        print(f"   idle after the run: each bridge keeps {standing:.2f} cores busy (Python and JVM)", flush=True)
    finally:
        bridges.stop()
    wall = last.at - first.at
    done = last.total - first.total
    each = [(b - a) / wall for a, b in zip(first.committed, last.committed, strict=True)]
    python = sum(last.python) - sum(first.python)
    jvm = sum(last.jvm) - sum(first.jvm)
    broker_cpu, pg_cpu = last.broker - first.broker, last.postgres - first.postgres
    ours = python + jvm + broker_cpu + pg_cpu
    others = (last.machine - first.machine) - ours
    cores = psutil.cpu_count() or 1
    writes = sum(last.writes) - sum(first.writes)
    rows = sum(last.rows) - sum(first.rows)
    window_reads = (last.polls - first.polls) / 2
    xacts = last.xacts - first.xacts - (last.polls - first.polls) - idle_xacts * window_reads
    statements = last.statements - first.statements - idle_statements * window_reads
    commits = delta_commits(work / "landing" / "bench", wall0, wall1)
    r2c = [histogram_quantile(0.5, a, b) for a, b in zip(first.receipt, last.receipt, strict=True)]
    r2c_mean = sum(x for x in r2c if x) / max(1, sum(1 for x in r2c if x))
    # the listener threads one bridge ran, on average over the bridges and the window's readings (every
    # POLL s): the adaptive law chooses them, and with them what one bridge holds in flight
    seen = [t for at, t in bridges.threads if first.at - POLL / 2 <= at <= last.at] or [sum(last.threads)]
    threads = sum(seen) / (len(seen) * n)
    inputs = Inputs(bridges=n, cores=cores, rate=done / wall, standing_cpu=standing,
                    free_cores=max(0.05, cores - others / wall), python_cpu=python / done,
                    jvm_cpu=jvm / done, broker_cpu=broker_cpu / done, postgres_cpu=pg_cpu / done,
                    in_flight=IN_FLIGHT_PER_THREAD * threads,
                    receipt_to_commit=r2c_mean, ledger_xacts=xacts / done, rows_per_commit=rows / max(writes, 1),
                    dispatch=extra["dispatch"], ledger_capacity=extra.get("ledger", float("inf")),
                    table_commits=extra.get("table", float("inf")),
                    table_log_commits=extra.get("table log", float("inf")))
    rate = done / wall
    print(f"   window {wall:.1f}s, {done:,.0f} messages: {rate:,.0f} msg/s; each bridge "
          + ", ".join(f"{r:,.0f}" for r in each) + " msg/s; threads at the end "
          + ", ".join(f"{t:.0f}" for t in last.threads) + f" (one bridge's mean over the window {threads:.1f})")
    print(f"   CPU-s per message (x1000): bridges' Python {1000 * inputs.python_cpu:.3f}, their JVMs "
          f"{1000 * inputs.jvm_cpu:.3f}, broker {1000 * inputs.broker_cpu:.3f}, PostgreSQL "
          f"{1000 * inputs.postgres_cpu:.3f}; the rest of the machine used {others / wall:.2f} of {cores} cores "
          f"(free {inputs.free_cores:.2f}); load average during {during}")
    lane = sum(last.write_seconds) - sum(first.write_seconds)
    print(f"   bulks written {writes:.0f}, {inputs.rows_per_commit:,.0f} rows each; Delta commits into the table "
          f"{commits} ({commits / wall:.2f}/s); receipt-to-commit p50 "
          + ", ".join(f"{x * 1000:,.0f} ms" if x else "-" for x in r2c))
    print(f"   write lane: {lane / max(writes, 1):.2f} s per bulk, busy {lane / (n * wall):.0%} of the window "
          f"(each bridge's executor time over the window, averaged); a bulk every "
          f"{n * wall / max(writes, 1):.2f} s per bridge")
    print(f"   PostgreSQL, less the idle reads': {xacts:.0f} transactions ({1000 * xacts / done:.2f} per 1000 "
          "messages, "
          f"{xacts / max(writes, 1):.1f} per bulk), {statements:.0f} statements ({1000 * statements / done:.2f} per "
          f"1000 messages, {statements / max(writes, 1):.1f} per bulk)", flush=True)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"   kept {work}")
    return Measured(n, rate, each, inputs, commits / wall, statements / done, during)


def dispatch(broker: Broker, args: argparse.Namespace) -> float:
    queue = f"/queue/bench-scaling-auto-{uuid.uuid4().hex[:8]}"
    put(broker, queue, args.warm + args.measure, args.size)
    return auto_ack_consumer(broker, queue, args.warm, args.measure, prefetch=500)


def with_pg_stat_statements(server: object, url: str) -> object:
    """pg_stat_statements loaded (a restart) and created; an autocommit connection for the counts."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as db:
        db.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
    server.restart()  # type: ignore[attr-defined]
    db = psycopg.connect(url, autocommit=True)
    db.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    return db


def commit_costs(work: Path, rows: int, most: int, seconds: float) -> None:
    """The writers bursts (`writers_burst`), printed: k = 1 .. `most` drivers committing bulks of `rows`
    rows into one table at once, and one driver with bulks of a quarter as many rows (what a row adds).
    Not an input of the model (docs/scaling.md, "What a commit costs with more writers"): what they
    say is whether a commit costs more because other writers commit into the same table."""
    bursts = []
    for k in range(1, most + 1):
        burst = writers_burst(work, k, rows, seconds)
        bursts.append(burst)
        print(f"writers burst ({k} at once, {rows:,} rows per commit): {burst.commits_per_s:.2f} commits/s in all, "
              f"{burst.seconds_per_commit:.2f} s and {burst.cpu_per_commit:.2f} CPU-s per commit; load average "
              f"{load()}", flush=True)
    small_rows = max(100, rows // 4)
    small = writers_burst(work / "small", 1, small_rows, seconds)
    span = max(rows - small_rows, 1)
    print(f"writers burst (1, {small_rows:,} rows per commit): {small.seconds_per_commit:.2f} s and "
          f"{small.cpu_per_commit:.2f} CPU-s per commit: a row adds "
          f"{1e6 * (bursts[0].seconds_per_commit - small.seconds_per_commit) / span:.0f} us and "
          f"{1e6 * (bursts[0].cpu_per_commit - small.cpu_per_commit) / span:.0f} CPU-us", flush=True)


def report(measured: list[Measured], extra: dict[str, float]) -> None:
    one = next(m for m in measured if m.n == 1)
    print("\nmodel: the N = 1 inputs predict each N (machine CPU: the free cores measured while that N ran; "
          "other work on the machine changes them, the bridges do not)")
    print(f"   shared: broker dispatch {extra['dispatch']:,.0f} msg/s; ledger {extra['ledger']:,.0f} transactions/s "
          f"(= {extra['ledger'] / one.inputs.ledger_xacts:,.0f} msg/s at N = 1's "
          f"{1000 * one.inputs.ledger_xacts:.2f} per 1000 messages); table {extra['table']:.2f} commits/s "
          f"for one writer, at most {extra['table log']:.1f} for all "
          f"(= {extra['table log'] * one.inputs.rows_per_commit:,.0f} msg/s at N = 1's "
          f"{one.inputs.rows_per_commit:,.0f} rows per commit)")
    print(" N  measured msg/s  predicted msg/s  error   limited by     terms (msg/s)")
    for m in measured:
        rate, limit, each = predict(one.inputs, m.n, free_cores=m.inputs.free_cores)
        own = ""
        if m.inputs.ledger_xacts > 0 and m.inputs.bridges * m.inputs.standing_cpu < m.inputs.free_cores:
            own_rate, own_limit, _ = predict(m.inputs, m.n)
            own = f"  (own inputs: {own_rate:,.0f}, {own_limit}, {error(own_rate, m.rate):+.0f}%)"
        print(f" {m.n}  {m.rate:>14,.0f}  {rate:>15,.0f}  {error(rate, m.rate):>+5.0f}%  {limit:<13}  "
              + ", ".join(f"{k} {v:,.0f}" for k, v in each.items()) + own)
    print("\nbridges on separate hosts (2 cores each; the broker, the ledger and the table shared), "
          "from the N = 1 inputs, each bridge's bulks closed at `latency` (the default 1s, and 10s):")
    for latency in (1.0, 10.0):
        for n in (1, 3, 10, 100):
            rate, limit, each = separate_hosts(one.inputs, n, host_cores=2, latency=latency)
            print(f" latency {latency:>2.0f}s {n:>3} bridges  {rate:>10,.0f} msg/s, limited by {limit}: "
                  + ", ".join(f"{k} {v:,.0f}" for k, v in each.items()))
    per_bridge = separate_hosts(one.inputs, 1, host_cores=2)[0]
    print(f"   one bridge alone on 2 cores: {per_bridge:,.0f} msg/s; the ledger is used up at "
          f"{extra['ledger'] / (one.inputs.ledger_xacts * per_bridge):.1f} such bridges, the broker's dispatch at "
          f"{extra['dispatch'] / per_bridge:.1f}; the table's {extra['table log']:.1f} commits/s at "
          f"{extra['table log']:.0f} bridges x latency in seconds (one commit per bridge per latency)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bridges", default="1,2,3", help="the N to run, comma separated (1 must be among them)")
    parser.add_argument("--warm", type=int, default=10_000, help="W: messages committed before the window")
    parser.add_argument("--measure", type=int, default=30_000, help="M: messages in the timed window")
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--port", type=int, default=61613, help="ActiveMQ's STOMP port on 127.0.0.1")
    parser.add_argument("--ledger-seconds", type=float, default=8.0)
    parser.add_argument("--table-seconds", type=float, default=20.0)
    parser.add_argument("--table-rows", type=int, default=100, help="rows per commit of the table burst")
    parser.add_argument("--writers-seconds", type=float, default=15.0,
                        help="each writers burst's timed part (k = 1 .. the largest N writers at once)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: N = 1, 2; W 2,000, M 6,000; short bursts")
    parser.add_argument("--keep", action="store_true", help="keep each N's work directory")
    args = parser.parse_args()
    if args.quick:
        args.bridges, args.warm, args.measure = "1,2", 2_000, 6_000
        args.ledger_seconds, args.table_seconds, args.writers_seconds = 3.0, 6.0, 6.0
    ns = [int(x) for x in args.bridges.split(",")]
    if 1 not in ns:
        parser.error("--bridges must include 1: its inputs predict the others")
    from tests.support.postgres import postgres_server

    began = time.perf_counter()
    broker = Broker("activemq", args.port)
    print(f"scaling: N = {args.bridges} `mqbridge run` processes (plain, this machine), W {args.warm:,} then M "
          f"{args.measure:,} messages x {args.size} B, ActiveMQ :{args.port}, Delta table (local warehouse), "
          f"PostgreSQL ledger; {psutil.cpu_count()} cores; load average {load()}", flush=True)
    with postgres_server() as server:
        db = with_pg_stat_statements(server, server.url)
        pg_proc = psutil.Process(int((server.data / "postmaster.pid").read_text().split()[0]))
        extra = {"dispatch": dispatch(broker, args)}
        print(f"broker dispatch (auto-ack consumer): {extra['dispatch']:,.0f} msg/s; load average {load()}",
              flush=True)
        measured = [run_n(1, args, broker, server.url, pg_proc, db, extra)]
        rows = max(1, round(measured[0].inputs.rows_per_commit))
        xps, sps, cycles = ledger_burst(server.url, db, rows, writers=4, seconds=args.ledger_seconds)
        extra["ledger"] = xps
        print(f"ledger burst (4 writers, {rows:,} identities per bulk): {xps:,.0f} transactions/s, {sps:,.0f} "
              f"statements/s, {cycles:,.1f} bulk cycles/s; load average {load()}", flush=True)
        for n in ns:
            if n != 1:
                measured.append(run_n(n, args, broker, server.url, pg_proc, db, extra))
        db.close()  # type: ignore[attr-defined]
    work = Path(tempfile.mkdtemp(prefix="mqbridge-scaling-table-"))
    try:
        per_s, median, log_part, count = table_burst(work, args.table_rows, args.table_seconds)
        commit_costs(work, rows, max(ns), args.writers_seconds)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    extra["table"], extra["table log"] = per_s, 1 / max(log_part, 1e-3)
    print(f"table burst ({args.table_rows} rows per commit, one driver, fence look-up on): {per_s:.2f} commits/s, "
          f"median {median * 1000:,.0f} ms each, of which the log part {log_part * 1000:,.0f} ms "
          f"(<= {extra['table log']:.1f} commits/s for all writers); {count} commits; load average {load()}",
          flush=True)
    for m in measured:  # the bursts came after some runs: their inputs get the ceilings now
        m.inputs = replace(m.inputs, ledger_capacity=extra["ledger"], table_commits=per_s,
                           table_log_commits=extra["table log"])
    report(measured, extra)
    print(f"\nwhole run {time.perf_counter() - began:.0f}s; load average at the end {load()}")


if __name__ == "__main__":
    main()
