"""The STOMP commit modes under kill -9 (`mqbridge run` killed at the failpoints inside the source
commit), on the real ActiveMQ and RabbitMQ, with the landing ledger on.

`commit_mode = "receipted"` is what Artemis needs (its ACK frames are never part of a transaction;
Artemis cannot run here, so the mode is tested on these two brokers) and RabbitMQ's only mode (it
does not apply a transaction atomically): moves confirmed by their receipts, then the ACK. A kill
between them may leave a moved message on the backout queue *and* give it back (a duplicate on the
backout queue), never lose one. Every good message lands exactly once; every poison message reaches
the backout queue; the source queue ends empty."""

from __future__ import annotations

import collections
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.amq import AmqClient, unique_queue
from tests.support.exactly_once import RABBIT_SOURCE, Rabbit, account, interleaved
from tests.support.processes import landed, leftovers, run_until_idle, run_until_killed, stomp_config

pytestmark = pytest.mark.integration

GOOD, EVERY = 400, 50  # 400 good JSON messages, a poison one (not JSON) after every 50th


def messages(tag: str) -> tuple[list[bytes], list[bytes]]:
    good = [json.dumps({"id": i, "tag": tag, "pad": "x" * 200}).encode() for i in range(GOOD)]
    poison = [f"poison {tag} {i}: not JSON".encode() for i in range(GOOD // EVERY)]
    return good, poison


def json_type(config: Path) -> Path:
    """Type `orders` parses JSON bodies: a body that is not JSON is a permanent failure (moved)."""
    text = config.read_text().replace('bulk_timeout = "500ms"\n',
                                      'bulk_timeout = "500ms"\nformat = "json"\nschema = "id INT, tag STRING"\n', 1)
    config.write_text(text)
    return config


@pytest.mark.parametrize(("broker", "commit_mode", "failpoint"), [
    ("activemq", "receipted", "after_backout_send"),
    ("activemq", "receipted", "after_source_ack"),
    ("activemq", "transactional", "after_backout_send"),
    ("rabbitmq", "receipted", "after_backout_send"),
    ("rabbitmq", "receipted", "after_source_ack"),
])
def test_killed_inside_the_source_commit_then_restarted_loses_nothing(
        tmp_path: Path, spark: Any, amq: AmqClient, rabbitmq: tuple[str, int],
        broker: str, commit_mode: str, failpoint: str) -> None:
    # Given good and poison messages, and a bridge (one thread, units of 200) killed inside the
    # commit of its first unit that moves a poison message to the backout queue
    tag = f"{broker}-{failpoint}"
    good, poison = messages(tag)
    extra_source = f'commit_mode = "{commit_mode}"'
    if broker == "activemq":
        queue = unique_queue(f"cm-{failpoint}")
        amq.put_many(queue, interleaved(good, poison, EVERY))
        config = stomp_config(tmp_path, queue, threads=1, extra_source=extra_source)
    else:
        rabbit = Rabbit(rabbitmq)
        queue = f"/queue/test.cm-{failpoint}.{uuid.uuid4().hex[:8]}"
        rabbit.put(queue, [(body, {"x-eo-id": f"id-{i}"}) for i, body in enumerate(interleaved(good, poison, EVERY))])
        config = stomp_config(tmp_path, queue, port=rabbitmq[1], broker="rabbitmq", threads=1,
                              extra_source=f"{RABBIT_SOURCE}\n{extra_source}",
                              extra_listener='identity = "header:x-eo-id"')
    json_type(config)
    run_until_killed(config, failpoint)
    # When it is started again and runs until idle
    run_until_idle(config)
    # Then every good message is in the table exactly once, no poison message is,
    table = tmp_path / "landing" / "orders"
    result = account(good, landed(spark, table))
    assert result.clean, str(result)
    assert leftovers(table) == []
    # every poison message is on the backout queue (twice at most: the receipted mode's duplicate),
    if broker == "activemq":
        moved = collections.Counter(bytes(f.body) for f in amq.drain(queue + ".backout"))
        assert amq.depth(queue) == 0
    else:
        moved = collections.Counter(bytes(f.body) for f in rabbit.deliveries(queue + ".backout", ack=True))
        assert rabbit.depth(queue) == 0
    assert set(moved) == set(poison), f"lost from the backout queue: {set(poison) - set(moved)}"
    duplicated = {body: n for body, n in moved.items() if n > 1}
    assert max(moved.values()) <= 2, duplicated
    if commit_mode == "transactional" or failpoint == "after_source_ack":
        assert duplicated == {}, "moved twice although the move and the ACK were never apart"
    else:  # killed between the confirmed move and the ACK: the unit came back and moved again
        assert duplicated, "no duplicate: the kill did not fall between the move and the ACK"
    # and the source queue is empty (checked above)
