"""The bridge's own Spark driver on an object store or HDFS (mqbridge.landing.object_stores): the S3A and
HDFS client settings it starts with, under `[spark] conf`, which wins key by key; the credentials
provider of the configured keys only; the S3A jars, a missing one a start-up error naming the command;
and the outage reasons read from the error chains S3A and HDFS really raise (recorded from Spark 4.1 /
Hadoop 3.4.2 against S3Proxy and a closed port, tests/integration/test_object_store_errors.py),
never holding a secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqbridge.app import _spark_section  # the composition root's merge: the settings the session starts with
from mqbridge.config import parse_config
from mqbridge.config.warehouse import ObjectStoreUri
from mqbridge.errors import ConfigError
from mqbridge.landing.log_store import JAR_NAME as LOG_STORE_JAR
from mqbridge.landing.object_stores import (
    HDFS_CONF,
    S3A_CONF,
    SIMPLE_PROVIDER,
    TEMPORARY_PROVIDER,
    error_chain,
    object_store_outage,
    outage_of_chain,
    session_conf,
)
from tests.support.configs import orders_config

S3 = ObjectStoreUri("s3a://landing-bucket/mqbridge")
HDFS = ObjectStoreUri("hdfs://127.0.0.1:9820/mqbridge")
SECRET = "wJalrXUtnFEMI-the-secret-key-0123"
KEYS = {"spark.hadoop.fs.s3a.access.key": "AKIDEXAMPLE", "spark.hadoop.fs.s3a.secret.key": SECRET}
ENDPOINT = {"spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:41234"}


@pytest.fixture
def jars_dir(tmp_path: Path) -> Path:
    (tmp_path / "s3").mkdir()
    for name in ("hadoop-aws-3.4.2.jar", "s3-2.29.52.jar"):
        (tmp_path / "s3" / name).write_bytes(b"")
    return tmp_path


# -- the settings the driver starts with ---------------------------------------------------------
def test_a_local_warehouse_gets_nothing_more(jars_dir: Path) -> None:
    assert session_conf(Path("/data/landing"), {"a": "b"}, jars_dir) == {"a": "b"}


def test_s3a_gets_bounded_retries_the_jars_and_the_configured_keys_only(jars_dir: Path) -> None:
    conf = session_conf(S3, {**KEYS, "spark.jars": "/opt/extra.jar"}, jars_dir)
    assert {k: conf[k] for k in S3A_CONF} == S3A_CONF
    assert conf["spark.hadoop.fs.s3a.aws.credentials.provider"] == SIMPLE_PROVIDER
    assert conf["spark.jars"] == f"/opt/extra.jar,{jars_dir}/s3/hadoop-aws-3.4.2.jar,{jars_dir}/s3/s3-2.29.52.jar"
    assert not any(k.startswith("spark.hadoop.ipc.") for k in conf)


def test_the_users_settings_win_key_by_key(jars_dir: Path) -> None:
    mine = {"spark.hadoop.fs.s3a.retry.limit": "7", "spark.hadoop.fs.s3a.aws.credentials.provider": "my.Provider",
            **KEYS}
    conf = session_conf(S3, mine, jars_dir)
    assert conf["spark.hadoop.fs.s3a.retry.limit"] == "7"
    assert conf["spark.hadoop.fs.s3a.aws.credentials.provider"] == "my.Provider"
    assert conf["spark.hadoop.fs.s3a.attempts.maximum"] == S3A_CONF["spark.hadoop.fs.s3a.attempts.maximum"]


def test_no_keys_no_provider_a_session_token_the_temporary_one(jars_dir: Path) -> None:
    assert "spark.hadoop.fs.s3a.aws.credentials.provider" not in session_conf(S3, {}, jars_dir)
    token = session_conf(S3, {**KEYS, "spark.hadoop.fs.s3a.session.token": "t"}, jars_dir)
    assert token["spark.hadoop.fs.s3a.aws.credentials.provider"] == TEMPORARY_PROVIDER


def test_keys_of_the_bucket_get_a_provider_of_the_bucket(jars_dir: Path) -> None:
    bucket = {f"spark.hadoop.fs.s3a.bucket.landing-bucket.{k}": v for k, v in
              (("access.key", "AKIDEXAMPLE"), ("secret.key", SECRET))}
    conf = session_conf(S3, bucket, jars_dir)
    assert conf["spark.hadoop.fs.s3a.bucket.landing-bucket.aws.credentials.provider"] == SIMPLE_PROVIDER
    assert "spark.hadoop.fs.s3a.aws.credentials.provider" not in conf


def test_hdfs_gets_bounded_ipc_retries_and_no_jars(jars_dir: Path) -> None:
    conf = session_conf(HDFS, {"spark.hadoop.ipc.client.connect.max.retries": "10"}, jars_dir)
    assert conf == {**HDFS_CONF, "spark.hadoop.ipc.client.connect.max.retries": "10"}


def test_missing_s3a_jars_are_a_start_up_error_naming_the_command(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"has no hadoop-aws jar: run `mqbridge jars --config <your configuration "
                                          r"file> s3`"):
        session_conf(S3, {}, tmp_path)


def test_the_bridge_starts_its_driver_with_delta_and_the_object_store_settings(tmp_path: Path) -> None:
    for folder, names in (("delta", ("delta-spark_4.1_2.13-4.4.0.jar", "delta-storage-4.4.0.jar", LOG_STORE_JAR)),
                          ("s3", ("hadoop-aws-3.4.2.jar",))):
        (tmp_path / folder).mkdir()
        for name in names:
            (tmp_path / folder / name).write_bytes(b"")
    text = orders_config(f'[spark]\nwarehouse = "{S3}"\ntable_format = "delta"\njars_dir = "{tmp_path}"\n'
                         '[spark.conf]\n"spark.hadoop.fs.s3a.connection.timeout" = "10s"\n'
                         '"spark.hadoop.fs.s3a.secret.key" = "${ENV:S3_SECRET}"\n'
                         '"spark.hadoop.fs.s3a.access.key" = "AKIDEXAMPLE"\n')
    cfg = parse_config(text, env={"S3_SECRET": SECRET})
    conf = _spark_section(cfg).conf
    assert conf["spark.hadoop.fs.s3a.connection.timeout"] == "10s"  # the configuration's
    assert conf["spark.hadoop.fs.s3a.retry.limit"] == S3A_CONF["spark.hadoop.fs.s3a.retry.limit"]
    assert conf["spark.hadoop.fs.s3a.aws.credentials.provider"] == SIMPLE_PROVIDER
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert [Path(j).name for j in conf["spark.jars"].split(",")] == [
        "hadoop-aws-3.4.2.jar", "delta-spark_4.1_2.13-4.4.0.jar", "delta-storage-4.4.0.jar", LOG_STORE_JAR]
    assert conf["spark.delta.logStore.s3a.impl"] == "org.mqbridge.delta.ConditionalPutLogStore"
    assert cfg.spark.conf.get("spark.hadoop.fs.s3a.retry.limit") is None  # the configuration itself is unchanged


def test_spark_connect_gets_nothing_from_the_bridge() -> None:
    text = orders_config(f'[spark]\nremote = "sc://spark:15002"\nwarehouse = "{S3}"\ntable_format = "delta"\n')
    cfg = parse_config(text)
    assert _spark_section(cfg) is cfg.spark


# -- outage reasons from the chains S3A and HDFS raise -------------------------------------------
#: Recorded: a write to a closed port with the bridge's settings (19 s), as `error_chain` gives it.
REFUSED = [
    "Py4JJavaError: An error occurred while calling o154.save.",
    "java.net.ConnectException: listObjects() on s3a://landing-bucket/mqbridge/orders/_delta_log: "
    "software.amazon.awssdk.core.exception.SdkClientException: Unable to execute HTTP request: Connect to "
    "127.0.0.1:41234 [/127.0.0.1] failed: Connection refused (SDK Attempt Count: 2):",
    "software.amazon.awssdk.core.exception.SdkClientException: Unable to execute HTTP request: Connect to "
    "127.0.0.1:41234 [/127.0.0.1] failed: Connection refused (SDK Attempt Count: 2)",
    "org.apache.http.conn.HttpHostConnectException: Connect to 127.0.0.1:41234 [/127.0.0.1] failed: Connection refused",
    "java.net.ConnectException: Connection refused",
]
WRONG_SECRET = [
    "Py4JJavaError: An error occurred while calling o171.save.",
    "java.nio.file.AccessDeniedException: s3a://landing-bucket/mqbridge/orders/_delta_log: listObjects() on "
    "s3a://landing-bucket/mqbridge/orders/_delta_log: software.amazon.awssdk.services.s3.model.S3Exception: The "
    "request signature we calculated does not match the signature you provided. Check your key and signing meth",
    "software.amazon.awssdk.services.s3.model.S3Exception: The request signature we calculated does not match the "
    "signature you provided. Check your key and signing method. (Service: S3, Status Code: 403, Request ID: "
    "B19B3B0AC63EF951) (SDK Attempt Count: 1)",
]
MISSING_BUCKET = [
    "Py4JJavaError: An error occurred while calling o188.save.",
    "org.apache.hadoop.fs.s3a.UnknownStoreException: `s3a://landing-bucket/mqbridge/orders/_delta_log': "
    "listObjects() on s3a://landing-bucket/mqbridge/orders/_delta_log: software.amazon.awssdk.services.s3.model."
    "NoSuchBucketException: The specified bucket does not exist (Service: S3, Status Code: 404, Request ID: 98AA",
    "software.amazon.awssdk.services.s3.model.NoSuchBucketException: The specified bucket does not exist (Service: "
    "S3, Status Code: 404, Request ID: 98AAE458B7C144B7) (SDK Attempt Count: 1)",
]


def test_a_refused_connection_names_the_endpoint_of_the_bucket() -> None:
    assert outage_of_chain(REFUSED, S3, ENDPOINT) == (
        "the object store endpoint http://127.0.0.1:41234 is unreachable for bucket landing-bucket (connection "
        "refused): check that it runs and [spark.conf] spark.hadoop.fs.s3a.endpoint")
    own = {**ENDPOINT, "spark.hadoop.fs.s3a.bucket.landing-bucket.endpoint": "http://user:pw@10.0.0.9:9000"}
    assert "endpoint http://10.0.0.9:9000 is unreachable" in outage_of_chain(REFUSED, S3, own)
    assert "the AWS S3 endpoint is unreachable" in outage_of_chain(REFUSED, S3, {})


def test_a_refused_credential_names_the_keys_to_check() -> None:
    assert outage_of_chain(WRONG_SECRET, S3, ENDPOINT) == (
        "the object store refused the credentials for bucket landing-bucket (HTTP 403: a wrong access key or secret "
        "key, or keys without permission on the bucket): check [spark.conf] spark.hadoop.fs.s3a.access.key / "
        "secret.key")


def test_a_missing_bucket_names_the_warehouse() -> None:
    assert outage_of_chain(MISSING_BUCKET, S3, ENDPOINT) == (
        "bucket landing-bucket does not exist (warehouse = s3a://landing-bucket/mqbridge): create it, or correct "
        "[spark] warehouse")


def test_an_hdfs_namenode_down_or_in_safe_mode() -> None:
    refused = ["Py4JJavaError: An error occurred while calling o1.save.",
               "java.net.ConnectException: Call From host/10.0.0.5 to 127.0.0.1:9820 failed on connection exception: "
               "java.net.ConnectException: Connection refused; For more details see:  http://wiki.apache.org/hadoop/"
               "ConnectionRefused", "java.net.ConnectException: Connection refused"]
    assert outage_of_chain(refused, HDFS, {}) == ("the HDFS namenode 127.0.0.1:9820 is unreachable (connection "
                                                  "refused) (warehouse = hdfs://127.0.0.1:9820/mqbridge)")
    safe = ["org.apache.hadoop.ipc.RemoteException: org.apache.hadoop.hdfs.server.namenode.SafeModeException: "
            "Cannot create directory /mqbridge/orders. Name node is in safe mode."]
    assert "does not take writes now (in safe mode)" in outage_of_chain(safe, HDFS, {})


#: Recorded: a write to an endpoint that accepts connections and never answers, with the bridge's settings.
NO_ANSWER = [
    "Py4JJavaError: An error occurred while calling o154.save.",
    "org.apache.hadoop.fs.s3a.AWSApiCallTimeoutException: listObjects() on s3a://landing-bucket/mqbridge/orders/"
    "_delta_log: software.amazon.awssdk.core.exception.ApiCallTimeoutException: Client execution did not complete "
    "before the specified timeout configuration: 15000 millis",
    "software.amazon.awssdk.core.exception.ApiCallTimeoutException: Client execution did not complete before the "
    "specified timeout configuration: 15000 millis",
]
#: A Delta read of s3a:// through a Spark Connect server started without the S3A jars (its error as the
#: server logged it, tests/integration/test_spark_modes.py), and Hadoop's error where no fs.s3a.impl is set.
NO_CONNECTOR = [
    "SparkConnectGrpcException: (java.lang.RuntimeException) java.lang.ClassNotFoundException: Class "
    "org.apache.hadoop.fs.s3a.S3AFileSystem not found",
]
NO_SCHEME = ['org.apache.hadoop.fs.UnsupportedFileSystemException: No FileSystem for scheme "s3a"']


def test_an_endpoint_that_never_answers_is_named_as_one() -> None:
    assert outage_of_chain(NO_ANSWER, S3, ENDPOINT) == (
        "the object store endpoint http://127.0.0.1:41234 does not answer for bucket landing-bucket (it takes "
        "connections but sends no reply within the bridge's timeouts): check that it runs and [spark.conf] "
        "spark.hadoop.fs.s3a.endpoint")


def test_a_spark_without_the_s3a_connector_is_told_how_to_get_it() -> None:
    assert outage_of_chain(NO_SCHEME, S3, ENDPOINT) == outage_of_chain(NO_CONNECTOR, S3, ENDPOINT) == (
        "Spark cannot open s3a:// (warehouse = s3a://landing-bucket/mqbridge): Hadoop's S3A connector is not on its "
        "class path. The bridge's own driver gets it from `mqbridge jars --config <your configuration file> s3`; a "
        "Spark Connect server, or a cluster's driver and executors, must be started with those jars (--jars) and the "
        'fs.s3a settings (docs/spark-and-tables.md, "Spark Connect and your own cluster")')


def test_a_namenode_that_never_answers_is_named_as_one() -> None:
    # Recorded: a Delta write to a port that accepts connections and never answers, with the bridge's settings.
    silent = ["Py4JJavaError: An error occurred while calling o61.save.",
              "java.net.SocketTimeoutException: Call From vm/127.0.0.1 to localhost:9820 failed on socket timeout "
              "exception: java.net.SocketTimeoutException: 15000 millis timeout while waiting for channel to be ready "
              "for read. ch : java.nio.channels.SocketChannel[connected local=/127.0.0.1:46208 remote=localhost/"
              "127.0.0.1:9820]",
              "java.net.SocketTimeoutException: 15000 millis timeout while waiting for channel to be ready for read. "
              "ch : java.nio.channels.SocketChannel[connected local=/127.0.0.1:46208 remote=localhost/127.0.0.1:9820]"]
    assert outage_of_chain(silent, HDFS, {}) == (
        "the HDFS namenode 127.0.0.1:9820 does not answer (it takes connections but sends no reply within "
        "ipc.client.rpc-timeout.ms) (warehouse = hdfs://127.0.0.1:9820/mqbridge)")
    assert HDFS_CONF["spark.hadoop.ipc.client.rpc-timeout.ms"] == "15000"


def test_what_is_not_the_stores_is_no_outage_of_it() -> None:
    schema = ["AnalysisException: [DELTA_FAILED_TO_MERGE_FIELDS] Failed to merge fields 'amount' and 'amount'"]
    assert outage_of_chain(schema, S3, ENDPOINT) == ""
    assert outage_of_chain(REFUSED, HDFS, {}) == ""  # an S3 chain on an HDFS warehouse is not the namenode's
    assert object_store_outage(RuntimeError("x"), Path("/data/landing")) == ""


def test_no_secret_reaches_a_reason_even_from_a_chain_holding_one() -> None:
    chain = [line + f" key={SECRET}" for line in WRONG_SECRET]
    conf = {**KEYS, "spark.hadoop.fs.s3a.endpoint": f"http://AKIDEXAMPLE:{SECRET}@10.0.0.9:9000"}
    for reason in (outage_of_chain(chain, S3, conf), outage_of_chain([*REFUSED, SECRET], S3, conf)):
        assert reason and SECRET not in reason


def test_the_chain_of_python_exceptions_is_read_outermost_first() -> None:
    try:
        try:
            raise ConnectionRefusedError("Connection refused")
        except OSError as inner:
            raise RuntimeError("listObjects() on s3a://landing-bucket/x failed\nsecond line") from inner
    except RuntimeError as exc:
        chain = error_chain(exc)
        assert chain == ["RuntimeError: listObjects() on s3a://landing-bucket/x failed",
                         "ConnectionRefusedError: Connection refused"]
        assert "(connection refused)" in object_store_outage(exc, S3, ENDPOINT)


# -- delta-rs's errors (the commands' readers; the listing of a template's tables by a lost ledger's rebuild) --
#: Recorded (deltalake 1.6.6, `delta_read.directories` with the bridge's options): a closed port, S3Proxy
#: refusing a wrong secret and naming a missing bucket, a closed namenode port; as `str(exc)` gives them
#: (one cause per line, each marked with a coloured arrow).
_ARROW = "\n          \x1b[31m\u21b3\x1b[0m "
RS_REFUSED = OSError(_ARROW.join([
    "Generic S3 error", "Error performing list request",
    "Error performing GET http://127.0.0.1:41234/landing-bucket?delimiter=%2F&list-type=2&prefix=mqbridge%2F in "
    "259.17ms, after 2 retries, max_retries", "2, retry_timeout", "60s  - HTTP error", "error sending request",
    "client error (Connect)", "tcp connect error", "Connection refused (os error 111)"]) + "\n")
RS_WRONG_SECRET = OSError(_ARROW.join([
    "Generic S3 error", "Error performing list request",
    "Error performing GET http://127.0.0.1:41234/landing-bucket?delimiter=%2F&list-type=2&prefix=mqbridge%2F in "
    "2.98ms - Server returned non-2xx status code", "403 Forbidden", "<?xml version='1.0' encoding='UTF-8'?><Error>"
    "<Code>SignatureDoesNotMatch</Code><Message>The request signature we calculated does not match the signature "
    "you provided. Check your key and signing method.</Message></Error>"]))
RS_NO_BUCKET = OSError(_ARROW.join([
    "Generic S3 error", "Error performing list request",
    "Error performing GET http://127.0.0.1:41234/landing-bucket?delimiter=%2F&list-type=2&prefix=mqbridge%2F in "
    "8.59ms - Server returned non-2xx status code", "404 Not Found", "<?xml version='1.0' encoding='UTF-8'?><Error>"
    "<Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message></Error>"]))
RS_HDFS_REFUSED = OSError(_ARROW.join([
    "Generic HdfsObjectStore error", "IO error occurred while communicating with HDFS",
    "Connection refused (os error 111)"]) + "\n")


def test_delta_rs_errors_are_read_with_the_causes_it_lists() -> None:
    assert error_chain(RS_HDFS_REFUSED) == ["OSError: Generic HdfsObjectStore error: IO error occurred while "
                                            "communicating with HDFS: Connection refused (os error 111)"]


def test_a_store_failing_under_delta_rs_is_named_as_an_outage_like_under_spark() -> None:
    assert object_store_outage(RS_REFUSED, S3, ENDPOINT) == outage_of_chain(REFUSED, S3, ENDPOINT)
    assert object_store_outage(RS_WRONG_SECRET, S3, ENDPOINT) == outage_of_chain(WRONG_SECRET, S3, ENDPOINT)
    assert object_store_outage(RS_NO_BUCKET, S3, ENDPOINT) == outage_of_chain(MISSING_BUCKET, S3, ENDPOINT)
    assert object_store_outage(RS_HDFS_REFUSED, HDFS) == ("the HDFS namenode 127.0.0.1:9820 is unreachable "
                                                          "(connection refused) (warehouse = hdfs://127.0.0.1:9820/"
                                                          "mqbridge)")
