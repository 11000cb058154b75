"""IBM MQ's PutDate/PutTime meet the same range as every source's put time (`mqbridge.put_time`):
whoever puts with MQPMO_SET_ALL_CONTEXT sets them, so a clock never set (1999) or one a year ahead
reaches the listener loop, which gives such a row its received time and keeps the refused time and
the reason in its headers. The real listener loop and collector on the fake queue manager."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone

import pytest

from mqbridge.bulks.collector import BulkCollector, CollectorLimits, TypeLimits
from mqbridge.counters import Counters
from mqbridge.loop.listener import ListenerSpec, ListenerThread, PlainChain
from mqbridge.message import Bulk, Message, MessageResult, put_date_of, utcnow
from mqbridge.put_time import ORIGINAL_HEADER, REFUSED_COUNTER, REFUSED_HEADER
from mqbridge.records import DeliveryTracker
from tests.support.fakes.mq_server import FakeQueueManagerServer
from tests.support.fakes.mq_testing import make_source
from tests.support.listener_run import RunningListener


class Landed:
    """Stands in for Spark: every message lands, as the listener handed it over."""

    def __init__(self) -> None:
        self.messages: list[Message] = []

    def execute(self, bulk: Bulk) -> list[MessageResult]:
        self.messages += bulk.messages
        return [MessageResult.success(m.msg_id) for m in bulk.messages]


class Run(RunningListener):
    def __init__(self, qm: FakeQueueManagerServer) -> None:
        self.landed = Landed()
        self.collector = BulkCollector(CollectorLimits(memory=64 << 20, max_bulks=10, workers=1),
                                       {"orders": TypeLimits(bulk_size=1 << 20, bulk_timeout=0.1)})
        self.collector.register_executor("orders", self.landed)
        self.collector.start()
        spec = ListenerSpec(name="qm:ORDERS#1", source_name="qm", queue="ORDERS", batch=10, wait=0.1,
                            message_type="orders", backout_threshold=0, backout_queue=None)
        self.counters = Counters()
        self.thread = ListenerThread(spec, make_source(qm, "ORDERS", batch=10), self.collector,
                                     PlainChain, self.counters, DeliveryTracker())
        self.thread.start()


def test_a_put_date_out_of_range_lands_with_the_received_time_and_says_why(
        qm: FakeQueueManagerServer, caplog: pytest.LogCaptureFixture) -> None:
    # Given three messages put (MQMD PutDate/PutTime) in 1999, a year ahead, and an hour ago
    never_set = datetime(1999, 12, 31, 23, 59, 59, tzinfo=timezone.utc)
    ahead = (utcnow() + timedelta(days=365)).replace(microsecond=0)
    hour_ago = (utcnow() - timedelta(hours=1)).replace(microsecond=0)
    for body, when in ((b"never-set", never_set), (b"ahead", ahead), (b"hour-ago", hour_ago)):
        qm.put("ORDERS", body, put_time=when)

    # When a listener lands them
    run = Run(qm)
    with caplog.at_level(logging.WARNING, logger="mqbridge.put_time"):
        assert run.finish(lambda: len(run.landed.messages) == 3) is None

    # Then the two out of range take their received time (and its put_date), with the refused time
    # and the reason in their headers; the one of an hour ago keeps its put time
    by_body = {m.body: m for m in run.landed.messages}
    for body, when in ((b"never-set", never_set), (b"ahead", ahead)):
        message = by_body[body]
        assert message.put_timestamp is None and put_date_of(message) == message.received_timestamp.date().isoformat()
        assert message.headers[ORIGINAL_HEADER] == when.isoformat()
        assert message.headers[REFUSED_HEADER].startswith(when.isoformat())
    assert by_body[b"hour-ago"].put_timestamp == hour_ago and REFUSED_HEADER not in by_body[b"hour-ago"].headers
    # and they are counted for the listener, and logged once
    assert run.counters.total(REFUSED_COUNTER, listener="qm:ORDERS") == 2
    assert len([r for r in caplog.records if "put time no row may have" in r.getMessage()]) == 1
