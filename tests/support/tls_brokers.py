"""The real brokers with STOMP over TLS, for tests of TLS end to end: a private ActiveMQ with a
`stomp+ssl` connector that asks for no client certificate and one that requires it, and a private
RabbitMQ node whose STOMP TLS listener requires one. Both serve the test CA's server certificate
(`tests/support/certs.py`, SAN localhost and 127.0.0.1) and trust the test CA for client
certificates; each also has a plain STOMP port on 127.0.0.1 where tests put and count messages.

ActiveMQ reads Java keystores: `openssl pkcs12` packs the broker's key and certificate, `keytool`
(Java's) makes the trust store; RabbitMQ reads the PEM files. A private RabbitMQ runs as the
`rabbitmq` user of the Debian package, so its base directory is a fresh one under the system's
temporary directory (pytest's own are private to root)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.certs import Certs
from tests.support.exactly_once import PrivateActiveMQ, free_port
from tests.support.processes import ROOT

#: The password of the test keystores (a test secret, written only into the private broker's files).
STORE_PASSWORD = "changeit-tls-test"


@dataclass(frozen=True)
class TlsBroker:
    """Where a private TLS broker listens: `plain` (STOMP, for the test's own client), `tls` (server
    certificate only; None where the broker has no such listener) and `mtls` (client certificate
    required)."""

    plain: int
    tls: int | None
    mtls: int


def _run(*command: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:2])} failed ({done.returncode}):\n{done.stdout}{done.stderr}")


def java_keystores(certs: Certs, base: Path) -> tuple[Path, Path]:
    """The broker's PKCS12 key store (server key and certificate) and trust store (the test CA)."""
    base.mkdir(parents=True, exist_ok=True)
    keystore, truststore = base / "broker.p12", base / "trust.p12"
    _run("openssl", "pkcs12", "-export", "-in", str(certs.server.cert), "-inkey", str(certs.server.key),
         "-certfile", str(certs.ca), "-name", "broker", "-out", str(keystore), "-passout", f"pass:{STORE_PASSWORD}")
    keytool = shutil.which("keytool") or "keytool"
    _run(keytool, "-importcert", "-noprompt", "-alias", "test-ca", "-file", str(certs.ca), "-keystore",
         str(truststore), "-storetype", "PKCS12", "-storepass", STORE_PASSWORD)
    return keystore, truststore


@contextmanager
def tls_activemq(certs: Certs, base: Path) -> Iterator[TlsBroker]:
    """A private ActiveMQ with a plain STOMP port and two `stomp+ssl` connectors; stopped at the end."""
    keystore, truststore = java_keystores(certs, base / "stores")
    ports = TlsBroker(free_port(), free_port(), free_port())
    broker = PrivateActiveMQ(base / "amq", ports.plain)
    broker.env.update({"MQBRIDGE_AMQ_TLS_KEYSTORE": str(keystore), "MQBRIDGE_AMQ_TLS_TRUSTSTORE": str(truststore),
                       "MQBRIDGE_AMQ_TLS_STORE_PASSWORD": STORE_PASSWORD, "MQBRIDGE_AMQ_TLS_PORT": str(ports.tls),
                       "MQBRIDGE_AMQ_MTLS_PORT": str(ports.mtls)})
    try:
        broker.start()
        yield ports
    finally:
        broker.stop()


@contextmanager
def tls_rabbitmq(certs: Certs) -> Iterator[TlsBroker]:
    """A private RabbitMQ node (its own name and ports beside the shared one) with a plain STOMP port
    and a STOMP TLS listener that requires a client certificate; stopped and removed at the end."""
    base = Path(tempfile.mkdtemp(prefix="mqbridge-rabbit-tls-"))
    base.chmod(0o711)  # the node (the `rabbitmq` user) reaches its own directory below
    tls_dir = base / "given"
    tls_dir.mkdir()
    for source, name in ((certs.server.cert, "server.pem"), (certs.server.key, "server.key"), (certs.ca, "ca.pem")):
        shutil.copyfile(source, tls_dir / name)
    ports = TlsBroker(free_port(), None, free_port())
    env = {**os.environ, "MQBRIDGE_RABBIT_BASE": str(base / "node"), "MQBRIDGE_RABBIT_NODE": "mqbridge-tls",
           "MQBRIDGE_RABBIT_STOMP_PORT": str(ports.plain), "MQBRIDGE_RABBIT_AMQP_PORT": str(free_port()),
           "MQBRIDGE_RABBIT_DIST_PORT": str(free_port()), "MQBRIDGE_RABBIT_TLS_PORT": str(ports.mtls),
           "MQBRIDGE_RABBIT_TLS_DIR": str(tls_dir)}

    def script(action: str) -> None:
        subprocess.run([str(ROOT / "scripts" / "rabbitmq.sh"), action], cwd=ROOT, env=env, check=True,
                       stdout=subprocess.DEVNULL, timeout=180)

    try:
        script("start")
        yield ports
    finally:
        script("stop")
        shutil.rmtree(base, ignore_errors=True)
