"""`mqbridge run` on RabbitMQ as an operator runs it, with the defaults (no `identity`, `ack_mode` or
`commit_mode` set): it loses no message whatever the queue does (a full queue refusing publications,
drop-head with dead-lettering, a producer's `user-id`, quorum queues) and wherever it is killed or
cut off; where it can land a message twice (a crash between landing and the source commit) it counts
it in `mqbridge_possible_duplicates_total`. Each message carries its own test id, and each case
accounts for every one: lost 0, unexpected 0, duplicated 0 where nothing crashed, else at most the
counter.

The facts these defaults rest on are checked without the bridge in test_rabbitmq_facts.py.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.bridge import read_table
from tests.support.configs import BridgeToml
from tests.support.exactly_once import RABBIT_SOURCE, OutputReader, Rabbit, free_port
from tests.support.metrics_watch import MetricsWatch
from tests.support.monitored import finish, start
from tests.support.processes import leftovers, run_until_killed, stomp_bridge
from tests.support.rabbit_plain import (
    TEST_ID,
    Accounting,
    BareStomp,
    ControlConsumer,
    LosslessProducer,
    StompTap,
    body_of,
    declare,
    delete_queues,
    drain,
    id_of_body,
    numbered_ids,
    queue_policy,
    rabbitmqctl,
    unique_name,
)
from tests.support.tcpproxy import TcpProxy
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

#: The landing protocol's kill points (mqbridge.failpoints), in order.
KILL_POINTS = ("after_stage", "after_prepare", "after_publish", "before_source_commit", "after_source_commit")
#: Killed before the bulk is prepared in the ledger: nothing can land twice. From `after_prepare` on the
#: bulk lands (start-up recovery rolls a prepared bulk forward) and RabbitMQ redelivers its messages
#: under new message-ids: the at-least-once window of docs/guarantees.md, prepared to source commit.
BEFORE_PREPARED = ("after_stage",)
#: What the bridge counts of the messages it may land twice.
COUNTER = "mqbridge_possible_duplicates_total"


# -- the bridge as an operator configures it ---------------------------------------------------
def defaults(queue: str, port: int, *, threads: int = 1, batch: int = 100) -> BridgeToml:
    """A `mqbridge run` (pyarrow writing type `orders`) on `queue` of RabbitMQ at `port` with the
    RabbitMQ defaults: no identity, ack_mode, commit_mode or heartbeat set (`stomp_bridge` sets
    ack_mode and heartbeat: removed); backout queue `<queue>.backout`."""
    return (stomp_bridge(queue, port=port, broker="rabbitmq", extra_source=RABBIT_SOURCE, threads=threads,
                         batch=batch)
            .set("sources.amq", ack_mode=None, heartbeat=None))


@dataclass
class CountedRun:
    """A `mqbridge run --until-idle` in the background with its `mqbridge_possible_duplicates_total`
    read from /metrics while it runs (the process exits at the end: its counters with it)."""

    reader: OutputReader
    watch: MetricsWatch

    def finish(self, timeout: float = 240) -> tuple[str, int]:
        """Its output and the counter's final value, once it ended with status 0 within `timeout` s."""
        try:
            out = finish(self.reader, timeout)
        finally:
            self.watch.close()
        return out, int(self.watch.stop())


def start_counted(toml: BridgeToml, path: Path, idle: str = "3s") -> CountedRun:
    """`toml` with its monitoring endpoint on a free port, written to `path`, run until idle."""
    port = free_port()
    config = toml.set("monitoring", listen=f"127.0.0.1:{port}").write(path)
    return CountedRun(start(config, idle=idle), MetricsWatch(f"http://127.0.0.1:{port}", COUNTER))


def assert_at_most_counted(accounting: Accounting, counted: int) -> None:
    """Every duplicate row is one the bridge counted as possible."""
    assert accounting.extra_rows <= counted, f"{accounting}; counted {counted}"


def threads_created(output: str) -> int:
    """Listener threads the run created (its final summary line): more than the configured number
    means the supervisor restarted one."""
    found = re.findall(r"threads \d+/\d+ created=(\d+)", output)
    assert found, f"no summary line in the bridge's output:\n{output[-3000:]}"
    return int(found[-1])


def landed_ids(spark: Any, table: Path, column: str | None = None) -> list[str]:
    """The test id of every row of `table` (from `column`, or the start of the body), repeats kept."""
    rows = read_table(spark, table)
    return [getattr(r, column) if column else id_of_body(bytes(r.body)) for r in rows]


def put_numbered(rabbitmq: tuple[str, int], destination: str, ids: list[str]) -> None:
    Rabbit(rabbitmq).put(destination, [(body_of(i), {TEST_ID: i}) for i in ids])


@contextmanager
def classic_or_quorum(rabbitmq: tuple[str, int], kind: str, what: str) -> Iterator[str]:
    """A new queue of `kind` ("classic", "quorum") and its backout queue `<queue>.backout`,
    declared; the destination the bridge reads. Both deleted at the end."""
    name = unique_name(what)
    if kind == "quorum":  # /queue/NAME would declare it again as a classic queue: refused
        declare(rabbitmq, name, {"x-queue-type": "quorum"})
        declare(rabbitmq, name + ".backout", {"x-queue-type": "quorum"})
        destination = f"/amq/queue/{name}"
    else:
        declare(rabbitmq, name)
        declare(rabbitmq, name + ".backout")
        destination = f"/queue/{name}"
    try:
        yield destination
    finally:
        delete_queues(name, name + ".backout")


def report(case: str, accounting: Accounting, **numbers: object) -> None:
    """One line of the case's numbers (shown with pytest -s, and in the log of a failure)."""
    extra = " ".join(f"{k}={v}" for k, v in numbers.items())
    print(f"\n[{case}] lost={len(accounting.lost)} duplicated={accounting.extra_rows} "
          f"unexpected={len(accounting.unexpected)} {extra}")


# -- a full queue, drop-head ---------------------------------------------------------------------
def test_a_full_queue_refusing_publications_loses_nothing_while_a_lossless_producer_sends_3000(
        tmp_path: Path, spark: Any, rabbitmq: tuple[str, int]) -> None:
    """max-length 200 with reject-publish: the producer is refused whenever the queue is full
    (it sends again what was not receipted); the bridge, draining meanwhile, lands all 3,000 once
    and never SENDs to its source queue (a give-back is a NACK on RabbitMQ)."""
    name = unique_name("lossless-reject")
    queue = f"/queue/{name}"
    sent = numbered_ids(3000, "rj")
    tap = StompTap(rabbitmq)
    try:
        with queue_policy(name, {"max-length": 200, "overflow": "reject-publish"}):
            declare(rabbitmq, name + ".backout")
            # Given a producer that has filled the queue and is being refused
            producer = LosslessProducer(rabbitmq, queue, sent).start()
            wait_until(lambda: producer.refused > 0 or producer.error is not None, 60,
                       "the producer to be refused by the full queue")
            # When the bridge drains the queue while the producer goes on
            run = start_counted(defaults(queue, tap.port), tmp_path / "bridge.toml", idle="5s")
            producer.join()
            out, counted = run.finish()
            # Then every message landed once; nothing is left; the bridge never sent to its queue
            accounting = Accounting(sent, landed_ids(spark, tmp_path / "landing" / "orders"))
            report("reject-publish", accounting, producer_refused=producer.refused, counted=counted,
                   sends=tap.destinations_sent_to())
            assert (accounting.lost, accounting.duplicated, accounting.unexpected) == ([], {}, []), \
                f"{accounting}\n{out[-3000:]}"
            assert producer.refused > 0
            assert tap.sends_to(queue) == 0, tap.destinations_sent_to()
            assert Rabbit(rabbitmq).depth(queue) == 0 and Rabbit(rabbitmq).depth(queue + ".backout") == 0
    finally:
        tap.close()
        delete_queues(name + ".backout")


def _drop_head_run(rabbitmq: tuple[str, int], tag: str,
                   consume: Callable[[str, LosslessProducer], list[str]]) -> tuple[list[str], list[str], list[str]]:
    """3,000 messages for a new queue of max-length 200 with drop-head, whose dropped heads are
    dead-lettered to `<queue>.dead`: `consume(destination, producer)` drains the queue while it runs
    the producer (each message receipted), and returns the test ids it took once it has consumed
    everything. Returns (sent, consumed, dead-lettered)."""
    name = unique_name(f"lossless-drophead-{tag}")
    dead = name + ".dead"
    sent = numbered_ids(3000, tag)
    declare(rabbitmq, dead)
    try:
        with queue_policy(name, {"max-length": 200, "overflow": "drop-head", "dead-letter-exchange": "",
                                 "dead-letter-routing-key": dead}):
            declare(rabbitmq, name)
            declare(rabbitmq, name + ".backout")
            consumed = consume(f"/queue/{name}", LosslessProducer(rabbitmq, f"/queue/{name}", sent))
            dead_lettered = [f.headers[TEST_ID] for f in drain(rabbitmq, f"/queue/{dead}")]
            assert Rabbit(rabbitmq).depth(f"/queue/{name}") == 0
        return sent, consumed, dead_lettered
    finally:
        delete_queues(dead, name + ".backout")


def test_a_drop_head_queue_dead_letters_what_the_producer_sent_once_and_nothing_the_bridge_sent(
        tmp_path: Path, spark: Any, rabbitmq: tuple[str, int]) -> None:
    """max-length 200 with drop-head and a dead-letter queue, 3,000 messages from a producer while
    a consumer drains: each message is either landed or dead-lettered, exactly once; the bridge
    never SENDs to its source queue, so it adds nothing there to push heads out. A plain stomp.py
    consumer acking each message is run in the same setting for comparison: it dead-letters fewer
    (measured 0 against the bridge's 103-288 of 3,000: the bridge holds batch x in_flight messages
    unacknowledged and lands them in bulks, so the ready part of the queue passes 200 sooner). Both
    counts are printed; how many heads are dropped depends on the processes' speed, so no ratio is
    asserted."""
    def control(destination: str, producer: LosslessProducer) -> list[str]:
        consumer = ControlConsumer(rabbitmq, destination)
        producer.run()
        return consumer.stop_when_quiet()

    tap = StompTap(rabbitmq)
    counts: list[int] = []

    def bridge(destination: str, producer: LosslessProducer) -> list[str]:
        run = start_counted(defaults(destination, tap.port), tmp_path / "bridge.toml", idle="5s")
        run.reader.wait_subscribed(1)
        producer.run()
        counts.append(run.finish()[1])
        assert tap.sends_to(destination) == 0, tap.destinations_sent_to()
        return landed_ids(spark, tmp_path / "landing" / "orders")

    try:
        sent, control_took, control_dead = _drop_head_run(rabbitmq, "ctl", control)
        bridge_sent, landed, bridge_dead = _drop_head_run(rabbitmq, "brg", bridge)
    finally:
        tap.close()
    control_accounting = Accounting(sent, control_took + control_dead)
    accounting = Accounting(bridge_sent, landed + bridge_dead)
    report("drop-head", accounting, control_dead_lettered=len(control_dead), bridge_dead_lettered=len(bridge_dead),
           counted=counts[0])
    assert (control_accounting.lost, control_accounting.duplicated) == ([], {}), str(control_accounting)
    # Then each message is landed or dead-lettered, exactly once: none lost, none twice
    assert (accounting.lost, accounting.duplicated, accounting.unexpected) == ([], {}, []), str(accounting)


# -- a producer's user-id on a poison message ----------------------------------------------------
@contextmanager
def another_user() -> Iterator[tuple[str, str]]:
    """A user of the shared broker, not the bridge's (guest), allowed everything on vhost "/";
    (name, password); deleted at the end."""
    user, password = f"test-producer-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    rabbitmqctl("add_user", user, password)
    try:
        rabbitmqctl("set_permissions", "-p", "/", user, ".*", ".*", ".*")
        yield user, password
    finally:
        rabbitmqctl("delete_user", user)


def test_a_poison_message_carrying_another_users_user_id_is_moved_with_its_reason_and_the_99_others_land_once(
        tmp_path: Path, spark: Any, rabbitmq: tuple[str, int]) -> None:
    """One message among 100 that another user produced (RabbitMQ keeps its `user-id` header, and
    refuses that header on a SEND by the bridge's user) and whose body is not JSON for the type's
    schema: the bridge moves it to the backout queue with the reason and the user-id under
    `mqbridge-original-user-id`; the 99 others land once; no listener restarts, nothing loops."""
    name = unique_name("lossless-userid")
    queue = f"/queue/{name}"
    good = numbered_ids(99, "ui")
    declare(rabbitmq, name)
    declare(rabbitmq, name + ".backout")
    try:
        with another_user() as (user, password):
            # Given 50 good messages, the poison one from the other user (its user-id set), 49 good
            guest = BareStomp(rabbitmq)
            for n, test_id in enumerate(good[:50]):
                assert guest.send(queue, json.dumps({"tid": test_id, "n": n}).encode(), {TEST_ID: test_id})
            other = BareStomp(rabbitmq, login=(user, password))
            assert other.send(queue, b"not JSON at all", {TEST_ID: "poison", "user-id": user}), other.errors
            other.close()
            for n, test_id in enumerate(good[50:], 50):
                assert guest.send(queue, json.dumps({"tid": test_id, "n": n}).encode(), {TEST_ID: test_id})
            guest.close()
            config = defaults(queue, rabbitmq[1]).set("types.orders", format="json", schema="tid STRING, n INT")
            # When the bridge runs until idle
            out, counted = start_counted(config, tmp_path / "bridge.toml").finish(timeout=200)
        # Then the poison message is on the backout queue, with the reason and its producer's user-id
        moved = drain(rabbitmq, queue + ".backout")
        assert [f.headers[TEST_ID] for f in moved] == ["poison"], out[-3000:]
        headers = moved[0].headers
        assert headers["mqbridge-reason"].startswith("body is not valid JSON for schema"), headers
        assert headers["mqbridge-original-user-id"] == user, headers
        assert headers.get("user-id") in (None, "guest"), headers
        # and the 99 others landed once each; one listener thread, never restarted
        accounting = Accounting(good, landed_ids(spark, tmp_path / "landing" / "orders", column="tid"))
        report("user-id poison", accounting, moved=len(moved), counted=counted,
               threads_created=threads_created(out))
        assert (accounting.lost, accounting.duplicated, accounting.unexpected) == ([], {}, []), str(accounting)
        assert threads_created(out) == 1, out[-3000:]
        assert Rabbit(rabbitmq).depth(queue) == 0
    finally:
        delete_queues(name, name + ".backout")


# -- kill -9 ---------------------------------------------------------------------------------------
def test_a_quorum_queue_killed_three_times_while_a_bulk_is_staged_moves_nothing_and_loses_nothing(
        tmp_path: Path, spark: Any, rabbitmq: tuple[str, int]) -> None:
    """A quorum queue counts every disconnect in `x-delivery-count`; killed three times (kill -9 at
    `after_stage`) the bridge must not take that for failed deliveries: then run to the end, it
    moves none of the 300 messages to the backout queue and lands them all, duplicates at most the
    counted ones."""
    with classic_or_quorum(rabbitmq, "quorum", "lossless-quorum3") as queue:
        sent = numbered_ids(300, "q3")
        put_numbered(rabbitmq, queue, sent)
        config = tmp_path / "bridge.toml"
        toml = defaults(queue, rabbitmq[1])
        for _ in range(3):  # (a killed run lands nothing: it dies when its first bulk is staged)
            run_until_killed(toml.write(config), "after_stage")
        out, counted = start_counted(toml, config).finish()
        accounting = Accounting(sent, landed_ids(spark, tmp_path / "landing" / "orders"))
        moved = drain(rabbitmq, queue + ".backout", quiet=0.5)
        report("quorum x3 after_stage", accounting, moved=len(moved), counted=counted)
        assert [f.headers.get(TEST_ID) for f in moved] == [], out[-3000:]
        assert (accounting.lost, accounting.unexpected) == ([], []), str(accounting)
        assert_at_most_counted(accounting, counted)
        assert Rabbit(rabbitmq).depth(queue) == 0


@pytest.mark.parametrize("failpoint", KILL_POINTS)
@pytest.mark.parametrize("kind", ["classic", "quorum"])
def test_killed_at_a_step_of_the_landing_protocol_it_loses_nothing_and_counts_what_it_lands_twice(
        tmp_path: Path, spark: Any, rabbitmq: tuple[str, int], kind: str, failpoint: str) -> None:
    """kill -9 at each step of the landing protocol, then a run to the end: no message lost or
    unexpected; duplicates at most `mqbridge_possible_duplicates_total`, and none when it died
    before its bulk was prepared in the ledger (from then on recovery publishes the bulk, and
    RabbitMQ delivers its messages again under new ids)."""
    with classic_or_quorum(rabbitmq, kind, f"lossless-{failpoint}") as queue:
        sent = numbered_ids(400, failpoint[:8])
        put_numbered(rabbitmq, queue, sent)
        config, toml = tmp_path / "bridge.toml", defaults(queue, rabbitmq[1])
        run_until_killed(toml.write(config), failpoint)
        out, counted = start_counted(toml, config).finish()
        table = tmp_path / "landing" / "orders"
        accounting = Accounting(sent, landed_ids(spark, table))
        moved = drain(rabbitmq, queue + ".backout", quiet=0.5)
        report(f"{kind} {failpoint}", accounting, counted=counted, moved=len(moved))
        assert (accounting.lost, accounting.unexpected) == ([], []), f"{accounting}\n{out[-3000:]}"
        assert_at_most_counted(accounting, counted)
        if failpoint in BEFORE_PREPARED:
            assert accounting.duplicated == {}, f"{accounting}\n{out[-3000:]}"
        assert moved == []
        assert Rabbit(rabbitmq).depth(queue) == 0
        assert leftovers(table) == []


# -- a connection cut at the commit ----------------------------------------------------------------
@pytest.mark.parametrize("forward", [False, True], ids=["acks-never-reach-the-broker", "receipt-never-comes-back"])
def test_a_connection_cut_at_the_commit_loses_nothing(
        tmp_path: Path, spark: Any, rabbitmq: tuple[str, int], forward: bool) -> None:
    """The connection cut by a TCP proxy at the third unit's commit (its ACKs with the receipt):
    either before the broker sees them, or after (the receipt never comes back). The bridge
    reconnects by itself; no message is lost; what it lands twice is counted."""
    with classic_or_quorum(rabbitmq, "classic", "lossless-cut") as queue:
        sent = numbered_ids(1000, "cut")
        put_numbered(rabbitmq, queue, sent)
        proxy = TcpProxy(rabbitmq)
        try:
            proxy.cut_at(b"receipt:ack-", skip=2, forward=forward)
            out, counted = start_counted(defaults(queue, proxy.port), tmp_path / "bridge.toml").finish()
        finally:
            proxy.close()
        assert proxy.trapped.is_set(), "the commit was never cut"
        accounting = Accounting(sent, landed_ids(spark, tmp_path / "landing" / "orders"))
        report(f"cut {'after' if forward else 'before'} the broker", accounting, counted=counted)
        assert (accounting.lost, accounting.unexpected) == ([], []), f"{accounting}\n{out[-3000:]}"
        assert_at_most_counted(accounting, counted)
        assert Rabbit(rabbitmq).depth(queue) == 0
