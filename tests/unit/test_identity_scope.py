"""Which identities are scoped in the one ledger of a bridge, and what the lookups find, on a real
SQLite ledger: producer-given ids of two queues are two messages; a message an earlier version
landed unscoped is still recognised after the upgrade; `mqbridge where` finds scoped landings by
the id the producer knows (`mqbridge.identity`, `mqbridge.loop.dedupe`, `mqbridge.tracing.where`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mqbridge.identity import UNSCOPED, Scope, answers_to, listener_scope, scoped
from mqbridge.landing.ledger import SqliteLedger, owner_id
from mqbridge.listeners.memory import MemoryBroker, MemorySource
from mqbridge.loop.dedupe import landed_before, landed_where, repeated_in_unit
from mqbridge.loop.preprocess import PlainChain
from mqbridge.message import Message
from mqbridge.source import BackoutMove
from mqbridge.tracing.where import Locator
from tests.support.memory import memory_config
from tests.support.undo import Listening, StubExecutor, StubLedger

RULE = "header:order-id"
ORDERS = listener_scope("amq", "/queue/orders", None, RULE)
INVOICES = listener_scope("amq", "/queue/invoices", None, RULE)


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[SqliteLedger]:
    opened = SqliteLedger.open(tmp_path / "state" / "ledger.sqlite3", owner=owner_id())
    yield opened
    opened.close()


def order(number: str, msg_id: str) -> Message:
    return Message(msg_id=msg_id, body=number.encode(), source="amq", destination="/queue/orders",
                   headers={"order-id": number})


def land(ledger: SqliteLedger, bulk_id: str, identities: list[str]) -> None:
    ledger.prepare(bulk_id, "orders", [("/w/orders/_staging/x", "/w/orders/put_date=2024-05-01/p.parquet")],
                   identities)
    ledger.mark_published(bulk_id)


def test_which_rules_are_scoped_by_what() -> None:
    assert Scope("amq:/queue/orders", unscoped_too=True) == ORDERS
    assert listener_scope("amq", "/queue/orders", None, "body-sha256").prefix == "amq:/queue/orders"
    # broker message ids are unique across queues
    assert listener_scope("amq", "/queue/orders", None, "msg_id") is UNSCOPED
    # a topic's subscription, whatever the rule; topics were scoped from the start
    assert listener_scope("amq", "/topic/t@audit", "audit", "msg_id") == Scope("amq:audit")


def test_the_same_producer_id_on_two_queues_is_two_messages(ledger: SqliteLedger) -> None:
    # Given order 7 of ORDERS landed
    first = [order("7", "ID:a-1")]
    assert landed_before(ledger, first, RULE, None, [], ORDERS) == set()
    land(ledger, "b1", [m.identity or "" for m in first])
    # When invoice 7 arrives on INVOICES, and order 7 is redelivered on ORDERS
    invoice, again = order("7", "ID:b-1"), order("7", "ID:a-2")
    # Then the invoice is new, and the redelivery is recognised
    assert landed_before(ledger, [invoice], RULE, None, [], INVOICES) == set()
    assert landed_before(ledger, [again], RULE, None, [], ORDERS) == {id(again)}
    assert (invoice.identity, again.identity) == ("amq:/queue/invoices|7", "amq:/queue/orders|7")


def test_a_message_an_earlier_version_landed_unscoped_is_recognised_after_the_upgrade(
        ledger: SqliteLedger) -> None:
    # Given order 7 landed by a version that kept queue identities unscoped
    land(ledger, "old", ["7"])
    redelivered = order("7", "ID:a-9")
    # When it is redelivered to the upgraded bridge
    recognised = landed_before(ledger, [redelivered], RULE, None, [], ORDERS)
    # Then it is committed without landing again, and its producer is told where it landed
    assert recognised == {id(redelivered)}
    assert [(w.bulk_id, w.table) for w in landed_where(ledger, [redelivered])] == [("old", "orders")]
    # and a topic subscription, scoped from the start, does not look for unscoped forms
    assert landed_before(ledger, [order("7", "ID:t-1")], RULE, None, [], Scope("amq:audit")) == set()


def test_a_message_without_its_header_is_moved_and_the_others_are_still_looked_up(ledger: SqliteLedger) -> None:
    land(ledger, "b1", [scoped("7", ORDERS.prefix)])
    headless = Message(msg_id="ID:x", body=b"?", source="amq", destination="/queue/orders")
    known = order("7", "ID:a-3")
    moves: list[BackoutMove] = []
    assert landed_before(ledger, [headless, known], RULE, "orders.backout", moves, ORDERS) == {id(known)}
    assert [m.message for m in moves] == [headless] and "order-id" in moves[0].reason


def test_where_finds_a_scoped_landing_by_the_producers_id(ledger: SqliteLedger) -> None:
    cfg, _ = memory_config(extra=f'identity = "{RULE}"')
    land(ledger, "b1", [scoped("o-42", "mem:orders")])
    doc = Locator(cfg.listeners, cfg.bridge.dedupe_window, ledger=ledger).locate("o-42")
    assert doc["state"] == "landed" and doc["landed"]["bulk"] == "b1"
    assert answers_to("mem:orders|o-42", "o-42") and answers_to("o-42", "o-42")
    assert not answers_to("mem:orders|o-421", "o-42") and not answers_to(None, "o-42")


def test_copies_of_one_identity_in_a_unit_are_one_message(ledger: SqliteLedger) -> None:
    # Given a unit holding order 7 three times (a producer re-sent it) and order 8, order 9 landed already
    land(ledger, "b1", [scoped("9", ORDERS.prefix)])
    batch = [order("7", "ID:a-1"), order("8", "ID:a-2"), order("7", "ID:a-3"), order("9", "ID:a-4"),
             order("7", "ID:a-5")]
    recognised = landed_before(ledger, batch, RULE, None, [], ORDERS)
    # Then only the first copy of 7 is new: the later ones are repeats, and 9 is recognised, not repeated
    assert recognised == {id(batch[3])}
    assert repeated_in_unit(batch, recognised) == {id(batch[2]), id(batch[4])}


def test_a_producers_resend_in_one_unit_lands_once_and_leaves_the_queue() -> None:
    # Given a queue where a producer sent order 7 three times (it missed two receipts) among others
    broker = MemoryBroker()
    for number, body in (("7", b"a"), ("8", b"b"), ("7", b"a"), ("9", b"c"), ("7", b"a")):
        broker.put("orders", body, headers={"order-id": number})
    ledger = StubLedger()
    executor = StubExecutor(ledger=ledger)
    source = MemorySource("mem", broker, "orders", backout_queue="orders.backout")
    run = Listening([source], executor, PlainChain([]), batch=10, ledger=ledger, identity=RULE)
    # When the listener takes them in one unit
    assert run.finish(lambda: broker.depth("orders") == 0 and not source._unit) is None
    # Then order 7 landed once, and every copy left the queue
    assert sorted(executor.landed) == [b"a", b"b", b"c"]
    assert run.counters.total("messages_deduplicated") == 2
