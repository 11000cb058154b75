"""A STOMP commit sends results only to reply-to destinations its listener allows: the others are
counted and left out, and the commit goes on as if those messages had asked for nothing."""

from __future__ import annotations

from typing import Any

from mqbridge.listeners.stomp.commit import CommitPlan, Transaction
from mqbridge.listeners.stomp.unit import Unit
from mqbridge.message import Message
from mqbridge.outbound.reply_to import ReplyAllowList
from mqbridge.records import DeliveryTracker, InDoubtLog
from mqbridge.source import Confirmations, Landed
from tests.unit.listeners.stomp.stubs import StubConnection


def message(n: int, reply_to: str | None) -> Message:
    return Message(msg_id=f"m{n}", body=b"x", source="amq", destination="/queue/in",
                   headers={"reply-to": reply_to} if reply_to else {})


def send_results(allow: ReplyAllowList, messages: list[Message]) -> tuple[Confirmations, list[str]]:
    connection: Any = StubConnection()
    transaction = Transaction(connection, None, InDoubtLog(), DeliveryTracker())
    confirmed = Confirmations()
    plan = CommitPlan.of(Unit(messages=messages), moves=[], returns=[])
    transaction.send_results(plan, [Landed(m, "orders", "b1") for m in messages], confirmed, allow, messages)
    return confirmed, connection.sent


def test_results_go_only_where_the_patterns_allow() -> None:
    messages = [message(1, "/queue/results.eu"), message(2, "/queue/audit"), message(3, None),
                message(4, "/queue/results.us")]
    confirmed, sent = send_results(ReplyAllowList(["/queue/results.*"], listener="amq:/queue/in"), messages)
    assert sent == ["/queue/results.eu", "/queue/results.us"]
    assert (confirmed.sent, confirmed.not_allowed, confirmed.failed) == (2, 1, 0)


def test_by_default_every_destination_of_the_broker_is_allowed() -> None:
    confirmed, sent = send_results(ReplyAllowList(None, listener="amq:/queue/in"),
                                   [message(1, "/queue/anything"), message(2, "/temp-queue/r")])
    assert sent == ["/queue/anything", "/temp-queue/r"] and confirmed.not_allowed == 0
