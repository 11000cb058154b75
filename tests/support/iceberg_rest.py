"""A real Iceberg REST catalog server of a test: Apache Iceberg's own `RESTCatalogServer` (the server
the project's `apache/iceberg-rest-fixture` image runs), from the jars of `scripts/jars.sh
iceberg-rest-test`, in a JVM of its own on a free port of 127.0.0.1, its catalog a JDBC catalog on an
SQLite file of a temporary directory. Stopped and removed at the end.

The server listens on every address (it takes a port, not a host); the tests reach it on loopback.
The catalog's properties come from `CATALOG_*` environment variables (`CATALOG_REST_PORT` is its
`rest.port`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.exactly_once import free_port
from tests.support.servers import answers_http, server_process

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
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CATALOG_", "REST_"))}
    env.update({"CATALOG_REST_PORT": str(port), "CATALOG_WAREHOUSE": warehouse.as_uri(),
                "CATALOG_URI": f"jdbc:sqlite:file:{base / 'catalog.db'}",
                "CATALOG_JDBC_USER": "user", "CATALOG_JDBC_PASSWORD": "password"})  # SQLite ignores both
    uri = f"http://127.0.0.1:{port}"
    argv = [shutil.which("java") or "java", "-Xmx256m", "-cp", f"{JARS}/*", MAIN_CLASS]
    with server_process("the Iceberg REST catalog server", argv, base=base, env=env,
                        ready=answers_http(f"{uri}/v1/config"), timeout=START_TIMEOUT) as log:
        yield RestCatalogServer(uri, warehouse, log)
