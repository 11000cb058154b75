"""Exactly-once landing under load and failure, on the real parts: a broker restarted mid-stream,
RabbitMQ (classic and quorum queues) with a kill -9, two bridges sharing one ledger, and what a
concurrent reader sees. Every message is accounted for (lost, duplicated, unexpected: all 0)."""

from __future__ import annotations

import collections
import re
import subprocess
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from mqbridge.landing.ledger import SqliteLedger, ledger_path, owner_id
from tests.support.amq import AmqClient, unique_queue
from tests.support.exactly_once import (
    RABBIT_SOURCE,
    OutputReader,
    Rabbit,
    account,
    bodies,
    private_activemq,
    published_files,
    wait_until,
)
from tests.support.processes import (
    landed,
    leftovers,
    mqbridge,
    run_until_idle,
    run_until_killed,
    stomp_config,
)

pytestmark = pytest.mark.integration


def assert_exactly_once(spark: Any, table: Path, sent: list[bytes]) -> None:
    result = account(sent, landed(spark, table))
    assert result.clean, str(result)
    assert leftovers(table) == [], "staging leftovers"


# -- 1. the broker restarted under load -------------------------------------------------------
def test_a_broker_restarted_mid_stream_loses_and_duplicates_nothing(tmp_path: Path, spark: Any) -> None:
    with private_activemq(tmp_path / "amq") as broker:
        # Given 10,000 messages on a private ActiveMQ and a bridge draining them
        q = unique_queue("eo-restart")
        sent = bodies(10_000, "rs")
        with AmqClient("127.0.0.1", broker.port) as client:
            client.put_many(q, sent)
        config = stomp_config(tmp_path, q, port=broker.port)
        table = tmp_path / "landing" / "orders"
        bridge = OutputReader(mqbridge("run", "--config", str(config), "--until-idle", "5s"))
        wait_until(lambda: published_files(table) >= 2, 120, "the first bulks to land")
        # When the broker is stopped and started again under it
        broker.stop()
        before = published_files(table)
        broker.start()
        # Then the same process reconnects and lands more
        wait_until(lambda: published_files(table) > before or bridge.proc.poll() is not None, 120,
                   "landing to resume after the restart")
        assert bridge.proc.poll() is None, f"the bridge ended while the broker was down:\n{bridge.text()}"
        code = bridge.wait(timeout=180)
        if code is None:  # not done in a reasonable time: stop it, and finish with a second run
            code = bridge.terminate()
            run_until_idle(config)
        assert code == 0, bridge.text()
        # and every message is in the table exactly once; the queue is empty
        assert_exactly_once(spark, table, sent)
        with AmqClient("127.0.0.1", broker.port) as client:
            assert client.depth(q) == 0 and client.depth(q + ".backout") == 0


# -- 2. RabbitMQ, kill -9 mid-stream ----------------------------------------------------------
@pytest.mark.parametrize("kind", ["classic", "quorum"])
def test_rabbitmq_killed_mid_stream_then_restarted_lands_every_message_once(
        tmp_path: Path, spark: Any, rabbitmq: tuple[str, int], kind: str) -> None:
    """RabbitMQ's STOMP `message-id` is per delivery on classic *and* quorum queues (3.10: a
    redelivery gets a new one), so the identity is a header the producer sets: its own `x-eo-id`
    on the classic queue; on the quorum queue `amqp-message-id`, which is how the AMQP message-id
    property shows over STOMP (a SEND sets it with that header; `message-id` is refused on SEND)."""
    rabbit = Rabbit(rabbitmq)
    name = f"test.eo-{kind}.{uuid.uuid4().hex[:8]}"
    if kind == "quorum":
        queue = rabbit.declare_quorum(name)
        rabbit.declare_quorum(name + ".backout")
        header = "amqp-message-id"
    else:
        queue, header = f"/queue/{name}", "x-eo-id"
    sent = bodies(3000, kind)
    rabbit.put(queue, [(body, {header: f"id-{i}"}) for i, body in enumerate(sent)])
    config = stomp_config(tmp_path, queue, port=rabbitmq[1], broker="rabbitmq", extra_source=RABBIT_SOURCE,
                          extra_listener=f'identity = "header:{header}"')
    table = tmp_path / "landing" / "orders"
    # Given a bridge killed after a bulk is published, before the source commit
    run_until_killed(config, "before_source_commit")
    # When it is started again and runs until idle
    out = run_until_idle(config)
    # Then the redelivered unit is recognised, and every message is in the table once
    assert "already landed; committed without landing them again" in out, out
    assert_exactly_once(spark, table, sent)
    assert rabbit.depth(queue) == 0 and rabbit.depth(queue.replace(name, name + ".backout")) == 0
    if kind == "quorum":
        for queue_name in (name, name + ".backout"):
            subprocess.run(["rabbitmqctl", "-n", "mqbridge-test@localhost", "delete_queue", queue_name],
                           check=False, capture_output=True, timeout=60)


def test_rabbitmq_message_ids_are_per_delivery_on_quorum_queues_too(rabbitmq: tuple[str, int]) -> None:
    """Why the test above uses a header identity on quorum queues: a redelivery (after a
    connection closed without acking) has another STOMP message-id; the producer's headers stay."""
    rabbit = Rabbit(rabbitmq)
    name = f"test.eo-ids.{uuid.uuid4().hex[:8]}"
    queue = rabbit.declare_quorum(name)
    rabbit.put(queue, [(b"one", {"amqp-message-id": "mine-1", "x-eo-id": "x-1"})])
    [first] = rabbit.deliveries(queue)
    [again] = rabbit.deliveries(queue, ack=True)
    assert first.headers["message-id"] != again.headers["message-id"]
    assert again.headers["amqp-message-id"] == "mine-1" and again.headers["x-eo-id"] == "x-1"
    assert int(again.headers["x-delivery-count"]) >= 1
    subprocess.run(["rabbitmqctl", "-n", "mqbridge-test@localhost", "delete_queue", name],
                   check=False, capture_output=True, timeout=60)


# -- 3. two bridges, one ledger ---------------------------------------------------------------
@pytest.mark.parametrize("how", ["sigkill", "after_publish"])
def test_two_bridges_on_one_queue_and_one_ledger_one_killed(
        tmp_path: Path, spark: Any, amq: AmqClient, how: str) -> None:
    """`sigkill`: bridge A is killed with SIGKILL at some point after its first bulk landed;
    `after_publish`: A kills itself (SIGKILL) right after it moved a bulk's files into the table
    and before the ledger says published: its unacknowledged messages go to B meanwhile."""
    q = unique_queue(f"eo-two-{how}")
    sent = bodies(10_000, "two")
    amq.put_many(q, sent)
    a = stomp_config(tmp_path, q, name="a.toml")
    b = stomp_config(tmp_path, q, name="b.toml")
    table = tmp_path / "landing" / "orders"
    first = OutputReader(mqbridge("run", "--config", str(a), failpoint="after_publish" if how != "sigkill" else None))
    # B starts once A has subscribed, so that A gets fresh messages: B alone could drain the queue
    # before A's JVM is up, and A would never publish a bulk (nor reach after_publish).
    first.wait_subscribed(threads=2)
    second = OutputReader(mqbridge("run", "--config", str(b), "--until-idle", "5s"))
    # Given A killed mid-stream while B runs on
    if how == "sigkill":
        wait_until(lambda: published_files(table) >= 2, 120, "the first bulks to land")
        first.proc.kill()  # SIGKILL; reaped below (a zombie would count as a live ledger owner)
    else:
        assert first.wait(timeout=120) == -9, first.text()
    first.wait(timeout=30)
    # When B has run to idle, and a bridge is started once more (recovering A's bulk)
    assert second.wait(timeout=240) == 0, second.text()
    out = run_until_idle(a)
    # Then every message is in the table exactly once, nothing is left behind, the queue is empty
    assert re.search(r"ledger recovery: \d+ bulks rolled forward", out), out
    assert_exactly_once(spark, table, sent)
    assert amq.depth(q) == 0 and amq.depth(q + ".backout") == 0


# -- 4. readers see whole bulks ---------------------------------------------------------------
def test_a_reader_sees_only_whole_bulks(tmp_path: Path, spark: Any, amq: AmqClient) -> None:
    """The documented window (`mqbridge.landing.publication`): each file is published by one rename, so a
    reader sees a file whole or not at all; a bulk of several files (several put_dates, or over
    128 MB) becomes visible file by file. The bulks of this test (128 KB, one put_date) are one
    file each, so every count a reader sees of a bulk must be its final count, also across a kill
    at `after_publish` (files in place, ledger not yet saying published) and the roll-forward."""
    q = unique_queue("eo-reader")
    sent = bodies(10_000, "rd")
    amq.put_many(q, sent)
    config = stomp_config(tmp_path, q)
    table = tmp_path / "landing" / "orders"
    seen: dict[str, set[int]] = collections.defaultdict(set)
    reads = 0
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        nonlocal reads
        while not stop.is_set():
            try:
                if published_files(table) == 0:
                    stop.wait(0.1)
                    continue
                for row in spark.read.parquet(str(table)).groupBy("bulk_id").count().collect():
                    seen[row["bulk_id"]].add(row["count"])
                reads += 1
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                errors.append(exc)
                return

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        run_until_killed(config, "after_publish")
        out = run_until_idle(config)
    finally:
        stop.set()
        thread.join(120)
    assert not errors, errors
    assert re.search(r"ledger recovery: [1-9]\d* bulks rolled forward", out), out
    ledger = SqliteLedger.open(ledger_path(tmp_path / "state"), owner=owner_id())
    try:
        sizes = ledger.bulk_sizes()
    finally:
        ledger.close()
    assert reads >= 3, f"the reader read only {reads} times"
    partial = {bulk: (sorted(counts), sizes.get(bulk)) for bulk, counts in seen.items() if counts != {sizes.get(bulk)}}
    assert partial == {}, "a reader saw part of a bulk (or a bulk the ledger does not hold)"
    assert sum(sizes.values()) == len(sent)
    assert_exactly_once(spark, table, sent)
    assert amq.depth(q) == 0
