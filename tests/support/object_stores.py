"""The object store and the HDFS of the tests, and a Spark with Delta Lake that writes to them.

`running_s3_server` and `running_hdfs_cluster` give the servers that scripts/s3.sh (S3Proxy on its
file-system backend, http://127.0.0.1:9000) and scripts/hdfs.sh (Hadoop's mini cluster,
hdfs://127.0.0.1:9820) start: started when nothing answers on their port, stopped again at the end
only if started here (the session fixtures `s3_server` and `hdfs_cluster` of
tests/integration/conftest.py).

`DeltaSpark` is a Spark driver with the Delta and S3A jars (scripts/jars.sh delta s3) in a child
process of its own: the extensions and jars of a session are fixed when its JVM starts, and this
process's one JVM is the plain `spark` fixture's. The child's session comes from the bridge's own
`create_spark_session`, so the S3 secret reaches the JVM in a private properties file, never on a
command line; its operations return outcomes (rows, or the error's classes and text) rather than
raise, so that a Java error's text crosses the process boundary whole. `DeltaSpark.run` and `submit`
call any module-level function with the child's session (`tests.support.delta_tables` has the checks
of the Delta tests): one such driver serves the whole test session (the `delta_spark` fixture of
tests/integration/conftest.py), each start of a JVM with the Delta jars costing tens of seconds here.
"""

from __future__ import annotations

import collections
import glob
import multiprocessing
import os
import subprocess
import time
import traceback
import uuid
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.delta_tables import SMALL_TABLE_CONF
from tests.support.exactly_once import free_port
from tests.support.run_servers import run_server

ROOT = Path(__file__).resolve().parents[2]
S3_PORT = int(os.environ.get("MQBRIDGE_S3_PORT", "9000"))
HDFS_PORT = int(os.environ.get("MQBRIDGE_HDFS_PORT", "9820"))
S3_BASE = Path(os.environ.get("MQBRIDGE_S3_BASE", ROOT / ".s3proxy"))
#: The region S3A signs for (S3Proxy accepts any; S3A must not look one up: the lookup asks the
#: EC2 instance metadata service, an address outside this machine).
S3_REGION = "us-east-1"
#: Starting a server: S3Proxy answers in about 2 s, the mini cluster in 12-20 s on a busy 2-core machine.
START_TIMEOUT = 180.0


@dataclass(frozen=True)
class S3Server:
    """An S3-compatible server on loopback: its endpoint and the one identity it accepts."""

    endpoint: str
    access_key: str
    secret_key: str = field(repr=False)

    def filesystem(self) -> Any:
        """A pyarrow S3 client of this server (a real S3 client: it signs its requests with SigV4)."""
        from pyarrow import fs

        return fs.S3FileSystem(access_key=self.access_key, secret_key=self.secret_key,
                               endpoint_override=self.endpoint, scheme="http", region=S3_REGION,
                               allow_bucket_creation=True, allow_bucket_deletion=True)

    def new_bucket(self, prefix: str = "test") -> str:
        """Create a bucket named `prefix`-<random> through the S3 API and return its name."""
        name = f"{prefix}-{uuid.uuid4().hex[:12]}".lower()
        self.filesystem().create_dir(name)
        return name

    def spark_conf(self) -> dict[str, str]:
        """The Spark settings of S3A for this server (the secret among them: `create_spark_session`
        passes settings named like credentials in a private file, not on spark-submit's command line)."""
        return {
            "spark.hadoop.fs.s3a.endpoint": self.endpoint,
            "spark.hadoop.fs.s3a.endpoint.region": S3_REGION,
            "spark.hadoop.fs.s3a.path.style.access": "true",  # bucket in the path, not the host name
            "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
            # Only the configured keys: the default chain ends with the EC2 metadata service.
            "spark.hadoop.fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
            "spark.hadoop.fs.s3a.access.key": self.access_key,
            "spark.hadoop.fs.s3a.secret.key": self.secret_key,
        }

    def storage_options(self) -> dict[str, str]:
        """The `storage_options` of `deltalake` (delta-rs) for this server."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_REGION": S3_REGION, "AWS_ALLOW_HTTP": "true",
                "AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
                "AWS_EC2_METADATA_DISABLED": "true"}

    def delta_bodies(self, bucket: str, table: str = "wh/orders") -> collections.Counter[bytes]:
        """The bodies in the Delta table s3a://<bucket>/<table>, read by delta-rs over the S3 API."""
        import deltalake

        frame = deltalake.DeltaTable(f"s3://{bucket}/{table}", storage_options=self.storage_options())
        bodies = frame.to_pyarrow_table(columns=["body"]).column("body").to_pylist()
        return collections.Counter(bytes(b) for b in bodies)


def read_credentials(base: Path = S3_BASE) -> tuple[str, str]:
    """(access key, secret) that scripts/s3.sh made for its server (`base`/credentials)."""
    values = dict(line.split("=", 1) for line in (base / "credentials").read_text().splitlines() if "=" in line)
    return values["access_key"], values["secret_key"]


def running_s3_server() -> Iterator[S3Server]:
    """The S3-compatible server of scripts/s3.sh, started if nothing answers on its port."""
    with run_server("s3.sh", S3_PORT, "S3Proxy", timeout=START_TIMEOUT):
        yield S3Server(f"http://127.0.0.1:{S3_PORT}", *read_credentials())


class PrivateS3Proxy:
    """An S3Proxy of one test, apart from the shared one on S3_PORT: scripts/s3.sh with its own port
    and state directory (`MQBRIDGE_S3_PORT`, `MQBRIDGE_S3_BASE`), so that a test may stop and start
    it (buckets, objects and credentials survive that) without touching anyone else's server."""

    def __init__(self, base: Path, port: int) -> None:
        self.base, self.port = base, port

    def _script(self, action: str) -> None:
        env = {**os.environ, "MQBRIDGE_S3_PORT": str(self.port), "MQBRIDGE_S3_BASE": str(self.base)}
        subprocess.run([str(ROOT / "scripts" / "s3.sh"), action], cwd=ROOT, env=env, check=True,
                       stdout=subprocess.DEVNULL, timeout=START_TIMEOUT + 60)

    def start(self) -> None:
        self._script("start")  # returns once the port answers (or fails saying why)

    def stop(self) -> None:
        self._script("stop")

    @property
    def server(self) -> S3Server:
        return S3Server(f"http://127.0.0.1:{self.port}", *read_credentials(self.base))


@contextmanager
def private_s3_server(base: Path) -> Iterator[PrivateS3Proxy]:
    """A started `PrivateS3Proxy` on a free port with its state under `base`; stopped at the end."""
    proxy = PrivateS3Proxy(base, free_port())
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()


def running_hdfs_cluster() -> Iterator[str]:
    """The `hdfs://127.0.0.1:PORT` of scripts/hdfs.sh's mini cluster, started if nothing answers."""
    with run_server("hdfs.sh", HDFS_PORT, "the HDFS mini cluster's namenode", timeout=START_TIMEOUT):
        yield f"hdfs://127.0.0.1:{HDFS_PORT}"


def delta_jars(sets: tuple[str, ...] = ("delta", "s3")) -> list[str]:
    """The jar files of `sets` under jars/ (scripts/jars.sh); an error naming the command if missing."""
    found: list[str] = []
    for name in sets:
        jars = sorted(glob.glob(str(ROOT / "jars" / name / "*.jar")))
        if not jars:
            raise RuntimeError(f"no jars in jars/{name}: run scripts/jars.sh {name}")
        found += jars
    return found


def delta_spark_conf(s3: S3Server | None = None) -> dict[str, str]:
    """A local[2] Spark with Delta Lake (and S3A and the bridge's log store for `s3`), small enough for the tests.
    Its commits to local tables go through the bridge's log store and checksum writer for them, as the
    bridge's own do (`mqbridge.landing.delta.session_conf`)."""
    from mqbridge.landing import delta, log_store

    conf = {
        "spark.jars": ",".join(delta_jars()),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        **SMALL_TABLE_CONF,
        "spark.databricks.delta.snapshotPartitions": "2",
        **delta.LOCAL_WAREHOUSE_CONF,
        log_store.LOCAL_CONF_KEY: log_store.LOCAL_CLASS_NAME,
    }
    if s3 is None:
        return conf
    # on S3 its commits go through the bridge's log store, as the bridge's own do (`mqbridge.landing.log_store`)
    return {**conf, **s3.spark_conf(), log_store.CONF_KEY: log_store.CLASS_NAME}


# --- the child process's side -------------------------------------------------------------------

_SESSION: Any = None


def _start_session(conf: Mapping[str, str], secrets: frozenset[str], scratch: str, java_options: str = "") -> None:
    global _SESSION
    from mqbridge.landing.driver_secrets import DriverSecrets
    from mqbridge.landing.session import create_spark_session

    # The AWS SDK must never ask the EC2 metadata service (an address outside this machine).
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    _SESSION = create_spark_session(master="local[2]", app_name="mqbridge-object-store-facts", conf={
        **conf, "spark.sql.warehouse.dir": f"{scratch}/warehouse", "spark.local.dir": f"{scratch}/local"},
        secrets=DriverSecrets(values=secrets), java_options=java_options)


def _failure(exc: BaseException, started: float) -> dict[str, Any]:
    """The outcome of a failed operation: the Python exception's class, and the Java exception and
    its causes, outermost first, each as "class: first line of its message"."""
    chain: list[str] = []
    java = getattr(exc, "java_exception", None)
    while java is not None and len(chain) < 20:
        message = str(java.getMessage() or "").strip().splitlines()
        chain.append(f"{java.getClass().getName()}: {message[0] if message else ''}")
        java = java.getCause()
    return {"ok": False, "seconds": time.monotonic() - started, "python_class": type(exc).__name__,
            "java_chain": chain, "root": chain[-1] if chain else f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc()[-4000:]}


def _outcome(fn: Any, *args: Any) -> dict[str, Any]:
    started = time.monotonic()
    try:
        value = fn(*args)
    except Exception as exc:
        return _failure(exc, started)
    return {"ok": True, "seconds": time.monotonic() - started, "value": value}


def _with_conf(options: Mapping[str, str]) -> None:
    """Session settings for what follows (Hadoop's `fs.*` keys reach the file systems created after)."""
    for key, value in options.items():
        _SESSION.conf.set(key, value)


def _append(path: str, ids: list[int], app_id: str | None, version: int | None,
            options: Mapping[str, str]) -> dict[str, Any]:
    def write() -> None:
        _with_conf(options)
        frame = _SESSION.createDataFrame([(i, f"row {i}") for i in ids], "id LONG, body STRING")
        writer = frame.write.format("delta").mode("append")
        if app_id is not None:
            writer = writer.option("txnAppId", app_id).option("txnVersion", str(version))
        writer.save(path)
    return _outcome(write)


def _read_ids(path: str, options: Mapping[str, str]) -> dict[str, Any]:
    def read() -> list[int]:
        _with_conf(options)
        return sorted(int(row.id) for row in _SESSION.read.format("delta").load(path).select("id").collect())
    return _outcome(read)


def _history_operations(path: str) -> dict[str, Any]:
    def history() -> list[str]:
        rows = _SESSION.sql(f"DESCRIBE HISTORY delta.`{path}`").select("version", "operation").collect()
        return [f"{row.version}:{row.operation}" for row in sorted(rows, key=lambda r: r.version)]
    return _outcome(history)


def _with_session(fn: Any, args: tuple[Any, ...]) -> dict[str, Any]:
    return _outcome(fn, _SESSION, *args)


def _driver_pid() -> int:
    return int(_SESSION.sparkContext._gateway.proc.pid)


def _stop_session() -> None:
    _SESSION.stop()


# --- the test process's side --------------------------------------------------------------------


class DeltaSpark:
    """A Spark driver with Delta Lake in a child process (see the module's docstring); each method
    returns the outcome dict of `_outcome`: {"ok", "seconds", "value"} or the failure's
    {"python_class", "java_chain", "root", "traceback"} (`_failure`)."""

    def __init__(self, conf: Mapping[str, str], scratch: Path, secrets: frozenset[str] = frozenset(),
                 java_options: str = "") -> None:
        """The child and its driver start at the first call; `java_options` go first on the driver's
        command line (the tests' class-data archive: `tests.support.class_archive.java_options`)."""
        self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                         initializer=_start_session,
                                         initargs=(dict(conf), secrets, str(scratch), java_options))
        self._started = False

    def _submit(self, fn: Any, *args: Any) -> Future[Any]:
        self._started = True
        return self._pool.submit(fn, *args)

    def _call(self, fn: Any, *args: Any, timeout: float = 300) -> Any:
        return self._submit(fn, *args).result(timeout=timeout)

    def append(self, path: str, ids: list[int], app_id: str | None = None, version: int | None = None,
               options: Mapping[str, str] | None = None, timeout: float = 300) -> dict[str, Any]:
        """Append rows `ids` to the Delta table at `path`, as a transaction (`app_id`, `version`) if given."""
        result: dict[str, Any] = self._call(_append, path, ids, app_id, version, dict(options or {}),
                                            timeout=timeout)
        return result

    def read_ids(self, path: str, options: Mapping[str, str] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = self._call(_read_ids, path, dict(options or {}))
        return result

    def history(self, path: str) -> dict[str, Any]:
        """The table's commits as "version:operation" ("0:WRITE", ...)."""
        result: dict[str, Any] = self._call(_history_operations, path)
        return result

    def run(self, fn: Any, *args: Any, timeout: float = 300) -> dict[str, Any]:
        """The outcome of `fn(session, *args)` in the child: `fn` a module-level function (the child
        imports it by name), its arguments and result picklable."""
        result: dict[str, Any] = self.submit(fn, *args).result(timeout=timeout)
        return result

    def submit(self, fn: Any, *args: Any) -> Future[dict[str, Any]]:
        """`run` without waiting: the future of its outcome. The child does one call at a time; the
        calls after this one wait for it to return."""
        return self._submit(_with_session, fn, args)

    def driver_pid(self) -> int:
        """The pid of the child's driver JVM (spark-submit's)."""
        pid: int = self._call(_driver_pid)
        return pid

    def close(self) -> None:
        """Stop the child's Spark (its JVM exits with it) and the child (never started: nothing to stop)."""
        try:
            if self._started:
                self._call(_stop_session, timeout=120)
        finally:
            self._pool.shutdown(wait=True, cancel_futures=True)


def scheduled_round(spark: Any, config: str, kind: str) -> dict[str, int]:
    """One round of a bridge's scheduled purge (`kind` "purge") or compaction ("compaction") with the
    configuration at `config` on `spark` (a `DeltaSpark` child's session: `DeltaSpark.run`), as the
    bridge runs it on its own driver: the containers it purged, skipped and compacted."""
    from mqbridge.config import load_config
    from mqbridge.counters import Counters
    from mqbridge.maintenance.compaction_scheduler import CompactionScheduler
    from mqbridge.maintenance.purge import PurgeScheduler

    loaded = load_config(config, secrets=False)
    counters = Counters()
    scheduler = PurgeScheduler if kind == "purge" else CompactionScheduler
    scheduler(loaded, lambda: spark, counters).run_round()
    return {name: int(counters.total(name))
            for name in ("purge_containers", "purge_containers_skipped", "compaction_containers")}
