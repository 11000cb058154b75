"""Bridges on other hosts sharing one PostgreSQL ledger (`[ledger] url`), each "host" a UTS namespace of
its own (judged by its heartbeat, never by its pid): a bulk in flight on a killed host is neither landed
twice nor lost; two live bridges that read the same messages never both land them (a claim); and a bridge
frozen (SIGSTOP) past its lease is fenced: on ActiveMQ and RabbitMQ in one run of the freeze (a pair of
bridges on each broker's queue) into Delta tables, and on ActiveMQ between an Iceberg append's stage and
its publish (write-audit-publish). The ledger's own records on PostgreSQL: test_ledger_postgres.py."""

from __future__ import annotations

import collections
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.amq import AmqClient, unique_queue
from tests.support.both_brokers import on_both_brokers
from tests.support.delta_tables import DELTA_SPARK, delta_rows
from tests.support.exactly_once import OutputReader, account, bodies, published_files
from tests.support.iceberg_tables import ICEBERG_SPARK, iceberg_rows, sqlite_catalog
from tests.support.postgres import PostgresServer, postgres_server
from tests.support.processes import ROOT, landed, leftovers, mqbridge, stomp_bridge, stomp_config
from tests.support.tcpproxy import TcpProxy
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresServer]:
    with postgres_server() as server:
        yield server


def _on_another_host(host: str, config: Path, failpoint: str | None = None, *args: str) -> subprocess.Popen[str]:
    """`mqbridge run` in a UTS namespace of its own whose host name is `host`: to the ledger, a
    bridge on another machine (judged by its heartbeat, never by its pid)."""
    env = {k: v for k, v in os.environ.items() if k != "MQBRIDGE_FAILPOINT"}
    if failpoint:
        env["MQBRIDGE_FAILPOINT"] = failpoint
    # Spark's driver would look its host name up, which no resolver here knows.
    env.update(SPARK_LOCAL_IP="127.0.0.1", SPARK_LOCAL_HOSTNAME="localhost")
    command = ["unshare", "--uts", "sh", "-c", f'hostname {host} && exec "$@"', "sh",
               sys.executable, "-m", "mqbridge", "run", "--config", str(config), *args]
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def test_a_bulk_in_flight_on_a_killed_host_is_neither_landed_twice_nor_lost(
        tmp_path: Path, spark: Any, amq: AmqClient, pg: PostgresServer) -> None:
    # Given 300 messages, and two bridges with their own state_dir sharing one PostgreSQL ledger,
    # bridge A on "another host" (lease 15 s: longer than B takes to start, so that B's start-up
    # recovery leaves A's bulk alone and B meets its messages while A counts as alive)
    q = unique_queue("pg-claim")
    sent = bodies(300, "pc")
    amq.put_many(q, sent)
    ledger = f'\n[ledger]\nurl = "{pg.url}"\ndatabase_schema = "claims"\nlease = "15s"\n'
    config_a = stomp_config(tmp_path, q, name="a.toml", state_dir="state-a", threads=1, batch=40, extra_bridge=ledger)
    config_b = stomp_config(tmp_path, q, name="b.toml", state_dir="state-b", threads=1, batch=40, extra_bridge=ledger)
    # When A is killed inside publication (its files are in the table, the ledger says prepared)
    run_a = OutputReader(_on_another_host("host-a", config_a, "after_publish"))
    assert run_a.wait(timeout=240) == -9, run_a.text()[-5000:]
    assert "failpoint after_publish reached" in run_a.text()
    # and B, on this host, gets A's messages redelivered while A's lease still runs
    run_b = OutputReader(mqbridge("run", "--config", str(config_b), "--until-idle", "4s"))
    try:
        assert run_b.wait(timeout=240) == 0, run_b.text()[-5000:]
    finally:
        if run_b.wait(0) is None:
            run_b.proc.kill()
            run_b.wait(30)
    out = run_b.text()
    # Then B's start-up left A's bulk alone, waited for it, finished it once A's lease expired, and
    # landed each message once
    assert "1 bulks of live processes left alone" in out, out[-5000:]
    assert "rolled forward: its messages came back to this bridge" in out, out[-5000:]
    table = tmp_path / "landing" / "orders"
    result = account(sent, landed(spark, table))
    assert result.clean, f"{result}\n{out[-3000:]}"
    assert amq.depth(q) == 0 and amq.depth(q + ".backout") == 0
    # And A, started again on its host, finds nothing left to do and leaves nothing behind
    again = OutputReader(_on_another_host("host-a", config_a, None, "--until-idle", "3s"))
    assert again.wait(timeout=240) == 0, again.text()[-5000:]
    assert account(sent, landed(spark, table)).clean and leftovers(table) == []


def _stop(*runs: OutputReader | None) -> None:
    """Stop each run still going: SIGTERM, SIGKILL after 60 s."""
    for run in runs:
        if run is not None and run.wait(0) is None:
            run.proc.terminate()
            if run.wait(60) is None:
                run.proc.kill()
                run.wait(30)


def test_two_live_bridges_that_read_the_same_messages_never_both_land_them(
        tmp_path: Path, spark: Any, amq: AmqClient, pg: PostgresServer) -> None:
    # Given 40 messages, and bridge A, which reads them through a connection the test can cut, stages
    # them and stops before its ledger prepare (a long GC, a slow write: alive, its bulk on its way)
    q = unique_queue("pg-race")
    sent = bodies(40, "pr")
    amq.put_many(q, sent)
    ledger = f'\n[ledger]\nurl = "{pg.url}"\ndatabase_schema = "race"\n'
    proxy = TcpProxy(("127.0.0.1", 61613))
    config_a = stomp_config(tmp_path, q, name="a.toml", state_dir="state-a", threads=1, batch=40, port=proxy.port,
                            extra_bridge=ledger)
    config_b = stomp_config(tmp_path, q, name="b.toml", state_dir="state-b", threads=1, batch=40, extra_bridge=ledger)
    gate_a, gate_b = tmp_path / "gate-a", tmp_path / "gate-b"
    table = tmp_path / "landing" / "orders"
    run_a = OutputReader(mqbridge("run", "--config", str(config_a), failpoint=f"after_write_staged:{gate_a}"))
    run_b: OutputReader | None = None
    try:
        wait_until(lambda: Path(f"{gate_a}.reached").exists(), 180, "bridge A to stage its bulk of the 40 messages")
        # When A's connection to the broker is lost, so that the broker gives the 40 to bridge B, which
        # finds them neither landed nor claimed, stages and prepares them, and holds its claim
        assert proxy.cut() >= 1
        run_b = OutputReader(mqbridge("run", "--config", str(config_b), "--until-idle", "5s",
                                      failpoint=f"holding_prepared:{gate_b}"))
        wait_until(lambda: Path(f"{gate_b}.reached").exists(), 180, "bridge B to prepare the redelivered messages")
        # and A goes on to its own prepare of the same messages while B's claim stands (A either gives
        # them back or, were the claim not honoured, publishes them)
        gate_a.touch()
        wait_until(lambda: "messages given back" in run_a.text() or published_files(table) >= 1, 120,
                   "bridge A to give back the messages B holds prepared (or to publish them)")
        gate_b.touch()
        assert run_b.wait(timeout=240) == 0, run_b.text()[-5000:]
    finally:
        proxy.close()
        _stop(run_a, run_b)
    # Then every message is in the table once: A's prepare was refused, naming B's bulk, and A gave the
    # messages back uncounted
    out_a = run_a.text()
    result = account(sent, landed(spark, table))
    assert result.clean, f"{result}\n{out_a[-3000:]}"
    refused = re.findall(r"bulk (\S+): (\d+) identities are in bulk (\S+) of \S+, prepared and not yet published",
                         out_a)
    # (A's collector may cut the 40 in two bulks; each names B's one)
    assert sum(int(count) for count in {bulk: count for bulk, count, _ in refused}.values()) == 40, out_a[-5000:]
    assert len({holder for _, _, holder in refused}) == 1, refused
    # and nothing moved, nothing left
    assert amq.depth(q) == 0 and amq.depth(q + ".backout") == 0 and leftovers(table) == []


def test_a_bridge_frozen_past_its_lease_is_fenced_and_never_lands_its_bulk_after_another_did(
        tmp_path: Path, amq: AmqClient, activemq: tuple[str, int], rabbitmq: tuple[str, int],
        pg: PostgresServer) -> None:
    """Both brokers in one run of the fault: a pair of bridges (A, frozen, and B) on an ActiveMQ queue and
    a pair on a RabbitMQ queue (`identity = "header:x-eo-id"`), each pair its own ledger schema and Delta
    table; the two A's are frozen together, the two B's wait out the leases together."""
    # Given on each broker bridge A on another host (lease 4 s) whose first bulk, of 40 messages, into a
    # Delta table that did not exist before is prepared (its table version reserved; A made the table
    # empty first, `delta_create`) when A freezes (SIGSTOP: a frozen VM), and its connection to the
    # broker is lost, so that the broker gives the 40 to bridge B on this host
    queues = on_both_brokers("pg-frozen", amq, activemq, rabbitmq)
    sent = {q.broker: bodies(40, f"pf-{q.broker}") for q in queues}
    proxies = {q.broker: TcpProxy(("127.0.0.1", q.port)) for q in queues}
    gates = {q.broker: tmp_path / f"gate-a-{q.broker}" for q in queues}
    tables = {q.broker: tmp_path / q.broker / "landing" / "orders" for q in queues}
    configs_b: dict[str, Path] = {}
    runs_a: dict[str, OutputReader] = {}
    runs_b: dict[str, OutputReader] = {}
    frozen: set[str] = set()
    try:
        for q in queues:
            q.put(sent[q.broker])
            (tmp_path / q.broker).mkdir()
            ledger = f'\n[ledger]\nurl = "{pg.url}"\ndatabase_schema = "frozen_{q.broker}"\nlease = "4s"\n'
            config_a = q.bridge(state_dir="state-a", threads=1, batch=40, port=proxies[q.broker].port,
                                extra_bridge=ledger, spark=DELTA_SPARK).write(tmp_path / q.broker / "a.toml")
            configs_b[q.broker] = q.bridge(state_dir="state-b", threads=1, batch=40, extra_bridge=ledger,
                                           spark=DELTA_SPARK).write(tmp_path / q.broker / "b.toml")
            runs_a[q.broker] = OutputReader(_on_another_host(f"host-a-{q.broker}", config_a,
                                                             f"holding_prepared:{gates[q.broker]}"))
        for broker, gate in gates.items():
            wait_until(Path(f"{gate}.reached").exists, 240, f"bridge A on {broker} to prepare its bulk of the 40")
        for broker, run_a in runs_a.items():
            os.kill(run_a.proc.pid, signal.SIGSTOP)  # `unshare` execs the shell, which execs python: one pid
            frozen.add(broker)
        for proxy in proxies.values():
            assert proxy.cut() >= 1
        # (each table is there, empty: made by its A before it prepared the bulk)
        for table in tables.values():
            assert (table / "_delta_log" / f"{0:020d}.json").exists() and not delta_rows(table)
        # When each B meets its A's claim, waits for A's lease to expire, fences A's version and lands the 40
        for broker, config_b in configs_b.items():
            runs_b[broker] = OutputReader(mqbridge("run", "--config", str(config_b), "--until-idle", "5s"))
        for broker, run_b in runs_b.items():
            assert run_b.wait(timeout=240) == 0, f"{broker}:\n{run_b.text()[-5000:]}"
            assert account(sent[broker], delta_rows(tables[broker])).clean, broker
        # and each A resumes and finishes its write of the same bulk
        for broker, run_a in runs_a.items():
            gates[broker].touch()
            os.kill(run_a.proc.pid, signal.SIGCONT)
            frozen.discard(broker)
        wait_until(lambda: all("was decided by another process" in run_a.text() for run_a in runs_a.values()), 120,
                   "each bridge A to find its bulk decided by its B")
    finally:
        for proxy in proxies.values():
            proxy.close()
        for broker in frozen:
            os.kill(runs_a[broker].proc.pid, signal.SIGCONT)
        _stop(*runs_a.values(), *runs_b.values())
    for q in queues:
        out_a, out_b = runs_a[q.broker].text(), runs_b[q.broker].text()
        # Then on each broker B decided A's bulk as never committed (its version fenced) and landed the messages
        assert "never committed into table orders" in out_b, f"{q.broker}:\n{out_b[-5000:]}"
        # and A's late write was skipped by Delta: every message once; A gave the messages back
        result = account(sent[q.broker], delta_rows(tables[q.broker]))
        assert result.clean, f"{q.broker}: {result}\n{out_a[-3000:]}"
        assert "messages given back" in out_a, f"{q.broker}:\n{out_a[-5000:]}"
        assert q.depths() == (0, 0), q.broker


def test_a_bridge_frozen_between_its_iceberg_stage_and_publish_is_fenced_and_its_publish_refused(
        tmp_path: Path, amq: AmqClient, activemq: tuple[str, int], pg: PostgresServer) -> None:
    """Iceberg's fence (`mqbridge.landing.iceberg`: write-audit-publish): a bridge whose append of a bulk
    is staged in the table, not yet published, when it stalls past its lease, never publishes it after
    another bridge decided the bulk."""
    # Given bridge A on another host (lease 4 s) whose first bulk of 40 messages into an Iceberg table is
    # staged (its append made under the bulk's WAP id, unseen) when A freezes (SIGSTOP), and its
    # connection to the broker is lost, so that the broker gives the 40 to bridge B on this host
    q = unique_queue("pg-iceberg-frozen")
    sent = bodies(40, "pif")
    amq.put_many(q, sent)
    proxy = TcpProxy(("127.0.0.1", activemq[1]))
    gate = tmp_path / "gate-a"
    ledger = f'\n[ledger]\nurl = "{pg.url}"\ndatabase_schema = "frozen_iceberg"\nlease = "4s"\n'
    config_a = stomp_bridge(q, state_dir="state-a", threads=1, batch=40, port=proxy.port, extra_bridge=ledger,
                            spark=ICEBERG_SPARK).write(tmp_path / "a.toml")
    config_b = stomp_bridge(q, state_dir="state-b", threads=1, batch=40, extra_bridge=ledger,
                            spark=ICEBERG_SPARK).write(tmp_path / "b.toml")
    catalog = sqlite_catalog(tmp_path)
    run_a = OutputReader(_on_another_host("host-a", config_a, f"holding_staged:{gate}"))
    run_b: OutputReader | None = None
    frozen = False
    try:
        wait_until(Path(f"{gate}.reached").exists, 240, "bridge A to stage its Iceberg append of the 40")
        os.kill(run_a.proc.pid, signal.SIGSTOP)
        frozen = True
        assert proxy.cut() >= 1
        assert iceberg_rows(catalog) == collections.Counter()  # staged: no reader sees it
        # When B meets A's claim, waits for A's lease to expire, fences A's bulk and lands the 40
        run_b = OutputReader(mqbridge("run", "--config", str(config_b), "--until-idle", "5s"))
        assert run_b.wait(timeout=240) == 0, run_b.text()[-5000:]
        assert account(sent, iceberg_rows(catalog)).clean
        # and A resumes and publishes its staged append of the same bulk
        gate.touch()
        os.kill(run_a.proc.pid, signal.SIGCONT)
        frozen = False
        wait_until(lambda: "was decided by another process" in run_a.text(), 120,
                   "bridge A to find its bulk decided by B (its publish refused)")
    finally:
        proxy.close()
        if frozen:
            os.kill(run_a.proc.pid, signal.SIGCONT)
        _stop(run_a, run_b)
    out_a, out_b = run_a.text(), run_b.text()
    # Then B fenced A's bulk (never committed) and landed the messages; A's publish was refused: every
    # message once, A gave the messages back, nothing left on the queue
    assert "never committed into table orders: not in the table: fenced" in out_b, out_b[-5000:]
    result = account(sent, iceberg_rows(catalog))
    assert result.clean, f"{result}\n{out_a[-3000:]}"
    assert "messages given back" in out_a, out_a[-5000:]
    assert amq.depth(q) == 0 and amq.depth(q + ".backout") == 0
