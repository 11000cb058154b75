"""Selectors on the real ActiveMQ with Spark writing every bulk: two listeners on one queue with
complementary STOMP `selector`s land their shares into two tables, every message exactly once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mqbridge.app import build_app
from tests.support.amq import AmqClient, unique_queue
from tests.support.bridge import listener_toml, make_config, run_until_idle
from tests.support.exactly_once import account, bodies
from tests.support.processes import landed

pytestmark = pytest.mark.integration

TYPES = "".join(f'\n[types.{name}]\nbulk_size = "2MB"\nbulk_timeout = "1s"\n' for name in ("eu", "rest"))


def test_two_listeners_with_complementary_selectors_each_land_their_share_exactly_once(
        tmp_path: Path, spark: Any, amq: AmqClient) -> None:
    # Given one queue holding EU, US and unlabelled messages, interleaved
    queue = unique_queue("selectors")
    sent: dict[str, list[bytes]] = {"eu": [], "rest": []}
    for n, chunk in enumerate(bodies(600, "sel")[i:i + 50] for i in range(0, 600, 50)):
        region = ["EU", "US", None][n % 3]
        amq.put_many(queue, chunk, {"region": region} if region else {})
        sent["eu" if region == "EU" else "rest"].extend(chunk)
    # and a bridge (Spark writing) with two listeners on it: EU to one table, the rest to another
    cfg = make_config(tmp_path, TYPES + listener_toml(queue, "eu", extra="selector = \"region = 'EU'\"")
                      + listener_toml(queue, "rest", extra="selector = \"region <> 'EU' OR region IS NULL\""),
                      tables={"spark": {"writer": "spark"}})

    # When it runs until the queue is idle
    assert run_until_idle(build_app(cfg, spark=spark).bridge) == 0

    # Then each table holds exactly its share: none lost, duplicated or in the wrong table
    for name in ("eu", "rest"):
        accounting = account(sent[name], landed(spark, tmp_path / "landing" / name))
        assert accounting.clean, f"{name}: {accounting}"
    assert amq.depth(queue) == 0 and amq.depth(f"{queue}.backout") == 0
