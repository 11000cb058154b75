"""The landing ledger in a real PostgreSQL (`[ledger] url`): the same records as the SQLite ledger,
owners on other hosts judged by their heartbeat, a bulk taken over never recorded published by its
owner, secrets kept out of every message, exact counters, a session gone silent inside a write
transaction, and three `mqbridge run` processes with separate state_dirs sharing one queue and one
ledger, two of them killed mid-stream: every message exactly once. (Bridges "on other hosts" sharing the
ledger, their claims and fences: tests/integration/test_ledger_fences.py.)"""

from __future__ import annotations

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
from tests.support.exactly_once import OutputReader, account, bodies, published_files
from tests.support.postgres import PASSWORD, PostgresServer, postgres_server
from tests.support.processes import landed, leftovers, mqbridge, run_until_idle, stomp_config
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


