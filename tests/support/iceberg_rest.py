"""A real Iceberg REST catalog server of a test: Apache Iceberg's own `RESTCatalogServer` (the server
the project's `apache/iceberg-rest-fixture` image runs), from the jars of `scripts/jars.sh
iceberg-rest-test`, in a JVM of its own on a free port of 127.0.0.1, its catalog a JDBC catalog on an
SQLite file of a temporary directory. Stopped and removed at the end.

The server listens on every address (it takes a port, not a host); the tests reach it on loopback.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.exactly_once import free_port

ROOT = Path(__file__).resolve().parent.parent.parent
JARS = ROOT / "jars" / "iceberg-rest-test"
MAIN_CLASS = "org.apache.iceberg.rest.RESTCatalogServer"
START_TIMEOUT = 60.0


@dataclass(frozen=True)
class RestCatalogServer:
    uri: str  # http://127.0.0.1:PORT
    warehouse: Path  # where the server puts a table created without a location
    log: Path


def missing_jars() -> str | None:
    """Why the server cannot start here (its jars are not fetched), or None."""
    if not any(JARS.glob("iceberg-open-api-*-test-fixtures.jar")):
        return f"the Iceberg REST catalog server's jars are missing from {JARS}: run scripts/jars.sh iceberg-rest-test"
    return None


@contextmanager
def rest_catalog_server() -> Iterator[RestCatalogServer]:
    """Start the server, wait until it answers `GET /v1/config`, yield it, stop it."""
    problem = missing_jars()
    if problem:
        raise RuntimeError(problem)
    base = Path(tempfile.mkdtemp(prefix="iceberg-rest-"))
    warehouse = base / "warehouse"
    warehouse.mkdir()
    port = free_port()
    log = base / "server.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CATALOG_", "REST_"))}
    env.update({"CATALOG_REST_PORT": str(port), "CATALOG_WAREHOUSE": warehouse.as_uri(),
                "CATALOG_URI": f"jdbc:sqlite:file:{base / 'catalog.db'}",
                "CATALOG_JDBC_USER": "user", "CATALOG_JDBC_PASSWORD": "password"})  # SQLite ignores both
    java = shutil.which("java") or "java"
    with log.open("wb") as out:
        proc = subprocess.Popen([java, "-Xmx256m", "-cp", f"{JARS}/*", MAIN_CLASS], env=env, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    uri = f"http://127.0.0.1:{port}"
    try:
        _wait_until_it_answers(uri, proc, log)
        yield RestCatalogServer(uri, warehouse, log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(base, ignore_errors=True)


def _wait_until_it_answers(uri: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the Iceberg REST catalog server exited with {proc.returncode}: "
                               f"{log.read_text(errors='replace')[-3000:]}")
        try:
            with urllib.request.urlopen(f"{uri}/v1/config", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"waited {START_TIMEOUT:.0f} s for the Iceberg REST catalog server to answer GET "
                       f"{uri}/v1/config; its log: {log.read_text(errors='replace')[-3000:]}")
