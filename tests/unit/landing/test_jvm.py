"""The Spark driver JVM's options (mqbridge.landing.jvm): a log4j2 configuration, quiet by default; its JIT
C1 only unless the configuration chooses."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from mqbridge.landing.jvm import JIT_OPTIONS, driver_java_conf, jvm_log_level


def test_the_driver_gets_our_log4j2_file_and_keeps_its_own_java_options() -> None:
    conf = driver_java_conf({"spark.driver.extraJavaOptions": "-Dmine=1"}, "ERROR")
    options = conf["spark.driver.extraJavaOptions"]
    assert options.startswith("-Dlog4j2.configurationFile=file:") and options.endswith(" -Dmine=1")
    path = Path(options.split()[0].split("file:", 1)[1])
    text = path.read_text()
    assert "rootLogger.level = error" in text and "target = SYSTEM_ERR" in text
    # pyspark's driver is a "shell" to Spark: its logger must match the root or Spark prints a banner
    assert "org.apache.spark.api.python.PythonGatewayServer" in text
    assert oct(path.stat().st_mode & 0o777) == "0o600"  # a private file, not one another user could swap
    assert JIT_OPTIONS in options.split()


@pytest.mark.parametrize("given", ["-XX:TieredStopAtLevel=4", "-Xmx2g -XX:-TieredCompilation",
                                   "-XX:+TieredCompilation"])
def test_a_jit_setting_given_replaces_ours(given: str) -> None:
    options = driver_java_conf({"spark.driver.extraJavaOptions": given}, "ERROR")["spark.driver.extraJavaOptions"]
    assert JIT_OPTIONS not in options.split() and options.endswith(given)


def test_without_options_given_the_driver_runs_c1_only() -> None:
    options = driver_java_conf({}, "ERROR")["spark.driver.extraJavaOptions"].split()
    assert options[1:] == ["-XX:TieredStopAtLevel=1", "-XX:ReservedCodeCacheSize=240m"]


def test_the_code_cache_c1_would_shrink_to_48_mb_is_kept_at_240_mb_unless_given() -> None:
    # C1 only shrinks HotSpot's default code cache to 48 MB, which a long-lived driver fills
    options = driver_java_conf({}, "ERROR")["spark.driver.extraJavaOptions"]
    assert "-XX:ReservedCodeCacheSize=240m" in options.split()
    given = driver_java_conf({"spark.driver.extraJavaOptions": "-XX:ReservedCodeCacheSize=512m"},
                             "ERROR")["spark.driver.extraJavaOptions"]
    assert given.endswith("-XX:ReservedCodeCacheSize=512m")  # the last of a flag wins: the operator's


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
