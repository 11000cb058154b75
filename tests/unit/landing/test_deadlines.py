"""`[spark] write_timeout` on a real local Spark (`deadlines.spark_guarded`): a write whose Spark job runs past
it is cancelled, an outage; a write past it that none of the cancels reaches (its work in the driver, as
Delta's commit of its log, or a cold JVM loading Delta's classes) ends by itself, and the log says it
completed; either way the thread's next Spark jobs are in the job group they were in before, which no cancel
of the write reaches any more."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from mqbridge import failpoints
from mqbridge.errors import SparkWriteTimeoutError
from mqbridge.landing.deadlines import spark_guarded

GROUP = "spark.jobGroup.id"


def test_the_job_group_the_thread_was_in_before_is_its_group_again(spark: Any) -> None:
    # Given a thread whose jobs are in a job group of its own (a scheduled maintenance task's)
    context = spark.sparkContext
    context.setJobGroup("maintenance", "mqbridge scheduled purge", interruptOnCancel=True)
    try:
        # When a write of it is guarded
        spark_guarded(spark, "orders", "write", lambda: spark.range(2).count(), 30.0)
        # Then its later jobs are in that group again
        assert context.getLocalProperty(GROUP) == "maintenance"
        assert context.getLocalProperty("spark.job.description") == "mqbridge scheduled purge"
    finally:
        for key in (GROUP, "spark.job.description", "spark.job.interruptOnCancel"):
            context.setLocalProperty(key, None)


def test_a_spark_job_past_write_timeout_is_cancelled_an_outage_and_the_next_job_runs(spark: Any) -> None:
    # Given a write whose Spark job never ends, with write_timeout = 1s
    def hung() -> None:
        spark.range(1).where(failpoints.HANG_FILTER).count()

    # When it is guarded, it is cancelled past 1 s
    started = time.monotonic()
    with pytest.raises(SparkWriteTimeoutError, match="hung write exceeded write_timeout"):
        spark_guarded(spark, "orders", "hung write", hung, 1.0)
    assert time.monotonic() - started < 30
    # Then the thread is in no job group of it, and its next job runs to the end
    assert spark.sparkContext.getLocalProperty(GROUP) is None
    assert spark.range(3).count() == 3


def test_a_write_past_write_timeout_that_no_cancel_reaches_completes_and_says_so(
        spark: Any, caplog: pytest.LogCaptureFixture) -> None:
    # Given a write that spends 1.5 s in the driver (no Spark job running then), with write_timeout = 0.5s
    def slow_in_the_driver() -> None:
        time.sleep(1.5)

    # When it is guarded: its cancels find nothing to cancel
    with caplog.at_level(logging.WARNING, logger="mqbridge.landing.deadlines"):
        spark_guarded(spark, "orders", "slow write", slow_in_the_driver, 0.5)
    # Then it completed, no outage, and the log says so after the cancel it announced
    text = caplog.text
    assert "slow write running for more than write_timeout" in text
    assert "slow write ended by itself" in text and "it completed, no outage" in text
    assert text.index("running for more than") < text.index("ended by itself")
