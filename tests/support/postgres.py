"""A PostgreSQL server of a test: `initdb` into a temporary directory and `pg_ctl start` on a free
port of 127.0.0.1, password authentication, stopped and removed at the end. PostgreSQL refuses to
run as root, so as root the server runs as the `postgres` user of the Debian package."""

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

from tests.support.exactly_once import free_port

USER = "mqbridge"
PASSWORD = "pg-secret-Xy7"


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise RuntimeError(f"PostgreSQL's {name} not found: run scripts/test-tools.sh")
    return found[-1]


class PostgresServer:
    def __init__(self, base: Path, port: int) -> None:
        self.base, self.port = base, port
        self.data = base / "data"

    @property
    def url(self) -> str:
        return f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{self.port}/postgres"

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
        self._run(_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.base / "server.log"), "-w", "-t", "60",
                  "-o", f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1 -c fsync=on", "start")

    def stop(self) -> None:
        self._run(_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")


@contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    """A started server; stopped and its files removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="mqbridge-pg-"))
    server = PostgresServer(base, free_port())
    try:
        server.start()
        yield server
    finally:
        with suppress(subprocess.CalledProcessError):
            server.stop()
        shutil.rmtree(base, ignore_errors=True)
