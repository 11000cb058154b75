"""`[types.X] results_to` on IBM MQ against the fake queue manager: each landed or moved message of a
type with a station gets one persistent datagram there, in the unit of work that removes it; a refused
station queue reroutes to the dead-letter queue; with neither, the unit is backed out and the listener
halts (nothing dropped)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from mqbridge.errors import BackoutFailedError
from mqbridge.listeners.mq import MqSource
from mqbridge.listeners.mq.mapping import unpack_dlh
from mqbridge.outbound.stations import Stations, type_of_bulk
from mqbridge.source import BackoutMove, Landed
from tests.support.fakes import pymqi_fake
from tests.support.fakes.mq_server import FakeQueueManagerServer
from tests.support.fakes.mq_testing import DLQ, listener_config, receive_n, source_config

C = pymqi_fake.CMQC


def station_source(qm: FakeQueueManagerServer, routes: dict[str, str]) -> MqSource:
    stations = Stations(routes, default_type="orders", listener="qm:ORDERS")
    return MqSource("qm", source_config(qm), "ORDERS", listener=listener_config("ORDERS"), driver=pymqi_fake,
                    stations=stations)


@pytest.fixture
def audited(qm: FakeQueueManagerServer) -> Iterator[MqSource]:
    qm.define_queue("AUDIT")
    src = station_source(qm, {"orders": "AUDIT"})
    src.connect()
    yield src
    src.close()


def test_landed_and_moved_messages_get_one_result_each_at_the_station(qm: FakeQueueManagerServer,
                                                                       audited: MqSource) -> None:
    ok_id = qm.put("ORDERS", b"order-1", priority=4)
    bad_id = qm.put("ORDERS", b"{bad")
    ok, bad = receive_n(audited, 2)
    ok.message_type = bad.message_type = "orders"

    done = audited.commit(moves=[BackoutMove(bad, "body is not valid JSON")],
                          landed=[Landed(ok, "orders", "orders-1a2b3c4d-00000007")])

    assert done is not None and (done.to_stations, done.sent, done.failed) == (2, 0, 0)
    assert qm.queue("ORDERS").depth == 0
    landed, moved = qm.queue("AUDIT").visible()
    assert (landed.md["MsgType"], landed.md["Persistence"], landed.md["Expiry"]) == (8, C.MQPER_PERSISTENT, -1)
    assert landed.md["CorrelId"] == ok_id and landed.md["Priority"] == 4 and moved.md["CorrelId"] == bad_id
    body = json.loads(landed.data)
    assert body == {"result": "landed", "message_id": ok.msg_id, "queue": "ORDERS", "queue_manager": qm.name,
                    "table": "orders", "bulk_id": "orders-1a2b3c4d-00000007", "put_date": body["put_date"],
                    "message_type": "orders", "source": "qm"}
    assert landed.prop("mqbridge_message_type") == "orders" and landed.prop("mqbridge_table") == "orders"
    assert json.loads(moved.data)["reason"] == "body is not valid JSON"
    assert moved.prop("mqbridge_moved_to") == "ORDERS.BACKOUT"


def test_nothing_reaches_the_station_before_the_commit(qm: FakeQueueManagerServer, audited: MqSource) -> None:
    qm.put("ORDERS", b"order-1")
    [message] = receive_n(audited, 1)
    audited.rollback()  # e.g. the write failed: the unit goes back, and no result exists
    assert qm.queue("AUDIT").depth == 0 and qm.queue("ORDERS").depth == 1
    [again] = receive_n(audited, 1)
    audited.commit(landed=[Landed(again, "orders", "orders-1a2b3c4d-00000008")])
    assert qm.queue("AUDIT").depth == 1 and message.msg_id == again.msg_id


def test_a_message_moved_at_get_time_is_of_the_listeners_type(qm: FakeQueueManagerServer, audited: MqSource) -> None:
    poisoned = qm.put("ORDERS", b"poison", backout_count=3)
    qm.put("ORDERS", b"fine")
    [fine] = receive_n(audited, 1)
    audited.commit(landed=[Landed(fine, "orders", "orders-1a2b3c4d-00000009")])
    results = {m.md["CorrelId"]: json.loads(m.data) for m in qm.queue("AUDIT").visible()}
    assert results[poisoned]["result"] == "backout" and results[poisoned]["message_type"] == "orders"
    assert "reached the backout threshold 3" in results[poisoned]["reason"]


def test_only_types_with_results_to_send_and_a_redelivery_is_of_its_bulks_type(qm: FakeQueueManagerServer) -> None:
    qm.define_queue("AUDIT")
    src = station_source(qm, {"invoices": "AUDIT"})
    src.connect()
    try:
        qm.put_many("ORDERS", [b"order", b"invoice"])
        order, invoice = receive_n(src, 2)
        order.message_type = "orders"
        # recognised by the ledger: unclassified, of the type its bulk was written for
        src.commit(landed=[Landed(order, "orders", "orders-1a2b3c4d-00000001"),
                           Landed(invoice, "invoices", "invoices-1a2b3c4d-00000002")])
    finally:
        src.close()
    [result] = qm.queue("AUDIT").visible()
    assert json.loads(result.data)["message_type"] == "invoices"


def test_a_refused_station_queue_reroutes_to_the_dead_letter_queue(qm: FakeQueueManagerServer) -> None:
    src = station_source(qm, {"orders": "NO.SUCH.QUEUE"})
    src.connect()
    try:
        qm.put("ORDERS", b"order")
        [message] = receive_n(src, 1)
        done = src.commit(landed=[Landed(message, "orders", "orders-1a2b3c4d-00000003")])
    finally:
        src.close()
    assert done is not None and done.rerouted == 1
    [dead] = qm.queue(DLQ).visible()
    dlh, data = unpack_dlh(dead.data)
    assert dlh["DestQName"] == "NO.SUCH.QUEUE" and json.loads(data)["result"] == "landed"


def test_with_no_queue_taking_the_result_the_unit_is_backed_out_and_the_listener_halts() -> None:
    qm = FakeQueueManagerServer(dead_letter_queue="")
    qm.define_queue("ORDERS", backout_threshold=3, backout_queue="ORDERS.BACKOUT")
    src = station_source(qm, {"orders": "NO.SUCH.QUEUE"})
    src.connect()
    try:
        qm.put("ORDERS", b"order")
        [message] = receive_n(src, 1)
        with pytest.raises(BackoutFailedError, match="results_to NO.SUCH.QUEUE"):
            src.commit(landed=[Landed(message, "orders", "orders-1a2b3c4d-00000004")])
        assert qm.queue("ORDERS").depth == 1  # backed out: nothing lost
    finally:
        src.close()
        qm.close()


@pytest.mark.parametrize(("bulk_id", "expected"), [
    ("orders-1a2b3c4d-00000042", "orders"), ("my-type.v2-1a2b3c4d-00000042", "my-type.v2"), ("b-17", ""), ("", ""),
])
def test_type_of_bulk(bulk_id: str, expected: str) -> None:
    assert type_of_bulk(bulk_id) == expected
