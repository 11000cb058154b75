"""`[spark] write_timeout` for the two writers: a Spark job is cancelled past it (`spark_guarded`), a pyarrow
write, which nothing can interrupt, is abandoned on its own thread (`abandoned_after`). Either way the
caller gets SparkWriteTimeoutError, an outage: the write cannot be the messages' fault.

A cancel reaches only the Spark jobs running when it is sent. What a write does between its jobs runs in
the driver (Delta's commit writes the table's log there; a cold JVM loads Delta's classes): a write past
its timeout may then end on its own, and it ended well, so it is no outage. Measured with a fresh local
driver and `write_timeout = "5s"`: a Delta table's making and its first bulk's commit each took 5-8 s
and ended 0.2-3 s after their cancel, landed (`spark_guarded` says so in the log).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from mqbridge.errors import SparkWriteTimeoutError, one_line
from mqbridge.landing.session import is_connect

log = logging.getLogger(__name__)

#: After a write exceeded its timeout, its job group is cancelled again this often until the
#: write returns (a cancel only reaches jobs already submitted).
CANCEL_EVERY = 1.0


def spark_guarded(spark: Any, owner: str, what: str, write: Callable[[], object], timeout: float) -> None:
    """Run `write` (one Spark action of `owner`, a message type) in its own job group; past `timeout`,
    cancel the group (again every CANCEL_EVERY until the write returns) and raise SparkWriteTimeoutError.
    A write that ends well after its timeout fired (the cancels found no job of it running: see the module
    docstring) returns, and the log says so. When this returns or raises, no cancel of the group is under
    way any more, and the thread's later Spark jobs are back in the job group they were in before."""
    group = f"mqbridge-{owner}-{threading.get_ident()}-{time.monotonic_ns()}"
    done, fired = threading.Event(), threading.Event()
    connect = is_connect(spark)
    started = time.monotonic()

    def watch() -> None:
        if done.wait(timeout):
            return
        fired.set()
        log.error("type %s: %s running for more than write_timeout %.0fs: cancelling its Spark jobs",
                  owner, what, timeout)
        while not done.is_set():
            try:
                if connect:
                    spark.interruptTag(group)
                else:
                    spark.sparkContext.cancelJobGroup(group)
            except Exception as exc:
                log.warning("type %s: cancelling the %s failed: %s", owner, what, one_line(exc))
            done.wait(CANCEL_EVERY)

    outer = _job_group(spark, connect)
    if connect:
        spark.addTag(group)
    else:
        spark.sparkContext.setJobGroup(group, f"mqbridge {what}", interruptOnCancel=True)
    watcher = threading.Thread(target=watch, name=f"spark-timeout-{owner}", daemon=True)
    watcher.start()
    try:
        write()
    except Exception as exc:
        if fired.is_set():
            raise SparkWriteTimeoutError(f"{what} exceeded write_timeout ({timeout:.0f}s); its "
                                         f"Spark jobs were cancelled") from exc
        raise
    finally:
        done.set()
        # A cancel the watcher sent just as the write ended would reach the thread's next job (the
        # settling of a failed Delta commit, say), which still ran in this group: wait for it, and leave it.
        watcher.join(CANCEL_EVERY + 5.0)
        _leave_group(spark, group, connect, outer)
    if fired.is_set():
        log.warning("type %s: %s ended by itself %.1fs after its cancel at write_timeout %.0fs (a cancel stops only "
                    "the Spark jobs running then): it completed, no outage", owner, what,
                    time.monotonic() - started - timeout, timeout)


#: The local properties of a thread's job group (`SparkContext.setJobGroup`).
_GROUP_PROPERTIES = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")


def _job_group(spark: Any, connect: bool) -> dict[str, str | None]:
    """The job group this thread's Spark jobs are in now (a scheduled maintenance task's, or none)."""
    if connect:
        return {}
    context = spark.sparkContext
    return {key: context.getLocalProperty(key) for key in _GROUP_PROPERTIES}


def _leave_group(spark: Any, group: str, connect: bool, outer: dict[str, str | None]) -> None:
    """This thread's later Spark jobs belong to `group` (tag) of `spark_guarded` no more, but to the job
    group they were in before (`outer`, from `_job_group`)."""
    try:
        if connect:
            spark.removeTag(group)
        else:
            for key, value in outer.items():
                spark.sparkContext.setLocalProperty(key, value)
    except Exception:
        log.debug("leaving job group %s failed", group, exc_info=True)


def abandoned_after(timeout: float, name: str, write: Callable[[], object], *, logged: str, error: str) -> None:
    """Run `write` (a pyarrow write) on a thread of its own called `name`, abandoned past `timeout`: a
    write blocked in the filesystem cannot be interrupted. Past `timeout`: `logged` is logged as an
    error and SparkWriteTimeoutError(`error`) raised; an error `write` raised is raised here."""
    outcome: list[BaseException | None] = []
    done = threading.Event()

    def run() -> None:
        try:
            write()
            outcome.append(None)
        except BaseException as exc:  # handed to the caller's thread
            outcome.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name=name, daemon=True).start()
    if not done.wait(timeout):
        log.error("%s", logged)
        raise SparkWriteTimeoutError(error)
    if outcome and outcome[0] is not None:
        raise outcome[0]
