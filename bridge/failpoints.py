"""Failpoints: a test-only way to kill the bridge at a named step of the landing protocol.

    MQBRIDGE_FAILPOINT=after_publish mqbridge run --config bridge.toml

makes the process kill itself (SIGKILL: no cleanup, no flush, like `kill -9` or a power cut) the
first time it reaches that step. `name:exit` exits with status 137 through `os._exit` instead, for
platforms without SIGKILL. Unset (the default), `hit()` costs one dictionary lookup. The
environment is read when a point is reached, never at import time.

Points, in the order of the protocol (see docs/guarantees.md):

    after_stage           a bulk's files are written to its staging directory
    after_prepare         the ledger holds the bulk as prepared
    after_publish         the bulk's files are in the table; the ledger does not say published yet
    before_source_commit  the ledger says published; the source has not committed
    after_source_commit   the source committed the unit of work

Inside a STOMP source commit (`mqbridge.listeners.stomp`), between `before_source_commit` and
`after_source_commit`:

    after_backout_send    the unit's backout moves / copies given back / results to reply-to
                          (confirm) / derived messages (mqbridge.emit) are sent (and, in
                          commit_mode = "receipted", confirmed by their receipts); no ACK yet.
                          Reached only by a unit that sends something
    after_source_ack      the unit's ACKs are sent (receipted: confirmed); no COMMIT yet

Inside an IBM MQ source commit (`mqbridge.listeners.mq`):

    after_results_put     the unit's PAN reports and derived messages (mqbridge.emit) are put
                          under syncpoint; no MQCMIT yet. Reached only by a unit that put one

Killing point of the stored results (`mqbridge.outbound.stored`), on their sender thread:

    after_stored_result   a message's "stored" result is confirmed by the broker; its bulk has not
                          necessarily landed, its final result is not sent (first one only)

Some points change behaviour instead of killing (`active`), the first time they are reached (the
first N times with `point:N`):

    spark_write_hang      the next bulk write never ends: by Spark until its job group is cancelled
                          by `[spark] write_timeout`; by pyarrow (`[spark] writer`) its thread blocks
                          for good and is abandoned at `write_timeout`. Spark's hang is a filter that
                          sleeps on each row (`HANG_FILTER`): it acts on a bulk's rows only, never on
                          a Delta table's empty making, whose frame has none (it would not hang there)
    delta_create_hang     the next making of a Delta table (`mqbridge.landing.delta_create`) never
                          ends: a Spark job of it sleeps until its job group is cancelled by
                          `write_timeout`; nothing is committed
    purge_write_hang      the next container a purge rewrites never ends (until the purge's Spark
                          jobs are cancelled at shutdown)

Points that wait instead (`wait`), the first time each is reached, so that a test can order what
another process does against it:

    after_write_staged:FILE  a bulk write has staged its rows (nothing is published, and a write
                             that landed no rows has not cleaned up yet): the process creates
                             FILE.reached, then waits until FILE exists
    holding_prepared:FILE    a bulk is prepared in the ledger (its claim on its identities), not yet
                             published or committed: a live bridge in the middle of its landing;
                             FILE.reached, then waits until FILE exists
    holding_staged:FILE      a bulk's Iceberg append is staged under its WAP id, not yet published
                             (`mqbridge.landing.iceberg.append`): FILE.reached, then waits until FILE exists

`point:FILE#N` waits the N-th time the point is reached instead of the first.

and one (`value`) makes Spark itself fail every bulk write that holds a chosen message:

    spark_poison_body:TEXT  a bulk write fails when a body contains TEXT: inside Spark (assert_true),
                            or before pyarrow writes; probe writes, which hold no message, succeed

Killing points of a purge (`mqbridge.maintenance.purge.purger`), per container:

    purge_before_swap     the new container is built beside the live one
    purge_after_swap      the new container is live; the old one is not removed yet

Killing points of a compaction (`mqbridge.maintenance.compaction.compactor`), per container:

    compact_before_swap   the new, sorted container is built beside the live one
    compact_mid_swap      inside the swap: the directories are exchanged under the table's lock;
                          the history does not record it yet, the marker is still in the container

Killing points of the purge of a Delta table (`mqbridge.maintenance.delta.purger`), per partition:

    delta_purge_before_commit  the strategy is chosen; nothing is committed
    delta_purge_after_commit   the DELETE or copy is committed; the cost model has not learnt it and
                               no VACUUM ran

Killing points of `mqbridge redrive`, per unit of work (STOMP transaction, MQ syncpoint):

    redrive_before_commit the copies are sent to the source queue and the backout messages
                          acknowledged (got) in the unit; no COMMIT (MQCMIT) yet. RabbitMQ: the
                          copies are confirmed by their receipts, the originals not yet ACKed
    redrive_after_commit  the unit is committed

Killing points of `mqbridge replay` and `mqbridge follow`, per batch:

    replay_before_commit  the batch's rows and marker are sent in its STOMP transaction; no COMMIT yet.
                          RabbitMQ: the rows are confirmed by their receipts, the marker not sent yet
    replay_after_commit   the target committed the batch; the replay (follow) ledger does not say sent yet
"""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path

log = logging.getLogger(__name__)

ENVIRONMENT_VARIABLE = "MQBRIDGE_FAILPOINT"
POINTS = ("after_stage", "after_prepare", "after_publish", "before_source_commit", "after_backout_send",
          "after_source_ack", "after_source_commit", "purge_before_swap", "purge_after_swap",
          "compact_before_swap", "compact_mid_swap",
          "redrive_before_commit", "redrive_after_commit",
          "replay_before_commit", "replay_after_commit", "after_stored_result")
_fired: set[str] = set()
_reached: dict[str, int] = {}  # how often each point was reached (`wait`'s `#N`, `active`'s `:N`)

#: Test only: a Spark filter that keeps every row and never ends (Java's Thread.sleep through SQL
#: reflection, no UDF; interrupted by a job cancel). A dropped column would be optimised away. It sleeps
#: once per row: on a frame of no rows it ends at once.
HANG_FILTER = "length(coalesce(reflect('java.lang.Thread', 'sleep', CAST(86400000 AS BIGINT)), '')) >= 0"


def hit(point: str) -> None:
    """Die here if the environment names this point (see the module docstring)."""
    wanted = os.environ.get(ENVIRONMENT_VARIABLE)
    if not wanted:
        return
    name, _, action = wanted.partition(":")
    if name != point:
        return
    log.critical("failpoint %s reached: killing the process (%s)", point, action or "kill")
    logging.shutdown()
    if action == "exit" or not hasattr(signal, "SIGKILL"):
        os._exit(137)
    os.kill(os.getpid(), signal.SIGKILL)


def active(point: str) -> bool:
    """True the first time `point` is reached if the environment names it (behaviour failpoints); the
    first N times with `point:N`."""
    wanted = os.environ.get(ENVIRONMENT_VARIABLE)
    if not wanted or point in _fired:
        return False
    name, _, times = wanted.partition(":")
    if name != point:
        return False
    _reached[point] = _reached.get(point, 0) + 1
    if _reached[point] >= (int(times) if times.isdigit() else 1):
        _fired.add(point)
    log.critical("failpoint %s reached (%d)", point, _reached[point])
    return True


def wait(point: str, timeout: float = 600.0) -> None:
    """The first time `point` is reached with the environment naming `point:FILE` (the N-th time with
    `point:FILE#N`): create `FILE.reached`, then wait until FILE exists (polled; at most `timeout`
    seconds, then go on)."""
    gate = value(point)
    if gate is None or point in _fired:
        return
    gate, _, nth = gate.partition("#")
    _reached[point] = _reached.get(point, 0) + 1
    if nth and _reached[point] < int(nth):
        return
    _fired.add(point)
    log.critical("failpoint %s reached: waiting for %s", point, gate)
    Path(f"{gate}.reached").touch()
    deadline = time.monotonic() + timeout
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.05)


def armed(*points: str) -> bool:
    """True if the environment names one of `points` (whether or not it has fired): a caller that
    builds the same work two ways takes the way that reaches its failpoints."""
    return os.environ.get(ENVIRONMENT_VARIABLE, "").partition(":")[0] in points


def value(point: str) -> str | None:
    """The text after `point:` if the environment names `point` (every time), else None."""
    wanted = os.environ.get(ENVIRONMENT_VARIABLE)
    if not wanted:
        return None
    name, _, text = wanted.partition(":")
    return text if name == point and text else None
