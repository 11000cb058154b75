"""Re-drive and replay on IBM MQ (the persistent fake queue manager, `mqbridge` processes, real
Spark). Re-drive: the backout queue back to the queue under syncpoint, keeping each MsgId; killed
before MQCMIT it moves nothing; a copy of a message that had landed is recognised by its MsgId and
not landed twice. Replay (on the table the re-drive completed, so one bridge run serves both): the
rows back onto a queue, killed after its first batch committed, resumed; each row arrives once with
its MsgId, in put order, and the markers are gone."""

from __future__ import annotations

import collections
import signal
from pathlib import Path
from typing import Any

import pytest

from mqbridge.config import load_config
from mqbridge.listeners.mq.replay import MqReplayTarget
from mqbridge.resend.replay import ReplayLedger, Selection, read_rows, replay
from tests.support.bridge import read_table
from tests.support.exactly_once import account, bodies
from tests.support.fakes import pymqi_fake
from tests.support.fakes.mq_server import FakeQueueManagerServer
from tests.support.processes import MQ_BOQ as BOQ
from tests.support.processes import MQ_DLQ as DLQ
from tests.support.processes import MQ_QUEUE as QUEUE
from tests.support.processes import fake_mq_env, mq_config, mqbridge, run_until_idle

pytestmark = pytest.mark.integration
POISON = b"poison-"
REPLAYED, MARKERS = "REPLAYED", "MQBRIDGE.REPLAY.MARKERS"


def _depths(state: Path) -> tuple[int, int, dict[str, int]]:
    """ORDERS and ORDERS.BOQ as the next process to open the queue manager sees them (it backs out
    a unit of work a killed process left open, as MQ does), and what it recovered."""
    qm = FakeQueueManagerServer(state_file=state, register=False)
    try:
        return qm.queue(QUEUE).depth, qm.queue(BOQ).depth, dict(qm.recovered)
    finally:
        qm.close()


def test_redrive_and_replay_on_mq_keep_the_msgid_survive_kills_and_do_nothing_twice(tmp_path: Path, spark: Any) -> None:
    # Given a bridge that landed 20 messages and moved two poison ones to ORDERS.BOQ (BOTHRESH 3)
    state, name = tmp_path / "qm.state", "QMREDRIVE"
    good, poison = bodies(20, "good"), [POISON + b for b in bodies(2, "bad")]
    qm = FakeQueueManagerServer(name, dead_letter_queue=DLQ, state_file=state)
    try:
        qm.define_queue(QUEUE, backout_threshold=3, backout_queue=BOQ)
        qm.define_queue(BOQ)
        qm.put_many(QUEUE, good + poison, properties={"region": "eu"})
    finally:
        qm.close()
    config, env = mq_config(tmp_path, name, threads=1, batch=50), fake_mq_env(state)
    run_until_idle(config, idle="2s", env_extra={**env, "MQBRIDGE_FAILPOINT": f"spark_poison_body:{POISON.decode()}"})
    table = tmp_path / "landing" / "orders"
    rows = read_table(spark, table)
    assert sorted(bytes(r.body) for r in rows) == sorted(good)
    # ... and a copy of a landed message on ORDERS.BOQ too (with its MsgId)
    qm = FakeQueueManagerServer(state_file=state, register=False)
    try:
        assert qm.queue(BOQ).depth == 2
        qm.put(BOQ, bytes(rows[0].body), msg_id=bytes.fromhex(rows[0].msg_id), properties={"mqbridge_reason": "twin"})
    finally:
        qm.close()
    cli = ("redrive", "--config", str(config), "--listener", QUEUE, "--batch", "2")

    # When a re-drive is killed before its first MQCMIT, then runs again, and the bridge runs again
    proc = mqbridge(*cli, failpoint="redrive_before_commit", env_extra=env)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL and "failpoint redrive_before_commit reached" in out, out
    on_queue, on_boq, recovered = _depths(state)
    assert (on_queue, on_boq, recovered["messages_backed_out"]) == (0, 3, 2)  # the open unit, backed out
    proc = mqbridge(*cli, env_extra=env)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "re-drive: 3 moved" in out, out
    run_until_idle(config, idle="2s", env_extra=env)

    # Then every message is in the table once, the poison ones with their own MsgIds and the history
    after = read_table(spark, table)
    accounting = account(good + poison, collections.Counter(bytes(r.body) for r in after))
    assert accounting.clean, accounting
    assert len({r.msg_id for r in after}) == len(after)
    redriven = [r for r in after if bytes(r.body).startswith(POISON)]
    assert all(r.headers["region"] == "eu" and "mqbridge_redriven_at" in r.headers for r in redriven)
    assert all(r.headers["mqbridge_redriven_reason"] == r.headers["mqbridge_reason"] for r in redriven)
    assert _depths(state)[:2] == (0, 0)

    _replay_across_a_kill(config, env, state, name, table, after, spark)


def _replay_across_a_kill(config: Path, env: dict[str, str], state: Path, name: str, table: Path,
                          rows: list[Any], spark: Any) -> None:
    # Given the table, a queue to replay it to and the marker queue
    qm = FakeQueueManagerServer(state_file=state, register=False)
    try:
        qm.define_queue(REPLAYED)
        qm.define_queue(MARKERS)
    finally:
        qm.close()

    # When a replay is killed after its first batch committed, before its ledger said so
    proc = mqbridge("replay", "--config", str(config), "--table", "orders", "--to", REPLAYED, "--batch", "7",
                    failpoint="replay_after_commit", env_extra=env)
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == -signal.SIGKILL and "failpoint replay_after_commit reached" in out, out
    replay_id = out.split("replay ", 1)[1].split(":", 1)[0]
    # ... and the same replay resumes: in this process, on the test session's Spark
    cfg = load_config(str(config))
    qm = FakeQueueManagerServer(name, state_file=state)
    ledger = ReplayLedger.in_state_dir(cfg.resolve_path(cfg.bridge.state_dir))
    try:
        assert (qm.queue(REPLAYED).depth, qm.queue(MARKERS).depth) == (7, 1)
        target = MqReplayTarget("qm", cfg.sources["qm"], REPLAYED, replay_id, 0.0, driver=pymqi_fake)
        try:
            report = replay(read_rows(spark, table, Selection()), target, ledger, replay_id, batch=7,
                            say=lambda _: None)
        finally:
            target.close()
        got = list(qm.queue(REPLAYED).messages)
        markers = qm.queue(MARKERS).depth
    finally:
        ledger.close()
        qm.close()

    # Then the committed batch counted as sent and every row arrived once, in put order, with its MsgId
    assert (report.resolved_sent, report.resolved_again, report.skipped) == (1, 0, 7)
    assert report.sent == len(rows) - 7 and markers == 0
    accounting = account([bytes(r.body) for r in rows], collections.Counter(m.data for m in got))
    assert accounting.clean, accounting
    by_body = {bytes(r.body): r for r in rows}
    assert all(m.md["MsgId"] == bytes.fromhex(by_body[m.data].msg_id) for m in got)
    put_times = [by_body[m.data].put_timestamp for m in got]
    assert put_times == sorted(put_times)
    assert all(dict((n, v) for n, (_, v) in m.properties.items())["mqbridge_replay_id"] == replay_id for m in got)

