"""The Spark driver JVM's own log (log4j2) on the bridge's terms: one line format like the
bridge's log lines, on standard error, at ERROR unless the bridge itself logs at DEBUG (`run
--log-level DEBUG` shows Spark's warnings too). Without it an in-process Spark prints its default
profile banner, a "Setting default log level" notice and WARN lines about the host's address and
Hadoop's native libraries on every start. And its JIT (`JIT_OPTIONS`): C1 only, unless the
configuration chooses.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import shlex
import tempfile
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

from mqbridge.landing.driver_secrets import child_environment, private_properties

#: Loggers whose warnings say nothing an operator can act on.
_QUIET = ("org.apache.spark.util.Utils", "org.apache.hadoop.util.NativeCodeLoader")


def jvm_log_level() -> str:
    """ERROR, or WARN while the bridge's own loggers show DEBUG."""
    return "WARN" if logging.getLogger("mqbridge").getEffectiveLevel() <= logging.DEBUG else "ERROR"


def _properties(level: str) -> str:
    lines = [
        "status = error",
        f"rootLogger.level = {level.lower()}",
        "rootLogger.appenderRef.stderr.ref = stderr",
        "appender.stderr.type = Console",
        "appender.stderr.name = stderr",
        "appender.stderr.target = SYSTEM_ERR",
        "appender.stderr.layout.type = PatternLayout",
        "appender.stderr.layout.pattern = %d{yyyy-MM-dd HH:mm:ss,SSS} %-8p %t spark.%c{1}: %m%n",
    ]
    for n, name in enumerate(_QUIET):
        lines += [f"logger.quiet{n}.name = {name}", f"logger.quiet{n}.level = error"]
    # pyspark's driver counts as a shell: unless the REPL logger has the root's level, Spark prints
    # "Setting default log level to WARN" and how to change it on every start.
    for n, name in enumerate(("org.apache.spark.repl.Main", "org.apache.spark.api.python.PythonGatewayServer",
                              "org.apache.spark.deploy.SparkSubmit")):
        lines += [f"logger.shell{n}.name = {name}", f"logger.shell{n}.level = {level.lower()}"]
    return "\n".join(lines) + "\n"


#: The in-process driver JVM's JIT: C1 only. A bridge runs one small Spark job per bulk, and each
#: job runs driver code (analysis, planning, commit) and freshly generated classes once: with the
#: JVM's default tiered JIT, C2 keeps recompiling them for hundreds of writes. Measured on the 2-core
#: machine (`local[2]`, 1 KB rows, writes 10–18 of a fresh JVM): the compiler threads took 0.54 of
#: the 0.87 JVM CPU-seconds of a 2,000-row write; with C1 only a write took 0.36 CPU-s (2,000 rows)
#: and 0.9 (20,000 rows) from the second write on, and the first write 7.5 CPU-s instead of 13–14.
#: C2's code is faster per row once warm (about 0.017 against 0.03 ms per row after ~120 writes),
#: so a bridge whose bulks are large and whose JVM has cores to spare may choose
#: `-XX:TieredStopAtLevel=4` in `[spark.conf] "spark.driver.extraJavaOptions"`; any JIT option
#: there (`-XX:TieredStopAtLevel`, `-XX:±TieredCompilation`) replaces this one.
JIT_OPTIONS = "-XX:TieredStopAtLevel=1"
#: The code cache of the driver JVM: C1 only shrinks HotSpot's default from 240 MB to 48 MB, and a
#: long-lived driver fills that with the classes Spark generates for its jobs. A full code cache
#: stops the JIT and then fails the JVM's own method handles ("Out of space in CodeCache for method
#: handle intrinsic"): a Delta test session's JVM died of it after 91 s in a CI rehearsal. 240 MB is
#: reserved address space; the JVM commits what its code takes. Always given, before the options an
#: operator gives (the last of a flag wins).
CODE_CACHE_OPTIONS = "-XX:ReservedCodeCacheSize=240m"
_JIT_CHOSEN = re.compile(r"-XX:(TieredStopAtLevel=|[+-]TieredCompilation\b)")


def driver_java_conf(settings: Mapping[str, str], level: str) -> dict[str, str]:
    """The `spark.driver.extraJavaOptions` of an in-process driver: this log configuration (written
    to a private temporary file, removed at exit), `JIT_OPTIONS` unless the options given choose a
    JIT setting, `CODE_CACHE_OPTIONS`, then any `spark.driver.extraJavaOptions` given."""
    fd, path = tempfile.mkstemp(prefix="mqbridge-log4j2-", suffix=".properties")
    with os.fdopen(fd, "w") as out:
        out.write(_properties(level))
    atexit.register(_remove, path)
    given = settings.get("spark.driver.extraJavaOptions") or ""
    options = [f"-Dlog4j2.configurationFile=file:{path}"]
    if not _JIT_CHOSEN.search(given):
        options.append(JIT_OPTIONS)
    options.append(CODE_CACHE_OPTIONS)
    if given:
        options.append(given)
    return {"spark.driver.extraJavaOptions": " ".join(options)}


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)


#: Lines of the driver JVM's standard error that say nothing an operator can act on: the JVM's
#: notice for the incubator module that Spark's launcher always adds (`--add-modules
#: jdk.incubator.vector`, hard-coded in its JavaModuleOptions; Java prints it for any incubator module).
_JVM_NOISE = ("WARNING: Using incubator modules:",)


class _ChildKwargs(dict[str, Any]):
    """Popen keyword arguments whose `env`, whoever sets it, holds none of `secrets`: pyspark's
    `launch_gateway` sets `env` to a copy of os.environ just before it starts the JVM, and offers no
    other way to give the child an environment of our choice."""

    def __init__(self, secrets: Collection[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.secrets = secrets

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, child_environment(value, self.secrets) if key == "env" else value)


def launch_driver_gateway(conf: Mapping[str, str], secret_conf: Mapping[str, str] | None = None,
                          hidden: Collection[str] = ()) -> None:
    """Start the in-process driver's JVM (py4j gateway) as pyspark would for `conf`, unless one
    runs, with its standard error through a pipe: each line is copied to our standard error, except
    `_JVM_NOISE`, which goes to the log at DEBUG. pyspark's `getOrCreate` then uses this gateway.

    `conf` goes on spark-submit's command line; `secret_conf` in a private properties file
    (`driver_secrets.private_properties`) removed once the JVM has started; the JVM's environment
    holds none of the `hidden` values (`driver_secrets.child_environment`)."""
    import subprocess
    import sys
    import threading

    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    with SparkContext._lock, private_properties(secret_conf or {}) as properties, \
            _submit_args(properties if secret_conf else None):
        if SparkContext._gateway is not None:
            return
        gateway = launch_gateway(  # type: ignore[no-untyped-call]  # pyspark's function has no annotations
            SparkConf(loadDefaults=False).setAll(list(conf.items())),
            popen_kwargs=_ChildKwargs(hidden, stderr=subprocess.PIPE))
        # launch_gateway returns once the JVM has told us its port: SparkSubmit has read the file.
        SparkContext._gateway = gateway
        SparkContext._jvm = gateway.jvm
    stream = gateway.proc.stderr
    threading.Thread(target=_copy_jvm_stderr, args=(stream, sys.stderr), name="spark-jvm-stderr",
                     daemon=True).start()


@contextlib.contextmanager
def _submit_args(properties: Path | None) -> Iterator[None]:
    """pyspark's `PYSPARK_SUBMIT_ARGS` (its only way to pass spark-submit an option) with our
    properties file first, for the duration of the launch (under SparkContext._lock, which every
    JVM launch of pyspark holds too); `--load-spark-defaults`: spark-defaults.conf still applies."""
    if properties is None:
        yield
        return
    given = os.environ.get("PYSPARK_SUBMIT_ARGS")
    os.environ["PYSPARK_SUBMIT_ARGS"] = (f"--properties-file {shlex.quote(str(properties))} --load-spark-defaults "
                                         f"{given or 'pyspark-shell'}")
    try:
        yield
    finally:
        if given is None:
            os.environ.pop("PYSPARK_SUBMIT_ARGS", None)
        else:
            os.environ["PYSPARK_SUBMIT_ARGS"] = given


def _copy_jvm_stderr(source: Any, target: Any) -> None:
    """Until the JVM ends (end of file): its lines to `target`, noise to the log."""
    log = logging.getLogger("mqbridge.jvm")
    for raw in iter(source.readline, b""):
        line = raw.decode("utf-8", "replace")
        if line.startswith(_JVM_NOISE):
            log.debug("JVM: %s", line.rstrip())
            continue
        try:
            target.write(line)
            target.flush()
        except (OSError, ValueError):  # our stderr closed: keep draining, or the JVM would block
            continue
