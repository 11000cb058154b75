"""Poison isolation and the halt policy in the listener loop, without Spark: the in-memory source
and the IBM MQ adapter on the fake queue manager, a recording executor.

(With the landing ledger the good neighbours of a culprit land before an MQ unit is backed out;
that path needs the ledger's real executor and is tested on local Spark in
tests/integration/test_poison.py.)
"""

from __future__ import annotations

import collections
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from mqbridge.app import build_app
from mqbridge.config import DEFAULT_HALT_AFTER_FAILURES, parse_config
from mqbridge.listeners.mq import MqSource
from mqbridge.loop.listener import PlainChain
from mqbridge.message import Message, MessageResult
from mqbridge.monitoring.health import health_problems
from mqbridge.plugins.fallback import FALLBACK_AFTER
from mqbridge.records import PoisonLog
from mqbridge.source import SourceContext
from tests.support.bridge import RunningBridge, run_until_idle
from tests.support.fakes import pymqi_fake
from tests.support.fakes.mq_server import FakeQueueManagerServer
from tests.support.memory import RecordingExecutor, memory_app, memory_config
from tests.support.plugins import STAMP, listener, make_host, request, write_plugin
from tests.support.waiting import wait_until

POISON = b"m13"


def bodies(n: int) -> list[bytes]:
    return [f"m{i:02d}".encode() for i in range(n)]


class Explode:
    """A preprocessor step that raises on the poison body and counts its calls per body."""

    def __init__(self) -> None:
        self.calls: collections.Counter[bytes] = collections.Counter()

    def __call__(self, message: Message) -> Message | None:
        self.calls[message.body] += 1
        if message.body == POISON:
            raise ValueError("cannot parse this one")
        return message

    def chain_factory(self, _entry: int):  # noqa: ANN201 -- a ChainFactory
        return lambda: PlainChain([("explode", self)])


# -- the shared suspect log ---------------------------------------------------------------------
def test_suspects_end_when_they_leave_the_queue_or_when_the_budget_of_single_reads_is_spent() -> None:
    log = PoisonLog()
    assert not log.isolating
    log.suspect(["a", "b"], unit_size=3)
    assert log.isolating
    log.read_alone("x")  # not a suspect: one of the budget of 3
    log.read_alone("a")  # a suspect: costs nothing
    log.left_queue(["a"])
    assert log.isolating
    log.read_alone("y")
    log.read_alone("z")  # the budget is spent: "b" was taken by someone else
    assert not log.isolating
    log.suspect(["c"], unit_size=5)
    log.left_queue(["c"])
    assert not log.isolating
    assert (log.failed("k"), log.failed("k"), log.failures("other")) == (1, 2, 0)
    log.forget(["k"])
    assert log.failures("k") == 0


# -- memory source (commits in part): threshold 0 ------------------------------------------------
def test_with_threshold_0_a_message_that_keeps_failing_halts_only_its_listener_after_the_stated_attempts() -> None:
    # Given threshold 0 (nothing ever moves a message) and a preprocessor that always raises on one
    cfg, broker = memory_config(batch=10, threshold=0, extra="halt_after_failures = 4")
    broker.put_many("orders", bodies(30))
    explode = Explode()
    executor = RecordingExecutor()
    app = memory_app(cfg, executor, chain_factory=explode.chain_factory)

    # When the bridge runs until idle
    code = run_until_idle(app.bridge, idle=0.3, timeout=60)

    # Then the listener halted after exactly 4 attempts on the poison message (counted across its
    # redeliveries), every other message landed once, and the poison message is still on the queue
    assert code == 1
    assert explode.calls[POISON] == 4
    assert collections.Counter(executor.bodies()) == collections.Counter(b for b in bodies(30) if b != POISON)
    assert [m.body for m in broker.browse("orders")] == [POISON]
    assert broker.depth("orders.backout") == 0
    # And the status and health say why, naming the message and the key
    [slot] = app.bridge.slots
    assert slot.halted
    [listener] = app.bridge.status()["listeners"]
    assert listener["phase"] == "halted"
    assert "failed 4 times" in listener["last_error"] and "halt_after_failures = 4" in listener["last_error"]
    assert "backout_threshold is 0" in listener["last_error"] and "cannot parse this one" in listener["last_error"]
    [problem] = [p for p in health_problems(app.bridge.status()) if p.startswith("listener")]
    assert problem.startswith("listener mem:orders#1: not running, halted") and "failed 4 times" in problem


def test_with_threshold_0_and_no_backout_queue_a_body_that_can_never_land_halts_instead_of_looping() -> None:
    # Given threshold 0 and no backout queue, and one body the table can never take (say, bad JSON)
    cfg, broker = memory_config(batch=10, threshold=0, backout_queue=None, extra="halt_after_failures = 3")
    broker.put_many("orders", bodies(20))
    attempts: collections.Counter[bytes] = collections.Counter()

    def decide(message: Message) -> MessageResult | None:
        attempts[message.body] += 1
        return MessageResult.permanent(message.msg_id, "body is not valid JSON") if message.body == POISON else None

    executor = RecordingExecutor(decide)
    app = memory_app(cfg, executor)

    # When the bridge runs until idle
    assert run_until_idle(app.bridge, idle=0.3, timeout=60) == 1

    # Then, with nowhere to move it, the message was given back 3 times and its listener halted
    # (before: the commit failed, the listener restarted and the unit came back, without end);
    # its neighbours landed once and the message is still on its queue
    assert attempts[POISON] == 3
    assert collections.Counter(executor.bodies()) == collections.Counter(b for b in bodies(20) if b != POISON)
    assert [m.body for m in broker.browse("orders")] == [POISON]
    assert app.bridge.counters.total("listener_restarts") == 0
    [listener] = app.bridge.status()["listeners"]
    assert listener["phase"] == "halted" and "no backout_queue" in listener["last_error"]
    assert "body is not valid JSON" in listener["last_error"]


def test_the_halt_policy_default_is_documented_in_the_schema() -> None:
    cfg, _ = memory_config(threshold=0)
    assert cfg.listeners[0].halt_after_failures == DEFAULT_HALT_AFTER_FAILURES == 10


# -- IBM MQ (backs out whole units) on the fake queue manager ------------------------------------
@pytest.fixture
def qm() -> Iterator[FakeQueueManagerServer]:
    server = FakeQueueManagerServer(dead_letter_queue="SYSTEM.DEAD.LETTER.QUEUE")
    yield server
    assert server.disconnects_with_open_uow == [], "a disconnect committed an open unit of work"
    server.close()


def mq_app(qm: FakeQueueManagerServer, executor: RecordingExecutor, explode: Explode, *, batch: int,
           exactly_once: bool, extra: str = "") -> object:
    cfg = parse_config(f"""
[bridge]
name = "unit"
state_dir = "{tempfile.mkdtemp(prefix='mqbridge-state-')}"
control_interval = "200ms"
shutdown_timeout = "5s"
exactly_once = {str(exactly_once).lower()}
[monitoring]
listen = ""
[types.orders]
bulk_timeout = "100ms"
[sources.qm]
kind = "mq"
queue_manager = "{qm.name}"
channel = "DEV.APP.SVRCONN"
conn_name = "mqhost(1414)"
[[listeners]]
source = "qm"
queue = "ORDERS"
message_type = "orders"
batch = {batch}
wait = "50ms"
{extra}
""")

    def factory(context: SourceContext) -> MqSource:
        return MqSource(context.source_name, cfg.sources["qm"], context.listener.queue, listener=context.listener,
                        driver=pymqi_fake, in_doubt=context.shared.in_doubt, poison=context.shared.poison)

    return build_app(cfg, executors={"orders": executor}, source_factory=factory,
                     chain_factory=explode.chain_factory)


def test_mq_without_the_ledger_the_backed_out_unit_is_read_one_by_one_and_only_the_culprit_reaches_boqname(
        qm: FakeQueueManagerServer) -> None:
    # Given BOTHRESH 3 and a preprocessor that raises on one message in a unit of 30, no ledger
    qm.define_queue("ORDERS", backout_threshold=3, backout_queue="ORDERS.BOQ")
    qm.define_queue("ORDERS.BOQ")
    qm.put_many("ORDERS", bodies(30))
    explode, executor = Explode(), RecordingExecutor()
    app = mq_app(qm, executor, explode, batch=30, exactly_once=False)

    # When the bridge runs until idle
    assert run_until_idle(app.bridge, idle=0.5, timeout=60) == 0  # type: ignore[attr-defined]

    # Then the whole unit was backed out once (nothing landed from it: it would land again), then
    # read one by one: each neighbour landed once, with BackoutCount 1 at most
    landed = collections.Counter(executor.bodies())
    assert landed == collections.Counter(b for b in bodies(30) if b != POISON)
    assert max(m.delivery_count for m in executor.landed) == 2
    # And only the culprit's count rose to BOTHRESH: it alone is on the backout queue
    assert qm.queue("ORDERS.BOQ").bodies() == [POISON]
    assert qm.queue("ORDERS").depth == 0
    assert explode.calls[POISON] == 3


def test_mq_bothresh_0_halts_the_listener_after_the_stated_attempts_and_keeps_the_message(
        qm: FakeQueueManagerServer) -> None:
    # Given BOTHRESH 0 (a new queue's default: nothing ever moves a message) and a poison message
    qm.define_queue("ORDERS", backout_threshold=0, backout_queue="ORDERS.BOQ")
    qm.define_queue("ORDERS.BOQ")
    qm.put_many("ORDERS", bodies(30))
    explode, executor = Explode(), RecordingExecutor()
    app = mq_app(qm, executor, explode, batch=30, exactly_once=False, extra="halt_after_failures = 3")

    # When the bridge runs until idle
    assert run_until_idle(app.bridge, idle=0.5, timeout=60) == 1  # type: ignore[attr-defined]

    # Then the listener halted after 3 attempts on the poison message, which is still on the queue
    # (neither moved nor lost), and the neighbours read before it landed once each
    assert explode.calls[POISON] == 3
    assert POISON in qm.queue("ORDERS").bodies() and qm.queue("ORDERS.BOQ").depth == 0
    assert collections.Counter(executor.bodies()) == collections.Counter(bodies(30)[:13])
    [listener] = app.bridge.status()["listeners"]  # type: ignore[attr-defined]
    assert listener["phase"] == "halted" and "BOTHRESH is 0" in listener["last_error"]


# -- a plugin version that raises at run time ----------------------------------------------------
RAISING = '''
from mqbridge import hookimpl

__version__ = "v2"


class Broken:
    def process(self, message):
        raise KeyError("field 'customer' is missing")


@hookimpl
def mqbridge_register_preprocessors(registry):
    registry.add("stamp", lambda options: Broken())
'''


def test_a_plugin_version_that_raises_on_every_message_falls_back_to_the_last_good_one(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Given a bridge whose chain runs a drop-in plugin v1, units of 5
    folder = tmp_path / "plugins"
    write_plugin(folder, "stamp", STAMP.format(version="v1"))
    host = make_host(folder, request("stamp"))
    host.start()
    cfg, broker = memory_config(batch=5, threshold=3)
    executor = RecordingExecutor()
    app = memory_app(cfg, executor, chain_factory=lambda _entry: host.chain_provider(listener(0)))
    running = RunningBridge(app.bridge)
    try:
        broker.put_many("orders", bodies(10))
        wait_until(lambda: len(executor.landed) >= 10, 30, "v1 messages")

        # When v2, which loads but raises on every message, is swapped in mid-stream
        write_plugin(folder, "stamp", RAISING)
        assert host.check_for_changes() and host.generation == 2
        sent = [f"n{i:02d}".encode() for i in range(30)]
        broker.put_many("orders", sent)
        wait_until(lambda: len(executor.landed) >= 40, 30, "every message")
    finally:
        running.stop()

    # Then every message landed once, each preprocessed by v1, and nothing was moved or counted
    assert collections.Counter(executor.bodies()) == collections.Counter(bodies(10) + sent)
    assert {m.headers["plugin_version"] for m in executor.landed} == {"v1"}
    assert {m.delivery_count for m in executor.landed} == {1}
    assert broker.depth("orders.backout") == 0 and broker.depth("orders") == 0
    # And the host fell back to generation 1 after FALLBACK_AFTER messages, saying so by name
    assert host.generation == 1 and host.counters.total("plugin_fallbacks") == 1
    note = host.status()["fallback"]
    assert f"stamp version v2 ({folder / 'stamp.py'})" in note and "fell back to generation 1" in note
    blamed = int(note.split("raised on each of the first ")[1].split()[0])
    assert blamed >= FALLBACK_AFTER and "of amq:/queue/q0 after generation 2 was swapped in" in note
    assert any(r.levelname == "WARNING" and "stamp version v2" in r.getMessage() for r in caplog.records)
    # And the rejected version is not swapped in again, while a fixed one is, as a new generation
    assert not host.check_for_changes()
    write_plugin(folder, "stamp", STAMP.format(version="v3"))
    assert host.check_for_changes() and host.generation == 3
    host.close()


def test_a_new_plugin_version_that_gets_one_message_through_is_kept() -> None:
    # A version that raises only on some messages is not "raising for every message": after
    # its first success, its failures are the messages' own (they count towards the threshold).
    folder = Path(tempfile.mkdtemp(prefix="mqbridge-plugins-"))
    write_plugin(folder, "stamp", STAMP.format(version="v1"))
    host = make_host(folder, request("stamp"))
    host.start()
    write_plugin(folder, "stamp", STAMP.format(version="v2"))
    assert host.check_for_changes()
    chain = host.chain(listener(0))
    assert chain.fallback() is not None  # on trial: a fallback chain exists
    chain.record(1, 0)
    assert host.chain(listener(0)).fallback() is None and host.generation == 2
    host.close()
