"""Unit tests of what the PostgreSQL ledger says when it cannot connect, with libpq's error texts
(as psycopg raises them) in place of a server: the ledger named without its password, and a
refused server certificate explained. The same messages from a real server over TLS:
tests/integration/test_ledger_postgres_tls.py."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from mqbridge.errors import LedgerError
from mqbridge.landing.ledger.postgres import PostgresLedger

SECRET = "s3cret-pw"
VERIFY_FAILED = ('connection failed: connection to server at "10.0.0.5", port 5432 failed: '
                 "SSL error: certificate verify failed")


def refused(monkeypatch: pytest.MonkeyPatch, url: str, libpq_says: str) -> str:
    """The LedgerError of opening `url` when libpq refuses the connection with `libpq_says`."""
    def connect(*args: Any, **kwargs: Any) -> Any:
        raise psycopg.OperationalError(libpq_says)

    monkeypatch.setattr(psycopg, "connect", connect)
    with pytest.raises(LedgerError) as info:
        PostgresLedger.open_url(url, owner="h:1:1.00")
    return str(info.value)


def test_a_refused_certificate_names_the_ledger_and_the_ca_file_it_was_checked_against(
        monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"postgresql://bridge:{SECRET}@db.example:5432/ledger?sslmode=verify-full&sslrootcert=/etc/mqbridge/ca.pem"
    said = refused(monkeypatch, url, VERIFY_FAILED)
    assert said == ("ledger postgresql://bridge:***@db.example:5432/ledger?sslmode=verify-full&"
                    f"sslrootcert=/etc/mqbridge/ca.pem: cannot connect: {VERIFY_FAILED} (usually: the server's "
                    "certificate is not signed by a CA in sslrootcert=/etc/mqbridge/ca.pem, or has expired or is "
                    "not yet valid)")


def test_a_refused_certificate_without_sslrootcert_points_at_the_default_file(monkeypatch: pytest.MonkeyPatch) -> None:
    said = refused(monkeypatch, f"postgresql://bridge:{SECRET}@db.example/ledger?sslmode=verify-ca", VERIFY_FAILED)
    assert said.endswith("not signed by a CA in the default root certificate file (no sslrootcert in the URL), "
                         "or has expired or is not yet valid)")
    assert SECRET not in said


def test_other_connection_errors_get_no_certificate_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    mismatch = ('connection failed: connection to server at "10.0.0.5", port 5432 failed: server certificate for '
                '"elsewhere.example" does not match host name "db.example"')
    said = refused(monkeypatch, f"postgresql://bridge:{SECRET}@db.example/ledger?sslmode=verify-full", mismatch)
    assert said == f"ledger postgresql://bridge:***@db.example/ledger?sslmode=verify-full: cannot connect: {mismatch}"
