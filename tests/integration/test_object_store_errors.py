"""A bridge's own Spark driver on an object store and HDFS, as `mqbridge run` starts it (`_spark_section`:
Delta, the S3A jars, the bridge's S3A and HDFS client settings; the S3 secret read from `${FILE:}`),
against the real S3 server of the tests (S3Proxy, scripts/s3.sh) and closed ports, one driver in a
child process shared by the module (`tests.support.bridge_spark`): it lands with the configured keys
while the secret is on neither its command line nor in its environment; and the failures a write
meets become the bridge's outage reasons (`object_store_outage` of the live exception): an endpoint
that refuses connections fails within 60 s (with S3A's own retries it took 616 s,
test_object_store_facts.py) naming the endpoint, a wrong secret names the keys to check, a missing
bucket names the bucket, a namenode that is down fails within 60 s naming it; none holds a secret.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psutil
import pytest

from mqbridge.config.warehouse import ObjectStoreUri
from mqbridge.landing.object_stores import HDFS_CONF, S3A_CONF, SIMPLE_PROVIDER, session_conf
from tests.support.bridge_spark import BridgeSpark
from tests.support.configs import orders
from tests.support.exactly_once import free_port
from tests.support.object_stores import S3_REGION, S3Server
from tests.support.processes import ROOT

pytestmark = pytest.mark.integration

#: The bound this module proves for a store that cannot be reached (S3A's defaults: 616 s).
BOUND = 60.0


@pytest.fixture(scope="module")
def bucket(s3_server: S3Server) -> str:
    """The bucket of the bridge's warehouse."""
    return s3_server.new_bucket("errors")


@pytest.fixture(scope="module")
def bridge_spark(s3_server: S3Server, bucket: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BridgeSpark]:
    """The Spark session of a bridge whose warehouse is s3a://`bucket`/landing, its S3 secret in a file."""
    folder = tmp_path_factory.mktemp("object-store-errors")
    secret = folder / "s3-secret"
    secret.write_text(s3_server.secret_key)
    secret.chmod(0o600)
    config = (orders().set("spark", warehouse=f"s3a://{bucket}/landing", table_format="delta",
                           jars_dir=str(ROOT / "jars"))
              .set("spark.conf", **{"spark.hadoop.fs.s3a.endpoint": s3_server.endpoint,
                                    "spark.hadoop.fs.s3a.endpoint.region": S3_REGION,
                                    "spark.hadoop.fs.s3a.path.style.access": "true",
                                    "spark.hadoop.fs.s3a.access.key": s3_server.access_key,
                                    "spark.hadoop.fs.s3a.secret.key": f"${{FILE:{secret}}}"})
              .write(folder / "bridge.toml"))
    driver = BridgeSpark(config, folder)
    yield driver
    driver.close()


def test_the_bridges_driver_lands_with_the_keys_kept_off_its_command_line(
        bridge_spark: BridgeSpark, bucket: str, s3_server: S3Server) -> None:
    outcome = bridge_spark.append(f"s3a://{bucket}/landing/orders")
    assert outcome["ok"], outcome.get("chain")
    # The bridge's settings: only the configured keys, bounded retries.
    assert bridge_spark.setting("spark.hadoop.fs.s3a.aws.credentials.provider") == SIMPLE_PROVIDER
    for key in ("spark.hadoop.fs.s3a.retry.limit", "spark.hadoop.fs.s3a.attempts.maximum"):
        assert bridge_spark.setting(key) == S3A_CONF[key]
    driver = psutil.Process(bridge_spark.driver_pid())
    for process in (driver, driver.parent()):
        assert process is not None
        assert not any(s3_server.secret_key in arg for arg in process.cmdline())
        assert not any(s3_server.secret_key in value for value in process.environ().values())


def test_an_endpoint_that_refuses_connections_fails_a_write_within_60_s_naming_it(bridge_spark: BridgeSpark) -> None:
    bucket = f"errors-unreachable-{uuid.uuid4().hex[:8]}"
    endpoint = f"http://127.0.0.1:{free_port()}"
    outcome = bridge_spark.append(f"s3a://{bucket}/landing/orders", {f"fs.s3a.bucket.{bucket}.endpoint": endpoint},
                                  timeout=600)
    assert not outcome["ok"]
    print(f"a closed port failed the write after {outcome['seconds']:.1f} s: {outcome['reason']}")
    assert outcome["seconds"] < BOUND, outcome
    assert outcome["reason"] == (f"the object store endpoint {endpoint} is unreachable for bucket {bucket} (connection "
                                 "refused): check that it runs and [spark.conf] spark.hadoop.fs.s3a.endpoint")


def test_a_wrong_secret_is_an_outage_naming_the_keys(bridge_spark: BridgeSpark, s3_server: S3Server) -> None:
    bucket = s3_server.new_bucket("errors")
    wrong = f"not-the-secret-{uuid.uuid4().hex}"
    outcome = bridge_spark.append(f"s3a://{bucket}/landing/orders", {f"fs.s3a.bucket.{bucket}.secret.key": wrong})
    assert not outcome["ok"]
    assert outcome["reason"] == (
        f"the object store refused the credentials for bucket {bucket} (HTTP 403: a wrong access key or secret key, "
        "or keys without permission on the bucket): check [spark.conf] spark.hadoop.fs.s3a.access.key / secret.key")
    assert not any(wrong in line or s3_server.secret_key in line for line in outcome["chain"])


def test_a_missing_bucket_is_an_outage_naming_it(bridge_spark: BridgeSpark) -> None:
    bucket = f"errors-missing-{uuid.uuid4().hex[:8]}"
    outcome = bridge_spark.append(f"s3a://{bucket}/landing/orders")
    assert not outcome["ok"]
    assert outcome["reason"] == (f"bucket {bucket} does not exist (warehouse = s3a://{bucket}/landing): create it, "
                                 "or correct [spark] warehouse")


def test_a_namenode_that_is_down_fails_a_write_within_60_s_naming_it(bridge_spark: BridgeSpark) -> None:
    namenode = f"127.0.0.1:{free_port()}"
    # The driver started for an s3a:// warehouse: the settings a driver gets for hdfs:// are set on its
    # session (the IPC client reads them when it connects to a namenode it has not met).
    hdfs = {key.removeprefix("spark.hadoop."): value
            for key, value in session_conf(ObjectStoreUri(f"hdfs://{namenode}/landing"), {}, ROOT / "jars").items()}
    assert hdfs == {key.removeprefix("spark.hadoop."): value for key, value in HDFS_CONF.items()}
    outcome = bridge_spark.append(f"hdfs://{namenode}/landing/orders", hdfs, timeout=600)
    assert not outcome["ok"]
    print(f"a namenode that is down failed the write after {outcome['seconds']:.1f} s: {outcome['reason']}")
    assert outcome["seconds"] < BOUND, outcome
    assert outcome["reason"] == (f"the HDFS namenode {namenode} is unreachable (connection refused) "
                                 f"(warehouse = hdfs://{namenode}/landing)")

