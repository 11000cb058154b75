"""The Spark driver JVM's log configuration (mqbridge.landing.jvm): written for log4j2, quiet by default."""

from __future__ import annotations

import logging
from pathlib import Path

from mqbridge.landing.jvm import driver_log_conf, jvm_log_level


def test_the_driver_gets_our_log4j2_file_and_keeps_its_own_java_options() -> None:
    conf = driver_log_conf({"spark.driver.extraJavaOptions": "-Dmine=1"}, "ERROR")
    options = conf["spark.driver.extraJavaOptions"]
    assert options.startswith("-Dlog4j2.configurationFile=file:") and options.endswith(" -Dmine=1")
    path = Path(options.split()[0].split("file:", 1)[1])
    text = path.read_text()
    assert "rootLogger.level = error" in text and "target = SYSTEM_ERR" in text
    # pyspark's driver is a "shell" to Spark: its logger must match the root or Spark prints a banner
    assert "org.apache.spark.api.python.PythonGatewayServer" in text
    assert oct(path.stat().st_mode & 0o777) == "0o600"  # a private file, not one another user could swap


def test_spark_warnings_show_when_the_bridge_logs_at_debug() -> None:
    logger = logging.getLogger("mqbridge")
    saved = logger.level
    try:
        logger.setLevel(logging.INFO)
        assert jvm_log_level() == "ERROR"
        logger.setLevel(logging.DEBUG)
        assert jvm_log_level() == "WARN"
    finally:
        logger.setLevel(saved)
