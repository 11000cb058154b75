"""The persistent fake queue manager: its state outlives the process using it, and loading it
does what MQ does when a client process dies (its open unit of work is backed out)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support.fakes import pymqi_fake as mq
from tests.support.fakes.mq_server import FakeQueueManagerServer
from tests.support.processes import ROOT, fake_mq_env

C = mq.CMQC


def connect(server: FakeQueueManagerServer) -> mq.QueueManager:
    qmgr = mq.QueueManager(None, disconnect_on_exit=False)  # type: ignore[arg-type]
    qmgr.connect_with_options(server.name, cd=mq.CD(ChannelName=b"CH", ConnectionName=b"h(1)"))
    return qmgr


def get(queue: mq.Queue, *, syncpoint: bool = True) -> bytes:
    gmo = mq.GMO(Options=(C.MQGMO_SYNCPOINT if syncpoint else C.MQGMO_NO_SYNCPOINT) | C.MQGMO_NO_PROPERTIES)
    return queue.get(1000, mq.MD(), gmo)


def put(queue: mq.Queue, body: bytes, *, syncpoint: bool = True) -> None:
    queue.put(body, mq.MD(), mq.PMO(Options=C.MQPMO_SYNCPOINT if syncpoint else C.MQPMO_NO_SYNCPOINT))


def test_a_dead_process_s_unit_of_work_is_backed_out_on_load(tmp_path: Path) -> None:
    # Given a persistent queue manager with 6 messages, a queue attribute and properties
    state = tmp_path / "qm.state"
    qm = FakeQueueManagerServer("QMP", dead_letter_queue="DLQ", state_file=state)
    qm.define_queue("Q", backout_threshold=4, backout_queue="Q.BO")
    qm.define_queue("OUT")
    qm.put_many("Q", [b"m0", b"m1", b"m2", b"m3", b"m4", b"m5"], properties={"k": "v"})
    qmgr = connect(qm)
    q, out = mq.Queue(qmgr, "Q"), mq.Queue(qmgr, "OUT")
    # ... a committed unit (2 gets, 1 put), a non-syncpoint get and put, then an open unit (2 gets, 1 put)
    assert [get(q), get(q)] == [b"m0", b"m1"]
    put(out, b"committed")
    qmgr.commit()
    assert get(q, syncpoint=False) == b"m2"
    put(out, b"no-syncpoint", syncpoint=False)
    assert [get(q), get(q)] == [b"m3", b"m4"]
    put(out, b"never-committed")
    # When the process dies there
    qm.crash()
    loaded = FakeQueueManagerServer(state_file=state, register=False)
    try:
        # Then the open unit is backed out: its gets are back in place with BackoutCount + 1, its put gone
        assert loaded.name == "QMP" and loaded.dead_letter_queue == "DLQ"
        assert [(m.data, m.backout_count) for m in loaded.queue("Q").visible()] == [
            (b"m3", 1), (b"m4", 1), (b"m5", 0)]
        assert loaded.queue("Q").visible()[0].prop("k") == "v"
        assert loaded.queue("OUT").bodies() == [b"committed", b"no-syncpoint"]
        assert (loaded.queue("Q").backout_threshold, loaded.queue("Q").backout_queue) == (4, "Q.BO")
        assert loaded.recovered == {"messages_backed_out": 2}
        # ... and new messages get new sequence numbers and message ids
        new_id = loaded.put("Q", b"m6")
        assert new_id not in {m.msg_id for m in loaded.queue("Q").messages[:-1]}
    finally:
        loaded.close()
    # ... and the recovery itself was saved: a second load backs nothing out again
    again = FakeQueueManagerServer(state_file=state, register=False)
    try:
        assert [(m.data, m.backout_count) for m in again.queue("Q").visible()] == [
            (b"m3", 1), (b"m4", 1), (b"m5", 0), (b"m6", 0)]
    finally:
        again.close()


def test_a_backout_a_commit_and_a_committing_disconnect_are_saved(tmp_path: Path) -> None:
    state = tmp_path / "qm.state"
    qm = FakeQueueManagerServer("QMB", state_file=state)
    qm.define_queue("Q")
    qm.put_many("Q", [b"a", b"b", b"c"])
    qmgr = connect(qm)
    q = mq.Queue(qmgr, "Q")
    get(q)
    qmgr.backout()
    get(q)
    qmgr.commit()
    get(q)
    qmgr.disconnect()  # MQDISC commits the open unit: recorded, and the event is saved
    qm.crash()
    loaded = FakeQueueManagerServer(state_file=state, register=False)
    try:
        assert [(m.data, m.backout_count) for m in loaded.queue("Q").visible()] == [(b"c", 0)]
        assert loaded.recovered == {"messages_backed_out": 0}
        assert [e["gets"] for e in loaded.disconnects_with_open_uow] == [1]
    finally:
        loaded.close()


def test_an_in_process_fake_writes_nothing(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    qm = FakeQueueManagerServer()
    qm.define_queue("Q")
    qm.put("Q", b"x")
    qm.close()
    assert list(tmp_path.iterdir()) == []


CHILD = """
import os, signal
import pymqi
C = pymqi.CMQC
qmgr = pymqi.QueueManager(None)
qmgr.connect_with_options("QMK", cd=pymqi.CD(ChannelName=b"CH", ConnectionName=b"h(1)"))
q = pymqi.Queue(qmgr, "Q", C.MQOO_INPUT_SHARED)
def get():
    return q.get(1000, pymqi.MD(), pymqi.GMO(Options=C.MQGMO_SYNCPOINT | C.MQGMO_NO_PROPERTIES))
print(get(), get(), get(), flush=True)
qmgr.commit()
print(get(), get(), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_the_fake_pymqi_on_pythonpath_survives_a_sigkill(tmp_path: Path) -> None:
    # Given a persistent queue manager with 6 messages, closed by the test process
    state = tmp_path / "qm.state"
    qm = FakeQueueManagerServer("QMK", state_file=state)
    qm.define_queue("Q")
    qm.put_many("Q", [f"m{i}".encode() for i in range(6)])
    qm.close()
    # When a process importing `pymqi` from tests/support/fake_pymqi_path commits 3 gets, gets 2
    # more under syncpoint and is SIGKILLed
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(CHILD)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, env={**_base_env(), **fake_mq_env(state)})
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["b'm0' b'm1' b'm2'", "b'm3' b'm4'"]
    # Then the 3 committed are gone and the 2 of the open unit are back with BackoutCount 1
    loaded = FakeQueueManagerServer(state_file=state, register=False)
    try:
        assert [(m.data, m.backout_count) for m in loaded.queue("Q").visible()] == [
            (b"m3", 1), (b"m4", 1), (b"m5", 0)]
    finally:
        loaded.close()


def _base_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    assert (ROOT / "tests" / "support" / "fake_pymqi_path" / "pymqi" / "__init__.py").exists()
    return env
