"""RabbitMQ with the defaults (`identity` msg_id, per delivery there; `ack_mode = "individual"`;
`commit_mode = "receipted"`), the bridge in this process: what it counts.

A message given back unlanded by a commit (NACK: a failure of its own, an outage) is known again on
its redelivery by its content, so it keeps its msg_id and its delivery count: a message failing on
its own on a classic queue reaches the backout queue after its threshold instead of looping, and
an outage's give-backs are no possible duplicates. A unit whose connection is cut after it landed,
before its ACK, lands again: every such duplicate is counted in `possible_duplicates`, and the count
is exactly the landed rows RabbitMQ flagged redelivered. (The broker facts these rely on are checked
with a bare client in tests/integration/test_rabbitmq_facts.py.)
"""

from __future__ import annotations

import collections
import uuid
from pathlib import Path
from typing import Any

import pytest

from mqbridge.app import build_app
from tests.support.bridge import RunningBridge, make_config, read_table
from tests.support.bridge import run_until_idle as run_in_process
from tests.support.exactly_once import Rabbit, bodies
from tests.support.tcpproxy import TcpProxy
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

RABBIT = {"broker": "rabbitmq", "user": "guest", "password": "guest", "allow_plaintext_password": True, "vhost": "/"}
TYPE = '\n[types.orders]\nbulk_size = "2MB"\nbulk_timeout = "500ms"\n'


def listener(queue: str, *, batch: int = 50, extra: str = "") -> str:
    return (f'\n[[listeners]]\nsource = "amq"\nqueue = "{queue}"\nbatch = {batch}\nwait = "200ms"\n'
            f'message_type = "orders"\nbackout_queue = "{queue}.backout"\n{extra}\n')


def config(tmp_path: Path, queue: str, port: int, **options: Any) -> Any:
    return make_config(tmp_path, TYPE + listener(queue, **options), port=port, source=RABBIT)


def test_a_classic_queue_message_failing_on_its_own_reaches_the_backout_queue_after_its_threshold(
        tmp_path: Path, spark: Any, rabbitmq: tuple[str, int], monkeypatch: pytest.MonkeyPatch) -> None:
    # Given 200 messages on a classic queue (no count of RabbitMQ's), one of which fails every write
    monkeypatch.setenv("MQBRIDGE_FAILPOINT", "spark_poison_body:POISON")
    rabbit = Rabbit(rabbitmq)
    queue = f"/queue/test.counts-poison.{uuid.uuid4().hex[:8]}"
    sent = bodies(199, "cp")
    rabbit.put(queue, [(body, {}) for body in [*sent[:100], b"the POISON one", *sent[100:]]])
    # When a bridge with the default threshold (3) runs until idle (it never would if the message looped)
    bridge = build_app(config(tmp_path, queue, rabbitmq[1], extra="backout_threshold = 3"), spark=spark).bridge
    assert run_in_process(bridge, idle=2.0, timeout=240) == 0
    # Then the poison message is on the backout queue after three deliveries, with the same id each time
    [moved] = rabbit.deliveries(queue + ".backout", ack=True)
    assert bytes(moved.body) == b"the POISON one"
    assert moved.headers["mqbridge-delivery-count"] == "3", moved.headers
    assert moved.headers["mqbridge-original-message-id"].startswith("T_"), moved.headers  # its first delivery's
    # and the others landed once each; nothing of them counts as a possible duplicate
    rows = read_table(spark, tmp_path / "landing" / "orders")
    assert collections.Counter(bytes(r.body) for r in rows) == collections.Counter(sent)
    assert rabbit.depth(queue) == 0
    assert bridge.counters.total("possible_duplicates") == 0


def test_an_outage_gives_back_by_nack_and_its_redeliveries_are_no_possible_duplicates(
        tmp_path: Path, spark: Any, rabbitmq: tuple[str, int]) -> None:
    # Given 300 messages, and the table's path a regular file: every write fails (an outage)
    rabbit = Rabbit(rabbitmq)
    queue = f"/queue/test.counts-outage.{uuid.uuid4().hex[:8]}"
    sent = bodies(300, "co")
    rabbit.put(queue, [(body, {}) for body in sent])
    (tmp_path / "landing").mkdir()
    blocker = tmp_path / "landing" / "orders"
    blocker.write_text("not a directory")
    bridge = build_app(config(tmp_path, queue, rabbitmq[1]), spark=spark).bridge
    running = RunningBridge(bridge, until_idle=2.0)
    # When units are given back (NACK) while the sink is down, and then it comes back
    wait_until(lambda: bridge.counters.total("messages_backed_out") >= 50, 120, "units given back in the outage")
    blocker.unlink()
    assert running.wait(240) == 0
    # Then every message landed once, many of them flagged redelivered by RabbitMQ, none counted
    rows = read_table(spark, tmp_path / "landing" / "orders")
    assert collections.Counter(bytes(r.body) for r in rows) == collections.Counter(sent)
    assert sum(r.redelivered for r in rows) >= 50
    assert bridge.counters.total("possible_duplicates") == 0
    assert rabbit.depth(queue) == 0 and rabbit.depth(queue + ".backout") == 0


def test_a_unit_cut_after_it_landed_lands_again_and_every_duplicate_is_counted(
        tmp_path: Path, spark: Any, rabbitmq: tuple[str, int]) -> None:
    # Given 600 messages without a producer id, reached through a proxy that cuts every connection when
    # the first unit's ACK goes out (dropped: the unit is landed, not removed)
    rabbit = Rabbit(rabbitmq)
    queue = f"/queue/test.counts-cut.{uuid.uuid4().hex[:8]}"
    sent = bodies(600, "cc")
    rabbit.put(queue, [(body, {}) for body in sent])
    proxy = TcpProxy(rabbitmq)
    try:
        proxy.cut_at(b"ACK\n", forward=False)
        bridge = build_app(config(tmp_path, queue, proxy.port), spark=spark).bridge
        running = RunningBridge(bridge, until_idle=3.0)
        assert proxy.trapped.wait(120), "the first unit's ACK never went out"
        assert running.wait(240) == 0
    finally:
        proxy.close()
    # Then nothing is lost; the cut unit landed twice (at-least-once), and each duplicate is counted:
    # the counter is the landed rows RabbitMQ flagged redelivered (an upper bound of the duplicates)
    rows = read_table(spark, tmp_path / "landing" / "orders")
    landed = collections.Counter(bytes(r.body) for r in rows)
    assert set(landed) == set(sent), "a message was lost"
    duplicates = sum(n - 1 for n in landed.values())
    counted = bridge.counters.total("possible_duplicates")
    assert 0 < duplicates <= counted == sum(r.redelivered for r in rows), (duplicates, counted)
    assert rabbit.depth(queue) == 0 and rabbit.depth(queue + ".backout") == 0

