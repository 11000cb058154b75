"""The identities replayed rows have at the target, checked against a real (SQLite) landing ledger
before a replay sends: rows a listener reading the destination would drop as already landed are
counted per listener, scoped as the ledger keeps them; `--new-identity` values are new, the same on
every run and unique per row; a dropped replayed message is logged as a warning by the bridge."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import pytest

from mqbridge.config import load_config
from mqbridge.counters import Counters
from mqbridge.identity import listener_scope, scoped
from mqbridge.landing.ledger import SqliteLedger, ledger_path
from mqbridge.listeners.stomp.replay import replay_headers
from mqbridge.loop.unit_plan import Unit, UnitPlan, UnitPolicy
from mqbridge.loop.unit_report import report_committed
from mqbridge.message import Message
from mqbridge.resend.replay import ReplayRow
from mqbridge.resend.replay.identities import (
    AS_LANDED,
    Delivered,
    Reader,
    Renewal,
    count_drops,
    readers_of,
    refusal,
    renewal_for,
    renewed_value,
)
from tests.support.processes import stomp_bridge

PUT = datetime(2026, 11, 26, 9, 0, tzinfo=timezone.utc)
POLICY = UnitPolicy(queue="/queue/o", backout_threshold=3, backout_queue=None, halt_after_failures=5,
                    partial_commit=True, source_moves=False, moving_threshold=3, ledger=True)


def _rows(n: int) -> list[ReplayRow]:
    return [ReplayRow(key=f"bulk/{i}", msg_id=f"ID:m-{i}", body=b"body-%d" % i, correlation_id=None,
                      put_timestamp=PUT, headers={"hid": f"order-{i}"}) for i in range(n)]


def _stomp_delivered(renewal: Renewal = AS_LANDED) -> Callable[[ReplayRow], Delivered]:
    return lambda row: Delivered(replay_headers(row, "r1", renewal), None)


def _ledger(tmp_path: Path, identities: list[str]) -> SqliteLedger:
    ledger = SqliteLedger.open(ledger_path(tmp_path / "state"), owner="test")
    ledger.prepare("bulk-1", "orders", [], identities)
    ledger.mark_published("bulk-1")
    return ledger


def test_rows_whose_header_identity_is_landed_are_counted_in_the_listeners_scope(tmp_path: Path) -> None:
    # Given a listener on /queue/o with identity header:hid that landed orders 0-2 (scoped), and an
    # older build's unscoped entry for order 3
    scope = listener_scope("amq", "/queue/o", None, "header:hid")
    reader = Reader("/queue/o", "header:hid", scope)
    ledger = _ledger(tmp_path, [scoped(f"order-{i}", scope.prefix) for i in range(3)] + ["order-3"])
    try:
        # When six rows are checked, two of them sent by this replay already
        drops = count_drops(_rows(6), [reader], _stomp_delivered(), ledger.published, skip={"bulk/0"})
        # ... and the same rows for a listener of another queue (another scope)
        other = Reader("/queue/p", "header:hid", listener_scope("amq", "/queue/p", None, "header:hid"))
        elsewhere = count_drops(_rows(6), [other], _stomp_delivered(), ledger.published, skip=set())
        # ... and with --new-identity
        renewed = count_drops(_rows(6), [reader], _stomp_delivered(Renewal(headers=frozenset({"hid"}))),
                              ledger.published, skip=set())
    finally:
        ledger.close()
    # Then orders 1 and 2 (scoped) and 3 (unscoped) would be dropped; 0 was sent before
    assert (drops.checked, drops.rows, drops.by_reader) == (5, 3, {"/queue/o": 3})
    assert (elsewhere.rows, renewed.rows) == (1, 0)  # only the unscoped entry; renewed: none
    text = refusal(drops, [reader], "/queue/o")
    assert "3 of the 5 rows to send would be dropped" in text and "header:hid" in text
    assert "--new-identity" in text and "mqbridge-replayed-hid" in text


def test_stomp_message_ids_are_new_at_the_target_but_a_body_digest_is_not(tmp_path: Path) -> None:
    rows = _rows(2)
    readers = [Reader("/queue/o", rule, listener_scope("amq", "/queue/o", None, rule))
               for rule in ("msg_id", "body-sha256")]
    digest = scoped(hashlib.sha256(b"body-0").hexdigest(), readers[1].scope.prefix)
    ledger = _ledger(tmp_path, ["ID:m-0", "ID:m-1", digest])
    try:
        drops = count_drops(rows, readers, _stomp_delivered(), ledger.published, skip=set())
    finally:
        ledger.close()
    assert drops.by_reader == {"/queue/o": 1} and drops.rows == 1
    text = refusal(drops, [readers[1]], "/queue/o")
    assert "body-sha256" in text and "cannot change" in text and "--new-identity" not in text


def test_renewed_values_are_new_stable_and_unique_per_row() -> None:
    first, again = renewed_value("order-1", "r1", "bulk/1"), renewed_value("order-1", "r1", "bulk/1")
    assert first == again and first.startswith("order-1.replay-r1.")
    assert renewed_value("order-1", "r1", "bulk/2") != first and renewed_value("order-1", "r2", "bulk/1") != first
    headers = replay_headers(_rows(1)[0], "r1", Renewal(headers=frozenset({"hid", "absent"})))
    assert headers["hid"].startswith("order-0.replay-r1.") and headers["mqbridge-replayed-hid"] == "order-0"
    assert headers["absent"].startswith("replay-r1.") and "mqbridge-replayed-absent" not in headers
    assert Renewal(headers=frozenset({"hid"})).covers("header:hid") and not Renewal().covers("msg_id")


def test_the_readers_of_a_destination_are_its_listeners_on_that_source(tmp_path: Path) -> None:
    path = (stomp_bridge("/queue/o", broker="rabbitmq", extra_listener='identity = "header:hid"')
            .write(tmp_path / "bridge.toml"))
    cfg = load_config(str(path))
    readers = readers_of(cfg, "amq", "/amq/queue/o")  # RabbitMQ: the same queue as /queue/o
    assert [(r.name, r.rule, r.scope.prefix) for r in readers] == [("/queue/o", "header:hid", "amq:/queue/o")]
    assert readers_of(cfg, "amq", "/queue/other") == []
    assert renewal_for(readers) == Renewal(headers=frozenset({"hid"}))


def test_a_dropped_replayed_message_is_a_warning_with_the_count(caplog: pytest.LogCaptureFixture) -> None:
    replayed = [Message(msg_id=f"m{i}", body=b"", source="amq", destination="/queue/o",
                        headers={"mqbridge-replay-key": f"bulk/{i}"}) for i in range(3)]
    redelivered = Message(msg_id="m9", body=b"", source="amq", destination="/queue/o")
    unit = Unit(batch=(*replayed, redelivered), deduplicated=(*replayed, redelivered))
    with caplog.at_level(logging.INFO, logger="mqbridge.listener"):
        report_committed(Counters(), {}, "/queue/o", unit, UnitPlan(POLICY))
    lines = {(r.levelno, r.getMessage().split(": ", 1)[1].split(";")[0]) for r in caplog.records}
    assert lines == {(logging.WARNING, "3 replayed messages (header mqbridge-replay-key) were already landed"),
                     (logging.INFO, "1 redelivered messages were already landed")}
