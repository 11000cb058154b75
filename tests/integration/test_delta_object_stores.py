"""Delta tables where the data lives: `[spark] warehouse = "s3a://bucket/prefix"` on a real S3-compatible
server (S3Proxy, `scripts/s3.sh`) and `hdfs://…` on Hadoop's own mini cluster (`scripts/hdfs.sh`), both
started by the session's fixtures. A real `mqbridge run` with its own Spark driver, the Delta and S3A
jars, the secret key only through `${FILE:…}`, on a real ActiveMQ; killed with SIGKILL at each step of
the landing protocol whose recovery touches the store in turn, each start recovering what the kill before
left, then run until idle: every message in the table exactly once as delta-rs (an independent reader)
sees it. And a wrong secret, an endpoint that accepts connections and never answers (a few lines of
Python here), or a closed port while a lost ledger's rebuild lists the tables a template rendered
(delta-rs), is an outage of the sink, named within a bounded time, that loses nothing."""

from __future__ import annotations

import collections
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.amq import AmqClient, unique_queue
from tests.support.delta_tables import DELTA_SPARK, JARS
from tests.support.exactly_once import account, bodies
from tests.support.object_stores import S3Server
from tests.support.processes import killed_in_turn, run_until_idle, run_until_killed, run_until_said, stomp_bridge

pytestmark = pytest.mark.integration

deltalake = pytest.importorskip("deltalake")


@pytest.fixture(scope="module", autouse=True)
def _jars() -> None:
    for name in ("delta", "s3"):
        if not (JARS / name).is_dir():
            pytest.fail(f"the {name} jars are missing from {JARS / name}: run scripts/jars.sh {name}")


#: How long a bridge whose S3 endpoint accepts connections and never answers may take to say so, its
#: start included (each S3 request given up after the 15 s of `mqbridge.landing.object_stores.S3A_CONF`).
SILENT_BOUND = 420.0


def s3_config(tmp_path: Path, queue: str, s3: S3Server, bucket: str, *, secret: str | None = None) -> Path:
    """A bridge landing `queue` into the Delta table `orders` under s3a://<bucket>/wh; the secret key
    (`secret`, else the server's) read from a private file by `${FILE:…}`."""
    secret_file = tmp_path / "s3-secret"
    secret_file.write_text(secret or s3.secret_key)
    secret_file.chmod(0o600)
    conf = {**s3.spark_conf(), "spark.hadoop.fs.s3a.secret.key": f"${{FILE:{secret_file}}}"}
    return (stomp_bridge(queue, spark=DELTA_SPARK).set("spark", warehouse=f"s3a://{bucket}/wh",
                                                       until_idle_outage_limit="20s")
            .set("spark.conf", **conf).write(tmp_path / "bridge.toml"))


def hdfs_rows(location: str) -> collections.Counter[bytes]:
    """The bodies in the Delta table at `location` (hdfs://…), read by delta-rs (its own HDFS client:
    another reader than the bridge's Spark)."""
    import deltalake

    return collections.Counter(deltalake.DeltaTable(location).to_pyarrow_table(columns=["body"])
                               .column("body").to_pylist())


#: The steps of the landing protocol a bridge is killed at, in turn, in one run of the test below: those
#: whose recovery touches the table on the store (its staged files, the fence, the log read). Not
#: before_source_commit: its recovery is the ledger's alone (the redelivered messages recognised as
#: landed), which tests/integration/test_delta_landing.py kills at on a local warehouse.
STEPS = ("after_stage", "after_prepare", "after_publish")


@pytest.mark.timeout(900)
def test_a_bridge_killed_at_each_step_lands_every_message_once_into_a_delta_table_on_s3(
        tmp_path: Path, amq: AmqClient, s3_server: S3Server) -> None:
    # Given 600 messages and a bridge landing into a Delta table on S3
    q = unique_queue("s3-steps")
    sent = bodies(600, "steps")
    amq.put_many(q, sent)
    bucket = s3_server.new_bucket("kill")
    config = s3_config(tmp_path, q, s3_server, bucket)
    # When it is killed at each step of the landing in turn (each start recovers what the kill before left,
    # then dies at the next step), then runs until idle
    runs = killed_in_turn(config, STEPS)
    # Then every message is in the table on S3 exactly once: 0 lost, 0 duplicated, 0 unexpected
    result = account(sent, s3_server.delta_bodies(bucket))
    assert result.clean, f"{result}\n{runs.last[-4000:]}"
    assert amq.depth(q) == 0 and amq.depth(q + ".backout") == 0
    # ... a start after the kill after_prepare fenced that bulk's version, one after the kill after_publish
    # found its commit in the log
    assert "never committed into table orders: fenced and rolled back" in runs.after["after_prepare"], runs.last[-4000:]
    assert "had committed into table orders: recorded published" in runs.after["after_publish"], runs.last[-4000:]
    # And the secret was in no output and on no command line
    assert s3_server.secret_key not in runs.every


@pytest.mark.timeout(600)
def test_a_bridge_killed_after_its_commit_lands_every_message_once_into_a_delta_table_on_hdfs(
        tmp_path: Path, amq: AmqClient, hdfs_cluster: str) -> None:
    # Given a bridge landing into a Delta table on HDFS, killed after its commit, before the ledger knew
    q = unique_queue("hdfs-after-publish")
    sent = bodies(600, "hdfs")
    amq.put_many(q, sent)
    warehouse = f"{hdfs_cluster}/mqbridge-{q.rsplit('/', 1)[-1]}"
    config = (stomp_bridge(q, spark=DELTA_SPARK).set("spark", warehouse=warehouse)
              .write(tmp_path / "bridge.toml"))
    run_until_killed(config, "after_publish")
    # When it is started again
    out = run_until_idle(config)
    # Then the table's log decided the bulk, and every message is in the table exactly once
    assert "had committed into table orders: recorded published" in out, out[-4000:]
    rows = hdfs_rows(f"{warehouse}/orders")
    result = account(sent, rows)
    assert result.clean, f"{result}\n{out[-4000:]}"
    assert amq.depth(q) == 0 and amq.depth(q + ".backout") == 0


def test_a_wrong_secret_is_an_outage_that_names_the_key_and_loses_nothing(
        tmp_path: Path, amq: AmqClient, s3_server: S3Server) -> None:
    # Given messages and a bridge whose S3 secret key is wrong (a first start: its new ledger waits to
    # be rebuilt from the table, which the store refuses to show; the sink's probe is refused too)
    q = unique_queue("s3-wrong-secret")
    sent = bodies(50, "wrong")
    amq.put_many(q, sent)
    bucket = s3_server.new_bucket("secret")
    wrong = "not-the-secret-0123456789abcdefghijklmnop"
    config = s3_config(tmp_path, q, s3_server, bucket, secret=wrong)
    # When it runs: it says which keys to check, within a bounded time
    out = run_until_said(config, "refused the credentials", tmp_path / "bridge.log", 180)
    # Then the reason names the keys; every message is still on its queue (an outage is never
    # poison: nothing on the backout queue); no secret in the output
    assert "spark.hadoop.fs.s3a.access.key / secret.key" in out, out[-4000:]
    assert amq.depth(q) == len(sent) and amq.depth(q + ".backout") == 0
    assert wrong not in out and s3_server.secret_key not in out


def test_a_store_refusing_the_listing_of_a_templates_tables_is_an_outage_of_the_ledgers_rebuild(
        tmp_path: Path, amq: AmqClient, s3_server: S3Server) -> None:
    # Given messages and a first start (a new ledger, rebuilt from the tables before any message is
    # answered for) of a bridge whose type's table is a template, so that the rebuild lists the store for
    # the tables it rendered (delta-rs's client), and whose S3 endpoint is a closed local port
    q = unique_queue("s3-closed-listing")
    sent = bodies(20, "closed")
    amq.put_many(q, sent)
    with socket.socket() as probe:  # a port nothing listens on: bound, then closed again
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    config = (stomp_bridge(q, spark=DELTA_SPARK).set("spark", warehouse="s3a://closed-bucket/wh")
              .set("spark.conf", **{**s3_server.spark_conf(), "spark.hadoop.fs.s3a.endpoint": closed})
              .add("types.orders", 'table = "t_{destination}"').write(tmp_path / "bridge.toml"))
    # When it runs: the rebuild's listing fails
    out = run_until_said(config, "the ledger cannot be rebuilt", tmp_path / "bridge.log", 180)
    # Then the rebuild names the store's outage as the sink's write would (not delta-rs's text as it is)
    line = next(line for line in out.splitlines() if "the ledger cannot be rebuilt" in line)
    assert (f"the object store endpoint {closed} is unreachable for bucket closed-bucket (connection refused): "
            "check that it runs and [spark.conf] spark.hadoop.fs.s3a.endpoint") in line, line
    # ... and every message is still on its queue (an outage, never poison); no secret in the output
    assert amq.depth(q) == len(sent) and amq.depth(q + ".backout") == 0
    assert s3_server.secret_key not in out


@pytest.fixture()
def silent_endpoint() -> Iterator[str]:
    """The http:// endpoint of a TCP server that accepts every connection and never answers (nor reads)."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, name="silent-endpoint", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        for conn in [*held, server]:
            conn.close()


@pytest.mark.timeout(600)
def test_an_endpoint_that_accepts_and_never_answers_is_an_outage_named_within_a_bound(
        tmp_path: Path, amq: AmqClient, s3_server: S3Server, silent_endpoint: str) -> None:
    # Given messages and a bridge whose S3 endpoint accepts connections and never answers (a hung
    # server or proxy); with the timeouts of S3A before this bound a write still waited after 15 minutes
    q = unique_queue("s3-silent")
    sent = bodies(20, "silent")
    amq.put_many(q, sent)
    config = s3_config(tmp_path, q, s3_server, "silent-bucket")
    # (stopped once it said so, with a listener thread still waiting on the endpoint: a shutdown deadline
    # of 5 s, not the default 30 s, which this test would otherwise wait out; the bound is the naming)
    text = config.read_text().replace(s3_server.endpoint, silent_endpoint)
    config.write_text(text.replace("[bridge]\n", '[bridge]\nshutdown_timeout = "5s"\n', 1))
    # When it runs: within a bounded time it says that the endpoint does not answer
    started = time.monotonic()
    out = run_until_said(config, "does not answer", tmp_path / "bridge.log", SILENT_BOUND)
    print(f"named after {time.monotonic() - started:.0f} s (the bridge's start included)")
    # Then the reason names the endpoint and the key; every message is still on its queue (an outage,
    # never poison: nothing on the backout queue); no secret in the output
    assert (f"the object store endpoint {silent_endpoint} does not answer for bucket silent-bucket" in out
            and "spark.hadoop.fs.s3a.endpoint" in out), out[-4000:]
    with AmqClient() as fresh:  # (a new connection: the shared broker may have restarted meanwhile)
        assert fresh.depth(q) == len(sent) and fresh.depth(q + ".backout") == 0
    assert s3_server.secret_key not in out
