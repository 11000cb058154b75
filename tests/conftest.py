"""Fixtures shared by every test: the real ActiveMQ broker (started if it is not running), and one real
local Spark for the tests that need it (integration tests, and the few unit tests of what Spark itself
does: a catalog table's cached listing, `from_xml`)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.certs import certs  # noqa: F401 -- the session fixture of TLS certificates, for every test
from tests.support.run_servers import run_server

ROOT = Path(__file__).resolve().parent.parent


def _broker(script: str, port: int) -> Iterator[tuple[str, int]]:
    """A broker with STOMP on 127.0.0.1:`port`, started by scripts/`script` when nothing listens
    there; if this run started it, stopped when the last of the run's pytest processes using it is
    done (tests/support/run_servers.py)."""
    with run_server(script, port, f"{script}'s broker's STOMP port", timeout=300):
        yield ("127.0.0.1", port)


#: The slowest contract and integration modules (100-190 s each in the run of 2026-12-02), collected
#: first: scripts/test.sh runs those tests on two workers, a module whole on one of them, in the order
#: collected, so the run ends on short modules rather than on one worker finishing a long one alone.
SLOWEST_FIRST = tuple(f"tests/integration/test_{name}.py" for name in (
    "delta_landing", "spark_modes", "iceberg_object_stores", "rabbitmq_lossless", "follow", "delta_object_stores",
    "iceberg_landing", "delta_store_maintenance", "ledger_fences", "outage", "delta_readers", "delta_maintenance"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Move the modules of SLOWEST_FIRST to the front, in that order (the rest as collected)."""
    rank = {path: index for index, path in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.relative_to(ROOT).as_posix(), len(rank)))


@pytest.fixture(scope="session")
def activemq() -> Iterator[tuple[str, int]]:
    """A running ActiveMQ with STOMP on 127.0.0.1:61613 (scripts/activemq.sh)."""
    yield from _broker("activemq.sh", 61613)


@pytest.fixture(scope="session")
def rabbitmq() -> Iterator[tuple[str, int]]:
    """A running RabbitMQ with STOMP on 127.0.0.1:61623 (scripts/rabbitmq.sh)."""
    yield from _broker("rabbitmq.sh", 61623)


@pytest.fixture
def amq(activemq: tuple[str, int]) -> Iterator[object]:
    """A test client connected to the broker."""
    from tests.support.amq import AmqClient

    client = AmqClient(*activemq)
    yield client
    client.close()


@pytest.fixture
def restore_root_logger() -> Iterator[None]:
    """Put the root logger's handlers and level back after a test that configures logging."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
        if handler not in handlers:
            handler.close()
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One real local SparkSession (local[2]) for the whole test session, stopped at the end.

    Its SQL warehouse and scratch space live under pytest's temporary directory, so nothing is
    left in the working tree; tests land their tables under their own `tmp_path`.
    """
    from mqbridge.landing.session import create_spark_session

    session = create_spark_session(master="local[2]", app_name="mqbridge-tests", conf={
        "spark.sql.warehouse.dir": str(tmp_path_factory.mktemp("spark-warehouse")),
        "spark.local.dir": str(tmp_path_factory.mktemp("spark-local")),
    })
    yield session
    session.stop()
