"""The landing ledger in a real PostgreSQL (`[ledger] url`): the same records as the SQLite ledger,
owners on other hosts judged by their heartbeat, secrets kept out of every message, and three
`mqbridge run` processes with separate state_dirs sharing one queue and one ledger, two of them
killed mid-stream: every message exactly once. Two live bridges that read the same messages never both
land them (a claim), and a bridge on another host frozen (SIGSTOP) past its lease is fenced: on ActiveMQ
and RabbitMQ in one run of the freeze (a pair of bridges on each broker's queue) into Delta tables, and
on ActiveMQ between an Iceberg append's stage and its publish (write-audit-publish)."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from mqbridge.errors import (
    BulkFencedError,
    DuplicateIdentityError,
    IdentityClaimedError,
    LedgerError,
    LedgerUnavailableError,
)
from mqbridge.landing.ledger.postgres import IDLE_IN_TRANSACTION_SECONDS, PostgresLedger, shown_url
from tests.support.amq import AmqClient, unique_queue
from tests.support.both_brokers import on_both_brokers
from tests.support.delta_tables import DELTA_SPARK, delta_rows
from tests.support.exactly_once import OutputReader, account, bodies, published_files
from tests.support.iceberg_tables import ICEBERG_SPARK, iceberg_rows, sqlite_catalog
from tests.support.postgres import PASSWORD, PostgresServer, postgres_server
from tests.support.processes import ROOT, landed, leftovers, mqbridge, run_until_idle, stomp_bridge, stomp_config
from tests.support.tcpproxy import TcpProxy
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresServer]:
    with postgres_server() as server:
        yield server


def test_records_bulks_and_identities_like_the_embedded_ledger(pg: PostgresServer) -> None:
    ledger = PostgresLedger.open_url(pg.url, owner="host-a:100:1.00", schema="records")
    try:
        assert ledger.created and PASSWORD not in str(ledger.path)
        ledger.prepare("b1", "orders", [("/t/_staging/x", "/t/part-b1-00000.parquet")], ["m1", "m2", "m2"])
        assert ledger.published(["m1", "m3"]) == set()  # prepared is not published
        assert [b.bulk_id for b in ledger.prepared_holding(["m2"])] == ["b1"]
        with pytest.raises(IdentityClaimedError, match="in bulk b1 of host-a:100:1.00") as claimed:
            ledger.prepare("b0", "orders", [], ["m0", "m2"])  # another bulk on its way to publishing m2
        assert claimed.value.identities == ["m2"] and ledger.state_of("b0") is None
        assert ledger.landing_of("m1") is None  # prepared is not landed
        ledger.mark_published("b1")
        assert ledger.published(["m1", "m3", "m2"]) == {"m1", "m2"}
        found = ledger.landing_of("m2")  # `mqbridge where`
        assert found is not None and (found.bulk_id, found.table) == ("b1", "orders")
        assert found.files == (("/t/_staging/x", "/t/part-b1-00000.parquet"),) and found.published_at > 0
        assert ledger.landing_of("m3") is None
        with pytest.raises(DuplicateIdentityError):
            ledger.prepare("b2", "orders", [], ["m3", "m2"])
        assert ledger.published(["m3"]) == set()  # the refused bulk recorded nothing
        many = [f"id-{n}" for n in range(2500)]
        ledger.prepare("big", "orders", [], many)
        ledger.mark_published("big")
        assert ledger.published(many + ["other"]) == set(many)
        # what `mqbridge follow` asks: a table's bulks published since a time, oldest first
        listed = ledger.published_since("orders", 0.0, 10)
        assert [b for b, _, _ in listed] == ["b1", "big"] and [n for _, _, n in listed] == [2, 2500]
        assert [b for b, _, _ in ledger.published_since("orders", listed[1][1], 1)] == ["big"]
        assert ledger.published_since("invoices", 0.0, 10) == [] and ledger.newest_publication() == listed[1][1]
        stats = ledger.stats()
        assert stats.bulks == {"prepared": 0, "published": 2} and stats.identities == 2502 and stats.file_bytes > 0
        assert ledger.prune(-1) == 2502  # everything is older than a negative window
        assert ledger.stats().prune_runs == 1 and ledger.published(["m1"]) == set()
    finally:
        ledger.close()
    again = PostgresLedger.open_url(pg.url, owner="host-a:100:1.00", schema="records")
    assert not again.created
    again.close()


def test_owners_on_other_hosts_are_judged_by_their_heartbeat(pg: PostgresServer) -> None:
    other = PostgresLedger.open_url(pg.url, owner="other-host:4242:1.00", schema="owners", lease=1.0)
    mine = PostgresLedger.open_url(pg.url, owner="this-host:1:1.00", schema="owners", lease=1.0)
    try:
        assert mine.owner_alive("other-host:4242:1.00")  # its heartbeat is fresh
        assert not mine.owner_alive("never-seen-host:1:1.00")
        time.sleep(1.5)  # the lease passes without a heartbeat
        assert not mine.owner_alive("other-host:4242:1.00")
        other.heartbeat()
        assert mine.owner_alive("other-host:4242:1.00")
    finally:
        other.close()
        mine.close()


def test_a_bulk_taken_over_is_never_recorded_published_by_its_owner(pg: PostgresServer) -> None:
    # Given a bulk prepared by a bridge on another host that stalled, taken over by this one to decide it
    stalled = PostgresLedger.open_url(pg.url, owner="stalled-host:7:1.00", schema="takeover", lease=1.0)
    mine = PostgresLedger.open_url(pg.url, owner="this-host:1:1.00", schema="takeover", lease=1.0)
    try:
        stalled.prepare("b1", "orders", [], ["m1"])
        assert mine.take_over("b1") and mine.in_progress()[0].owner == "this-host:1:1.00"
        # When the stalled bridge resumes and records it published: refused, the bulk still prepared
        with pytest.raises(BulkFencedError, match="taken over by this-host:1:1.00"):
            stalled.mark_published("b1", owner="stalled-host:7:1.00")
        assert mine.state_of("b1") == "prepared"
        # Then the bridge that took it over decides it; a second take-over finds it decided
        mine.mark_published("b1", owner="this-host:1:1.00")
        assert mine.state_of("b1") == "published" and not stalled.take_over("b1")
    finally:
        stalled.close()
        mine.close()


def test_a_wrong_password_or_server_is_one_line_without_the_password(pg: PostgresServer) -> None:
    wrong = pg.url.replace(PASSWORD, "not-the-password-123")
    with pytest.raises(LedgerError) as info:
        PostgresLedger.open_url(wrong, owner="h:1:1.00")
    assert "not-the-password-123" not in str(info.value) and "password authentication failed" in str(info.value)
    assert shown_url(wrong) in str(info.value)
    with pytest.raises(LedgerError, match="cannot connect"):
        PostgresLedger.open_url(f"postgresql://u:{PASSWORD}@127.0.0.1:1/db", owner="h:1:1.00")


def test_three_bridges_on_one_queue_two_killed_mid_stream(tmp_path: Path, spark: Any, amq: AmqClient,
                                                          pg: PostgresServer) -> None:
    # Given 3,000 messages on one queue and three bridges with their own state_dir, one ledger
    q = unique_queue("pg-three")
    sent = bodies(3000, "pg")
    amq.put_many(q, sent)
    ledger = f'\n[ledger]\nurl = "{pg.url}"\ndatabase_schema = "three"\n'
    configs = [stomp_config(tmp_path, q, name=f"bridge{i}.toml", state_dir=f"state{i}", extra_bridge=ledger)
               for i in range(3)]
    # When two of them are killed at steps of the landing protocol while the third runs on. Each is
    # started once the one before has subscribed: the first gets fresh messages (only a bulk of
    # fresh ones reaches after_publish), and no later bridge drains the queue before it subscribes.
    doomed: list[OutputReader] = []
    survivor = None
    try:
        for config, failpoint in zip(configs[:2], ["after_publish", "before_source_commit"], strict=True):
            doomed.append(OutputReader(mqbridge("run", "--config", str(config), failpoint=failpoint)))
            doomed[-1].wait_subscribed(threads=2)
        survivor = OutputReader(mqbridge("run", "--config", str(configs[2]), "--until-idle", "10s"))
        outputs = []
        for run in doomed:
            assert run.wait(timeout=240) == -9, run.text()[-5000:]
            outputs.append(run.text())
        assert survivor.wait(timeout=240) == 0, survivor.text()[-5000:]
    finally:
        for run in [*doomed, survivor]:
            if run is not None and run.wait(0) is None:
                run.proc.kill()
                run.wait(30)
    out = survivor.text()
    # and the killed ones are started again until idle
    for config in configs[:2]:
        outputs.append(run_until_idle(config))
    # Then every message is in the table exactly once; the ledger agrees with the table
    table = tmp_path / "landing" / "orders"
    result = account(sent, landed(spark, table))
    assert result.clean, f"{result}\n{out[-3000:]}"
    assert amq.depth(q) == 0 and amq.depth(q + ".backout") == 0 and leftovers(table) == []
    verify = subprocess.run([sys.executable, "-m", "mqbridge", "ledger", "--config", str(configs[2]), "--verify"],
                            capture_output=True, text=True, timeout=60)
    assert verify.returncode == 0 and "verify: OK" in verify.stdout, verify.stdout + verify.stderr
    assert PASSWORD not in verify.stdout and "***" in verify.stdout
    assert all(PASSWORD not in text for text in [out, *outputs])


def test_dropped_ledger_connections_are_an_outage_and_the_bridge_reconnects(tmp_path: Path, spark: Any,
                                                                            amq: AmqClient, pg: PostgresServer) -> None:
    # Given a bridge landing 1,000 messages through a PostgreSQL ledger
    q = unique_queue("pg-dropped")
    sent = bodies(1000, "pd")
    amq.put_many(q, sent)
    ledger = f'\n[ledger]\nurl = "{pg.url}"\ndatabase_schema = "dropped"\n'
    config = stomp_config(tmp_path, q, threads=1, batch=50, extra_bridge=ledger)
    table = tmp_path / "landing" / "orders"
    run = OutputReader(mqbridge("run", "--config", str(config), "--until-idle", "4s"))
    admin = psycopg.connect(pg.url, autocommit=True)
    try:
        wait_until(lambda: published_files(table) >= 1, 180, "the first bulk to land")
        # When the server drops the bridge's connections again and again while it lands (an
        # administrator's pg_terminate_backend, a failover, a proxy restart)
        for _ in range(5):
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE application_name = 'mqbridge-ledger'")
            wait_until(lambda: "unavailable" in run.text() or run.proc.poll() is not None, 60,
                       "the bridge to meet a dropped ledger connection")
            if published_files(table) >= 10:
                break
        code = run.wait(timeout=300)
    finally:
        admin.close()
        if run.wait(0) is None:
            run.proc.kill()
            run.wait(30)
    out = run.text()
    # Then it was an outage, never poison: it reconnected, every message landed exactly once, none moved
    assert code == 0, out[-5000:]
    assert "ledger" in out and "unavailable" in out, out[-5000:]
    result = account(sent, landed(spark, table))
    assert result.clean, f"{result}\n{out[-3000:]}"
    assert amq.depth(q) == 0 and amq.depth(q + ".backout") == 0 and leftovers(table) == []
    assert PASSWORD not in out


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
    assert "40 identities are in bulk" in out_a and "prepared and not yet published" in out_a, out_a[-5000:]
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


def test_a_bridge_gone_silent_inside_a_write_transaction_holds_the_others_up_only_for_a_bound(
        pg: PostgresServer) -> None:
    # Given bridge A inside a write transaction (the write lock taken) that then sends nothing more: a
    # host cut off or frozen between two statements. Until the server ends such a session, every other
    # bridge's prepare waits for the lock (with the server's TCP keepalive defaults: hours)
    a = PostgresLedger.open_url(pg.url, owner="silent-host:1:1.00", schema="silent", lease=4.0)
    b = PostgresLedger.open_url(pg.url, owner="other-host:2:1.00", schema="silent", lease=4.0)
    holding = a._write()
    holding.__enter__()
    started = time.monotonic()
    finished = threading.Event()

    def prepare() -> None:
        b.prepare("b-after", "orders", [], ["m-after"])
        finished.set()

    threading.Thread(target=prepare, daemon=True).start()
    # When B prepares a bulk: it waits at most the session bound the ledger sets on its connections
    bound = IDLE_IN_TRANSACTION_SECONDS + 10
    prepared = finished.wait(bound)
    waited = time.monotonic() - started
    # (A speaks again: its COMMIT, which also lets B through if the server kept A's transaction)
    try:
        holding.__exit__(None, None, None)
        ended: LedgerUnavailableError | None = None
    except LedgerUnavailableError as exc:
        ended = exc
    try:
        assert prepared, f"B's prepare still waited for A's write lock after {bound:.0f} s"
        print(f"B prepared {waited:.1f} s after A went silent")
        assert b.state_of("b-after") == "prepared"
        # Then A finds its transaction ended by the server (an outage, nothing recorded), and its next
        # write goes through on a new connection
        assert ended is not None, "A's transaction was still open when A spoke again"
        a.probe_write()
    finally:
        a.close()
        b.close()


def test_counters_are_exact_on_postgresql(pg: PostgresServer) -> None:
    def counted(ledger: PostgresLedger) -> tuple[dict[str, int], int]:
        with psycopg.connect(pg.url, autocommit=True) as db:
            db.execute('SET search_path TO "counters"')
            bulks = {"prepared": 0, "published": 0}
            bulks.update(dict(db.execute("SELECT state, COUNT(*) FROM bulks GROUP BY state").fetchall()))
            return bulks, db.execute("SELECT COUNT(*) FROM identities").fetchone()[0]

    ledger = PostgresLedger.open_url(pg.url, owner="host-a:100:1.00", schema="counters")
    try:
        # Given prepares, publications (one twice), a forget and a batched prune
        ledger.prepare("b1", "orders", [], ["m1", "m2", "m2"])
        ledger.prepare("b2", "orders", [], ["m3"])
        ledger.prepare("b3", "orders", [], [f"x{n}" for n in range(7000)])  # more than one prune batch
        ledger.mark_published("b1")
        ledger.mark_published("b1")
        ledger.mark_published("b3")
        ledger.forget("b2")
        stats = ledger.stats()
        assert (stats.bulks, stats.identities) == counted(ledger) == ({"prepared": 0, "published": 2}, 7002)
        assert ledger.prune(-1) == 7002
        stats = ledger.stats()
        assert (stats.bulks, stats.identities) == counted(ledger) == ({"prepared": 0, "published": 0}, 0)
        ledger.prepare("b4", "orders", [], ["m4"])
        # When the counters are missing (a ledger from before them) and it is opened again
        with psycopg.connect(pg.url, autocommit=True) as db:
            db.execute("DELETE FROM counters.meta WHERE key LIKE 'count_%'")
    finally:
        ledger.close()
    again = PostgresLedger.open_url(pg.url, owner="host-a:100:1.00", schema="counters")
    try:
        # Then they are counted once, and kept from there on
        stats = again.stats()
        assert (stats.bulks, stats.identities) == counted(again) == ({"prepared": 1, "published": 0}, 1)
        again.mark_published("b4")
        assert (again.stats().bulks, again.stats().identities) == counted(again)
    finally:
        again.close()


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
