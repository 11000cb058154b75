"""Fixtures of the integration tests: a real local Spark (and, later, the brokers)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


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
