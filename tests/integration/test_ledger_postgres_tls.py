"""The PostgreSQL ledger over TLS (`sslmode=verify-full`) on a real PostgreSQL that accepts TCP
logins only over TLS: the ledger records and looks landings up, a `mqbridge run` lands through it,
and a server certificate the URL's CA did not sign, or one made for another host, stops the ledger
with a message naming the ledger and the certificate problem (never the password)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pyarrow.parquet as pq
import pytest

from mqbridge.errors import LedgerError
from mqbridge.landing.ledger.postgres import PostgresLedger, shown_url
from tests.support.amq import AmqClient, unique_queue
from tests.support.certs import Certs
from tests.support.postgres import PASSWORD, PostgresServer, postgres_server
from tests.support.processes import mqbridge, stomp_config

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def pg(certs: Certs) -> Iterator[PostgresServer]:
    """A server with a certificate for localhost, 127.0.0.1 and ::1, signed by `certs.ca`."""
    with postgres_server(tls=certs.server) as server:
        yield server


def finished(proc: subprocess.Popen[str], timeout: float, what: str) -> tuple[int, str]:
    """The return code and output of `proc` once it ended; killed, and an AssertionError naming
    `what` with its output, if it has not ended within `timeout` seconds."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        raise AssertionError(f"timed out after {timeout:g} s waiting for {what}; its output:\n{out[-5000:]}") from None
    return proc.returncode, out


def test_the_server_refuses_a_login_without_tls(pg: PostgresServer) -> None:
    # The premise of every other test here: a login that succeeds went over TLS.
    with pytest.raises(psycopg.OperationalError, match="no encryption"):
        psycopg.connect(pg.url + "?sslmode=disable", connect_timeout=10).close()


def test_the_ledger_over_verified_tls_records_and_looks_up_a_landing(pg: PostgresServer, certs: Certs) -> None:
    # Given the ledger opened with a URL that requires TLS and checks the certificate and host name
    url = pg.verified_url(certs.ca)
    ledger = PostgresLedger.open_url(url, owner="host-a:100:1.00", schema="tls_records")
    try:
        assert ledger.created and PASSWORD not in str(ledger.path)
        # When a landing is recorded
        ledger.prepare("b1", "orders", [("/t/_staging/x", "/t/put_date=2024-01-01/part-b1-00000.parquet")],
                       ["m1", "m2"])
        ledger.mark_published("b1")
        # Then it is found again, over connections that all use TLS
        assert ledger.published(["m1", "m2", "m3"]) == {"m1", "m2"}
        assert ledger.landed_in(["m2"])["m2"][0] == "b1"
        with psycopg.connect(url, autocommit=True) as admin:
            tls = admin.execute("SELECT s.ssl FROM pg_stat_ssl AS s JOIN pg_stat_activity AS a USING (pid) "
                                "WHERE a.application_name = 'mqbridge-ledger'").fetchall()
        assert tls and all(row[0] for row in tls), tls
    finally:
        ledger.close()


def test_a_bridge_lands_through_the_ledger_over_verified_tls(tmp_path: Path, amq: AmqClient, pg: PostgresServer,
                                                            certs: Certs) -> None:
    # Given a few messages and a bridge whose ledger URL requires TLS and checks the certificate
    q = unique_queue("pg-tls")
    sent = [f"tls-{n}".encode() for n in range(20)]
    amq.put_many(q, sent)
    url = pg.verified_url(certs.ca)
    config = stomp_config(tmp_path, q, threads=1,
                          extra_bridge=f'\n[ledger]\nurl = "{url}"\ndatabase_schema = "tls_run"\n')
    # When it runs until the queue is idle
    code, out = finished(mqbridge("run", "--config", str(config), "--until-idle", "3s"), 300,
                         "`mqbridge run --until-idle 3s` with a ledger over TLS to end")
    # Then every message landed once, and the ledger over TLS holds each of their identities
    assert code == 0, out[-5000:]
    files = sorted((tmp_path / "landing" / "orders").glob("put_date=*/part-*.parquet"))
    landed = [body for path in files for body in pq.read_table(path, columns=["body"]).column(0).to_pylist()]
    assert sorted(landed) == sorted(sent) and amq.depth(q) == 0
    ledger = PostgresLedger.open_url(url, owner="host-b:1:1.00", schema="tls_run")
    try:
        assert ledger.stats().identities == len(sent)
    finally:
        ledger.close()
    assert PASSWORD not in out


def test_a_certificate_of_another_ca_is_refused_naming_the_ledger_and_the_ca_file(
        tmp_path: Path, pg: PostgresServer, certs: Certs) -> None:
    # Given a URL whose sslrootcert is a CA that did not sign the server's certificate
    url = pg.verified_url(certs.other_ca)
    # When the ledger connects, Then it is refused: the ledger (without its password), the
    # certificate problem, and the CA file it was checked against
    with pytest.raises(LedgerError) as info:
        PostgresLedger.open_url(url, owner="h:1:1.00", schema="tls_refused")
    said = str(info.value)
    assert said.startswith(f"ledger {shown_url(url)}: cannot connect:"), said
    assert "certificate verify failed" in said and f"not signed by a CA in sslrootcert={certs.other_ca}" in said
    assert PASSWORD not in said
    # And `mqbridge run` stops at start with the same line, before it reads any message
    config = stomp_config(tmp_path, unique_queue("pg-tls-refused"),
                          extra_bridge=f'\n[ledger]\nurl = "{url}"\ndatabase_schema = "tls_refused"\n')
    code, out = finished(mqbridge("run", "--config", str(config), "--until-idle", "2s"), 120,
                         "`mqbridge run` with a ledger of an untrusted certificate to stop")
    assert code == 1 and f"mqbridge: {said}" in out and PASSWORD not in out, out[-5000:]


@pytest.fixture(scope="module")
def pg_elsewhere(certs: Certs) -> Iterator[PostgresServer]:
    """A server whose certificate, signed by `certs.ca`, names only elsewhere.invalid."""
    with postgres_server(tls=certs.wrong_host) as server:
        yield server


def test_a_certificate_for_another_host_is_refused(pg_elsewhere: PostgresServer, certs: Certs) -> None:
    # Given a server whose certificate, signed by the trusted CA, was made for another host
    url = pg_elsewhere.verified_url(certs.ca)
    # When the ledger connects to localhost with verify-full, Then it is refused, naming both names
    with pytest.raises(LedgerError) as info:
        PostgresLedger.open_url(url, owner="h:1:1.00", schema="tls_elsewhere")
    said = str(info.value)
    assert said.startswith(f"ledger {shown_url(url)}: cannot connect:"), said
    assert 'server certificate for "elsewhere.invalid" does not match host name "localhost"' in said, said
    assert PASSWORD not in said
