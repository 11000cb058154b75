"""An outage is not poison, on the real parts: `mqbridge run --until-idle` (a subprocess) on the shared
ActiveMQ and a real local Spark, default `backout_threshold` (3).

- the table path blocked by a file for ~30 s (tests run as root, so chmod would not block: a file stands
  where the table directory should be), then freed;
- the Spark JVM (py4j's java child process) killed with SIGKILL while bulks are being written;
- a bulk write that hangs (failpoint `spark_write_hang`: Java's Thread.sleep through SQL reflection,
  cancelled by the job group; with writer = "arrow", pyarrow's write thread blocked, abandoned) with a
  short `[spark] write_timeout`; and the same into a Delta table, twice in a row, whose sink must then
  be probed available again (its probe, a Delta commit beside the table, once failed on every attempt);
  and a Delta table's making that hangs (failpoint `delta_create_hang`), each reported as an outage;
- one message that makes Spark's write fail (failpoint `spark_poison_body`: assert_true inside the
  write) while probe writes succeed: only that message reaches the backout queue.

Each time every other message lands exactly once (counted per body) and nothing is on the backout
queue that should not be.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from mqbridge.monitoring.status_client import run_status
from tests.support.amq import AmqClient, unique_queue
from tests.support.delta_tables import JARS, delta_rows
from tests.support.exactly_once import account, bodies, published_files
from tests.support.http import get
from tests.support.monitored import finish, outage_config, sink, start
from tests.support.processes import landed, leftovers
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


def test_an_unwritable_table_path_pauses_the_sink_and_moves_nothing(tmp_path: Path, spark: Any,
                                                                     amq: AmqClient) -> None:
    # Given 600 messages, the default backout threshold, and a file where the table directory goes
    q = unique_queue("outage-path")
    sent = bodies(600, "op")
    amq.put_many(q, sent)
    config, url = outage_config(tmp_path, q, batch=100)
    (tmp_path / "landing").mkdir()
    blocker = tmp_path / "landing" / "orders"
    blocker.write_text("not a directory")
    run = start(config)
    try:
        # When the bridge runs: the sink's breaker opens and says so everywhere
        wait_until(lambda: sink(url).get("available") is False, 180, "the breaker of sink orders to open")
        code, health = get(url + "/healthz")
        assert code == 503 and "sink orders: unavailable since" in health, health
        exit_code, report = run_status(url)
        assert exit_code == 1 and "UNAVAILABLE since" in report, report
        _, metrics = get(url + "/metrics")
        assert 'mqbridge_sink_available{type="orders"} 0.0' in metrics
        # ... while probes keep failing (five of them, at most 2 s apart: more than the backout threshold
        # of 3; the 30 s this test once waited cost the suite 18 s more)
        opened = time.monotonic()
        wait_until(lambda: time.monotonic() - opened >= 10 and sink(url).get("probe_failures", 0) >= 5,
                   120, "10 s of outage and 5 failed probes")
        assert amq.depth(q + ".backout") == 0
        # Then the path is fixed
        blocker.unlink()
        out = finish(run)
    finally:
        if run.wait(0) is None:
            run.terminate()
    assert "probe write succeeded; available again" in out
    rows = landed(spark, tmp_path / "landing" / "orders")
    accounting = account(sent, rows)
    assert accounting.clean, str(accounting)
    assert amq.depth(q) == 0 and amq.depth(q + ".backout") == 0
    assert leftovers(tmp_path / "landing" / "orders") == []


def test_a_killed_spark_jvm_is_replaced_and_nothing_is_lost(tmp_path: Path, spark: Any, amq: AmqClient) -> None:
    # Given 3,000 messages being landed in small bulks
    q = unique_queue("outage-jvm")
    sent = bodies(3000, "jv")
    amq.put_many(q, sent)
    config, url = outage_config(tmp_path, q, batch=100, spark='writer = "spark"')  # the JVM writes every bulk
    table = tmp_path / "landing" / "orders"
    run = start(config)
    try:
        wait_until(lambda: published_files(table) >= 2, 180, "the first bulks to land")
        # When the JVM (the bridge's java child process) is killed with SIGKILL under load
        [java] = [p for p in psutil.Process(run.proc.pid).children(recursive=True) if "java" in p.name()]
        java.kill()
        out = finish(run)
    finally:
        if run.wait(0) is None:
            run.terminate()
    # Then a new session was started, and every message landed exactly once
    assert "new SparkSession started" in out, out[-5000:]
    rows = landed(spark, table)
    accounting = account(sent, rows)
    assert accounting.clean, str(accounting)
    assert amq.depth(q) == 0 and amq.depth(q + ".backout") == 0
    assert leftovers(table) == []


def through_a_hung_write(config: Path, url: str, failpoint: str = "spark_write_hang", outages: int = 1) -> str:
    """Run the bridge of `config` (monitored at `url`) whose first write hangs (`failpoint`) until
    the write timeout is reported in /status `outages` times (the sink's breaker opened as often), then to
    the end; its output."""
    run = start(config, failpoint=failpoint)

    def reported() -> bool:
        state = sink(url)
        return "write_timeout" in (state.get("last_outage") or "") and state.get("opens", 0) >= outages

    try:
        wait_until(reported, 240, f"the write timeout to be reported in /status {outages} times")
        return finish(run)
    finally:
        if run.wait(0) is None:
            run.terminate()


@pytest.mark.parametrize("writer", ["spark", "arrow"])
def test_a_hanging_write_is_cancelled_at_write_timeout_and_nothing_is_lost(tmp_path: Path, spark: Any,
                                                                          amq: AmqClient, writer: str) -> None:
    # Given a bridge whose first bulk write hangs (a Spark job, or pyarrow's file write), with
    # write_timeout = 5s
    q = unique_queue("outage-hang")
    sent = bodies(400, "hg")
    amq.put_many(q, sent)
    config, url = outage_config(tmp_path, q, batch=100, spark=f'write_timeout = "5s"\nwriter = "{writer}"')
    # When the timeout fires, the status says why, and the bridge runs to the end
    out = through_a_hung_write(config, url)
    assert "failpoint spark_write_hang reached" in out
    assert ("running for more than write_timeout 5s: cancelling its Spark jobs" if writer == "spark"
            else "running for more than write_timeout 5s: abandoned") in out
    rows = landed(spark, tmp_path / "landing" / "orders")
    accounting = account(sent, rows)
    assert accounting.clean, str(accounting)
    assert amq.depth(q) == 0 and amq.depth(q + ".backout") == 0


@pytest.mark.parametrize(("failpoint", "hung", "outages"), [
    ("spark_write_hang:2", "Delta commit of bulk", 2),  # a bulk's commit, then the next one again
    ("delta_create_hang", "making of Delta table", 1),  # the table's making, before any bulk is prepared
])
def test_a_delta_sink_whose_write_hung_is_probed_available_again_and_nothing_is_lost(
        tmp_path: Path, amq: AmqClient, failpoint: str, hung: str, outages: int) -> None:
    # Given a bridge landing into a Delta table whose first bulk commits hang (each one after the sink came
    # back from the last), or whose making hangs, with write_timeout = 5s
    q = unique_queue("outage-delta")
    sent = bodies(300, "dh")
    amq.put_many(q, sent)
    config, url = outage_config(tmp_path, q, batch=100,
                                spark=f'write_timeout = "5s"\ntable_format = "delta"\njars_dir = "{JARS}"\n'
                                      'writer = "spark"')
    # When each timeout makes the sink unavailable, with the hung step as the reason in /status and the
    # log, and its probe (a Delta commit beside the table) succeeds
    out = through_a_hung_write(config, url, failpoint, outages)
    assert out.count(f"failpoint {failpoint.partition(':')[0]} reached") == outages
    reported = [line for line in out.splitlines() if "mqbridge.breaker: sink orders unavailable:" in line]
    timeouts = [line for line in reported if f"{hung} " in line and "exceeded write_timeout (5s)" in line]
    assert len(timeouts) == outages, out[-6000:]
    # Then every message landed once, after the sink came back
    accounting = account(sent, delta_rows(tmp_path / "landing" / "orders"))
    assert accounting.clean, f"{accounting}\n{out[-4000:]}"
    assert amq.depth(q) == 0 and amq.depth(q + ".backout") == 0


def test_one_message_failing_the_spark_write_is_isolated_and_its_neighbours_land(tmp_path: Path, spark: Any,
                                                                                amq: AmqClient) -> None:
    # Given 300 messages, one of which makes Spark's write fail, in units of 300
    q = unique_queue("outage-bisect")
    sent = bodies(300, "bs")
    poison = sent[137]
    amq.put_many(q, sent)
    config, url = outage_config(tmp_path, q, batch=300, threads=1)
    run = start(config, failpoint="spark_poison_body:bs-00137:")
    out = finish(run)
    # Then only that message is on the backout queue, every other landed once, no breaker opened
    rows = landed(spark, tmp_path / "landing" / "orders")
    accounting = account([b for b in sent if b != poison], rows)
    assert accounting.clean, str(accounting)
    moved = amq.drain(q + ".backout")
    assert [m.body for m in moved] == [poison]
    assert "failed on its own while the sink takes writes" in moved[0].headers["mqbridge-reason"]
    assert "isolated as the cause" in out and "sink orders unavailable" not in out
    assert amq.depth(q) == 0
