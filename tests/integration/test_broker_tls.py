"""STOMP over TLS against the brokers' own TLS listeners (`tests/support/tls_brokers.py`): ActiveMQ's
`stomp+ssl` connectors (server certificate only, and client certificate required) and RabbitMQ's
STOMP TLS listener (client certificate required). Every message lands exactly once over each, also
when the bridge is killed in the middle of a landing; each certificate problem at connect halts its
listener once, naming the source and the problem, in the log and on /healthz. (That `run
--until-idle` then exits 1: tests/integration/test_stomp_tls.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.amq import AmqClient
from tests.support.certs import Certs
from tests.support.configs import BridgeToml, toml_value
from tests.support.exactly_once import Rabbit, account, bodies, free_port
from tests.support.http import get
from tests.support.monitored import running
from tests.support.processes import (
    landed,
    leftovers,
    process_bridge,
    run_until_idle,
    run_until_killed,
    stomp_config,
)
from tests.support.tls_brokers import TlsBroker, tls_activemq, tls_rabbitmq
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def amq_tls(certs: Certs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    with tls_activemq(certs, tmp_path_factory.mktemp("amq-tls")) as broker:
        yield broker


@pytest.fixture(scope="module")
def rabbit_tls(certs: Certs) -> Iterator[TlsBroker]:
    with tls_rabbitmq(certs) as broker:
        yield broker


def _tls_source(port: int, ca: Path, client: Any = None, *, broker: str = "activemq") -> dict[str, Any]:
    """The keys of a `[sources.X]` table: STOMP over TLS to `port` on localhost (the name in the
    broker's certificate), verifying it with `ca`, with `client` (a KeyPair) as client certificate."""
    keys: dict[str, Any] = {"kind": "stomp", "host": "localhost", "port": port, "broker": broker, "ssl": True,
                            "ca_certs": str(ca), "connect_timeout": "5s"}
    if client is not None:
        keys.update(cert_file=str(client.cert), key_file=str(client.key))
    if broker == "rabbitmq":
        keys.update(user="guest", password="guest")
    return keys


def _bridge(sources: dict[str, dict[str, Any]]) -> BridgeToml:
    """A `mqbridge run` with one single-thread listener per source, on queue /queue/tls.<source>."""
    toml = process_bridge("tls").set("spark", master="local[2]")
    for name, keys in sources.items():
        toml = toml.set(f"sources.{name}", **keys).listener(
            source=name, queue=f"/queue/tls.{name}", threads=1, batch=100, wait="200ms", message_type="orders",
            backout_queue=f"/queue/tls.{name}.backout")
    return toml


def test_every_message_lands_once_over_server_verified_and_mutual_tls_on_activemq_and_rabbitmq(
        tmp_path: Path, spark: Any, certs: Certs, amq_tls: TlsBroker, rabbit_tls: TlsBroker) -> None:
    # Given messages on three queues: ActiveMQ's server-verified connector, its mutual TLS connector
    # and RabbitMQ's mutual TLS listener (put through each broker's plain port)
    assert amq_tls.tls is not None
    sent = {name: bodies(200, name) for name in ("amq_tls", "amq_mtls", "rabbit_mtls")}
    with AmqClient("127.0.0.1", amq_tls.plain) as amq:
        amq.put_many("/queue/tls.amq_tls", sent["amq_tls"])
        amq.put_many("/queue/tls.amq_mtls", sent["amq_mtls"])
    rabbit = Rabbit(("127.0.0.1", rabbit_tls.plain))
    rabbit.put("/queue/tls.rabbit_mtls", [(body, {}) for body in sent["rabbit_mtls"]])
    config = _bridge({
        "amq_tls": _tls_source(amq_tls.tls, certs.ca),
        "amq_mtls": _tls_source(amq_tls.mtls, certs.ca, certs.client),
        "rabbit_mtls": _tls_source(rabbit_tls.mtls, certs.ca, certs.client, broker="rabbitmq"),
    }).write(tmp_path / "bridge.toml")
    # When the bridge runs until idle
    out = run_until_idle(config)
    # Then every message is in the table once, and every queue is empty, without a unit given back on
    # the way (a connection lost and made again would still land everything, minutes later)
    assert not [line for line in out.splitlines() if " ERROR " in line or "retrying in" in line
                or "restarting in" in line], out
    every = [body for group in sent.values() for body in group]
    accounting = account(every, landed(spark, tmp_path / "landing" / "orders"))
    assert accounting.clean, str(accounting)
    with AmqClient("127.0.0.1", amq_tls.plain) as amq:
        assert (amq.depth("/queue/tls.amq_tls"), amq.depth("/queue/tls.amq_mtls")) == (0, 0)
    assert rabbit.depth("/queue/tls.rabbit_mtls") == 0


def test_each_certificate_problem_halts_its_listener_with_the_source_and_the_reason(
        tmp_path: Path, certs: Certs, amq_tls: TlsBroker, rabbit_tls: TlsBroker) -> None:
    # Given three sources whose TLS does not fit: a CA that did not sign the broker's certificate (the
    # broker sends its chain with the test CA in it: "self-signed certificate in certificate chain"), and
    # a client certificate missing where the broker requires one (ActiveMQ and RabbitMQ). (Expired and
    # wrong-host broker certificates: tests/unit/listeners/stomp/test_tls.py, against a TLS endpoint
    # of the test that serves them; a broker serves one certificate.)
    assert amq_tls.tls is not None
    expected = {
        "wrong_ca": "the broker's TLS certificate is not accepted: self-signed certificate in certificate chain",
        "no_client_amq": "set cert_file and key_file",
        "no_client_rabbit": "set cert_file and key_file",
    }
    healthz = f"http://127.0.0.1:{free_port()}/healthz"
    config = _bridge({
        "wrong_ca": _tls_source(amq_tls.tls, certs.other_ca),
        "no_client_amq": _tls_source(amq_tls.mtls, certs.ca),
        "no_client_rabbit": _tls_source(rabbit_tls.mtls, certs.ca, broker="rabbitmq"),
    }).set("monitoring", listen=healthz.split("/")[2]).write(tmp_path / "bridge.toml")
    # When the bridge runs
    with running(config) as run:
        def all_halted() -> bool:  # on /healthz, and logged by the control thread
            code, text = get(healthz)
            lines = text.splitlines() + run.text().splitlines()
            return code == 503 and all(
                sum("halted: " in line and f"(source '{source}')" in line for line in lines) >= 2
                for source in expected)
        try:
            wait_until(all_halted, 180, "/healthz and the log to name the 3 listeners halted by their TLS problems")
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\n/healthz: {get(healthz)}\n{run.text()[-6000:]}") from None
        _, health = get(healthz)
    out = run.text()
    # Then /healthz and the log name each listener's source and certificate problem, and each
    # listener halted once (no reconnecting)
    halted = [line for line in out.splitlines() if "CRITICAL" in line and ": halted: " in line]
    for source, problem in expected.items():
        lines = [line for line in halted if f"source '{source}'" in line]
        assert len(lines) == 1 and problem in lines[0], f"{source}: {lines}\n{out[-6000:]}"
        assert any(f"(source '{source}')" in line and problem in line for line in health.splitlines()), health
    assert "no TCP connection" not in out, out[-6000:]


def test_a_bridge_killed_after_publishing_over_mutual_tls_lands_every_message_once_after_restart(
        tmp_path: Path, spark: Any, certs: Certs, amq_tls: TlsBroker) -> None:
    # Given 2,000 messages behind ActiveMQ's mutual TLS connector and a bridge that dies right after
    # publishing its first bulk (before the commit at the source)
    queue = "/queue/tls.killed"
    sent = bodies(2000, "tls-kill")
    with AmqClient("127.0.0.1", amq_tls.plain) as amq:
        amq.put_many(queue, sent)
    tls = "\n".join(f"{key} = {toml_value(value)}" for key, value in _tls_source(
        amq_tls.mtls, certs.ca, certs.client).items() if key not in ("kind", "port", "broker"))
    config = stomp_config(tmp_path, queue, port=amq_tls.mtls, extra_source=tls)
    run_until_killed(config, "before_source_commit")
    # When it is started again and runs until idle
    out = run_until_idle(config)
    # Then every message is in the table exactly once, the queue is empty, nothing is left behind
    accounting = account(sent, landed(spark, tmp_path / "landing" / "orders"))
    assert accounting.clean, str(accounting)
    assert "already landed; committed without landing them again" in out, out[-6000:]
    with AmqClient("127.0.0.1", amq_tls.plain) as amq:
        assert amq.depth(queue) == 0 and amq.depth(f"{queue}.backout") == 0
    assert leftovers(tmp_path / "landing" / "orders") == []
