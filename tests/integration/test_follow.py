"""`mqbridge follow` sends the rows a bridge lands on to destinations chosen by type and sender, once
per row and destination across a kill (real ActiveMQ and RabbitMQ, `mqbridge` processes, real local
Spark reading the table).

One table `orders` is fed by two queues (two senders). Three forwards follow it:
- `late` starts with the bulks landed after its first pass (`start = "new"`);
- `eu` sends the rows of one sender whose header `region` is `eu` to two destinations, in batches of 4;
- `all` sends every row to one destination, in batches of 7.
The first follow is killed (`kill -9`) in its first batch: on ActiveMQ inside the batch's transaction
(not sent: it goes again), on RabbitMQ after the batch's marker was confirmed and before the follow
ledger said so (sent: not again); more messages land; the second follow runs until idle. Every
destination is then counted like a total-queue checker: lost, duplicated, unexpected all 0. A third
test restarts the broker under a follow: the same process waits, then sends each row once.
"""

from __future__ import annotations

import collections
import signal
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support.amq import AmqClient, unique_queue
from tests.support.configs import TAIL
from tests.support.exactly_once import RABBIT_SOURCE, OutputReader, Rabbit, account, bodies, private_activemq
from tests.support.processes import mqbridge, run_until_idle, stomp_bridge
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


def _forwards(queue: str, late: str, eu: tuple[str, str], every: str) -> str:
    return f"""
[[forwards]]
name = "late"
table = "orders"
source = "amq"
to = ["{late}"]
every = "300ms"

[[forwards]]
name = "eu"
table = "orders"
source = "amq"
to = ["{eu[0]}", "{eu[1]}"]
senders = ["{queue}"]
where = "headers['region'] = 'eu'"
start = "all"
batch = 4
every = "300ms"

[[forwards]]
name = "all"
table = "orders"
source = "amq"
to = ["{every}"]
start = "all"
batch = 7
every = "300ms"
"""


def _follow(config: Path, *extra: str, failpoint: str | None = None) -> tuple[int, str]:
    proc = mqbridge("follow", "--config", str(config), *extra, failpoint=failpoint)
    out, _ = proc.communicate(timeout=300)
    return proc.returncode, out


def _region(i: int) -> str:
    return "eu" if i % 2 == 0 else "us"


def _follow_through_a_kill(tmp_path: Path, put: Callable[[str, list[tuple[bytes, dict[str, str]]]], None],
                           drain: Callable[[str], list[Any]], names: Callable[[str], str], failpoint: str,
                           settled: str, **bridge: Any) -> None:
    queue, other = names("follow-in"), names("follow-in2")
    late, eu_a, eu_b, every = (names(n) for n in ("late", "eu-a", "eu-b", "all"))
    config = (stomp_bridge(queue, threads=1, batch=50, **bridge)
              .listener(source="amq", queue=other, threads=1, batch=50, wait="200ms", message_type="orders",
                        backout_queue=f"{other}.backout")
              .add(TAIL, _forwards(queue, late, (eu_a, eu_b), every)).write(tmp_path / "bridge.toml"))
    first, second, from_other = bodies(30, "first"), bodies(20, "second"), bodies(10, "other")
    # Given 30 messages from one sender and 10 from another, landed in one table
    put(queue, [(body, {"region": _region(i)}) for i, body in enumerate(first)])
    put(other, [(body, {"region": "eu"}) for body in from_other])
    run_until_idle(config, idle="2s")

    # When a follow is killed in its first batch (`failpoint`)
    code, out = _follow(config, failpoint=failpoint)
    assert code == -signal.SIGKILL and f"failpoint {failpoint} reached" in out, out
    # and 20 more messages land, then the follow runs again until idle
    put(queue, [(body, {"region": _region(i)}) for i, body in enumerate(second)])
    run_until_idle(config, idle="2s")
    code, out = _follow(config, "--until-idle", "3s", "--in-doubt-wait", "5s")
    assert code == 0, out
    assert f"1 batches to {eu_a} left in doubt: {settled}" in out, out

    # Then each destination has each of its rows once: `eu` the eu rows of the first sender, `all`
    # every row, `late` only the rows landed after its first pass
    eu_rows = [b for i, b in enumerate(first) if _region(i) == "eu"] + [b for i, b in enumerate(second)
                                                                         if _region(i) == "eu"]
    expected = {eu_a: eu_rows, eu_b: eu_rows, every: first + from_other + second, late: second}
    for destination, want in expected.items():
        frames = drain(destination)
        accounting = account(want, collections.Counter(bytes(f.body) for f in frames))
        assert accounting.clean, (destination, accounting)
        assert all(f.headers.get("mqbridge-replay-key") for f in frames), destination


def test_follow_sends_each_row_once_to_each_destination_by_type_and_sender_across_a_kill(
        tmp_path: Path, spark: Any, amq: AmqClient) -> None:
    def put(queue: str, messages: list[tuple[bytes, dict[str, str]]]) -> None:
        for body, headers in messages:
            amq.put(queue, body, headers)

    # killed inside the batch's transaction: the batch was not sent, and goes again
    _follow_through_a_kill(tmp_path, put, amq.drain, unique_queue, "replay_before_commit", "0 had been sent, 1 had not")


def test_follow_to_rabbitmq_sends_each_row_once_across_a_kill(tmp_path: Path, spark: Any,
                                                              rabbitmq: tuple[str, int]) -> None:
    rabbit = Rabbit(rabbitmq)
    run = uuid.uuid4().hex[:8]
    _follow_through_a_kill(tmp_path, rabbit.put, lambda d: rabbit.deliveries(d, ack=True),
                           lambda n: f"/queue/{n}-{run}", "replay_after_commit", "1 had been sent, 0 had not",
                           port=rabbitmq[1], broker="rabbitmq",
                           extra_source=RABBIT_SOURCE)


def test_follow_waits_out_a_broker_restart_mid_stream_and_sends_each_row_once(tmp_path: Path, spark: Any) -> None:
    with private_activemq(tmp_path / "amq") as broker:
        # Given 2,000 messages landed from a private ActiveMQ (bulks of 500), and a follow sending them on in
        # batches of 10: once it has sent its first bulk, three are left (150 batches)
        queue, destination = unique_queue("follow-restart"), unique_queue("follow-restart-out")
        sent = bodies(2000, "restart")
        with AmqClient("127.0.0.1", broker.port) as client:
            client.put_many(queue, sent)
        config = (stomp_bridge(queue, port=broker.port, threads=1, batch=500)
                  .add(TAIL, f'[[forwards]]\nname = "out"\ntable = "orders"\nsource = "amq"\nto = ["{destination}"]\n'
                             'start = "all"\nbatch = 10\nevery = "300ms"').write(tmp_path / "bridge.toml"))
        run_until_idle(config, idle="2s")
        follow = OutputReader(mqbridge("follow", "--config", str(config), "--until-idle", "3s",
                                       "--in-doubt-wait", "5s"))
        wait_until(lambda: "rows of bulk" in follow.text() or follow.proc.poll() is not None, 180,
                   "the follow to send its first bulk")

        # When the broker stops under it, and starts again
        broker.stop()
        wait_until(lambda: "a pass failed" in follow.text() or follow.proc.poll() is not None, 60,
                   "the follow to meet the stopped broker")
        assert follow.proc.poll() is None, f"the follow ended while the broker was down:\n{follow.text()}"
        broker.start()

        # Then the same process sends the rest and ends idle, each row at the destination once
        code = follow.wait(timeout=240)
        assert code == 0, follow.text()
        assert "passing again" in follow.text(), follow.text()
        # ... mid-stream: rows were still to be sent when the broker stopped (a bulk sent after the failure)
        after_failure = follow.text().split("a pass failed", 1)[1]
        assert "rows of bulk" in after_failure, f"every row was sent before the broker stopped:\n{follow.text()}"
        with AmqClient("127.0.0.1", broker.port) as client:
            accounting = account(sent, collections.Counter(bytes(f.body) for f in client.drain(destination)))
        assert accounting.clean, accounting


def test_a_row_the_destination_refuses_goes_to_the_backout_queue_and_the_others_on(
        tmp_path: Path, spark: Any, rabbitmq: tuple[str, int], amq: AmqClient) -> None:
    # Given rows landed from RabbitMQ, one with a header ActiveMQ refuses (JMSXGroupSeq must be a
    # number there: it drops the connection; RabbitMQ takes any value), forwarded to ActiveMQ
    queue = f"/queue/follow-poison-{uuid.uuid4().hex[:8]}"
    destination = unique_queue("follow-poison-out")
    good = bodies(11, "good")
    poison = b"poison-row"
    Rabbit(rabbitmq).put(queue, [(body, {}) for body in good[:6]] + [(poison, {"JMSXGroupSeq": "abc"})]
                         + [(body, {}) for body in good[6:]])
    config = (stomp_bridge(queue, port=rabbitmq[1], broker="rabbitmq", extra_source=RABBIT_SOURCE, threads=1,
                           batch=50)
              .set("sources.active", kind="stomp", port=61613, broker="activemq")
              .add(TAIL, f'[[forwards]]\nname = "out"\ntable = "orders"\nsource = "active"\nto = ["{destination}"]\n'
                         f'backout_queue = "{destination}.backout"\nbackout_threshold = 2\nstart = "all"\n'
                         'batch = 5\nevery = "300ms"').write(tmp_path / "bridge.toml"))
    run_until_idle(config, idle="2s")

    # When the follow sends them on
    code, out = _follow(config, "--until-idle", "3s", "--in-doubt-wait", "2s")

    # Then the other rows arrive once each; the refused row, after 2 refusals, is on the backout
    # queue once, with the reason and without the header ActiveMQ refused
    assert code == 0, out
    assert f"{destination} refused row " in out and "1 of 2; then to" in out, out
    accounting = account(good, collections.Counter(bytes(f.body) for f in amq.drain(destination)))
    assert accounting.clean, accounting
    [aside] = amq.drain(f"{destination}.backout")
    assert bytes(aside.body) == poison
    assert aside.headers["mqbridge-backout-reason"].startswith(f"{destination} refused it 2 times: "), aside.headers
    assert "JMSXGroupSeq" not in aside.headers and aside.headers["mqbridge-replay-key"], aside.headers


def test_follow_starts_spark_again_when_its_jvm_is_killed_and_sends_each_row_once(tmp_path: Path, spark: Any,
                                                                                 amq: AmqClient) -> None:
    # Given rows landed and a follow that has sent them on
    queue, destination = unique_queue("follow-jvm"), unique_queue("follow-jvm-out")
    first, second = bodies(20, "jvm-first"), bodies(20, "jvm-second")
    amq.put_many(queue, first)
    config = (stomp_bridge(queue, threads=1, batch=50)
              .add(TAIL, f'[[forwards]]\nname = "out"\ntable = "orders"\nsource = "amq"\nto = ["{destination}"]\n'
                         'start = "all"\nevery = "300ms"').write(tmp_path / "bridge.toml"))
    run_until_idle(config, idle="2s")
    follow = OutputReader(mqbridge("follow", "--config", str(config)))
    try:
        wait_until(lambda: amq.depth(destination) == len(first) or follow.proc.poll() is not None, 180,
                   f"the follow to send the first {len(first)} rows")
        assert follow.proc.poll() is None, follow.text()

        # When its Spark driver's JVM is killed, and more rows land
        [java] = [p for p in psutil.Process(follow.proc.pid).children(recursive=True) if "java" in p.name()]
        java.kill()
        amq.put_many(queue, second)
        run_until_idle(config, idle="2s")

        # Then the same follow starts a new session and sends the new rows, each once
        wait_until(lambda: amq.depth(destination) >= len(first + second) or follow.proc.poll() is not None, 180,
                   f"the follow to send all {len(first + second)} rows after its JVM was killed")
        assert follow.proc.poll() is None, follow.text()
    finally:
        code = follow.terminate()
    assert code == 0, follow.text()
    assert "new SparkSession started" in follow.text(), follow.text()
    accounting = account(first + second, collections.Counter(bytes(f.body) for f in amq.drain(destination)))
    assert accounting.clean, accounting
