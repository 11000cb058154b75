"""A STOMP source over TLS whose certificates do not fit: a configuration error naming the source and
the certificate problem (the listener halts), never "no TCP connection" and an endless reconnect.

The endpoint is a real TLS server (Python's ssl module on 127.0.0.1) with the test certificates of
`tests/support/certs.py`; it fails every case at the handshake, before any STOMP frame, so no broker is
needed. The same cases against ActiveMQ's and RabbitMQ's own TLS listeners belong to the broker tests.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
import stomp

from mqbridge.config import StompSourceConfig
from mqbridge.errors import HaltListener, SourceConnectionError, SourceTLSError
from mqbridge.listeners.stomp import StompSource
from mqbridge.records import DeliveryTracker
from tests.support.certs import Certs
from tests.support.tls_server import tls_server


def source(port: int, **settings: Any) -> StompSource:
    config = StompSourceConfig(host="127.0.0.1", port=port, ssl=True, connect_timeout="2s", **settings)
    return StompSource("amq-tls", config, "/queue/q", prefetch=1, tracker=DeliveryTracker())


def connect_error(port: int, **settings: Any) -> Exception:
    with pytest.raises(Exception) as caught:
        source(port, **settings).connect()
    return caught.value


NOT_ACCEPTED = "the broker's TLS certificate is not accepted: "


@pytest.mark.parametrize(("served", "trusted", "problem"), [
    ("server", "other_ca", NOT_ACCEPTED + "unable to get local issuer certificate"),
    ("expired", "ca", NOT_ACCEPTED + "certificate has expired"),
    ("wrong_host", "ca", NOT_ACCEPTED + "IP address mismatch, certificate is not valid for '127.0.0.1'"),
], ids=["unknown-ca", "expired", "wrong-host"])
def test_a_broker_certificate_the_bridge_does_not_trust_halts_the_listener_with_the_reason(
        certs: Certs, served: str, trusted: str, problem: str) -> None:
    # Given a TLS endpoint whose certificate is wrong for this source in one way
    with tls_server(getattr(certs, served)) as port:
        # When the source connects
        error = connect_error(port, ca_certs=getattr(certs, trusted))
    # Then it is a configuration error (the listener halts) naming the source and the problem
    assert isinstance(error, SourceTLSError) and isinstance(error, HaltListener), repr(error)
    assert "source 'amq-tls'" in str(error) and problem in str(error), str(error)


def test_a_missing_client_certificate_is_named_with_the_fix(certs: Certs) -> None:
    # Given a broker that requires a client certificate signed by the test CA, and a source without one
    with tls_server(certs.server, client_ca=certs.ca) as port:
        error = connect_error(port, ca_certs=certs.ca)
    # Then the refusal is a TLS configuration error that says what to set
    assert isinstance(error, SourceTLSError), repr(error)
    assert "certificate required" in str(error) and "set cert_file and key_file" in str(error), str(error)


def test_a_client_certificate_from_a_ca_the_broker_does_not_trust_is_named(certs: Certs, tmp_path: Path) -> None:
    # Given a broker that trusts only client certificates of another CA
    with tls_server(certs.server, client_ca=certs.other_ca) as port:
        error = connect_error(port, ca_certs=certs.ca, cert_file=certs.client.cert, key_file=certs.client.key)
    assert isinstance(error, SourceTLSError), repr(error)
    assert "is cert_file signed by a CA the broker trusts?" in str(error), str(error)


def test_good_tls_and_a_closed_port_are_not_called_tls_problems(certs: Certs) -> None:
    # Given a TLS endpoint the source trusts (it never answers CONNECT): not a TLS error
    with tls_server(certs.server) as port:
        error = connect_error(port, ca_certs=certs.ca)
    assert type(error) is SourceConnectionError and "no answer to CONNECT" in str(error), repr(error)
    # And a port nobody listens on: reconnecting may help, as for plain STOMP
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    error = connect_error(port, ca_certs=certs.ca)
    assert type(error) is SourceConnectionError, repr(error)


def test_ssl_insecure_without_ca_certs_still_verifies_the_broker_against_the_systems_cas(certs: Certs) -> None:
    # Given a broker whose certificate is signed by the test CA (in no system store) and a source with
    # ssl_insecure = true and no ca_certs
    with tls_server(certs.server) as port:
        error = connect_error(port, ssl_insecure=True)
    # Then stomp.py itself refused the handshake (its connect raised: the refusal is the cause, not a
    # wait for CONNECTED on a connection it accepted), and the reason is the unknown issuer
    assert isinstance(error, SourceTLSError), repr(error)
    assert isinstance(error.__cause__, stomp.exception.ConnectFailedException), repr(error.__cause__)
    assert NOT_ACCEPTED + "unable to get local issuer certificate" in str(error), str(error)
    # while with ca_certs the same endpoint is trusted (the source then waits for CONNECTED)
    with tls_server(certs.server) as port:
        error = connect_error(port, ca_certs=certs.ca, ssl_insecure=True)
    assert type(error) is SourceConnectionError and "no answer to CONNECT" in str(error), repr(error)
