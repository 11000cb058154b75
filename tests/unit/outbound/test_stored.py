"""The "stored" result's decisions (mqbridge.outbound.stored): where it goes, its key, the claim that
keeps a redelivery from a second one (also across a reopened log, as after a kill), its shape, and
that nothing the sender meets (behind, refused, failing) blocks the listener or stops the bridge."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from mqbridge.counters import Counters
from mqbridge.errors import ConfigError
from mqbridge.identity import Scope
from mqbridge.message import Message
from mqbridge.outbound.reply_to import ReplyAllowList
from mqbridge.outbound.stored import StoredLog, StoredResults, StoredSend, stored_result_of
from tests.support.configs import orders


def message(msg_id: str = "ID:1", *, mtype: str = "orders", **headers: str) -> Message:
    return Message(msg_id, b"body", "amq", "/queue/in", message_type=mtype, correlation_id="order-1",
                   headers=dict(headers))


class Recorder:
    """A Sender that records, refuses a destination, or blocks until released."""

    def __init__(self, refuse: str = "", block: threading.Event | None = None) -> None:
        self.sent: list[StoredSend] = []
        self.refuse = refuse
        self.block = block
        self.done = threading.Event()

    def send(self, item: StoredSend) -> str:
        if self.block is not None:
            self.block.wait(10)
        if item.destination == self.refuse:
            self.done.set()
            return "the broker answered with ERROR: refused"
        self.sent.append(item)
        self.done.set()
        return ""

    def close(self) -> None:
        pass


def results(tmp_path: Path, sender: Recorder, *, routes: dict[str, str | None] | None = None,
            reply_to: ReplyAllowList | None = None, identity: str = "msg_id", capacity: int = 100,
            counters: Counters | None = None) -> StoredResults:
    return StoredResults({"orders": None} if routes is None else routes, listener="amq:/queue/in", source="amq",
                         identity=identity, scope=Scope(), stored_log=StoredLog(tmp_path / "stored.db", 3600),
                         sender=lambda: sender, reply_to=reply_to, counters=counters, capacity=capacity)


def settle(stored: StoredResults, count: int) -> None:
    deadline = time.monotonic() + 5
    while stored.sent + stored.dropped < count:
        assert time.monotonic() < deadline, f"waited 5 s for {count} stored results to be sent or dropped"
        time.sleep(0.01)


def test_it_goes_where_the_final_results_go(tmp_path: Path) -> None:
    allow = ReplyAllowList(["/queue/replies.*"], listener="amq:/queue/in")
    stored = results(tmp_path, Recorder(), routes={"orders": "/queue/station", "plain": None}, reply_to=allow)
    # reply-to (allowed, with confirm) and the type's results_to
    assert stored.wanted(message(**{"reply-to": "/queue/replies.a"})) == ["/queue/replies.a", "/queue/station"]
    assert stored.wanted(message(**{"reply-to": "/queue/elsewhere"})) == ["/queue/station"]  # not allowed
    assert stored.wanted(message(mtype="plain")) == []  # no reply-to, no results_to
    assert stored.wanted(message(mtype="other", **{"reply-to": "/queue/replies.a"})) == []  # no stored_result
    without_confirm = results(tmp_path, Recorder(), routes={"orders": None})
    assert without_confirm.wanted(message(**{"reply-to": "/queue/replies.a"})) == []


def test_a_redelivery_gets_no_second_stored_result_even_after_a_restart(tmp_path: Path) -> None:
    sender = Recorder()
    stored = results(tmp_path, sender, routes={"orders": "/queue/station"})
    stored.joined([message("ID:1"), message("ID:2")])
    stored.joined([message("ID:1")])  # the unit came back: joins a bulk again
    settle(stored, 2)
    # a restarted bridge (the log reopened from its file) remembers the claims too
    again = results(tmp_path, sender, routes={"orders": "/queue/station"})
    again.joined([message("ID:2"), message("ID:3")])
    settle(again, 1)
    stored.close()
    again.close()
    assert [json.loads(s.body)["message_id"] for s in sender.sent] == ["ID:1", "ID:2", "ID:3"]


def test_the_key_is_the_ledger_identity_or_the_rule_and_none_without_one(tmp_path: Path) -> None:
    stored = results(tmp_path, Recorder(), identity="header:x-id")
    assert stored.key(message(**{"x-id": "k1"}), "/queue/r") == "k1>/queue/r"
    scoped = message()
    scoped.identity = "amq:/queue/in|k1"  # as the ledger keeps it
    assert stored.key(scoped, "/queue/r") == "amq:/queue/in|k1>/queue/r"
    assert stored.key(message(), "/queue/r") is None  # the header is missing: no stored result


def test_claims_older_than_the_window_are_pruned_when_the_log_opens(tmp_path: Path) -> None:
    now = [1000.0]
    log = StoredLog(tmp_path / "s.db", 60, clock=lambda: now[0])
    assert log.claim(["a", "b"]) == {"a", "b"}
    assert log.claim(["a", "c"]) == {"c"}
    log.close()
    now[0] += 61
    assert StoredLog(tmp_path / "s.db", 60, clock=lambda: now[0]).claim(["a", "c"]) == {"a", "c"}


def test_its_shape_is_a_final_results_with_stored_and_not_landed() -> None:
    item = stored_result_of(message(persistent="true", other="x"), {"message_type": "orders", "source": "amq"})
    body = json.loads(item.body)
    assert body == {"result": "stored", "landed": "false", "message_id": "ID:1", "queue": "/queue/in",
                    "correlation_id": "order-1", "message_type": "orders", "source": "amq"}
    assert item.headers["correlation-id"] == "ID:1" and item.headers["mqbridge_result"] == "stored"
    assert item.headers["mqbridge_landed"] == "false" and item.headers["persistent"] == "true"
    assert "other" not in item.headers


def test_a_sender_that_is_behind_never_blocks_the_listener_and_drops_what_does_not_fit(tmp_path: Path) -> None:
    release, counters = threading.Event(), Counters()
    sender = Recorder(block=release)
    stored = results(tmp_path, sender, routes={"orders": "/queue/station"}, capacity=2, counters=counters)
    started = time.monotonic()
    stored.joined([message(f"ID:{i}") for i in range(10)])  # the sender holds one, the queue two
    assert time.monotonic() - started < 1.0
    release.set()
    settle(stored, 10)
    stored.close()
    assert len(sender.sent) + stored.dropped == 10 and stored.dropped >= 7
    assert counters.snapshot()["counters"]["stored_results_dropped"]


def test_a_refused_or_failing_send_is_dropped_and_the_next_one_goes(tmp_path: Path, caplog: pytest.LogCaptureFixture
                                                                    ) -> None:
    sender = Recorder(refuse="/queue/full")
    stored = results(tmp_path, sender, routes={"orders": "/queue/full", "invoices": "/queue/ok"})
    stored.joined([message("ID:1"), message("ID:2", mtype="invoices")])
    settle(stored, 2)
    assert (stored.dropped, [s.destination for s in sender.sent]) == (1, ["/queue/ok"])
    assert "stored result to /queue/full not sent" in caplog.text

    def broken() -> Recorder:
        raise ConnectionRefusedError("broker down")

    failing = StoredResults({"orders": "/queue/x"}, listener="l", source="amq", identity="msg_id", scope=Scope(),
                            stored_log=StoredLog(tmp_path / "other.db", 60), sender=broken)
    failing.joined([message("ID:9")])
    settle(failing, 1)
    assert failing.dropped == 1


def test_the_configuration_key_defaults_to_off() -> None:
    assert not orders().parse().types["orders"].stored_result
    assert orders().add("types.orders", "stored_result = true").parse().types["orders"].stored_result
    with pytest.raises(ConfigError):
        orders().add("types.orders", 'stored_result = "yes please"').parse()
