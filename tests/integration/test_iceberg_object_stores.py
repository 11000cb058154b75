"""Iceberg tables on an object store: `[spark] warehouse = "s3a://bucket/wh"` on the shared S3-compatible
server (S3Proxy, `scripts/s3.sh`), the catalog a JDBC catalog on a real PostgreSQL (an object-store
warehouse needs a catalog server: `config.iceberg.store_problems`). A real `mqbridge run` with its own
Spark driver, the Iceberg and S3A jars (`scripts/jars.sh iceberg s3`), Iceberg's HadoopFileIO through S3A
with the S3 secret only through `${FILE:…}`, on a real ActiveMQ: killed with SIGKILL at each step of the
landing protocol whose recovery reads the table in turn, then its state_dir wiped and every message sent
again (the ledger rebuilt from the table through the catalog). Every message must be in the table exactly
once as pyiceberg (an independent reader: the catalog on PostgreSQL, the files over the S3 API) sees it,
and `ledger --verify` and `tables` read it with the S3 settings the bridge maps from its S3A keys; then
`mqbridge compact` rewrites its small files into one and `mqbridge purge` deletes a quarter of its rows
(position deletes) on S3, every other row kept once. And a table template's tables there, found by
`mqbridge tables` and by the ledger's rebuild after a wiped state_dir (nothing lands twice). And a wrong
secret is an outage that names the keys and loses nothing, met by the first write or by the ledger's
rebuild from a table there."""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.amq import AmqClient, unique_queue
from tests.support.configs import BridgeToml
from tests.support.delta_tables import JARS
from tests.support.exactly_once import account, bodies
from tests.support.iceberg_tables import ICEBERG_SPARK, iceberg_rows, killed_at_each_step_then_wiped
from tests.support.object_stores import S3_REGION, S3Server
from tests.support.processes import mqbridge, run_until_idle, run_until_said, stomp_bridge

pytestmark = pytest.mark.integration

pytest.importorskip("pyiceberg")

#: Every fourth message sent (bodies `is3-00000:…`, `is3-00004:…`, …): `mqbridge purge --where` designates them.
EVERY_FOURTH = "cast(cast(substring(body, 5, 5) AS STRING) AS INT) % 4 = 0"


@pytest.fixture(scope="module", autouse=True)
def _jars() -> None:
    for name, jar in (("iceberg", "iceberg-spark-runtime-*.jar"), ("s3", "hadoop-aws-*.jar")):
        if not any((JARS / name).glob(jar)):
            pytest.fail(f"the {name} jars are missing from {JARS / name}: run scripts/jars.sh {name}")


@pytest.fixture(scope="module")
def postgres() -> Iterator[object]:
    from tests.support.postgres import postgres_server

    with postgres_server() as server:
        yield server


def s3_iceberg_config(tmp_path: Path, queue: str, s3: S3Server, bucket: str, port: int, *,
                      secret: str | None = None, namespace: str = "mqbridge") -> Path:
    """`s3_iceberg_bridge` written to `<tmp_path>/bridge.toml`."""
    return s3_iceberg_bridge(tmp_path, queue, s3, bucket, port, secret=secret, namespace=namespace).write(
        tmp_path / "bridge.toml")


def s3_iceberg_bridge(tmp_path: Path, queue: str, s3: S3Server, bucket: str, port: int, *,
                      secret: str | None = None, namespace: str = "mqbridge") -> BridgeToml:
    """A bridge landing `queue` (one thread, units of 25, identity the body's hash) into the Iceberg table
    `orders` under s3a://<bucket>/wh, its catalog the JDBC catalog on the PostgreSQL at `port`; the S3
    secret key (`secret`, else the server's) and the catalog's password each read from a private file
    by `${FILE:…}`; the catalog's tables in `namespace`; for `mqbridge purge` and `compact`, an
    operator's equal per-row purge costs, snapshots kept 0 s, 2 small files compact a partition."""
    from tests.support.postgres import PASSWORD, USER

    files = {}
    for name, value in (("s3-secret", secret or s3.secret_key), ("catalog-password", PASSWORD)):
        files[name] = tmp_path / name
        files[name].write_text(value)
        files[name].chmod(0o600)
    conf = {**s3.spark_conf(), "spark.hadoop.fs.s3a.secret.key": f"${{FILE:{files['s3-secret']}}}"}
    spark = (ICEBERG_SPARK + f'\n[spark.iceberg]\ncatalog = "jdbc"\nuri = "jdbc:postgresql://127.0.0.1:{port}/postgres"'
             f'\nuser = "{USER}"\npassword = "${{FILE:{files["catalog-password"]}}}"\nnamespace = "{namespace}"\n')
    return (stomp_bridge(queue, spark=spark, threads=1, batch=25).every_listener(identity="body-sha256")
            .set("spark", warehouse=f"s3a://{bucket}/wh", until_idle_outage_limit="20s")
            .set("purge", delete_row_seconds=1e-5, copy_row_seconds=1e-5, container_seconds=0, vacuum_retention="0s")
            .set("compaction", small_files=2)
            .set("spark.conf", **conf))


def data_files(catalog: dict[str, str], table: str = "orders") -> int:
    """The data files of the table's current snapshot, as pyiceberg reads its manifests on S3."""
    from pyiceberg.catalog import load_catalog

    return len(load_catalog("mqbridge", **catalog).load_table(("mqbridge", table)).inspect.files())


def pyiceberg_catalog(s3: S3Server, port: int) -> dict[str, str]:
    """pyiceberg's properties of the bridge's catalog on PostgreSQL, its files read over the S3 API."""
    from tests.support.postgres import PASSWORD, USER

    return {"type": "sql", "init_catalog_tables": "false",
            "uri": f"postgresql+psycopg://{USER}:{PASSWORD}@127.0.0.1:{port}/postgres",
            "s3.endpoint": s3.endpoint, "s3.region": S3_REGION, "s3.force-virtual-addressing": "false",
            "s3.access-key-id": s3.access_key, "s3.secret-access-key": s3.secret_key}


@pytest.mark.timeout(900)
def test_a_bridge_killed_at_each_step_lands_every_message_once_into_an_iceberg_table_on_s3(
        tmp_path: Path, amq: AmqClient, s3_server: S3Server, postgres: object) -> None:
    # Given 150 messages and a bridge landing them into an Iceberg table on S3, its catalog on PostgreSQL
    from tests.support.postgres import PASSWORD

    port = postgres.port  # type: ignore[attr-defined]
    q = unique_queue("iceberg-s3-kills")
    sent = bodies(150, "is3")
    amq.put_many(q, sent)
    config = s3_iceberg_config(tmp_path, q, s3_server, s3_server.new_bucket("iceberg"), port)
    # When it is killed at each step of the landing protocol whose recovery reads the table on S3 in turn
    # (after_prepare, after_publish, before_source_commit: tests/integration/test_iceberg_landing.py kills it
    # at every step on a local warehouse), and then its state_dir is wiped and every message sent again:
    # every message is in the table on S3 exactly once, the queue and its backout queue empty (the
    # helper's assertions)
    out = killed_at_each_step_then_wiped(config, amq, q, sent, pyiceberg_catalog(s3_server, port),
                                         every_step=False)
    # And the bridge's own reader without Spark (pyiceberg with the S3 settings it maps from the S3A keys)
    # finds one row per identity of every published bulk in the table on S3, and lists its partitions
    verified = mqbridge("ledger", "--config", str(config), "--verify")
    verify_out, _ = verified.communicate(timeout=120)
    assert verified.returncode == 0 and "verify: OK (" in verify_out, verify_out[-3000:]
    listed = mqbridge("tables", "--config", str(config))
    tables_out, _ = listed.communicate(timeout=120)
    assert listed.returncode == 0 and "Iceberg table, snapshot" in tables_out, tables_out[-3000:]
    catalog = pyiceberg_catalog(s3_server, port)
    files_before = data_files(catalog)
    assert files_before > 2, files_before  # a file per bulk: small files to compact
    # When `mqbridge compact` runs (rewrite_data_files sorted by put_timestamp on S3, then the snapshots
    # before it expired: `vacuum_retention` 0 s)
    compacted = mqbridge("compact", "--config", str(config))
    compact_out, _ = compacted.communicate(timeout=300)
    # Then the partition is one file, and every message is still in the table exactly once
    assert compacted.returncode == 0 and "action compact" in compact_out and "1 files after" in compact_out, (
        compact_out[-4000:])
    assert data_files(catalog) == 1
    assert account(sent, iceberg_rows(catalog)).clean
    # When `mqbridge purge` deletes every fourth message (position deletes written to S3)
    purged = mqbridge("purge", "--config", str(config), "--where", EVERY_FOURTH, "--strategy", "delete")
    purge_out, _ = purged.communicate(timeout=300)
    # Then exactly those rows left the table, every other row is there once
    assert purged.returncode == 0 and "designated 38/150" in purge_out and "strategy delete  measured" in purge_out, (
        purge_out[-4000:])
    assert account(sent[1::4] + sent[2::4] + sent[3::4], iceberg_rows(catalog)).clean
    # And no secret was in any output
    for text in (out, verify_out, tables_out, compact_out, purge_out):
        assert s3_server.secret_key not in text and PASSWORD not in text


def test_a_table_templates_iceberg_tables_on_s3_are_found_by_tables_and_by_the_ledgers_rebuild(
        tmp_path: Path, amq: AmqClient, s3_server: S3Server, postgres: object) -> None:
    # Given 10 messages on each of two queues, landed by one type whose table is a template
    # (`q_{destination}`) into two Iceberg tables on S3 (its catalog on PostgreSQL, a namespace of its own)
    port = postgres.port  # type: ignore[attr-defined]
    by_queue = {f"/queue/itpl_{uuid.uuid4().hex[:8]}": bodies(10, f"itpl{n}") for n in range(2)}
    for queue, sent in by_queue.items():
        amq.put_many(queue, sent)
    rendered = {f"q_{queue.removeprefix('/queue/')}": sent for queue, sent in by_queue.items()}
    first, second = by_queue
    bridge = (s3_iceberg_bridge(tmp_path, first, s3_server, s3_server.new_bucket("itemplate"), port,
                                namespace="templates")
              .add("types.orders", 'table = "q_{destination}"')
              .listener(source="amq", queue=second, threads=1, batch=25, wait="200ms", message_type="orders",
                        backout_queue=f"{second}.backout", identity="body-sha256"))
    config = bridge.write(tmp_path / "bridge.toml")
    catalog = pyiceberg_catalog(s3_server, port)
    run_until_idle(config)
    for table, sent in rendered.items():
        assert account(sent, iceberg_rows(catalog, table, namespace="templates")).clean, table
    # When `mqbridge tables` lists the type's tables
    listed = mqbridge("tables", "--config", str(config))
    tables_out, _ = listed.communicate(timeout=120)
    # Then it finds both rendered tables on the store (listed, and each a table of the catalog)
    assert listed.returncode == 0 and tables_out.count("Iceberg table, snapshot") == 2, tables_out[-3000:]
    for table in rendered:
        assert f"  {table}  (Iceberg table" in tables_out, tables_out[-3000:]
    # When its state_dir is wiped (a replaced disk) and every message is delivered again
    shutil.rmtree(tmp_path / "state")
    for queue, sent in by_queue.items():
        amq.put_many(queue, sent)
    out = run_until_idle(config)
    # Then the ledger is rebuilt from both tables, and nothing lands twice
    assert "ledger rebuilt from the tables: 20 identities" in out, out[-4000:]
    for table, sent in rendered.items():
        result = account(sent, iceberg_rows(catalog, table, namespace="templates"))
        assert result.clean, f"{table}: {result}\n{out[-6000:]}"
    for queue in by_queue:
        assert amq.depth(queue) == 0 and amq.depth(queue + ".backout") == 0


def test_a_wrong_secret_is_an_outage_of_the_iceberg_table_on_s3_that_names_the_keys(
        tmp_path: Path, amq: AmqClient, s3_server: S3Server, postgres: object) -> None:
    # Given messages and a bridge whose S3 secret key is wrong (its catalog on PostgreSQL answers, in a
    # namespace of its own: with no table there its first write meets the refusal, not a ledger rebuild
    # reading the kill test's table, which named it only after about 95 s of retries)
    q = unique_queue("iceberg-s3-wrong-secret")
    sent = bodies(30, "iwrong")
    amq.put_many(q, sent)
    wrong = "not-the-secret-0123456789abcdefghijklmnop"
    bucket = s3_server.new_bucket("isecret")
    port = postgres.port  # type: ignore[attr-defined]
    config = s3_iceberg_config(tmp_path, q, s3_server, bucket, port, secret=wrong, namespace="wrong_secret")
    # When it runs: it says which keys to check, within a bounded time
    out = run_until_said(config, "refused the credentials", tmp_path / "bridge.log", 240)
    # Then the reason names the keys; every message is still on its queue (an outage is never poison:
    # nothing on the backout queue); no secret in the output
    assert "spark.hadoop.fs.s3a.access.key / secret.key" in out, out[-4000:]
    assert amq.depth(q) == len(sent) and amq.depth(q + ".backout") == 0
    assert wrong not in out and s3_server.secret_key not in out


#: Iceberg reads a table's metadata file with 20 tries whatever the error, its back-off sleeps alone
#: 87.1 s (100 ms times 4 per try, at most 5 s: `BaseMetastoreTableOperations.refreshFromMetadataLocation`).
#: A bridge whose ledger rebuild met a refused key only there named it about 95 s after its start; asked
#: of the store first (`iceberg.store_answers`), it must within this, its start included.
REBUILD_BOUND = 80.0


def test_a_wrong_secret_met_by_the_ledger_rebuild_from_an_iceberg_table_on_s3_is_named_before_icebergs_retries(
        tmp_path: Path, amq: AmqClient, s3_server: S3Server, postgres: object) -> None:
    # Given an Iceberg table on S3 a bridge landed messages into (its catalog on PostgreSQL, a namespace
    # of its own), then its state_dir wiped (the next start rebuilds the ledger by reading the table)
    port = postgres.port  # type: ignore[attr-defined]
    q = unique_queue("iceberg-s3-rebuild-secret")
    amq.put_many(q, bodies(10, "irebuilt"))
    bucket = s3_server.new_bucket("irebuild")
    config = s3_iceberg_config(tmp_path, q, s3_server, bucket, port, namespace="rebuild_secret")
    run_until_idle(config)
    assert amq.depth(q) == 0
    shutil.rmtree(tmp_path / "state")
    # ... and more messages, and the S3 secret key now wrong
    sent = bodies(20, "irebuild-wrong")
    amq.put_many(q, sent)
    wrong = "not-the-secret-0123456789abcdefghijklmnop"
    config = s3_iceberg_config(tmp_path, q, s3_server, bucket, port, secret=wrong, namespace="rebuild_secret")
    # When it runs: it says which keys to check before Iceberg's own retries of the table's read could end
    started = time.monotonic()
    out = run_until_said(config, "refused the credentials", tmp_path / "bridge.log", REBUILD_BOUND)
    print(f"named after {time.monotonic() - started:.0f} s (the bridge's start included)")
    # Then the reason names the keys; every new message is still on its queue (the ledger unavailable
    # is an outage, never poison: nothing on the backout queue); no secret in the output
    assert "spark.hadoop.fs.s3a.access.key / secret.key" in out, out[-4000:]
    assert amq.depth(q) == len(sent) and amq.depth(q + ".backout") == 0
    assert wrong not in out and s3_server.secret_key not in out
