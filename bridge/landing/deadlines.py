"""`[spark] write_timeout` for the two writers: a Spark job is cancelled past it (`spark_guarded`), a pyarrow
write, which nothing can interrupt, is abandoned on its own thread (`abandoned_after`). Either way the
caller gets SparkWriteTimeoutError, an outage: the write cannot be the messages' fault.
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
    cancel the group (again every CANCEL_EVERY until the write returns) and raise SparkWriteTimeoutError."""
    group = f"mqbridge-{owner}-{threading.get_ident()}-{time.monotonic_ns()}"
    done, fired = threading.Event(), threading.Event()
    connect = is_connect(spark)

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
        if connect:
            try:
                spark.removeTag(group)
            except Exception:
                log.debug("removeTag failed", exc_info=True)


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
