"""The backout log (`mqbridge.tracing.backout_log`) on real files: what a line holds and never holds, its
bounds by count and by age, its private modes, several processes writing one log, and a log that
cannot be written never failing or holding up a move."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import stat
import time
from pathlib import Path

import pytest

from mqbridge.message import Message
from mqbridge.source import BackoutMove
from mqbridge.tracing.backout_log import BACKOUT_LOG_FILE, REASON_CHARS, BackoutLog, MovedMessage


def moved(msg_id: str, *, at: float | None = None, identity: str = "", reason: str = "bad") -> MovedMessage:
    return MovedMessage(time.time() if at is None else at, "amq:/queue/orders#1", "/queue/orders",
                        "/queue/orders.backout", msg_id, identity, reason, "orders", 3)


def written(log: BackoutLog, *records: MovedMessage) -> BackoutLog:
    for record in records:
        log.record(record)
    log.close()
    return log


def test_a_move_is_found_by_its_message_id_or_its_identity(tmp_path: Path) -> None:
    log = BackoutLog.in_state_dir(tmp_path / "state")
    message = Message("ID:1", b"secret body", "amq", "/queue/orders", message_type="orders", identity="ORDER-7",
                      headers={"card": "4111"}, delivery_count=4)
    log.record_moves([BackoutMove(message, "body is not valid JSON", None)], listener="amq:/queue/orders#1",
                     queue="/queue/orders", default_queue="/queue/orders.backout")
    log.close()
    for key in ("ID:1", "ORDER-7"):
        found = log.find(key)
        assert found is not None and (found.msg_id, found.identity, found.backout_queue, found.reason,
                                      found.delivery_count) == ("ID:1", "ORDER-7", "/queue/orders.backout",
                                                                "body is not valid JSON", 4)
    assert log.find("ID:2") is None and log.find("ID") is None  # whole ids only
    # Never the body or the headers
    text = (tmp_path / "state" / BACKOUT_LOG_FILE).read_text()
    assert "secret body" not in text and "4111" not in text and "card" not in text


def test_the_newest_move_of_a_message_is_the_answer(tmp_path: Path) -> None:
    log = written(BackoutLog.in_state_dir(tmp_path), moved("m1", at=time.time() - 10, reason="first"),
                  moved("m2"), moved("m1", reason="second"))
    found = log.find("m1")
    assert found is not None and found.reason == "second"


def test_a_reason_is_one_line_without_secrets_and_bounded(tmp_path: Path) -> None:
    log = written(BackoutLog.in_state_dir(tmp_path, secrets=["s3cr3t-pw"]),
                  moved("m1", reason="connect amqp://u:s3cr3t-pw@host failed\nsecond line " + "x" * 5000))
    found = log.find("m1")
    assert found is not None
    assert "s3cr3t-pw" not in found.reason and "u:***@host" in found.reason
    assert "\n" not in found.reason and len(found.reason) == REASON_CHARS and found.reason.endswith("...")
    assert "s3cr3t-pw" not in (tmp_path / BACKOUT_LOG_FILE).read_text()


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o000])
def test_the_files_are_private_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    old = os.umask(umask)
    try:
        log = written(BackoutLog.in_state_dir(tmp_path / "state", max_entries=2), *(moved(f"m{n}") for n in range(3)))
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700
    for path in (log.path, log.rotated, log.path.with_name("backout.log.lock")):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_at_most_twice_max_entries_are_kept_the_newest(tmp_path: Path) -> None:
    log = BackoutLog.in_state_dir(tmp_path, max_entries=5)
    for n in range(23):
        log.record(moved(f"m{n}"))
        if n % 4 == 0:
            time.sleep(0.01)  # several batches of the writer thread
    log.close()
    kept = [m.msg_id for m in log.moves()]
    assert 5 <= len(kept) <= 10 and kept == [f"m{n}" for n in range(23 - len(kept), 23)]
    assert len(log.path.read_text().splitlines()) < 5 and len(log.rotated.read_text().splitlines()) == 5


def test_moves_older_than_max_age_are_not_reported_and_the_next_write_removes_them(tmp_path: Path) -> None:
    now = time.time()
    log = written(BackoutLog.in_state_dir(tmp_path, max_age=3600),
                  moved("old", at=now - 7200), moved("recent", at=now - 60))
    assert log.find("recent") is not None and log.find("old") is None
    assert [m.msg_id for m in log.moves()] == ["recent"]
    # Lines written by an older process, before this one's first write
    log.path.write_text(log.path.read_text() + json.dumps(moved("older", at=now - 9000).to_json()) + "\n")
    again = written(BackoutLog.in_state_dir(tmp_path, max_age=3600), moved("new"))
    assert "old" not in again.path.read_text() and "older" not in again.path.read_text()
    assert [m.msg_id for m in again.moves()] == ["recent", "new"]


def test_a_line_cut_short_by_a_crash_is_skipped(tmp_path: Path) -> None:
    log = written(BackoutLog.in_state_dir(tmp_path), moved("m1"))
    with open(log.path, "a") as file:
        file.write('{"time": 1, "msg_id": "m2", "reas')  # the process died in the middle of the write
        file.write('\n[1, 2]\n"text"\n{"time": "yesterday", "msg_id": "m3"}\n')
    again = written(BackoutLog.in_state_dir(tmp_path), moved("m4"))
    assert [m.msg_id for m in again.moves()] == ["m1", "m4"]


def _write_many(path: str, prefix: str, count: int, max_entries: int) -> None:
    log = BackoutLog(Path(path), max_entries=max_entries)
    for n in range(count):
        log.record(moved(f"{prefix}-{n}"))
        if n % 10 == 0:
            time.sleep(0.001)
    log.close(30)


@pytest.mark.parametrize("max_entries", [100_000, 50])
def test_processes_sharing_a_state_dir_write_whole_lines_and_keep_the_bounds(tmp_path: Path,
                                                                             max_entries: int) -> None:
    path = str(tmp_path / BACKOUT_LOG_FILE)
    context = multiprocessing.get_context("fork")
    writers = [context.Process(target=_write_many, args=(path, f"p{k}", 300, max_entries)) for k in range(3)]
    for process in writers:
        process.start()
    for process in writers:
        process.join(60)
        assert process.exitcode == 0
    log = BackoutLog(Path(path), max_entries=max_entries)
    lines = [line for p in (log.rotated, log.path) if p.exists() for line in p.read_text().splitlines()]
    assert all(json.loads(line)["msg_id"] for line in lines)  # none torn or interleaved
    kept = [m.msg_id for m in log.moves()]
    if max_entries > 900:
        assert sorted(kept) == sorted(f"p{k}-{n}" for k in range(3) for n in range(300))
    else:
        assert max_entries <= len(kept) <= 2 * max_entries and len(set(kept)) == len(kept)
        assert kept[-1].endswith("-299")  # the newest move of all (the last writer's last) is kept, last


def test_a_log_that_cannot_be_written_never_fails_a_move(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Given a state_dir that cannot be made (a file stands where it should be)
    blocker = tmp_path / "state"
    blocker.write_text("not a directory")
    log = BackoutLog.in_state_dir(blocker / "deeper")
    # When moves are recorded: no error, no wait
    with caplog.at_level(logging.WARNING, logger="mqbridge.backout_log"):
        started = time.monotonic()
        for n in range(3):
            log.record(moved(f"m{n}"))
        assert time.monotonic() - started < 0.5
        log.close()
    # Then the lines are counted as lost and one warning names the log
    assert log.lost == 3 and log.find("m1") is None
    assert [r.getMessage() for r in caplog.records if "could not be written" in r.getMessage()][:1]
    assert "the moves themselves are committed" in caplog.text
    # And a record after close is lost the same way, quietly
    log.record(moved("late"))
    assert log.lost == 4


def test_nothing_is_written_and_no_thread_started_until_a_move(tmp_path: Path) -> None:
    log = BackoutLog.in_state_dir(tmp_path / "state")
    assert log.find("m1") is None and list(log.moves()) == []
    log.close()
    assert not (tmp_path / "state").exists()
