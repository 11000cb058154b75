"""The Spark session of the process: started in-process (its driver JVM, see `mqbridge.landing.jvm`)
or reached through Spark Connect, recognised as gone when its JVM died or its server restarted,
and started again (`SparkSessions`); and the start-up probe of the warehouse (`check_warehouse`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from mqbridge.config import SparkSection, shown_remote
from mqbridge.errors import SparkUnavailableError, StagingMismatchError, WarehouseInvisibleError, one_line
from mqbridge.landing import class_archive
from mqbridge.landing.driver_secrets import DriverSecrets
from mqbridge.landing.jvm import driver_java_conf, jvm_log_level, launch_driver_gateway
from mqbridge.landing.publication import discard, owner_dirname, staged_moves, verify_staged

log = logging.getLogger(__name__)

#: Session defaults for a bridge on a small machine; the configuration's [spark.conf] wins.
DEFAULT_CONF: dict[str, str] = {
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # Spark's default (INT96) writes no min/max statistics: readers could not skip files by put_timestamp.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}
#: Only for an in-process driver: a Spark Connect server's static settings cannot be changed.
LOCAL_DEFAULT_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",  # no [Stage …] bars on the terminal of `mqbridge run`
}


#: The driver JVM's default time zone (the bridge's timestamps are UTC, as is the session's). Delta Lake
#: checks it: in any other zone (even "Etc/UTC") every commit rebuilds the table's whole state from
#: its log to verify the checksum it keeps incrementally, 3 Spark jobs per commit (docs/performance.md).
DRIVER_TIME_ZONE = "-Duser.timezone=UTC"


def create_spark_session(master: str = "local[*]", remote: str | None = None, app_name: str = "mqbridge",
                         conf: Mapping[str, str] | None = None,
                         secrets: DriverSecrets | None = None, state_dir: Path | None = None,
                         java_options: str = "") -> SparkSession:
    """The process's SparkSession (created on first call, reused after), in-process on `master`,
    or through Spark Connect when `remote` ("sc://host:15002") is given.

    An in-process driver's JVM gets the settings that are secrets (named like credentials, or
    `secrets.conf_keys`) in a private file, never on its command line, and an environment without
    `secrets.values` (`mqbridge.landing.driver_secrets`); every setting is then also set on the
    session's SparkConf through py4j, as pyspark's builder does.

    An in-process driver maps the class-data archive of `state_dir` if it has one
    (`mqbridge.landing.class_archive`); `java_options` go before the configuration's
    `spark.driver.extraJavaOptions` (`mqbridge spark-archive` gives its dump options there).

    Raises SparkUnavailableError when Spark cannot be started or reached.
    """
    settings = {**DEFAULT_CONF, **({} if remote else LOCAL_DEFAULT_CONF), **dict(conf or {})}
    level = jvm_log_level()
    if not remote:
        options = " ".join(o for o in (DRIVER_TIME_ZONE, java_options or class_archive.java_options(state_dir),
                                       settings.get("spark.driver.extraJavaOptions", "")) if o)
        settings["spark.driver.extraJavaOptions"] = options
        settings.update(driver_java_conf(settings, level))
    try:
        if remote:
            # `create`, never the cached default session, which a restarted server no longer knows
            # (see SparkSessions.reset); with no options, so that nothing is sent to the server
            # before the short retry policy is in place (pyspark's own retries an unreachable
            # server for about 10 minutes, which would hang the start).
            spark: SparkSession = SparkSession.builder.remote(remote).create()
            _fail_fast(spark)
            _set_connect_conf(spark, settings)
        else:
            secrets = secrets or DriverSecrets()
            public, secret = secrets.split({k: str(v) for k, v in settings.items()})
            launch_driver_gateway({**public, "spark.master": master, "spark.app.name": app_name}, secret,
                                  secrets.values)
            builder = SparkSession.builder.appName(app_name).master(master)
            for key, value in settings.items():
                builder = builder.config(key, str(value))
            spark = builder.getOrCreate()
            spark.sparkContext.setLogLevel(level)
    except Exception as exc:
        where = f"Spark Connect server {shown_remote(remote)}" if remote else f"Spark (master {master})"
        raise SparkUnavailableError(f"cannot start {where}: {one_line(exc)}{_java_hint(remote)}") from exc
    return spark


def is_connect(session: Any) -> bool:
    return type(session).__module__.startswith("pyspark.sql.connect")


def writes_as_this_user(session: Any) -> bool:
    """Spark writes files as this process's user: an in-process driver with a local master. A Spark
    Connect server or a cluster's executors may run as another user, who must be able to create
    what the bridge would otherwise create private for it."""
    return not is_connect(session) and str(getattr(session.sparkContext, "master", "")).startswith("local")


def jvm_gone(session: Any) -> bool:
    """True when the in-process driver's JVM (py4j's java child process) has exited or its
    SparkContext is stopped; never a py4j call, so it cannot hang. Always False for Spark Connect."""
    if session is None or is_connect(session):
        return False
    try:
        context = session.sparkContext
        proc = getattr(context._gateway, "proc", None)
        if proc is not None and proc.poll() is not None:
            return True
        return context._jsc is None
    except Exception:  # an attribute pyspark no longer has: take the session as broken
        return True


def connection_lost(exc: BaseException) -> bool:
    """The error (or one it was raised from) is py4j losing its connection to the JVM."""
    from py4j.protocol import Py4JNetworkError

    seen: BaseException | None = exc
    for _ in range(10):
        if seen is None:
            return False
        if isinstance(seen, (ConnectionError, Py4JNetworkError)):
            return True
        text = str(seen)
        if "Answer from Java side is empty" in text or "Error while sending or receiving" in text:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


#: Spark Connect errors after which the session is gone for good (the server restarted): a new
#: session must be created (measured on pyspark 4.2: NO_ACTIVE_SESSION after a server restart).
_CONNECT_SESSION_LOST = ("NO_ACTIVE_SESSION", "INVALID_HANDLE.SESSION", "SESSION_CHANGED", "SESSION_CLOSED",
                         "SESSION_NOT_FOUND")
#: Spark Connect (gRPC) errors of a server that does not answer.
_CONNECT_UNAVAILABLE = ("StatusCode.UNAVAILABLE", "failed to connect to all addresses", "Connection refused")


def _error_texts(exc: BaseException) -> Iterator[str]:
    seen: BaseException | None = exc
    for _ in range(10):
        if seen is None:
            return
        yield str(seen)
        seen = seen.__cause__ or seen.__context__


def connect_session_lost(exc: BaseException) -> bool:
    return any(mark in text for text in _error_texts(exc) for mark in _CONNECT_SESSION_LOST)


def connect_unavailable(exc: BaseException) -> bool:
    return any(mark in text for text in _error_texts(exc) for mark in _CONNECT_UNAVAILABLE)


def _forget_local_session(session: Any) -> None:
    """Make pyspark forget a session whose JVM is gone, so that the next `getOrCreate` starts a new
    JVM instead of returning the dead session (pyspark's own `stop` gives up half-way when the JVM
    does not answer)."""
    from pyspark import SparkContext
    from pyspark.sql.context import SQLContext

    context = getattr(session, "_sc", None)
    try:
        if context is not None:
            context.stop()
    except Exception as exc:  # expected: the JVM is gone
        log.debug("stopping the dead SparkContext: %s", one_line(exc))
    try:
        if context is not None and getattr(context, "_accumulatorServer", None):
            context._accumulatorServer.shutdown()
            context._accumulatorServer = None
    except Exception:
        log.debug("accumulator server shutdown failed", exc_info=True)
    with SparkContext._lock:
        SparkContext._active_spark_context = None
        SparkContext._gateway = None
        SparkContext._jvm = None
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None
    SQLContext._instantiatedContext = None


#: Spark Connect client retries of a call the server does not answer: 5 tries over about 3 s.
#: pyspark's default keeps retrying for at least 10 minutes, during which a write blocks and no
#: outage is seen; the bridge's circuit breaker probes and resumes on its own instead.
CONNECT_RETRIES, CONNECT_BACKOFF_MS, CONNECT_MAX_BACKOFF_MS = 4, 200, 2000


def _fail_fast(spark: Any) -> None:
    """Give a Spark Connect session a short retry policy (CONNECT_RETRIES, doubling backoff)."""
    try:
        from pyspark.sql.connect.client.retries import DefaultPolicy

        spark.client.set_retry_policies([DefaultPolicy(max_retries=CONNECT_RETRIES, backoff_multiplier=2.0,
                                                       initial_backoff=CONNECT_BACKOFF_MS,
                                                       max_backoff=CONNECT_MAX_BACKOFF_MS)])
    except Exception as exc:  # a pyspark without this API: its own retries apply
        log.warning("Spark Connect: cannot shorten the client's retries (%s); an unreachable server is seen "
                    "as an outage only after pyspark's own retries (about 10 minutes)", one_line(exc))


def _set_connect_conf(spark: Any, settings: Mapping[str, Any]) -> None:
    """Set the session's configuration on the Connect server, as pyspark's builder would: a
    static setting the server refuses to change (its own) is skipped; anything else (the server
    unreachable) raises."""
    from pyspark.errors import AnalysisException

    for key, value in settings.items():
        try:
            spark.conf.set(key, str(value))
        except AnalysisException as exc:  # e.g. CANNOT_MODIFY_CONFIG for a static setting
            log.debug("Spark Connect: %s not set: %s", key, one_line(exc))


#: How `SparkSessions` starts a session: `create_spark_session`'s keyword arguments, the session.
SessionFactory = Callable[..., SparkSession]


class SparkSessions:
    """The process's SparkSession for one `[spark]` section: started on first `get()` (by what needs
    it: the bridge's warm-up, `mqbridge.landing.warmup`, or else a Spark write, a typed type's schema,
    the catalog, the purge), never by a health probe (`current` is None until then). A `get()` while
    another thread starts the session waits for that start.

    When the in-process driver's JVM dies (killed, out of memory), `reset` forgets the session and
    the next `get()` starts a new one; every executor asks `get()` for each write, so all of them
    pick the new session up. `section` None: only the session given is ever used (tests).
    `secrets`: what a driver JVM it starts must not get on its command line or in its environment.
    `create`: how a session is started (`create_spark_session`; tests count or refuse the starts).
    `state_dir`: where an in-process driver's class-data archive is (`mqbridge.landing.class_archive`);
    `record_classes`: a driver started without one records the classes it loads (`class_list`), for
    the bridge to make one from (`mqbridge.landing.archive_maker`).
    """

    def __init__(self, section: SparkSection | None, session: SparkSession | None = None,
                 secrets: DriverSecrets | None = None, create: SessionFactory | None = None,
                 state_dir: Path | None = None, record_classes: bool = False) -> None:
        self.section = section
        self.secrets = secrets
        self.state_dir = state_dir
        self.record_classes = record_classes
        #: the list of classes the in-process driver records as it loads them, None when it records none
        self.class_list: Path | None = None
        self._create = create or create_spark_session
        self._session = session
        self._lock = threading.Lock()
        self.recreated = 0  # sessions started again after the JVM was gone

    @property
    def current(self) -> SparkSession | None:
        """The session if one was given or started, else None."""
        return self._session

    def get(self) -> SparkSession:
        """The session, started now if needed (SparkUnavailableError if it cannot be)."""
        with self._lock:
            if self._session is not None and jvm_gone(self._session):
                self._forget_locked(self._session, "its JVM is gone")
            if self._session is None:
                s = self.section
                if s is None:
                    raise SparkUnavailableError("the SparkSession given to the bridge is gone and cannot be "
                                                "started again (no [spark] section)")
                started = time.monotonic()
                archive = None if s.remote or self.state_dir is None else class_archive.archive_path(self.state_dir)
                record = archive is not None and self.record_classes and not archive.is_file()
                extra = {"java_options": class_archive.record_options(self._class_list())} if record else {}
                self._session = self._create(master=s.master, remote=s.remote, app_name=s.app_name, conf=s.conf,
                                             secrets=self.secrets, state_dir=self.state_dir, **extra)
                self.class_list = self._class_list() if record else None
                shared = self._archive_state(self._session, archive)
                if self.recreated:
                    log.warning("Spark: new SparkSession started (%d since the bridge started)", self.recreated)
                else:
                    log.info("Spark: SparkSession started in %.1fs (%s)", time.monotonic() - started,
                             f"Spark Connect {shown_remote(s.remote)}" if s.remote else
                             f"master {s.master}, class-data archive: {shared}")
            return self._session

    def _class_list(self) -> Path:
        assert self.state_dir is not None
        return class_archive.class_list_path(self.state_dir)

    def _archive_state(self, spark: SparkSession, archive: Path | None) -> str:
        """What the log says of the driver's class-data archive; one its JVM refused is removed."""
        if archive is None:
            return "none"
        if not archive.is_file():
            return ("none: the driver records the classes it loads, and the bridge makes one from them"
                    if self.class_list is not None else "none (mqbridge spark-archive makes one)")
        try:
            refused = class_archive.refused(spark)
        except Exception as exc:  # noqa: BLE001 - a look only: the session itself is what matters
            return f"mapped (not checked: {one_line(exc)})"
        if not refused:
            return "mapped"
        archive.unlink(missing_ok=True)
        log.warning("Spark: the driver JVM refused the class-data archive %s (its class path or Java changed since it "
                    "was made) and shares no classes: removed, so that a new one is made", archive)
        return "refused, removed"

    def reset(self, broken: SparkSession, why: str) -> None:
        """`broken` failed in a way only a new session can cure: forget it (once, whoever calls)."""
        with self._lock:
            if self._session is broken:
                self._forget_locked(broken, why)

    def _forget_locked(self, broken: SparkSession, why: str) -> None:
        log.critical("Spark: the SparkSession is unusable (%s); a new one is started for the next write", why)
        self._session = None
        if self.section is not None:
            self.recreated += 1
            if not is_connect(broken):
                _forget_local_session(broken)


def write_probe(spark: SparkSession, target: Path) -> None:
    """One row written by a Spark job as Parquet to `target` (replacing what is there)."""
    spark.range(1).selectExpr("id", "current_timestamp() AS probed_at").write.mode("overwrite").parquet(str(target))


#: Where `check_warehouse` writes its probe: a name Spark and Parquet readers skip.
WAREHOUSE_PROBE = "_mqbridge_probe"


def store_answers(spark: SparkSession, location: object) -> None:
    """For a `location` on an object store or HDFS (a URI, not a Path), ONE request to it through the
    driver's Hadoop file system, with the session's keys and the bridge's single try and timeouts
    (`object_stores.S3A_CONF`): an error naming the refusal (a wrong key: HTTP 403), the missing bucket
    or the silent endpoint as soon as that request ends. Asked before the first read of a table, which
    makes several requests, each waiting out its own timeout (Delta reads `_last_checkpoint` three times,
    then lists the log: a silent endpoint was named after about 70 s of them) or retrying on its own
    (Iceberg, `iceberg.table_exists`). Nothing to ask of a local directory, nor through Spark Connect (no
    driver objects here)."""
    if isinstance(location, Path):
        return
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        return
    path = jvm.org.apache.hadoop.fs.Path(str(location))
    path.getFileSystem(spark._jsc.hadoopConfiguration()).exists(path)


def check_warehouse(sessions: SparkSessions, warehouse: Path | str, owner: str) -> None:
    """Before the first bulk: write a row through Spark into the warehouse and read it back from
    this process. WarehouseInvisibleError, naming the warehouse, the Spark mode and what to fix,
    when the row is not where Spark was told to write it (every bulk would then be lost from the
    bridge's view: staged where it cannot be verified or published). SparkUnavailableError when
    Spark cannot be started or reached. An object store's warehouse (a URI, not a Path) is the one
    place both read: nothing to check (its Delta tables are probed by their sinks)."""
    if not isinstance(warehouse, Path):
        return
    target = Path(warehouse).absolute() / WAREHOUSE_PROBE / owner_dirname(owner)
    spark = sessions.get()
    try:
        write_probe(spark, target)
        verify_staged(staged_moves(target, target, "probe"), 1, target, what="start-up probe")
    except StagingMismatchError as exc:
        section = sessions.section
        if section is not None and section.remote:
            mode = f"Spark Connect server {shown_remote(section.remote)}"
        else:
            mode = f"Spark master {section.master if section is not None else 'of the given session'}"
        raise WarehouseInvisibleError(
            f"warehouse {warehouse}: a row written through {mode} is not visible to the bridge at "
            f"{target} ({exc}). Spark writes to another file system than this process reads: give the "
            "Spark Connect server or the cluster's executors the same warehouse directory at the same path "
            "(a shared mount), and no spark.hadoop.fs.defaultFS pointing elsewhere") from exc
    except Exception as exc:
        raise SparkUnavailableError(f"start-up probe write to warehouse {warehouse} failed: {one_line(exc)}") from exc
    finally:
        discard(target)
        with contextlib.suppress(OSError):
            target.parent.rmdir()


def _java_hint(remote: str | None) -> str:
    """Why a local Spark could not start, when the cause is the usual one: no Java."""
    if remote:
        return ""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and not (Path(java_home) / "bin" / "java").exists():
        return f" (JAVA_HOME={java_home} has no bin/java: point it at a Java 17+ runtime)"
    if not java_home and shutil.which("java") is None:
        return " (no `java` on PATH: install a Java 17+ runtime or set JAVA_HOME)"
    return ""
