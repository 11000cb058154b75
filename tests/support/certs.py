"""Certificates for TLS tests, made with the `openssl` command: a CA, a server certificate for this
machine (SAN 127.0.0.1, ::1 and localhost), a client certificate, an expired one, one for another
host, and a second CA that signed none of them. Any TLS endpoint of a test (the monitoring
endpoint, a broker's TLS connector, PostgreSQL) can use them: the `certs` fixture makes one set per
test session.

    def test_x(certs: Certs) -> None:
        ssl_context.load_verify_locations(certs.ca)
        server.load_cert_chain(certs.server.cert, certs.server.key)
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

#: Days the CA and the good certificates are valid.
DAYS = 30


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key (PEM files, the key 0600)."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class Certs:
    """One set of test certificates under `base` (see the module docstring)."""

    base: Path
    ca: Path  # the CA certificate that signed server, client, expired and wrong_host
    ca_key: Path
    server: KeyPair  # CN localhost; SAN DNS:localhost, IP:127.0.0.1, IP:::1; serverAuth
    client: KeyPair  # CN mqbridge-client; clientAuth
    expired: KeyPair  # like server, but valid only in 2020
    wrong_host: KeyPair  # SAN DNS:elsewhere.invalid only
    other_ca: Path  # a CA that signed none of the above


def _openssl(*args: str, cwd: Path) -> None:
    found = shutil.which("openssl")
    if found is None:
        raise RuntimeError("openssl is not installed: run scripts/test-tools.sh")
    done = subprocess.run([found, *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed:\n{done.stderr}")


def _ca(base: Path, name: str) -> tuple[Path, Path]:
    cert, key = base / f"{name}.pem", base / f"{name}.key"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
             "-days", str(DAYS), "-subj", f"/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=base)
    key.chmod(0o600)
    return cert, key


#: `openssl ca` settings: the only way of openssl 3.0 to give a certificate dates in the past.
_CA_CONF = """[ca]
default_ca = test_ca
[test_ca]
dir = {base}
database = {base}/index.txt
new_certs_dir = {base}/issued
serial = {base}/serial
default_md = sha256
policy = anything
copy_extensions = copy
unique_subject = no
[anything]
commonName = supplied
"""


def _signed(base: Path, name: str, cn: str, extensions: str, ca: tuple[Path, Path],
            dates: tuple[str, str] | None = None) -> KeyPair:
    """A key and a certificate for `cn` with `extensions` (openssl -extfile lines), signed by `ca`."""
    key, csr, cert, ext = (base / f"{name}{suffix}" for suffix in (".key", ".csr", ".pem", ".ext"))
    ext.write_text(extensions)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={cn}",
             cwd=base)
    key.chmod(0o600)
    if dates is None:
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]), "-CAcreateserial",
                 "-out", str(cert), "-days", str(DAYS), "-sha256", "-extfile", str(ext), cwd=base)
    else:
        (base / "issued").mkdir(exist_ok=True)
        (base / "index.txt").touch()
        if not (base / "serial").exists():
            (base / "serial").write_text("1000\n")
        conf = base / "ca.cnf"
        conf.write_text(_CA_CONF.format(base=base))
        _openssl("ca", "-batch", "-config", str(conf), "-cert", str(ca[0]), "-keyfile", str(ca[1]), "-in", str(csr),
                 "-out", str(cert), "-startdate", dates[0], "-enddate", dates[1], "-extfile", str(ext), "-notext",
                 cwd=base)
    return KeyPair(cert, key)


_SERVER = ("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
           "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1\n")
_CLIENT = "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n"
_WRONG_HOST = _SERVER.replace("DNS:localhost,IP:127.0.0.1,IP:::1", "DNS:elsewhere.invalid")


def make_certs(base: Path) -> Certs:
    """A fresh set of test certificates in the directory `base` (created)."""
    base.mkdir(parents=True, exist_ok=True)
    ca = _ca(base, "test-ca")
    other_ca, _ = _ca(base, "other-ca")
    return Certs(base=base, ca=ca[0], ca_key=ca[1],
                 server=_signed(base, "server", "localhost", _SERVER, ca),
                 client=_signed(base, "client", "mqbridge-client", _CLIENT, ca),
                 expired=_signed(base, "expired", "localhost", _SERVER, ca, ("20200101000000Z", "20200201000000Z")),
                 wrong_host=_signed(base, "wrong-host", "elsewhere.invalid", _WRONG_HOST, ca),
                 other_ca=other_ca)


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Certs]:
    """One set of test certificates for the whole session (`make_certs`)."""
    yield make_certs(tmp_path_factory.mktemp("certs"))
