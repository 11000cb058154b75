"""Outage versus poison without Spark: the circuit breaker's state machine, the triage of a failed
bulk (probe, then bisect), and the listener loop on the in-memory source with an executor whose
sink can be "down" (its writes and its probe fail) or that rejects one message."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from mqbridge.app import build_app
from mqbridge.bulks.breaker import SinkBreaker, SinkBreakers
from mqbridge.bulks.triage import settle
from mqbridge.counters import Counters
from mqbridge.drivers import open_source
from mqbridge.gate import AllOpenGate, IntakeGate
from mqbridge.loop.preprocess import PlainChain
from mqbridge.message import Bulk, Message, MessageResult, Outcome
from mqbridge.records import DeliveryTracker
from tests.support.bridge import run_until_idle
from tests.support.memory import RecordingExecutor, memory_app, memory_config


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# -- the state machine --------------------------------------------------------------------------------
def test_breaker_opens_on_an_outage_backs_off_capped_and_closes_on_a_probe_write() -> None:
    clock = Clock()
    breaker = SinkBreaker("orders", probe_max=5.0, probe_initial=1.0, clock=clock)
    assert not breaker.is_open and breaker.gate.is_open and breaker.describe() == "sink orders: available"
    # An outage opens it and closes its intake gate
    assert breaker.trip("Spark write failed: FileAlreadyExistsException") is True
    assert breaker.is_open and not breaker.gate.is_open
    assert breaker.trip("again") is False  # already open: the first outage's time stays
    assert not breaker.due()
    text = breaker.describe()
    assert text.startswith("sink orders: unavailable since ") and "next probe in 1s" in text
    assert "FileAlreadyExistsException" in text
    # Probes back off 1, 2, 4, 5 (capped), 5 seconds
    waits = []
    for _ in range(5):
        clock.now = breaker.next_probe  # type: ignore[assignment]
        assert breaker.due()
        breaker.probe_failed("still down")
        waits.append(breaker.next_probe - clock.now)  # type: ignore[operator]
    assert waits == [2.0, 4.0, 5.0, 5.0, 5.0]
    status = breaker.status()
    assert status["state"] == "open" and status["available"] is False and status["probe_failures"] == 5
    assert status["last_probe_error"] == "still down" and status["unavailable_since"]
    # A probe write that lands closes it; the next outage starts the backoff afresh
    clock.now += 5
    assert breaker.probe_succeeded() == pytest.approx(1 + 2 + 4 + 5 + 5 + 5)
    assert not breaker.is_open and breaker.gate.is_open and not breaker.due()
    assert breaker.status()["last_outage"].startswith("Spark write failed")
    breaker.trip("down again")
    assert breaker.next_probe == clock.now + 1.0 and breaker.opens == 2


def test_breakers_count_opens_and_probes_and_report_the_open_sink() -> None:
    counters = Counters()
    down = True

    def probe(name: str) -> None:
        if down:
            raise OSError("Not a directory")

    breakers = SinkBreakers(["orders", "invoices"], counters, probe_max=10.0, probe=probe)
    assert counters.gauge("sink_available", type="orders") == 1
    breakers.trip("orders", "write failed")
    breakers.trip("orders", "write failed")  # still one outage
    assert breakers.is_open("orders") and not breakers.is_open("invoices")
    assert counters.total("sink_breaker_opens", type="orders") == 1
    assert counters.gauge("sink_available", type="orders") == 0
    assert breakers.summary().startswith("sink orders: unavailable since")
    assert breakers.status_fields()["sinks"]["invoices"]["available"] is True
    assert breakers.run_probe("orders") is False
    down = False
    assert breakers.run_probe("orders") is True
    assert counters.total("sink_probes", type="orders", result="failed") == 1
    assert counters.total("sink_probes", type="orders", result="ok") == 1
    assert counters.gauge("sink_available", type="orders") == 1 and breakers.summary() == ""


def test_all_open_gate_is_open_only_when_every_part_is() -> None:
    memory, sink = IntakeGate(), IntakeGate()
    gate = AllOpenGate([memory, sink])
    assert gate.is_open and gate.wait(0)
    sink.close()
    assert not gate.is_open and not gate.wait(0.01)
    threading.Timer(0.05, sink.open).start()
    assert gate.wait(2.0)


# -- triage -----------------------------------------------------------------------------------------
def messages(n: int) -> list[Message]:
    return [Message(msg_id=f"m{i}", body=f"b{i}".encode(), source="s", destination="q", message_type="t")
            for i in range(n)]


def failed_pairs(batch: list[Message], reason: str = "write failed") -> list[tuple[Message, MessageResult]]:
    return [(m, MessageResult.retryable(m.msg_id, reason, "bulk-1")) for m in batch]


class Sink:
    """Lands every message except those in `poison`; `down` fails writes and probes alike."""

    def __init__(self, poison: set[str] = frozenset(), down: bool = False) -> None:  # type: ignore[assignment]
        self.poison, self.down = poison, down
        self.writes: list[list[str]] = []
        self.landed: Counter[str] = Counter()
        self.probes = 0
        self.down_after_writes: int | None = None

    def run(self, bulk: Bulk) -> list[tuple[Message, MessageResult]]:
        self.writes.append([m.msg_id for m in bulk.messages])
        if self.down_after_writes is not None and len(self.writes) > self.down_after_writes:
            self.down = True
        if self.down or any(m.msg_id in self.poison for m in bulk.messages):
            return [(m, MessageResult.retryable(m.msg_id, "write failed", bulk.bulk_id)) for m in bulk.messages]
        self.landed.update(m.msg_id for m in bulk.messages)
        return [(m, MessageResult.success(m.msg_id, bulk.bulk_id)) for m in bulk.messages]

    def probe(self) -> None:
        self.probes += 1
        if self.down:
            raise OSError("Not a directory: /landing/orders")


def test_a_failed_bulk_whose_probe_fails_is_an_outage_for_every_message() -> None:
    batch = messages(8)
    sink = Sink(down=True)
    verdict = settle("t", failed_pairs(batch), run=sink.run, probe=sink.probe)
    assert verdict.outage.startswith("probe write failed: OSError: Not a directory")
    assert all(r.outcome is Outcome.RETRYABLE and r.outage for _m, r in verdict.pairs)
    assert sink.writes == []  # no bisecting of an outage


def test_an_outage_the_executor_reported_needs_no_probe() -> None:
    batch = messages(3)
    pairs = [(m, MessageResult.sink_outage(m.msg_id, "the Spark JVM is gone")) for m in batch]
    sink = Sink()
    verdict = settle("t", pairs, run=sink.run, probe=sink.probe)
    assert verdict.outage == "the Spark JVM is gone" and sink.probes == 0
    assert all(r.outage for _m, r in verdict.pairs)


def test_messages_the_ledger_holds_elsewhere_are_neither_an_outage_nor_bisected() -> None:
    # Given a bulk whose other messages landed, and two the ledger holds in another bulk (given back)
    batch = messages(6)
    pairs = [(m, MessageResult.success(m.msg_id, "bulk-1")) for m in batch]
    for i in (2, 4):
        pairs[i] = (batch[i], MessageResult.given_back(batch[i].msg_id, "in bulk b9 of h:1:1.00, prepared"))
    sink = Sink()
    # When the triage looks at it
    verdict = settle("t", pairs, run=sink.run, probe=sink.probe)
    # Then nothing is probed, written again or called an outage (the breaker stays closed); the two
    # stay given back, uncounted (outage) and marked as claimed
    assert verdict.outage == "" and verdict.bisect_writes == 0 and sink.probes == 0 and sink.writes == []
    assert [(r.outage, r.claimed) for _m, r in verdict.pairs if not r.ok] == [(True, True), (True, True)]
    # And beside a message that really failed, only that one is bisected
    pairs[0] = (batch[0], MessageResult.retryable("m0", "write failed"))
    poisoned = Sink(poison={"m0"})
    verdict = settle("t", pairs, run=poisoned.run, probe=poisoned.probe)
    assert verdict.outage == "" and verdict.culprits == 1 and poisoned.writes == []
    assert {m.msg_id: r.claimed for m, r in verdict.pairs if not r.ok} == {"m0": False, "m2": True, "m4": True}


def test_a_failed_bulk_with_a_healthy_probe_is_bisected_down_to_the_culprit() -> None:
    batch = messages(16)
    sink = Sink(poison={"m11"})
    pairs = failed_pairs(batch)
    pairs[3] = (batch[3], MessageResult.permanent("m3", "bad JSON"))  # known results stay
    verdict = settle("t", pairs, run=sink.run, probe=sink.probe)
    assert verdict.outage == "" and verdict.culprits == 1
    by_id = {m.msg_id: r for m, r in verdict.pairs}
    assert by_id["m11"].outcome is Outcome.RETRYABLE and not by_id["m11"].outage
    assert "failed on its own while the sink takes writes" in by_id["m11"].reason
    assert by_id["m3"].outcome is Outcome.PERMANENT
    assert {i for i, r in by_id.items() if r.ok} == {f"m{i}" for i in range(16)} - {"m3", "m11"}
    assert all(n == 1 for n in sink.landed.values())  # each neighbour landed once, in its own bulk
    bulk_ids = {r.bulk_id for r in by_id.values() if r.ok}
    assert len(bulk_ids) >= 2 and "bulk-1" not in bulk_ids
    assert verdict.bisect_writes <= 2 * 4 + 1  # two halves per level, one confirming probe


def test_a_sink_that_goes_down_while_bisecting_makes_the_rest_an_outage() -> None:
    batch = messages(8)
    sink = Sink(poison={"m6"})
    sink.down_after_writes = 1  # the first half lands, then the sink is down
    verdict = settle("t", failed_pairs(batch), run=sink.run, probe=sink.probe)
    assert verdict.outage
    by_id = {m.msg_id: r for m, r in verdict.pairs}
    assert all(by_id[f"m{i}"].ok for i in range(4))
    assert all(by_id[f"m{i}"].outage for i in range(4, 8))


def test_without_a_probe_results_stay_as_they_are() -> None:
    pairs = failed_pairs(messages(2))
    assert settle("t", pairs, run=Sink().run, probe=None).pairs == pairs


def test_outage_give_backs_are_discounted_and_forgotten_on_commit() -> None:
    tracker = DeliveryTracker()
    for _ in range(4):
        tracker.delivered("m1")
    tracker.gave_back_in_outage(["m1", "m1"])
    tracker.gave_back_in_outage(["m1"])
    assert tracker.outage_give_backs("m1") == 3
    tracker.forget(["m1"])
    assert tracker.outage_give_backs("m1") == 0


# -- the listener loop, end to end on the in-memory source -------------------------------------------------
class SwitchableExecutor(RecordingExecutor):
    """A RecordingExecutor whose sink can be down (every write and probe fails)."""

    def __init__(self, poison: bytes | None = None) -> None:
        super().__init__(self._decide)
        self.down = threading.Event()
        self.poison = poison
        self.probes = 0

    def _decide(self, message: Message) -> MessageResult | None:
        if self.down.is_set():
            return MessageResult.retryable(message.msg_id, "Spark write failed: Not a directory")
        return None

    def execute(self, bulk: Bulk) -> list[MessageResult]:
        if self.poison is not None and any(m.body == self.poison for m in bulk.messages):
            return [MessageResult.retryable(m.msg_id, "Spark write failed: bad row") for m in bulk.messages]
        return super().execute(bulk)

    def probe(self) -> None:
        self.probes += 1
        if self.down.is_set():
            raise OSError("Not a directory")


def test_an_outage_longer_than_the_backout_threshold_moves_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("mqbridge.bulks.breaker.PROBE_INITIAL", 0.05)
    # Given the default threshold (3), 30 messages and a sink that is down
    cfg, broker = memory_config(batch=10)
    broker.put_many("orders", [f"m{i}".encode() for i in range(30)])
    executor = SwitchableExecutor()
    executor.down.set()
    app = memory_app(cfg, executor)
    bridge = app.bridge
    bridge.start()
    runner = threading.Thread(target=bridge.run, kwargs={"until_idle": 0.3}, daemon=True)
    runner.start()
    try:
        # When probes have failed more often than the threshold
        deadline = threading.Event()
        for _ in range(200):
            if executor.probes >= 5:
                break
            deadline.wait(0.05)
        assert executor.probes >= 5
        sinks = bridge.status()["sinks"]
        assert sinks["orders"]["available"] is False and "Not a directory" in sinks["orders"]["reason"]
        assert not bridge.idle()  # an open breaker is never idle
        assert "sink orders: unavailable since" in bridge.summary()
        # Then the sink comes back
        executor.down.clear()
        runner.join(30)
        assert not runner.is_alive()
    finally:
        bridge.stop()
        runner.join(10)
    # Every message landed once; nothing on the backout queue
    assert Counter(executor.bodies()) == Counter(f"m{i}".encode() for i in range(30))
    assert broker.depth("orders.backout") == 0 and broker.depth("orders") == 0
    assert bridge.counters.total("sink_breaker_opens", type="orders") == 1
    assert bridge.counters.total("messages_moved_to_backout") == 0


def test_one_bad_message_in_a_failing_bulk_is_isolated_and_only_it_is_moved(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg, broker = memory_config(batch=20)
    broker.put_many("orders", [f"m{i}".encode() for i in range(20)])
    executor = SwitchableExecutor(poison=b"m13")
    app = memory_app(cfg, executor)
    assert run_until_idle(app.bridge, idle=0.3, timeout=60) == 0
    assert Counter(executor.bodies()) == Counter(f"m{i}".encode() for i in range(20) if i != 13)
    [moved] = broker.browse("orders.backout")
    assert moved.body == b"m13" and "failed on its own" in moved.headers["mqbridge-reason"]
    assert app.bridge.counters.total("sink_breaker_opens", type="orders") == 0


def test_run_until_idle_gives_up_on_a_sink_unavailable_past_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("mqbridge.bulks.breaker.PROBE_INITIAL", 0.05)
    cfg, broker = memory_config(extra="")
    cfg.spark.until_idle_outage_limit = 1.0
    broker.put_many("orders", [b"a", b"b"])
    executor = SwitchableExecutor()
    executor.down.set()
    app = memory_app(cfg, executor)
    assert run_until_idle(app.bridge, idle=0.3, timeout=60) == 1
    assert "until_idle_outage_limit" in app.bridge.gave_up and "sink orders" in app.bridge.gave_up
    assert broker.depth("orders") == 2 and broker.depth("orders.backout") == 0


def test_the_health_probe_never_waits_longer_than_ping_wait_for_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    from mqbridge.monitoring.health import SparkProbe, health_problems

    monkeypatch.setattr("mqbridge.monitoring.health.PING_WAIT", 0.1)
    release = threading.Event()
    probe = SparkProbe(lambda: object(), max_age=0.0, ping=lambda _session: release.wait(30) and None)
    try:
        # A ping that hangs (a py4j call to a stuck JVM): the answer comes from state
        assert probe.check() is False
        status = probe.status()
        assert status["reachable"] is False and "no answer from Spark within" in status["error"]
        bridge_status = {"listeners": [{"name": "a#1", "alive": True, "phase": "receiving"}], "spark": status}
        assert any(p.startswith("spark: not reachable") for p in health_problems(bridge_status))
    finally:
        release.set()


def test_an_open_sink_is_a_health_problem_with_its_reason() -> None:
    from mqbridge.monitoring.health import health_problems

    breakers = SinkBreakers(["orders"], Counters(), probe_max=60.0)
    breakers.trip("orders", "Spark write failed: the Spark JVM is gone")
    status = {"listeners": [{"name": "a#1", "alive": True, "phase": "paused"}], **breakers.status_fields()}
    [problem] = health_problems(status)
    assert problem.startswith("sink orders: unavailable since ") and "the Spark JVM is gone" in problem


class RouteAudits(PlainChain):
    """A classify hook sending bodies that start with "audit" to type `audit`."""

    def classify(self, message: Message) -> str | None:
        return "audit" if message.body.startswith(b"audit") else None


def test_a_listener_pauses_for_the_sink_of_a_type_its_classify_hook_routes_to(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("mqbridge.bulks.breaker.PROBE_INITIAL", 0.05)
    # Given a listener of type orders whose classify hook routes audits to type audit, whose sink is down
    cfg, broker = memory_config(batch=10, extra='[types.audit]\nbulk_timeout = "100ms"\n')
    sent = [f"m{i}".encode() if i % 3 else f"audit{i}".encode() for i in range(30)]
    broker.put_many("orders", sent)
    orders, audit = RecordingExecutor(), SwitchableExecutor()
    audit.down.set()
    app = build_app(cfg, executors={"orders": orders, "audit": audit}, source_factory=open_source,
                    chain_factory=lambda _entry: lambda: RouteAudits())
    bridge = app.bridge
    bridge.start()
    runner = threading.Thread(target=bridge.run, kwargs={"until_idle": 0.3}, daemon=True)
    runner.start()
    try:
        # When the audit sink's breaker is open
        for _ in range(200):
            if bridge.breakers is not None and bridge.breakers.is_open("audit"):
                break
            threading.Event().wait(0.05)
        assert bridge.breakers is not None and bridge.breakers.is_open("audit")
        # Then the listener stops reading (paused at its gate) instead of taking the given-back
        # messages again and again while probes keep failing
        threading.Event().wait(0.5)
        received = bridge.counters.total("messages_received")
        probes = audit.probes
        threading.Event().wait(1.0)
        assert audit.probes > probes, "the breaker keeps probing"
        assert bridge.counters.total("messages_received") == received
        # And once the sink is back every message lands once, nothing on the backout queue
        audit.down.clear()
        runner.join(30)
        assert not runner.is_alive()
    finally:
        bridge.stop()
        runner.join(10)
    assert Counter(orders.bodies() + audit.bodies()) == Counter(sent)
    assert broker.depth("orders") == 0 and broker.depth("orders.backout") == 0
