"""What the bridge's own Spark driver needs to land on an object store (S3 through Hadoop's S3A) or
HDFS, and what an operator is told when it cannot.

`session_conf`: the settings the driver starts with, under `[spark] conf` (which wins, key by key):

- bounded retries and timeouts, so that a write to an endpoint or namenode that cannot be reached
  fails in well under a minute, and one to an endpoint that accepts connections and never answers
  within minutes (an outage of the sink: the messages stay on their queue and the bridge's breaker
  probes until the store is back) instead of hanging. With S3A's own defaults
  (`fs.s3a.attempts.maximum` 5 SDK tries inside each of `fs.s3a.retry.limit` 7 S3A retries) a write
  to a closed port failed after 616 s here (tests/integration/test_object_store_facts.py); Hadoop's
  IPC client retries a namenode connection 10 times (45 on timeouts of 20 s each);
- `SimpleAWSCredentialsProvider` (or `TemporaryAWSCredentialsProvider` with a session token) when
  `[spark.conf]` gives keys and no provider: S3A's default chain ends with the EC2 instance metadata
  service, an address outside the machine that a misconfigured key would send it to;
- the S3A jars (`<jars_dir>/s3`, `mqbridge jars s3`): Spark ships Hadoop's client without it.

The keys themselves reach the driver JVM only as `[spark.conf]` values, which as credentials (named
like them, or read from `${FILE:}`/`${ENV:}`) go in a private properties file, never on its command
line (`mqbridge.landing.driver_secrets`).

`object_store_outage(exc, warehouse, conf)`: why a failed write is an outage of the store, in one
line naming the key to check ("" when it is not one): the credentials refused (HTTP 403), the bucket
missing, the endpoint or the namenode unreachable, the endpoint not answering, Spark without the S3A
connector (a Spark Connect server or cluster started without its jars), HDFS in safe mode or refusing
the user. Built from
fixed words, the bucket and the endpoint, never from the exception's text: no secret can be in it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from mqbridge.config.warehouse import ObjectStoreUri, s3a_endpoint, s3a_keys_set, s3a_setting
from mqbridge.errors import ConfigError

#: S3A settings of the bridge's driver (each under `spark.hadoop.`): one try by the AWS SDK inside each
#: of two S3A tries (a write to a closed port fails well within a minute: test_object_store_errors.py);
#: 15 s to establish a connection, 15 s of silence on one, 15 s for a request (the least S3A takes: it
#: raises shorter network timeouts to 15 s; uploads have their own `fs.s3a.connection.part.upload.timeout`).
#: An endpoint that accepts connections and never answers costs each request its 15 s, and a Delta write
#: makes several (the log's `_last_checkpoint` is read 3 times, then the log listed): a bare write still
#: waited after 7 minutes with 30 s / 60 s and 3 tries, failed after 305 s with 15 s / 15 s and 3 tries,
#: after 136 s with 1. The bridge asks the store with one request before any of those
#: (`session.store_answers`) and names it about 40 s after its start (test_delta_object_stores.py).
S3A_CONF = {
    "spark.hadoop.fs.s3a.attempts.maximum": "1",
    "spark.hadoop.fs.s3a.retry.limit": "1",
    "spark.hadoop.fs.s3a.retry.interval": "500ms",
    "spark.hadoop.fs.s3a.connection.establish.timeout": "15s",
    "spark.hadoop.fs.s3a.connection.timeout": "15s",
    "spark.hadoop.fs.s3a.connection.request.timeout": "15s",
}
#: Hadoop IPC client settings (the HDFS namenode's RPC) of the bridge's driver: 3 connection retries
#: a second apart, 5 s to connect, 3 retries after connect timeouts, 15 s for a call's answer (a
#: namenode port that accepts connections and never answers: a write failed after 99 s here, and still
#: waited after 400 s with Hadoop's default of 120 s per call).
HDFS_CONF = {
    "spark.hadoop.ipc.client.connect.max.retries": "3",
    "spark.hadoop.ipc.client.connect.retry.interval": "1000",
    "spark.hadoop.ipc.client.connect.timeout": "5000",
    "spark.hadoop.ipc.client.connect.max.retries.on.timeouts": "3",
    "spark.hadoop.ipc.client.rpc-timeout.ms": "15000",
}
SIMPLE_PROVIDER = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
TEMPORARY_PROVIDER = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
#: The jar set of S3A (`mqbridge.landing.jar_sets`) and the jar it must hold.
S3_JAR_SET = "s3"
S3_REQUIRED_JAR = "hadoop-aws-"
FETCH_COMMAND = "mqbridge jars --config <your configuration file> s3"


def session_conf(warehouse: Path | ObjectStoreUri, conf: Mapping[str, str], jars_dir: Path) -> dict[str, str]:
    """`conf` (`[spark] conf`) with what a driver writing to `warehouse` needs beneath it (see the
    module docstring); `conf` itself for a local warehouse. ConfigError naming `FETCH_COMMAND` when
    the S3A jars are missing from `<jars_dir>/s3`."""
    if not isinstance(warehouse, ObjectStoreUri):
        return dict(conf)
    if warehouse.scheme == "hdfs":
        return {**HDFS_CONF, **conf}
    merged = {**S3A_CONF, **_provider(conf, warehouse.bucket), **conf}
    jars = [str(j) for j in s3a_jars(jars_dir)]
    given = [j for j in conf.get("spark.jars", "").split(",") if j]
    return {**merged, "spark.jars": ",".join([*given, *(j for j in jars if j not in given)])}


def _provider(conf: Mapping[str, str], bucket: str | None) -> dict[str, str]:
    """The credentials provider to set: only the configured keys (none when the keys or a provider
    are configured by `conf`)."""
    if not s3a_keys_set(conf, bucket) or s3a_setting(conf, bucket, "aws.credentials.provider"):
        return {}
    own = bucket is not None and any(f"spark.hadoop.fs.s3a.bucket.{bucket}.{k}" in conf
                                     for k in ("access.key", "secret.key", "session.token"))
    key = f"spark.hadoop.fs.s3a.bucket.{bucket}.aws.credentials.provider" if own else \
        "spark.hadoop.fs.s3a.aws.credentials.provider"
    token = s3a_setting(conf, bucket, "session.token")
    return {key: TEMPORARY_PROVIDER if token else SIMPLE_PROVIDER}


def s3a_jars(jars_dir: Path) -> list[Path]:
    """The S3A jars under `<jars_dir>/s3`; ConfigError naming the command that fetches them."""
    folder = Path(jars_dir) / S3_JAR_SET
    jars = sorted(folder.glob("*.jar")) if folder.is_dir() else []
    if not any(j.name.startswith(S3_REQUIRED_JAR) for j in jars):
        raise ConfigError(f"[spark] warehouse = \"s3a://...\" needs Hadoop's S3A connector and the AWS SDK in "
                          f"{folder}, which has no {S3_REQUIRED_JAR.rstrip('-')} jar: run `{FETCH_COMMAND}` (or copy "
                          "that folder from a host that ran it; `[spark] jars_dir` says where it is)")
    return jars


# --- outage reasons --------------------------------------------------------------------------------

_REFUSED_CREDENTIALS = ("AccessDeniedException", "Status Code: 403", "InvalidAccessKeyId", "SignatureDoesNotMatch",
                        "signature we calculated does not match", "ExpiredToken", "InvalidToken")
_NO_CREDENTIALS = ("NoAuthWithAWSException", "No AWS Credentials provided", "Unable to load credentials")
_NO_BUCKET = ("UnknownStoreException", "NoSuchBucket", "The specified bucket does not exist")
_UNREACHABLE = {"UnknownHostException": "unknown host", "ConnectTimeoutException": "connection timed out",
                "SocketTimeoutException": "timed out", "Connection refused": "connection refused",
                "NoRouteToHostException": "no route to host", "ConnectException": "connection failed",
                "Unable to execute HTTP request": "no answer"}
#: A request that got no answer in time from an endpoint that accepted its connection (S3A's
#: `fs.s3a.connection.request.timeout`, or a read timing out on an open connection).
_NO_ANSWER = ("ApiCallTimeoutException", "ApiCallAttemptTimeoutException", "Read timed out")
#: A namenode call that got no answer in time (`ipc.client.rpc-timeout.ms`) on an open connection.
_HDFS_NO_ANSWER = ("timeout while waiting for channel to be ready for read", "failed on socket timeout exception")
_HDFS_NOT_SERVING = {"SafeModeException": "in safe mode", "StandbyException": "a standby namenode",
                     "NameNode still not started": "still starting"}
#: delta-rs's S3 client (the commands' readers; the listing of a template's tables) names neither s3a:// nor
#: a Java class: its errors start "Generic S3 error" (`error_chain` keeps the causes it lists after).
_S3A_MARKS = ("s3a://", "org.apache.hadoop.fs.s3a", "software.amazon.awssdk", "Generic S3 error")
#: Hadoop without the S3A connector (a Spark Connect server, or a cluster's executors, started without
#: the jars of `FETCH_COMMAND`).
_NO_CONNECTOR = ('No FileSystem for scheme "s3a"', "ClassNotFoundException: org.apache.hadoop.fs.s3a.S3AFileSystem",
                 "Class org.apache.hadoop.fs.s3a.S3AFileSystem not found")
_HDFS_MARKS = ("hdfs://", "org.apache.hadoop.ipc", "org.apache.hadoop.hdfs", "Call From ", "HdfsObjectStore error")


def object_store_outage(exc: BaseException, warehouse: Path | ObjectStoreUri,
                        conf: Mapping[str, str] | None = None) -> str:
    """Why `exc`, raised by a write into `warehouse`, is an outage of its object store or HDFS, in
    one line naming what to check; "" when it is not one of those (or the warehouse is local). `conf`
    (`[spark] conf`) names the S3 endpoint."""
    if not isinstance(warehouse, ObjectStoreUri):
        return ""
    return outage_of_chain(error_chain(exc), warehouse, conf or {})


def outage_of_chain(chain: Iterable[str], warehouse: ObjectStoreUri, conf: Mapping[str, str]) -> str:
    """`object_store_outage` of an error's texts (`error_chain`: "class: message", outermost first)."""
    text = "\n".join(chain)
    if warehouse.scheme == "hdfs":
        return _hdfs_outage(text, warehouse) if any(m in text for m in _HDFS_MARKS) else ""
    if any(m in text for m in _NO_CONNECTOR):
        return (f"Spark cannot open s3a:// (warehouse = {warehouse}): Hadoop's S3A connector is not on its class "
                f"path. The bridge's own driver gets it from `{FETCH_COMMAND}`; a Spark Connect server, or a "
                "cluster's driver and executors, must be started with those jars (--jars) and the fs.s3a settings "
                "(docs/spark-and-tables.md, \"Spark Connect and your own cluster\")")
    if not any(m in text for m in _S3A_MARKS):
        return ""
    bucket = warehouse.bucket
    if any(m in text for m in _NO_BUCKET):
        return f"bucket {bucket} does not exist (warehouse = {warehouse}): create it, or correct [spark] warehouse"
    if any(m in text for m in _REFUSED_CREDENTIALS):
        return (f"the object store refused the credentials for bucket {bucket} (HTTP 403: a wrong access key or "
                "secret key, or keys without permission on the bucket): check [spark.conf] "
                "spark.hadoop.fs.s3a.access.key / secret.key")
    if any(m in text for m in _NO_CREDENTIALS):
        return (f"no credentials for bucket {bucket}: set [spark.conf] spark.hadoop.fs.s3a.access.key / secret.key "
                "(from ${FILE:...} or ${ENV:...})")
    if any(m in text for m in _NO_ANSWER):
        endpoint, _ = s3a_endpoint(conf, bucket)
        return (f"the object store endpoint {endpoint} does not answer for bucket {bucket} (it takes connections but "
                "sends no reply within the bridge's timeouts): check that it runs and [spark.conf] "
                "spark.hadoop.fs.s3a.endpoint")
    why = next((why for mark, why in _UNREACHABLE.items() if mark in text), None)
    if why is not None:
        endpoint, _ = s3a_endpoint(conf, bucket)
        return (f"the object store endpoint {endpoint} is unreachable for bucket {bucket} ({why}): check that it "
                "runs and [spark.conf] spark.hadoop.fs.s3a.endpoint")
    return ""


def _hdfs_outage(text: str, warehouse: ObjectStoreUri) -> str:
    namenode = warehouse.authority
    state = next((state for mark, state in _HDFS_NOT_SERVING.items() if mark in text), None)
    if state is not None:
        return f"the HDFS namenode {namenode} does not take writes now ({state}) (warehouse = {warehouse})"
    if "AccessControlException" in text or "Permission denied" in text:
        return (f"HDFS refused the bridge's user access to {warehouse} (permission denied): give it write access "
                "there, or correct [spark] warehouse")
    if any(m in text for m in _HDFS_NO_ANSWER):
        return (f"the HDFS namenode {namenode} does not answer (it takes connections but sends no reply within "
                f"ipc.client.rpc-timeout.ms) (warehouse = {warehouse})")
    why = next((why for mark, why in _UNREACHABLE.items() if mark in text), None)
    if why is not None:
        return f"the HDFS namenode {namenode} is unreachable ({why}) (warehouse = {warehouse})"
    return ""


def error_chain(exc: BaseException) -> list[str]:
    """`exc` and the errors it came from, each as "class: message", outermost first: the Python
    exceptions (`__cause__`, `__context__`; a delta-rs error with the causes it lists, `message_line`)
    and, for a Java error raised through py4j, the Java exception and its causes (read from the JVM;
    skipped when it is gone)."""
    chain: list[str] = []
    seen: BaseException | None = exc
    while seen is not None and len(chain) < 40:
        chain.append(f"{type(seen).__name__}: {message_line(str(seen))}")
        java = getattr(seen, "java_exception", None)
        try:
            while java is not None and len(chain) < 40:
                chain.append(f"{java.getClass().getName()}: {message_line(str(java.getMessage() or ''))}")
                java = java.getCause()
        except Exception:  # noqa: S110 (the JVM is gone: the Python texts are what there is)
            pass
        seen = seen.__cause__ or seen.__context__
    return chain


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: How delta-rs marks each cause of an error on a line of its own ("Generic S3 error" / "↳ Error
#: performing list request" / … / "↳ Connection refused (os error 111)"), coloured.
_CAUSE = "\u21b3"


def message_line(text: str) -> str:
    """An error's message as one line: its first line, then each cause delta-rs lists on the lines after
    it (`_CAUSE`), joined by ": ". A delta-rs error names the store's URL and what failed, never its
    storage options; its first line alone ("Generic S3 error") says neither."""
    lines = [line.strip() for line in _ANSI.sub("", text).strip().splitlines()]
    if not lines:
        return ""
    causes = [line.lstrip(_CAUSE).strip() for line in lines[1:] if line.startswith(_CAUSE)]
    return ": ".join(part for part in (lines[0], *causes) if part)
