"""The replay ledger (a real SQLite file): batches recorded before their unit of work, marked sent
after it, forgotten when their unit never committed; what a resumed replay skips."""

from __future__ import annotations

import argparse
from datetime import datetime, timezone
from pathlib import Path

import pytest

from mqbridge.commands.replay import replay_id_of
from mqbridge.errors import ConfigError
from mqbridge.listeners.stomp.replay import replay_headers
from mqbridge.resend.replay import ReplayLedger, ReplayRow, Selection


def test_a_batch_in_doubt_is_marked_sent_or_forgotten(tmp_path: Path) -> None:
    ledger = ReplayLedger.in_state_dir(tmp_path / "state")
    ledger.intend("r1", "b1", ["k1", "k2"])
    ledger.mark_sent("r1", "b1")
    ledger.intend("r1", "b2", ["k3"])
    ledger.intend("r1", "b3", ["k4"])
    ledger.intend("r2", "b1", ["k1"])  # another replay's keys are its own
    ledger.close()

    # A new run (a new process) sees what the killed one left
    again = ReplayLedger.in_state_dir(tmp_path / "state")
    assert again.in_doubt("r1") == ["b2", "b3"] and again.keys("r1") == {"k1", "k2", "k3", "k4"}
    again.mark_sent("r1", "b2")  # its marker was there
    again.forget("r1", "b3")  # it was not: its rows go again
    assert again.in_doubt("r1") == [] and again.keys("r1") == {"k1", "k2", "k3"}
    assert again.sent("r1") == (2, 3) and again.sent("r2") == (0, 0)
    with pytest.raises(Exception, match="UNIQUE"):  # a key is recorded once per replay
        again.intend("r1", "b4", ["k1"])
    assert again.in_doubt("r1") == []  # ... and the refused batch left nothing behind
    assert (tmp_path / "state" / "replay.sqlite3").stat().st_mode & 0o777 == 0o600


def test_a_batch_the_target_confirmed_in_part_keeps_only_the_rows_that_arrived(tmp_path: Path) -> None:
    # Given a batch whose target stopped part-way (RabbitMQ: a row refused), and one that stopped at its first row
    ledger = ReplayLedger.in_state_dir(tmp_path / "state")
    ledger.intend("r1", "b1", ["k1", "k2", "k3"])
    ledger.keep_sent("r1", "b1", frozenset({"k1"}))
    ledger.intend("r1", "b2", ["k2", "k3"])
    ledger.keep_sent("r1", "b2", frozenset())
    # Then the arrived row is sent, its batch with it; the other rows are to be sent again; none in doubt
    assert ledger.keys("r1") == {"k1"} and ledger.sent("r1") == (1, 1) and ledger.in_doubt("r1") == []
    ledger.close()


def test_a_row_is_sent_with_its_headers_and_where_it_comes_from() -> None:
    put = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    row = ReplayRow(key="bulk/ID:1/ab/1", msg_id="ID:1", body=b"\x00\xff", correlation_id="c-1", put_timestamp=put,
                    headers={"x-app": "shop", "expires": "1700000000000", "persistent": "false", "priority": "4"})
    headers = replay_headers(row, "r1")
    assert headers == {"x-app": "shop", "priority": "4", "persistent": "true", "correlation-id": "c-1",
                       "mqbridge-replay-id": "r1", "mqbridge-replay-key": "bulk/ID:1/ab/1",
                       "mqbridge-replayed-message-id": "ID:1",
                       "mqbridge-replayed-put-timestamp": "2026-01-02T03:04:05+00:00"}


def _args(**changes: object) -> argparse.Namespace:
    values: dict[str, object] = {"replay_id": None, "table": "orders", "where": None, "older_than": None,
                                 "newer_than": 3600.0, "to": "/queue/x"}
    values.update(changes)
    return argparse.Namespace(**values)


def test_the_same_command_resumes_the_same_replay() -> None:
    assert replay_id_of(_args(), "amq") == replay_id_of(_args(), "amq")
    assert replay_id_of(_args(), "amq") != replay_id_of(_args(to="/queue/y"), "amq")
    assert replay_id_of(_args(replay_id="nightly-1"), "amq") == "nightly-1"
    with pytest.raises(ConfigError, match="only letters, digits"):
        replay_id_of(_args(replay_id="a/b"), "amq")


def test_older_and_newer_than_are_cuts_before_now() -> None:
    now = datetime(2026, 1, 2, tzinfo=timezone.utc)
    selection = Selection.of("x = 1", 60.0, 120.0, now)
    assert selection.older_than == datetime(2026, 1, 1, 23, 59, tzinfo=timezone.utc)
    assert selection.newer_than == datetime(2026, 1, 1, 23, 58, tzinfo=timezone.utc)
    assert Selection.of(None, None, None, now) == Selection()
