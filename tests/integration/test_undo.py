"""Undo on every rollback, on the real parts: `mqbridge run` (a subprocess, Spark writing every bulk) on
the shared ActiveMQ with a drop-in plugin that writes each message it processes and each
`on_submit_error` call it gets (with its `Rollback`) to a file. On each path a delivery can fail by
(a preprocessor failure, a failed write, an outage, a commit in doubt, `kill -9`), every delivery
the plugin processed is told once with its kind, or its message landed with it; a landed message
that comes back is committed as landed, untold.

- a preprocessor that raises on one message (`preprocessor`, moved on its third delivery);
- a message that makes Spark's write fail (failpoint `spark_poison_body`), isolated by triage
  (`write_failed`, moved on its third delivery) while its neighbours land, untold;
- the table path blocked by a file, then freed (`outage` on every give-back, nothing moved);
- the connection cut at a STOMP COMMIT, before the broker sees it or before its receipt comes back
  (`in_doubt`, landed): the unit that comes back is recognised by the ledger, and its messages are
  neither preprocessed nor told again;
- `kill -9` after a bulk was published and before the source commit: the units the killed process
  held are never told, and after the restart the redelivered messages that had landed are
  committed as landed, neither preprocessed nor told again (only the one message a preprocessor
  refuses is ever told).

IBM MQ's whole-unit backouts (fake queue manager): tests/unit/listeners/mq/test_undo_paths.py.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.amq import AmqClient, unique_queue
from tests.support.configs import toml_value
from tests.support.monitored import finish, start
from tests.support.plugin_bridge import write_plugin
from tests.support.processes import landed, leftovers, run_until_idle, run_until_killed, stomp_bridge
from tests.support.tcpproxy import TcpProxy
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

RECORD = '''
import threading

from mqbridge import PreprocessorOptions, Rollback, hookimpl

LOCK = threading.Lock()


class Options(PreprocessorOptions):
    log: str
    fail: str = ""  # a body starting with this makes process raise


class Record:
    def __init__(self, options):
        self.log, self.fail = options.log, options.fail.encode()

    def write(self, line):
        with LOCK, open(self.log, "a") as f:
            f.write(line + "\\n")

    def process(self, message):
        self.write(f"process {message.body.decode()} {message.delivery_count}")
        if self.fail and message.body.startswith(self.fail):
            raise ValueError("refused by the recording plugin")
        return message

    def on_submit_error(self, message, reason: Rollback):
        self.write(f"undo {message.body.decode()} {message.delivery_count} {reason.kind.value} "
                   f"{int(reason.landed)} {int(reason.moved)} {type(reason.error).__name__}")


@hookimpl
def mqbridge_register_preprocessors(registry):
    registry.add("record", Record, options=Options)
'''


@dataclass(frozen=True)
class Undo:
    body: bytes
    delivery: int
    kind: str
    landed: bool
    moved: bool
    error: str


@dataclass
class Record:
    """What the recording plugin wrote: each delivery it processed, each undo call."""

    processed: list[tuple[bytes, int]]
    undone: list[Undo]

    @classmethod
    def read(cls, path: Path, start: int = 0) -> Record:
        processed, undone = [], []
        lines = path.read_text().splitlines()[start:] if path.exists() else []
        for line in lines:
            what, body, delivery, *rest = line.split(" ")
            if what == "process":
                processed.append((body.encode(), int(delivery)))
            else:
                kind, landed_, moved, error = rest
                undone.append(Undo(body.encode(), int(delivery), kind, landed_ == "1", moved == "1", error))
        return cls(processed, undone)

    def of(self, body: bytes) -> list[Undo]:
        return [u for u in self.undone if u.body == body]

    def processed_count(self) -> Counter[bytes]:
        return Counter(b for b, _ in self.processed)


def bodies(n: int, tag: str) -> list[bytes]:
    return [f"{tag}-{i:05d}.".encode() for i in range(n)]


def with_plugin(tmp_path: Path, queue: str, *, fail: str = "", spark: dict[str, str] | None = None,
                **options: Any) -> tuple[Path, Path]:
    """A `mqbridge run` on `queue` (`stomp_bridge(queue, **options)`) whose listener runs the
    recording plugin (refusing bodies that start with `fail`), with Spark writing every bulk (and
    these `spark` keys), written to `<tmp_path>/bridge.toml`; its path and the plugin's log."""
    write_plugin(tmp_path, "record", RECORD)
    log = tmp_path / "record.log"
    record = {"name": "record", "log": log, **({"fail": fail} if fail else {})}
    toml = (stomp_bridge(queue, extra_listener=f"preprocessors = {toml_value([record])}", **options)
            .set("bridge", plugin_dirs=["plugins"]).set("spark", writer="spark", **(spark or {})))
    return toml.write(tmp_path / "bridge.toml"), log


def assert_every_delivery_told_once_or_landed(record: Record, rows: Counter[bytes]) -> None:
    """Each delivery the plugin processed was told once (and never twice), or its message landed
    with it: per message, processed = told + landed."""
    deliveries = [(u.body, u.delivery) for u in record.undone]
    assert len(deliveries) == len(set(deliveries)), "a delivery was told twice"
    told = Counter(u.body for u in record.undone)
    assert record.processed_count() == told + rows, "a delivery neither told nor landed"


def test_a_preprocessor_failure_is_told_on_each_delivery_and_moved_on_the_last(tmp_path: Path, spark: Any,
                                                                              amq: AmqClient) -> None:
    # Given 60 messages, one of which the recording plugin refuses, in units of 20
    q = unique_queue("undo-pre")
    sent = bodies(60, "pp")
    amq.put_many(q, sent[:30] + [b"bad-1."] + sent[30:])
    config, log = with_plugin(tmp_path, q, fail="bad-", threads=1, batch=20)
    # When the bridge runs until idle
    run_until_idle(config)
    # Then the refused message was told "preprocessor" on each of its 3 deliveries, moved on the third
    record = Record.read(log)
    assert [(u.delivery, u.kind, u.moved, u.landed, u.error) for u in record.of(b"bad-1.")] == [
        (1, "preprocessor", False, False, "PreprocessorError"), (2, "preprocessor", False, False, "PreprocessorError"),
        (3, "preprocessor", True, False, "PreprocessorError")]
    # And it is on the backout queue; every other message landed once, untold
    rows = landed(spark, tmp_path / "landing" / "orders")
    assert rows == Counter(sent)
    assert [m.body for m in amq.drain(q + ".backout")] == [b"bad-1."]
    assert {u.body for u in record.undone} == {b"bad-1."}
    assert_every_delivery_told_once_or_landed(record, rows)
    assert amq.depth(q) == 0


def test_a_write_failure_is_told_on_each_delivery_while_its_neighbours_land_untold(tmp_path: Path, spark: Any,
                                                                                  amq: AmqClient) -> None:
    # Given 40 messages in one unit, one of which makes Spark's write fail (probe writes succeed)
    q = unique_queue("undo-write")
    sent = bodies(40, "wf")
    poison = sent[17]
    amq.put_many(q, sent)
    config, log = with_plugin(tmp_path, q, threads=1, batch=40)
    # When the bridge runs until idle
    run_until_idle(config, env_extra={"MQBRIDGE_FAILPOINT": f"spark_poison_body:{poison.decode()}"})
    # Then it was told "write_failed" on each of its 3 deliveries (isolated by triage), moved on the third
    record = Record.read(log)
    assert [(u.delivery, u.kind, u.moved, u.landed, u.error) for u in record.of(poison)] == [
        (1, "write_failed", False, False, "WriteFailedError"), (2, "write_failed", False, False, "WriteFailedError"),
        (3, "write_failed", True, False, "WriteFailedError")]
    # And only it: its neighbours landed once each (in the bisection's halves), untold
    rows = landed(spark, tmp_path / "landing" / "orders")
    assert rows == Counter(b for b in sent if b != poison)
    moved = amq.drain(q + ".backout")
    assert [m.body for m in moved] == [poison]
    assert "failed on its own while the sink takes writes" in moved[0].headers["mqbridge-reason"]
    assert {u.body for u in record.undone} == {poison}
    assert_every_delivery_told_once_or_landed(record, rows)


def test_an_outage_is_told_on_every_give_back_and_moves_nothing(tmp_path: Path, spark: Any, amq: AmqClient) -> None:
    # Given 300 messages and a file where the table directory goes
    q = unique_queue("undo-outage")
    sent = bodies(300, "ou")
    amq.put_many(q, sent)
    config, log = with_plugin(tmp_path, q, batch=100, spark={"probe_interval_max": "2s"})
    (tmp_path / "landing").mkdir()
    blocker = tmp_path / "landing" / "orders"
    blocker.write_text("not a directory")
    run = start(config)
    try:
        # When the bridge gives units back for a while (each delivery of them told "outage")
        wait_until(lambda: len({u.body for u in Record.read(log).undone}) >= 100, 240,
                   "100 messages given back in the outage")
        time.sleep(5)
        # Then the path is fixed, and the bridge runs until idle
        blocker.unlink()
        out = finish(run)
    finally:
        if run.wait(0) is None:
            run.terminate()
    assert "probe write succeeded; available again" in out
    record = Record.read(log)
    assert {(u.kind, u.landed, u.moved, u.error) for u in record.undone} == {(
        "outage", False, False, "SinkOutageError")}
    rows = landed(spark, tmp_path / "landing" / "orders")
    assert rows == Counter(sent)
    assert_every_delivery_told_once_or_landed(record, rows)
    assert amq.depth(q) == 0 and amq.depth(q + ".backout") == 0
    assert leftovers(tmp_path / "landing" / "orders") == []


@pytest.mark.parametrize("forward", [False, True], ids=["commit-never-reaches-broker", "receipt-never-comes-back"])
def test_a_commit_in_doubt_is_told_and_its_recognised_redelivery_is_not(
        tmp_path: Path, spark: Any, amq: AmqClient, activemq: tuple[str, int], forward: bool) -> None:
    # Given a bridge whose connection is cut at its third STOMP COMMIT (its bulk published)
    q = unique_queue("undo-doubt")
    sent = bodies(1000, "id")
    amq.put_many(q, sent)
    proxy = TcpProxy(activemq)
    try:
        proxy.cut_at(b"COMMIT\n", skip=2, forward=forward)
        config, log = with_plugin(tmp_path, q, port=proxy.port, threads=1, batch=100)
        # When it runs until idle (it reconnects by itself)
        out = run_until_idle(config)
    finally:
        proxy.close()
    assert proxy.trapped.is_set()
    # Then the unit in doubt was told so, as landed, once per message
    record = Record.read(log)
    doubt = [u for u in record.undone if u.kind == "in_doubt"]
    assert doubt and all(u.landed and u.error == "InDoubtError" for u in doubt), record.undone
    # (the cut also ends the listener's other connection: a unit in flight there goes back too)
    assert {u.kind for u in record.undone} <= {"in_doubt", "unit_backout"}
    # And a message told as landed is never preprocessed again (recognised, if it came back at all);
    # one told as not landed is preprocessed again and lands once
    rows = landed(spark, tmp_path / "landing" / "orders")
    assert rows == Counter(sent)
    not_landed = Counter(u.body for u in record.undone if not u.landed)
    assert record.processed_count() == not_landed + rows
    if not forward:  # the broker gave the unit back, and the ledger knew it had landed
        assert "already landed; committed without landing them again" in out
    assert amq.depth(q) == 0 and amq.depth(q + ".backout") == 0


def test_after_a_kill_the_landed_redeliveries_are_committed_untold(tmp_path: Path, spark: Any,
                                                                   amq: AmqClient) -> None:
    # Given 2,000 messages, one of which the recording plugin refuses, and a bridge killed after its
    # first bulk was published and before its source commit
    q = unique_queue("undo-kill")
    sent = bodies(2000, "kl")
    amq.put_many(q, sent[:500] + [b"bad-1."] + sent[500:])
    config, log = with_plugin(tmp_path, q, fail="bad-")
    table = tmp_path / "landing" / "orders"
    run_until_killed(config, "before_source_commit")
    before = Record.read(log)
    landed_before_restart = landed(spark, table)
    assert landed_before_restart, "the killed bridge published nothing"
    # When it is started again and runs until idle
    out = run_until_idle(config)
    after = Record.read(log, start=len(before.processed) + len(before.undone))
    # Then the messages that had landed came back and were committed as landed: neither
    # preprocessed nor told again
    assert "already landed; committed without landing them again" in out, out
    assert not set(landed_before_restart) & {b for b, _ in after.processed}
    # And nothing but the refused message was ever told, in either run, until it was moved
    undone = before.undone + after.undone
    assert {(u.body, u.kind) for u in undone} == {(b"bad-1.", "preprocessor")} and after.undone
    assert [u.moved for u in undone] == [False] * (len(undone) - 1) + [True]
    # And every other message landed exactly once
    rows = landed(spark, table)
    assert rows == Counter(sent)
    assert [m.body for m in amq.drain(q + ".backout")] == [b"bad-1."]
    assert amq.depth(q) == 0 and leftovers(table) == []
