"""The Spark driver JVM's own log (log4j2) on the bridge's terms: one line format like the
bridge's log lines, on standard error, at ERROR unless the bridge itself logs at DEBUG (`run
--log-level DEBUG` shows Spark's warnings too). Without it an in-process Spark prints its default
profile banner, a "Setting default log level" notice and WARN lines about the host's address and
Hadoop's native libraries on every start.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import tempfile
from collections.abc import Mapping

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


def driver_log_conf(settings: Mapping[str, str], level: str) -> dict[str, str]:
    """The Spark settings that give an in-process driver JVM this log configuration (written to a
    private temporary file, removed at exit), keeping any `spark.driver.extraJavaOptions` given."""
    fd, path = tempfile.mkstemp(prefix="mqbridge-log4j2-", suffix=".properties")
    with os.fdopen(fd, "w") as out:
        out.write(_properties(level))
    atexit.register(_remove, path)
    options = f"-Dlog4j2.configurationFile=file:{path}"
    given = settings.get("spark.driver.extraJavaOptions")
    return {"spark.driver.extraJavaOptions": f"{options} {given}" if given else options}


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)
