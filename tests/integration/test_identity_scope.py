"""Producer-given identities are scoped by their queue: two queues whose producers number their
messages alike are different messages, across a kill -9 too (`mqbridge.identity.listener_scope`).

Unscoped, the second queue's order 7 was taken for a redelivery of the first queue's order 7: it
was committed at the source and never landed (lost while the bridge reported success)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.amq import AmqClient, unique_queue
from tests.support.exactly_once import account, bodies
from tests.support.processes import landed, leftovers, run_until_idle, run_until_killed, stomp_bridge

pytestmark = pytest.mark.integration


def test_two_queues_with_the_same_producer_ids_each_land_every_message_once_across_a_kill(
        tmp_path: Path, spark: Any, amq: AmqClient) -> None:
    # Given two queues whose producers both number their messages o-0 .. o-59 (header order-id),
    # read by one bridge into one table, with pyarrow writing the bulks (no JVM: this is the ledger's test)
    first, second = unique_queue("scope-a"), unique_queue("scope-b")
    sent = {first: bodies(60, "a"), second: bodies(60, "b")}
    for queue, messages in sent.items():
        for i, body in enumerate(messages):
            amq.put(queue, body, {"order-id": f"o-{i}"})
        amq.put_many(queue, [])  # waits for the broker's receipt of the puts
    config = (stomp_bridge(first, spark='master = "local[1]"\nwriter = "arrow"', batch=25)
              .listener(source="amq", queue=second, threads=1, batch=25, wait="200ms", message_type="orders",
                        backout_queue=f"{second}.backout")
              .every_listener(identity="header:order-id")
              .write(tmp_path / "bridge.toml"))
    table = tmp_path / "landing" / "orders"
    # When the bridge is killed after a bulk is published, before its source commit, and run again
    run_until_killed(config, "before_source_commit")
    out = run_until_idle(config)
    # Then the redelivered unit is recognised by its scoped identity, and both queues' messages,
    # same ids and all, are in the table exactly once
    assert "already landed; committed without landing them again" in out, out
    result = account(sent[first] + sent[second], landed(spark, table))
    assert result.clean, str(result)
    assert leftovers(table) == [], "staging leftovers"
    for queue in sent:
        assert amq.depth(queue) == 0 and amq.depth(f"{queue}.backout") == 0, queue
