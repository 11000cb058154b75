"""A ledger transaction whose COMMIT's answer is lost, on a real PostgreSQL behind a TCP proxy that cuts
the connection once it has forwarded the client's COMMIT (as a server's fast shutdown can: the CI run
of 2026-12-03 met it while `tests/integration/test_shared_faults.py` restarted the ledger's server).
First the fact, with bare psycopg: the client is told the connection failed, and the server committed.
Then what it does to a bridge: `Landing.land` of a Parquet bulk whose `prepare` meets it fails as an
outage (its staged files removed) while the ledger holds the bulk prepared by this live process, which
no other process may decide. Its own process decides it: forgotten (none of its files was published)
when its messages come back, at once rather than after the claim's wait, or at a control tick without
them, so that no bridge sharing the ledger gives those messages back for ever; then they land once.
The same for a dead process's bulk of a Delta table that a bridge takes over to decide (`Ledger.take_over`)
and whose take-over loses its answer: the ledger holds it owned by the live bridge, which decides it by its
table (in the session's Delta-enabled driver) when its messages come back or at a tick."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from mqbridge.counters import Counters
from mqbridge.errors import LedgerUnavailableError
from mqbridge.landing.landing import CLAIM_WAIT, Landing
from mqbridge.landing.ledger import TableTransaction, owner_id
from mqbridge.landing.ledger.owners import this_host
from mqbridge.landing.ledger.postgres import PostgresLedger
from mqbridge.landing.ledger.records import PreparedBulk
from mqbridge.landing.publication import staging_dir
from tests.support.delta_commits import APP, frame_rows
from tests.support.delta_tables import delta_jars_fetched  # noqa: F401 (the module's autouse fixture)
from tests.support.ledger import stage_like_spark
from tests.support.object_stores import DeltaSpark
from tests.support.postgres import PostgresServer, postgres_server
from tests.support.tcpproxy import TcpProxy
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

IDENTITIES = ["m1", "m2", "m3", "m4"]


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresServer]:
    with postgres_server() as server:
        yield server


@pytest.fixture
def proxy(pg: PostgresServer) -> Iterator[TcpProxy]:
    cutter = TcpProxy(("127.0.0.1", pg.port))
    yield cutter
    cutter.close()


def through(pg: PostgresServer, proxy: TcpProxy) -> str:
    """The server's URL with the proxy's port."""
    return pg.url.replace(f":{pg.port}/", f":{proxy.port}/")


def test_a_commit_whose_answer_is_lost_fails_at_the_client_and_is_committed_at_the_server(
        pg: PostgresServer, proxy: TcpProxy) -> None:
    # Given a transaction that inserted a row, through the proxy
    with psycopg.connect(pg.url, autocommit=True) as direct:
        direct.execute("CREATE TABLE IF NOT EXISTS lost_commit (n int)")
        direct.execute("TRUNCATE lost_commit")
    client = psycopg.connect(through(pg, proxy), autocommit=True)
    client.execute("BEGIN")
    client.execute("INSERT INTO lost_commit VALUES (1)")
    # When its COMMIT reaches the server and the connection is cut before the answer comes back
    proxy.cut_at(b"COMMIT", forward=True)
    with pytest.raises(psycopg.OperationalError):
        client.execute("COMMIT")
    client.close()
    # Then the client was told it failed, and the row is committed all the same
    assert proxy.trapped.wait(5)  # (set by the proxy once it has cut: the client may hear of it first)
    with psycopg.connect(pg.url, autocommit=True) as direct:
        assert direct.execute("SELECT count(*) FROM lost_commit").fetchone() == (1,)


def landing_with_a_lost_prepare(pg: PostgresServer, proxy: TcpProxy, table: Path, schema: str) -> Landing:
    """A `Landing` on a PostgreSQL ledger (in `schema`) through `proxy` whose `land` of bulk b1 (4 rows
    staged in `table`) lost its prepare's answer: asserted to have raised an outage, with the ledger holding
    b1 prepared by this process and nothing of it in the table."""
    ledger = PostgresLedger.open_url(through(pg, proxy), owner=owner_id(), schema=schema)
    landing = Landing(ledger=ledger, owner=ledger.owner, counters=Counters(), dedupe_window=3600.0,
                      warehouse=table.parent)
    staging = staging_dir(table, ledger.owner, "b1")
    stage_like_spark(staging, {"2024-01-01": 1}, rows_per_file=len(IDENTITIES))
    proxy.cut_at(b"COMMIT", forward=True)
    with pytest.raises(LedgerUnavailableError):
        landing.land("b1", "orders", table, staging, IDENTITIES)
    assert proxy.trapped.wait(5)  # (set by the proxy once it has cut: the client may hear of it first)
    assert [(b.bulk_id, b.owner) for b in ledger.in_progress()] == [("b1", ledger.owner)], (
        "the prepare's COMMIT was not carried out by the server: nothing to decide")
    assert not staging.exists() and published_files(table) == []
    return landing


def land_again(landing: Landing, table: Path) -> None:
    """The redelivered messages land: not published, then bulk b2 staged and landed."""
    assert landing.published(IDENTITIES) == set()
    staging = staging_dir(table, landing.owner, "b2")
    stage_like_spark(staging, {"2024-01-01": 1}, rows_per_file=len(IDENTITIES))
    landing.land("b2", "orders", table, staging, IDENTITIES)
    assert landing.published(IDENTITIES) == set(IDENTITIES)
    assert published_files(table) and all(name.startswith("part-b2-") for name in published_files(table))


def published_files(table: Path) -> list[str]:
    """The names of the part files in the table's put_date partitions (not under `_staging`, which the
    landing's janitor may be removing meanwhile)."""
    return sorted(f.name for d in table.glob("put_date=*") for f in d.glob("part-*.parquet"))


def test_a_bulk_whose_prepare_lost_its_answer_is_forgotten_when_its_messages_come_back(
        tmp_path: Path, pg: PostgresServer, proxy: TcpProxy) -> None:
    table = tmp_path / "landing" / "orders"
    landing = landing_with_a_lost_prepare(pg, proxy, table, "lost_prepare_back")
    try:
        # When its messages come back: not published, and asked without waiting out the claim (before, a
        # live owner's claim: given back after CLAIM_WAIT, every time they came, for ever)
        started = time.monotonic()
        assert landing.published(IDENTITIES) == set()
        assert time.monotonic() - started < CLAIM_WAIT / 2
        # Then the bulk is forgotten, and the messages land once
        assert landing.ledger.in_progress() == []
        land_again(landing, table)
    finally:
        landing.close()


def test_a_bulk_whose_prepare_lost_its_answer_is_forgotten_at_a_tick_without_its_messages(
        tmp_path: Path, pg: PostgresServer, proxy: TcpProxy) -> None:
    table = tmp_path / "landing" / "orders"
    landing = landing_with_a_lost_prepare(pg, proxy, table, "lost_prepare_tick")
    try:
        # When the control thread ticks (its messages not back: another bridge may hold them now)
        def ticked_and_forgotten() -> bool:
            landing.on_tick(None)  # type: ignore[arg-type]  # (the landing's tick reads nothing of the bridge)
            return landing.ledger.in_progress() == []

        # Then the bulk is forgotten within a few ticks, and its messages land once wherever they come
        wait_until(ticked_and_forgotten, 20, "a tick to forget the bulk whose prepare lost its answer")
        assert landing.counters.total("recovery_rolled_back") == 1
        land_again(landing, table)
    finally:
        landing.close()


# --- a take-over whose answer is lost (a dead process's bulk of a Delta table) -------------------


def table_with_bulk_1(spark: Any, path: str) -> None:
    """In the Delta-enabled driver: the table at `path` with bulk-1 committed as version 1 of APP."""
    from mqbridge.landing import delta_commit

    delta_commit.write_frame(frame_rows(spark, "bulk-1", range(0, 4)), path, "bulk-1", TableTransaction(APP, 1))


def settled_in_driver(spark: Any, url: str, schema: str, owner: str, path: str, bulk: PreparedBulk) -> dict[str, Any]:
    """In the Delta-enabled driver: `mqbridge.landing.delta.settle` of `bulk` on a ledger of `owner` (the
    bridge's own decision, made where its Spark is), and whether a late write of the bulk's version by
    its dead writer would commit afterwards."""
    from mqbridge.landing import delta, delta_commit
    from mqbridge.landing.ledger.postgres import PostgresLedger

    ledger = PostgresLedger.open_url(url, owner=owner, schema=schema)
    try:
        landed = delta.settle(ledger, bulk, spark, path)
    finally:
        ledger.close()
    late = delta_commit.write_frame(frame_rows(spark, bulk.bulk_id, range(4, 8)), path, bulk.bulk_id,
                                    TableTransaction(APP, 2), first_attempt=False)
    return {"landed": landed, "late write committed": late,
            "rows": int(spark.read.format("delta").load(path).count())}


def dead_owner() -> str:
    """A ledger owner on this host whose process has exited."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    return f"{this_host()}:{gone.pid}:1.00"


@contextlib.contextmanager
def landing_with_a_lost_take_over(pg: PostgresServer, proxy: TcpProxy, delta_spark: DeltaSpark, table: Path,
                                  schema: str, settled: list[dict[str, Any]]) -> Iterator[Landing]:
    """A `Landing` on a PostgreSQL ledger (in `schema`) through `proxy`, deciding its Delta tables in
    `delta_spark` (each decision's facts appended to `settled`), whose messages IDENTITIES came back while a
    dead process's bulk b2 (version 2, never written) holds them; the take-over of b2 lost its answer:
    asserted to have given them back as an outage, with the ledger holding b2 owned by this process.
    Closed on leaving."""
    outcome = delta_spark.run(table_with_bulk_1, str(table))
    assert outcome["ok"], outcome.get("traceback")
    dead = PostgresLedger.open_url(pg.url, owner=dead_owner(), schema=schema)
    dead.prepare("b2", "orders", [], IDENTITIES, transaction=TableTransaction(APP, 2))
    dead.close()
    ledger = PostgresLedger.open_url(through(pg, proxy), owner=owner_id(), schema=schema)

    def settle(bulk: PreparedBulk) -> bool:
        decided = delta_spark.run(settled_in_driver, pg.url, schema, ledger.owner, str(table), bulk)
        assert decided["ok"], decided.get("traceback")
        settled.append(decided["value"])
        return bool(decided["value"]["landed"])

    landing = Landing(ledger=ledger, owner=ledger.owner, counters=Counters(), dedupe_window=3600.0,
                      warehouse=table.parent)
    landing.in_doubt.settle = settle
    try:
        proxy.cut_at(b"COMMIT", forward=True)
        with pytest.raises(LedgerUnavailableError):
            landing.published(IDENTITIES)
        assert proxy.trapped.wait(5)  # (set by the proxy once it has cut: the client may hear of it first)
        assert [(b.bulk_id, b.owner) for b in ledger.in_progress()] == [("b2", ledger.owner)], (
            "the take-over's COMMIT was not carried out by the server: nothing to decide")
        with contextlib.suppress(LedgerUnavailableError):  # the proxy cut the ledger's reading connection too
            ledger.published(IDENTITIES)  # (its first use fails as an outage, the next reconnects)
        assert settled == []
        yield landing
    finally:
        landing.close()


def assert_decided_not_landed(landing: Landing, settled: list[dict[str, Any]]) -> None:
    """b2 was decided once, by its table: not landed (fenced: a late write of its version is skipped),
    forgotten by the ledger, its messages free to land."""
    assert settled == [{"landed": False, "late write committed": False, "rows": 4}], settled
    assert landing.ledger.in_progress() == []
    assert landing.published(IDENTITIES) == set()
    assert landing.counters.total("recovery_rolled_back") == 1


def test_a_dead_processs_bulk_whose_take_over_lost_its_answer_is_decided_when_its_messages_come_back(
        tmp_path: Path, pg: PostgresServer, proxy: TcpProxy, delta_spark: DeltaSpark) -> None:
    settled: list[dict[str, Any]] = []
    with landing_with_a_lost_take_over(pg, proxy, delta_spark, tmp_path / "orders", "lost_take_over_back",
                                       settled) as landing:
        # When its messages come back: not published, and asked without waiting out a claim (before, this
        # live process's own claim: given back after CLAIM_WAIT, every time they came, for ever)
        assert landing.published(IDENTITIES) == set()
        # Then the bulk was decided by its table
        assert_decided_not_landed(landing, settled)


def test_a_dead_processs_bulk_whose_take_over_lost_its_answer_is_decided_at_a_tick(
        tmp_path: Path, pg: PostgresServer, proxy: TcpProxy, delta_spark: DeltaSpark) -> None:
    settled: list[dict[str, Any]] = []
    with landing_with_a_lost_take_over(pg, proxy, delta_spark, tmp_path / "orders", "lost_take_over_tick",
                                       settled) as landing:
        # When the control thread ticks (its messages not back: another bridge may hold them now, and
        # leaves a live owner's bulk alone)
        def ticked_and_decided() -> bool:
            landing.on_tick(None)  # type: ignore[arg-type]  # (the landing's tick reads nothing of the bridge)
            return landing.counters.total("recovery_rolled_back") > 0  # (counted once the decision is done)

        # Then the bulk is decided by its table within a few ticks
        wait_until(ticked_and_decided, 60, "a tick to decide the bulk whose take-over lost its answer")
        assert_decided_not_landed(landing, settled)
