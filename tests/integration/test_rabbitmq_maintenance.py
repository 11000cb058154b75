"""The maintenance commands on RabbitMQ lose nothing when the queue they send to is full (the shared
RabbitMQ; a queue given `max-length` and `overflow = reject-publish` by a policy).

First what RabbitMQ does, with a bare stomp.py client: even the first SEND of a connection, asking
a receipt, that a full queue refuses gets no receipt and the connection is closed without an ERROR
frame (what `listeners/stomp/publish.py` relies on: a SEND is taken only once its receipt came).

Then `mqbridge redrive` (processes) of eight messages from a backout queue into a source queue that
holds three: each run moves what the queue takes, confirmed, stops at the first copy it refuses with
the reason (exit 1), and leaves the rest on the backout queue; after the queue is drained a run moves
the next ones. Every message ends on the source queue exactly once, with its identity; a `user-id`
set aside by the move comes back as `user-id` only if it is the login's.

And a replay (the runner and the STOMP target in this process, no Spark: the rows are given) of ten
rows in batches of three to a queue that holds seven: the run stops at the first refused row with the
reason, the replay ledger records as sent exactly the rows that arrived (one batch partly), and,
once the queue is drained, the same replay resumed sends exactly the other rows, in order.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from mqbridge.config import StompSourceConfig, load_config
from mqbridge.errors import PartlySentError
from mqbridge.resend.replay import ReplayLedger, ReplayRow, replay, replay_target
from tests.support.exactly_once import RABBIT_SOURCE, Rabbit
from tests.support.processes import mqbridge, stomp_config
from tests.support.rabbit_plain import (
    TEST_ID,
    Accounting,
    BareStomp,
    bodies_of,
    body_of,
    delete_queues,
    drain,
    id_of_body,
    numbered_ids,
    queue_policy,
    unique_name,
)

pytestmark = pytest.mark.integration


def _full_at(length: int) -> dict[str, object]:
    return {"max-length": length, "overflow": "reject-publish"}


def test_the_first_receipted_send_of_a_connection_to_a_full_queue_gets_no_receipt_and_no_error(
        rabbitmq: tuple[str, int]) -> None:
    """A connection that never asked a receipt before: its first SEND asking one, refused by
    `reject-publish`, is not receipted either; the connection closes without an ERROR frame."""
    full = unique_name("maint-full")
    with queue_policy(full, _full_at(1)):
        filler = BareStomp(rabbitmq)
        assert filler.send(f"/queue/{full}", b"taken")
        filler.close()
        # When a fresh connection's first SEND, asking a receipt, goes to the full queue
        client = BareStomp(rabbitmq)
        refused = client.send(f"/queue/{full}", b"refused")
        # Then no receipt, the connection closed, no ERROR; the queue holds the first message only
        assert refused is False and client.closed and client.errors == []
        client.close()
        assert bodies_of(drain(rabbitmq, f"/queue/{full}")) == [b"taken"]


def _redrive(config: Path, queue: str) -> tuple[int, str]:
    proc = mqbridge("redrive", "--config", str(config), "--listener", queue, "--batch", "5")
    out, _ = proc.communicate(timeout=120)
    return proc.returncode, out


def test_redrive_to_a_full_source_queue_stops_at_the_refused_copy_and_loses_nothing(
        tmp_path: Path, rabbitmq: tuple[str, int]) -> None:
    # Given eight messages the bridge moved to the backout queue of a source queue that holds three
    name = unique_name("maint-redrive")
    queue, backout = f"/queue/{name}", f"/queue/{name}.backout"
    ids = numbered_ids(8, "rd")
    rabbit = Rabbit(rabbitmq)
    config = stomp_config(tmp_path, queue, port=rabbitmq[1], broker="rabbitmq", extra_source=RABBIT_SOURCE,
                          threads=1, batch=50)
    with queue_policy(name, _full_at(3)):
        moved = []
        for i, test_id in enumerate(ids):
            headers = {TEST_ID: test_id, "mqbridge-original-message-id": f"orig-{test_id}",
                       "mqbridge-reason": "poison", "mqbridge-original-timestamp": "1700000000000"}
            if i < 2:  # the move set the producer's user-id aside: another user's, then the login's own
                headers["mqbridge-original-user-id"] = "someone-else" if i == 0 else "guest"
            moved.append((body_of(test_id), headers))
        rabbit.put(backout, moved)

        # When the re-drive runs, the source queue is drained, and it runs again, until it is done
        arrived, runs = [], []
        for _ in range(4):
            code, out = _redrive(config, queue)
            frames = drain(rabbitmq, queue)
            runs.append((code, out, len(frames), rabbit.depth(backout)))
            arrived += frames
            if code == 0:
                break

        # Then each run that found the queue full stopped with the reason, having moved three
        for code, out, taken, _left in runs[:2]:
            assert code == 1, out
            assert "re-drive stopped" in out and "reject-publish" in out and "3 messages were moved" in out, out
            assert taken == 3, out
        assert [left for *_, left in runs[:2]] == [5, 2]
        assert runs[2][0] == 0 and "re-drive: 2 moved" in runs[2][1] and runs[2][2:] == (2, 0), runs[2]
        assert len(runs) == 3
    delete_queues(f"{name}.backout")
    # ... and every message arrived once, in order, byte-exact, with its identity
    accounting = Accounting(ids, [f.headers[TEST_ID] for f in arrived])
    assert not (accounting.lost or accounting.duplicated or accounting.unexpected), accounting
    assert [f.headers[TEST_ID] for f in arrived] == ids
    assert all(bytes(f.body) == body_of(f.headers[TEST_ID]) for f in arrived)
    assert all(f.headers["mqbridge-requeue-id"] == f"orig-{f.headers[TEST_ID]}" for f in arrived)
    first, second = arrived[0].headers, arrived[1].headers
    assert first["mqbridge-original-user-id"] == "someone-else" and "user-id" not in first
    assert second["user-id"] == "guest" and "mqbridge-original-user-id" not in second


def test_replay_to_a_full_queue_records_as_sent_only_what_arrived_and_resumes_with_the_rest(
        tmp_path: Path, rabbitmq: tuple[str, int]) -> None:
    # Given ten rows to replay, in batches of three, to a queue that holds seven
    name = unique_name("maint-replay")
    destination = f"/queue/{name}"
    ids = numbered_ids(10, "rp")
    rows = [ReplayRow(key=f"key-{test_id}", msg_id=f"landed-{test_id}", body=body_of(test_id), correlation_id=None,
                      put_timestamp=datetime(2026, 1, 1, tzinfo=timezone.utc), headers={TEST_ID: test_id})
            for test_id in ids]
    config = stomp_config(tmp_path, destination, port=rabbitmq[1], broker="rabbitmq", extra_source=RABBIT_SOURCE)
    source = load_config(str(config)).sources["amq"]
    assert isinstance(source, StompSourceConfig)
    ledger = ReplayLedger(tmp_path / "state" / "replay.sqlite3")
    replay_id = f"maint-{name[-10:]}"
    said: list[str] = []

    def run() -> None:
        target = replay_target("stomp", "amq", source, destination, replay_id, in_doubt_wait=2.0)
        try:
            replay(iter(rows), target, ledger, replay_id, batch=3, say=said.append)
        finally:
            target.close()

    with queue_policy(name, _full_at(7)):
        # When the replay runs
        with pytest.raises(PartlySentError) as stopped:
            run()
        # Then it stops at the eighth row with the reason: the third batch's second row is refused
        assert "did not take row key-rp-00007" in str(stopped.value), said
        assert "reject-publish" in str(stopped.value) and "1 of the batch's 3 rows arrived" in str(stopped.value)
        # ... and the ledger says sent exactly the seven rows on the queue (one batch partly), none in doubt
        first = drain(rabbitmq, destination)
        assert ledger.sent(replay_id) == (3, 7) and ledger.in_doubt(replay_id) == []
        assert ledger.keys(replay_id) == {f"key-{f.headers[TEST_ID]}" for f in first}

        # When the queue has been drained (above) and the same replay runs again
        run()
        rest = drain(rabbitmq, destination)
    ledger.close()
    delete_queues(f"mqbridge.replay.{replay_id}")

    # Then every row arrived once, in order, byte-exact; the ledger says all ten were sent
    arrived = first + rest
    assert [f.headers[TEST_ID] for f in arrived] == ids
    assert [id_of_body(bytes(f.body)) for f in arrived] == ids
    assert all(bytes(f.body) == body_of(f.headers[TEST_ID]) for f in arrived)
    assert ledger_rows(tmp_path, replay_id) == 10


def ledger_rows(tmp_path: Path, replay_id: str) -> int:
    ledger = ReplayLedger(tmp_path / "state" / "replay.sqlite3")
    try:
        return ledger.sent(replay_id)[1]
    finally:
        ledger.close()
