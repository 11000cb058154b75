"""A PostgreSQL server of a test: `initdb` into a temporary directory and `pg_ctl start` on a free
port of 127.0.0.1, password authentication, stopped and removed at the end. PostgreSQL refuses to
run as root, so as root the server runs as the `postgres` user of the Debian package.

With `tls` (a certificate and key of `tests.support.certs`) the server speaks TLS and its pg_hba
accepts TCP logins only over TLS (`hostssl`): a client that does not ask for TLS is refused, so a
test that logs in has proved the password travelled encrypted.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from urllib.parse import quote

from tests.support.certs import KeyPair
from tests.support.exactly_once import free_port

USER = "mqbridge"
PASSWORD = "pg-secret-Xy7"


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise RuntimeError(f"PostgreSQL's {name} not found: run scripts/test-tools.sh")
    return found[-1]


#: pg_hba.conf of a TLS server: the Unix socket as initdb has it, TCP only over TLS.
_HBA_TLS = """local all all scram-sha-256
hostssl all all 127.0.0.1/32 scram-sha-256
hostssl all all ::1/128 scram-sha-256
"""


class PostgresServer:
    def __init__(self, base: Path, port: int, tls: KeyPair | None = None) -> None:
        self.base, self.port, self.tls = base, port, tls
        self.data = base / "data"

    @property
    def url(self) -> str:
        return f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{self.port}/postgres"

    def verified_url(self, root_cert: Path, host: str = "localhost", **params: str) -> str:
        """A URL to `host` that requires TLS and a server certificate signed by `root_cert` naming
        `host` (libpq's `sslmode=verify-full`); `params` are more URL parameters (`hostaddr`)."""
        query = {"sslmode": "verify-full", "sslrootcert": str(root_cert), **params}
        return f"postgresql://{USER}:{PASSWORD}@{host}:{self.port}/postgres?" + "&".join(
            f"{key}={quote(value, safe='/')}" for key, value in query.items())

    def _run(self, *args: str) -> None:
        command = list(args)
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)

    def start(self) -> None:
        if os.geteuid() == 0:
            entry = pwd.getpwnam("postgres")
            os.chown(self.base, entry.pw_uid, entry.pw_gid)
        pwfile = self.base / "pw"
        pwfile.write_text(PASSWORD + "\n")
        if os.geteuid() == 0:
            os.chown(pwfile, pwd.getpwnam("postgres").pw_uid, -1)
        self._run(_bin("initdb"), "-D", str(self.data), "-U", USER, "--pwfile", str(pwfile), "--auth", "scram-sha-256",
                  "-E", "UTF8", "--no-sync")
        pwfile.unlink()
        options = f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1 -c fsync=on"
        if self.tls is not None:
            options += self._tls_options(self.tls)
        self._run(_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.base / "server.log"), "-w", "-t", "60",
                  "-o", options, "start")

    def _tls_options(self, tls: KeyPair) -> str:
        """Copy the certificate and key beside the data directory (PostgreSQL refuses a key that
        others may read or that its user does not own), allow TCP logins only over TLS, and return
        the server options that turn TLS on."""
        cert, key = self.base / "server.crt", self.base / "server.key"
        shutil.copyfile(tls.cert, cert)
        shutil.copyfile(tls.key, key)
        key.chmod(0o600)
        (self.data / "pg_hba.conf").write_text(_HBA_TLS)
        if os.geteuid() == 0:
            entry = pwd.getpwnam("postgres")
            for path in (cert, key, self.data / "pg_hba.conf"):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        return f" -c ssl=on -c ssl_cert_file={cert} -c ssl_key_file={key}"

    def stop(self) -> None:
        self._run(_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def restart(self) -> None:
        """`pg_ctl restart -m fast` on the same port and options (pg_ctl keeps them in
        postmaster.opts): every session is ended, the server is down for a moment and comes back."""
        self._run(_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.base / "server.log"), "-m", "fast", "-w",
                  "-t", "60", "restart")


@contextmanager
def postgres_server(tls: KeyPair | None = None) -> Iterator[PostgresServer]:
    """A started server (over TLS with `tls`'s certificate, see the module docstring); stopped and
    its files removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="mqbridge-pg-"))
    server = PostgresServer(base, free_port(), tls)
    try:
        server.start()
        yield server
    finally:
        with suppress(subprocess.CalledProcessError):
            server.stop()
        shutil.rmtree(base, ignore_errors=True)
