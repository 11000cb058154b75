"""Re-drive and replay on the real parts: ActiveMQ, `mqbridge run` processes, real local Spark.

One bridge run (module fixture) lands a table and moves two poison messages to the backout queue;
the re-drive test moves them back (killed once in the middle) with a copy of a message that had
already landed, and a second run lands each once; the replay test turns the table's rows back into
messages (killed once in the middle by the command, resumed in this process) and checks each arrives
once, byte-exact, in put order.
"""

from __future__ import annotations

import collections
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mqbridge.config import load_config
from mqbridge.resend.replay import ReplayLedger, ReplayReport, Selection, read_rows, replay, replay_target
from tests.support.amq import AmqClient, unique_queue
from tests.support.bridge import read_table
from tests.support.exactly_once import account, bodies
from tests.support.processes import mqbridge, run_until_idle, stomp_config
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

POISON = b"poison-"


@dataclass
class Landed:
    """What the module's first bridge run left: its configuration, queue, what was sent and landed."""

    config: Path
    queue: str
    good: list[bytes]
    poison: list[bytes]
    table: Path


@pytest.fixture(scope="module")
def landed(tmp_path_factory: pytest.TempPathFactory, activemq: tuple[str, int]) -> Landed:
    tmp = tmp_path_factory.mktemp("redrive")
    queue = unique_queue("redrive")
    good, poison = bodies(40, "good"), [POISON + b for b in bodies(2, "bad")]
    with AmqClient(*activemq) as amq:
        amq.put_many(queue, good[:20] + poison[:1] + good[20:] + poison[1:],
                     headers={"x-app": "shop", "correlation-id": "corr-7"})
    config = stomp_config(tmp, queue, threads=1, batch=50, extra_listener="backout_threshold = 1")
    run_until_idle(config, idle="2s", env_extra={"MQBRIDGE_FAILPOINT": f"spark_poison_body:{POISON.decode()}"})
    return Landed(config, queue, good, poison, tmp / "landing" / "orders")


def _resume(config: Path, destination: str, replay_id: str, spark: Any, say: Callable[[str], None]) -> ReplayReport:
    cfg = load_config(str(config))
    ledger = ReplayLedger.in_state_dir(cfg.resolve_path(cfg.bridge.state_dir))
    target = replay_target("stomp", "amq", cfg.sources["amq"], destination, replay_id, in_doubt_wait=5.0)
    try:
        rows = read_rows(spark, cfg.resolve_path(cfg.spark.warehouse) / "orders", Selection())
        return replay(rows, target, ledger, replay_id, batch=7, say=say)
    finally:
        target.close()
        ledger.close()


def _run(*args: str, failpoint: str | None = None, timeout: float = 120) -> tuple[int, str]:
    proc = mqbridge(*args, failpoint=failpoint)
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


def test_redrive_keeps_identity_survives_a_kill_and_lands_nothing_twice(landed: Landed, spark: Any,
                                                                         amq: AmqClient) -> None:
    # Given the two poison messages on the backout queue, moved there by the bridge, and a copy of a
    # message that had landed (as a crash in commit_mode = "receipted" leaves one on both queues)
    backout = landed.queue + ".backout"
    rows = read_table(spark, landed.table)
    assert sorted(bytes(r.body) for r in rows) == sorted(landed.good)
    twin = rows[0]
    amq.put_many(backout, [bytes(twin.body)], headers={
        "mqbridge-original-message-id": twin.msg_id, "mqbridge-reason": "moved while landing",
        "mqbridge-original-timestamp": str(int(twin.put_timestamp.timestamp() * 1000))})
    assert amq.depth(backout) == 3
    cli = ("redrive", "--config", str(landed.config), "--listener", landed.queue)

    # When a dry run lists them, then a re-drive is killed between its sends and its commit
    code, out = _run(*cli, "--dry-run")
    assert code == 0 and "3 messages on" in out and "moved while landing" in out, out
    code, out = _run(*cli, "--batch", "2", failpoint="redrive_before_commit")
    assert code == -signal.SIGKILL and "failpoint redrive_before_commit reached" in out, out
    # ... nothing moved: the transaction died with the connection, and the broker gives the batch back
    wait_until(lambda: amq.depth(backout) == 3, 30, "the broker to give the killed re-drive's batch back")
    assert amq.depth(landed.queue) == 0
    code, out = _run(*cli, "--batch", "2")
    assert code == 0 and "re-drive: 3 moved" in out, out
    assert amq.depth(backout) == 0

    # ... and the bridge runs again (no poison any more)
    run_until_idle(landed.config, idle="2s")

    # Then every message is in the table once: the twin was recognised by the ledger
    after = read_table(spark, landed.table)
    accounting = account(landed.good + landed.poison, collections.Counter(bytes(r.body) for r in after))
    assert accounting.clean, accounting
    redriven = [r for r in after if bytes(r.body).startswith(POISON)]
    assert all(r.headers["x-app"] == "shop" and r.correlation_id == "corr-7" for r in redriven)
    assert all("backout threshold is 1" in r.headers["mqbridge-redriven-reason"] for r in redriven)
    assert all("mqbridge-reason" not in r.headers and r.delivery_count == 1 for r in redriven)
    first = {bytes(r.body): r.msg_id for r in rows}
    assert len({r.msg_id for r in redriven} | set(first.values())) == len(after)  # original ids, distinct
    assert amq.depth(landed.queue) == 0 and amq.depth(backout) == 0


def test_replay_sends_each_row_once_in_put_order_across_a_kill(landed: Landed, spark: Any,
                                                                amq: AmqClient) -> None:
    # Given the landed table (as the re-drive test, if it ran first, left it)
    rows = read_table(spark, landed.table)
    destination = unique_queue("replayed")
    cli = ("replay", "--config", str(landed.config), "--table", "orders", "--to", destination, "--batch", "7",
           "--in-doubt-wait", "5s")

    # When a replay is killed after the target committed its first batch, before its ledger said so
    code, out = _run(*cli, failpoint="replay_after_commit", timeout=240)
    assert code == -signal.SIGKILL and "failpoint replay_after_commit reached" in out, out
    replay_id = out.split("replay ", 1)[1].split(":", 1)[0]
    wait_until(lambda: amq.depth(destination) == 7, 30, "the killed replay's committed first batch of 7")
    # ... and the same replay resumes: in this process, on the test session's Spark (one JVM start
    # less than running the command again; the command's own resume is the same `replay` call)
    said: list[str] = []
    report = _resume(landed.config, destination, replay_id, spark, said.append)
    assert (report.resolved_sent, report.resolved_again) == (1, 0), said
    assert (report.skipped, report.sent) == (7, len(rows) - 7), said

    # Then every row arrived once, byte-exact, with its headers, oldest put_timestamp first
    frames = amq.drain(destination)
    accounting = account([bytes(r.body) for r in rows], collections.Counter(bytes(f.body) for f in frames))
    assert accounting.clean, accounting
    put_times = [f.headers["mqbridge-replayed-put-timestamp"] for f in frames]
    assert put_times == sorted(put_times)
    by_body = {bytes(r.body): r for r in rows}
    for frame in frames:
        row = by_body[bytes(frame.body)]
        assert frame.headers["mqbridge-replayed-message-id"] == row.msg_id
        assert frame.headers["x-app"] == "shop" and frame.headers["correlation-id"] == "corr-7"
        assert frame.headers["mqbridge-replay-id"] == replay_id
    # ... the markers are gone, and the replay ledger is private
    assert amq.depth(f"/queue/mqbridge.replay.{replay_id}") == 0
    assert (landed.config.parent / "state" / "replay.sqlite3").stat().st_mode & 0o777 == 0o600
