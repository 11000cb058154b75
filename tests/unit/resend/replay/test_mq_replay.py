"""Replay to IBM MQ on the stateful fake queue manager: a batch's rows and its marker in one unit of
work; a batch left in doubt by a crash is decided from its marker (committed: marked sent; backed
out: sent again), so each row arrives once; a row keeps its MsgId, CorrelId, Format and headers."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from mqbridge.errors import ConfigError
from mqbridge.listeners.mq.replay import MqReplayTarget, property_name
from mqbridge.resend.replay import ReplayLedger, ReplayRow, replay
from mqbridge.resend.replay.identities import Renewal
from tests.support.fakes import pymqi_fake
from tests.support.fakes.mq_server import FakeQueueManagerServer
from tests.support.fakes.mq_testing import source_config

MARKERS = "MQBRIDGE.REPLAY.MARKERS"


@pytest.fixture
def qm() -> Iterator[FakeQueueManagerServer]:
    server = FakeQueueManagerServer()
    server.define_queue("REPLAYED")
    server.define_queue(MARKERS)
    yield server
    server.close()


def _rows(n: int) -> list[ReplayRow]:
    put = datetime(2026, 11, 26, 9, 0, tzinfo=timezone.utc)
    return [ReplayRow(key=f"bulk/{i}", msg_id=hashlib.sha256(b"%d" % i).hexdigest()[:48], body=b"row-%d\xff" % i,
                      correlation_id="ab" * 24 if i % 2 else None, put_timestamp=put,
                      headers={"MQMD.Format": "MQSTR", "MQMD.CodedCharSetId": "819", "MQMD.Priority": "7",
                               "region": "eu", "x-app": "shop"}) for i in range(n)]


def _target(qm: FakeQueueManagerServer, replay_id: str = "r1") -> MqReplayTarget:
    return MqReplayTarget("qm", source_config(qm), "REPLAYED", replay_id, 5.0, driver=pymqi_fake)


def test_each_row_arrives_once_with_what_mq_knew_of_it(qm: FakeQueueManagerServer, tmp_path: Path) -> None:
    ledger = ReplayLedger.in_state_dir(tmp_path)
    target = _target(qm)
    try:
        report = replay(iter(_rows(5)), target, ledger, "r1", batch=2, say=lambda _: None)
    finally:
        target.close()
    assert (report.sent, report.batches) == (5, 3)
    got = qm.queue("REPLAYED").messages
    assert [m.data for m in got] == [r.body for r in _rows(5)]
    first, second = got[0], got[1]
    assert first.md["MsgId"] == bytes.fromhex(_rows(1)[0].msg_id)
    assert first.md["CorrelId"] == b"\0" * 24 and second.md["CorrelId"] == bytes.fromhex("ab" * 24)
    assert (first.md["Format"], first.md["CodedCharSetId"], first.md["Priority"]) == (b"MQSTR   ", 819, 7)
    props = {name: value for name, (_, value) in first.properties.items()}
    assert props["region"] == "eu" and props["x_app"] == "shop" and props["mqbridge_replay_key"] == "bulk/0"
    assert props["mqbridge_replay_id"] == "r1" and "MQMD.Format" not in props
    assert qm.queue(MARKERS).depth == 0  # every marker removed once its batch was marked sent


def test_a_batch_in_doubt_is_decided_by_its_marker(qm: FakeQueueManagerServer, tmp_path: Path) -> None:
    rows = _rows(6)
    ledger = ReplayLedger.in_state_dir(tmp_path)
    # Given a run that committed batch b1 but died before its ledger said so ...
    target = _target(qm)
    ledger.intend("r1", "a" * 32, [r.key for r in rows[:2]])
    target.send("a" * 32, rows[:2])
    target.close()
    # ... and one that died before batch b2's MQCMIT (the queue manager backs the open unit out)
    ledger.intend("r1", "b" * 32, [r.key for r in rows[2:4]])
    target = _target(qm)
    target._put_row(rows[2])
    target._qmgr.backout()
    target.close()
    assert qm.queue("REPLAYED").depth == 2 and qm.queue(MARKERS).depth == 1

    # When the replay runs again
    said: list[str] = []
    target = _target(qm)
    try:
        report = replay(iter(rows), target, ledger, "r1", batch=10, say=said.append)
    finally:
        target.close()

    # Then b1 counts as sent, b2's rows go again, and each row is there once
    assert (report.resolved_sent, report.resolved_again, report.skipped, report.sent) == (1, 1, 2, 4)
    assert sorted(m.data for m in qm.queue("REPLAYED").messages) == sorted(r.body for r in rows)
    assert qm.queue(MARKERS).depth == 0
    assert ledger.sent("r1") == (2, 6)


def test_another_replays_markers_are_not_taken_for_its_own(qm: FakeQueueManagerServer) -> None:
    one, other = _target(qm, "r1"), _target(qm, "r2")
    try:
        one.send("c" * 32, _rows(1))
        assert other.committed(["c" * 32]) == set() and one.committed(["c" * 32]) == {"c" * 32}
    finally:
        one.close()
        other.close()


def test_a_missing_marker_queue_is_named_with_how_to_define_it() -> None:
    server = FakeQueueManagerServer()
    server.define_queue("REPLAYED")
    try:
        with pytest.raises(ConfigError, match=r"MQBRIDGE.REPLAY.MARKERS does not exist.*DEFINE QLOCAL"):
            MqReplayTarget("qm", source_config(server), "REPLAYED", "r1", 5.0, driver=pymqi_fake)
        assert server.live_connections() == []
    finally:
        server.close()


def test_header_names_become_mq_property_names() -> None:
    assert property_name("x-app") == "x_app" and property_name("region") == "region"
    assert property_name("1st") == "x_1st" and property_name("a.b") == "a.b"


def test_a_missing_destination_is_refused_before_anything_is_sent_or_recorded(tmp_path: Path) -> None:
    server = FakeQueueManagerServer()
    server.define_queue(MARKERS)
    ledger = ReplayLedger.in_state_dir(tmp_path)
    try:
        # When a replay goes to a queue the queue manager does not know
        with pytest.raises(ConfigError, match=r"--to NOSUCH: no such queue .*2085.*Nothing was sent"):
            target = MqReplayTarget("qm", source_config(server), "NOSUCH", "r1", 5.0, driver=pymqi_fake)
            replay(iter(_rows(3)), target, ledger, "r1", batch=2, say=lambda _: None)
        # Then nothing is recorded (no batch in doubt for a later run to resolve) and nothing is left open
        assert ledger.keys("r1") == set() and ledger.in_doubt("r1") == []
        assert server.queue(MARKERS).depth == 0 and server.live_connections() == []
    finally:
        ledger.close()
        server.close()


def test_new_identity_gives_a_new_msgid_and_new_header_values_keeping_the_old(qm: FakeQueueManagerServer,
                                                                               tmp_path: Path) -> None:
    rows = _rows(2)
    target = MqReplayTarget("qm", source_config(qm), "REPLAYED", "r1", 5.0, driver=pymqi_fake,
                            renewal=Renewal(headers=frozenset({"region"}), msg_id=True))
    try:
        seen = target.delivered(rows[0])
        replay(iter(rows), target, ReplayLedger.in_state_dir(tmp_path), "r1", batch=2, say=lambda _: None)
    finally:
        target.close()
    got = qm.queue("REPLAYED").messages
    assert [m.data for m in got] == [r.body for r in rows]
    for message, row in zip(got, rows, strict=True):
        props = {name: value for name, (_, value) in message.properties.items()}
        assert message.md["MsgId"] != bytes.fromhex(row.msg_id) and props["mqbridge_replayed_message_id"] == row.msg_id
        assert props["region"] != "eu" and props["region"].startswith("eu.replay-r1.")
        assert props["mqbridge_replayed_region"] == "eu"
    # ... and what the identity check computes is what was put
    assert seen.msg_id is None and seen.headers["region"] == {n: v for n, (_, v) in got[0].properties.items()}["region"]

