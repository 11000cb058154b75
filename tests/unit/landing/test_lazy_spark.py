"""Spark is started only when something needs it: executors of types pyarrow writes land bulks and
probe their sinks without a session (the session factory is never called); a typed type asks for one."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from mqbridge.config import SparkSection, TypeConfig
from mqbridge.counters import Counters
from mqbridge.errors import SinkOutageError, SparkUnavailableError
from mqbridge.landing.catalog import CatalogRegistrar
from mqbridge.landing.executor import SparkExecutor, executors_for
from mqbridge.landing.landing import Landing
from mqbridge.landing.ledger import Ledger
from mqbridge.landing.session import SparkSessions
from mqbridge.message import Bulk, Message


class CountingFactory:
    """A session factory that counts its calls and refuses each: any start of Spark shows."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, **_settings: Any) -> Any:
        self.calls += 1
        raise SparkUnavailableError("cannot start Spark (master local[1]): refused by the test")


def sessions(factory: CountingFactory) -> SparkSessions:
    return SparkSessions(SparkSection(master="local[1]", warehouse=Path("landing")), create=factory)


def bulk(n: int) -> Bulk:
    now = datetime.now(timezone.utc)
    b = Bulk("orders")
    for i in range(n):
        b.add(Message(msg_id=f"m{i}", body=f"body {i}".encode(), source="mem", destination="orders",
                      message_type="orders", put_timestamp=now, received_timestamp=now))
    return b


def landed_rows(table: Path) -> int:
    import pyarrow.parquet as pq

    return sum(pq.read_metadata(p).num_rows for p in table.rglob("*.parquet") if "_staging" not in p.parts)


def test_executors_of_types_pyarrow_writes_land_and_probe_without_a_session(tmp_path: Path, ledger: Ledger) -> None:
    # Given the executors of a raw type with writer "auto" (pyarrow), exactly-once
    factory = CountingFactory()
    landing = Landing(ledger=ledger, owner=ledger.owner, counters=Counters(), dedupe_window=3600,
                      warehouse=tmp_path)
    executor = executors_for(sessions(factory), tmp_path, {"orders": TypeConfig()}, landing=landing,
                             writer="auto")["orders"]
    # When it lands a bulk and probes its sink (the probe leaves nothing behind)
    results = executor.execute(bulk(20))
    executor.probe()
    # Then all landed, and no session was ever asked for
    assert all(r.ok for r in results) and landed_rows(tmp_path / "orders") == 20
    assert not list((tmp_path / "orders").rglob("probe"))
    assert factory.calls == 0 and executor.sessions.current is None


def test_the_pyarrow_probe_of_an_unwritable_table_is_an_outage_without_spark(tmp_path: Path) -> None:
    # Given a raw type pyarrow writes, whose table directory is a regular file
    factory = CountingFactory()
    (tmp_path / "orders").write_text("not a directory")
    executor = SparkExecutor(sessions(factory), tmp_path, "orders", TypeConfig(), arrow="snappy")
    # Then its probe says the sink is unavailable, and why, without starting Spark
    with pytest.raises(SinkOutageError, match="Not a directory"):
        executor.probe()
    assert factory.calls == 0


def test_a_failed_write_names_the_rendered_table_and_its_template(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    # Given a type whose table is a template, rendered per queue, and whose rendered table
    # directory is a regular file (pyarrow writes the type: no Spark)
    (tmp_path / "land_orders").write_text("not a directory")
    executor = SparkExecutor(sessions(CountingFactory()), tmp_path, "orders",
                             TypeConfig(table="land_{destination}"), arrow="snappy")
    # When a bulk fails to land
    with caplog.at_level("WARNING", logger="mqbridge.landing.executor"):
        results = executor.execute(bulk(2))
    # Then the warning names the rendered table and its directory, and the template it came from
    assert not any(r.ok for r in results)
    [warning] = [r.getMessage() for r in caplog.records if "not written to" in r.getMessage()]
    assert f"not written to table land_orders ({tmp_path / 'land_orders'}, table template land_{{destination}})" \
        in warning, warning


def test_a_typed_type_asks_for_spark_only_when_it_writes_and_spark_down_is_an_outage(tmp_path: Path) -> None:
    # Given a typed type (Spark parses its bodies): building its executor starts nothing
    factory = CountingFactory()
    executor = SparkExecutor(sessions(factory), tmp_path, "orders",
                             TypeConfig(format="json", schema="order_id STRING"), arrow="snappy")
    assert factory.calls == 0 and executor.arrow is None
    # When it writes a bulk while Spark cannot start
    results = executor.execute(bulk(3))
    # Then the session was asked for, and every message is given back as an outage (never its fault)
    assert factory.calls == 1
    assert all(r.outage and "cannot start Spark" in r.reason for r in results)
    with pytest.raises(SinkOutageError, match="cannot start Spark"):
        executor.probe()
    assert factory.calls == 2


def test_a_catalog_registration_without_spark_fails_alone_and_is_tried_again(tmp_path: Path) -> None:
    # Given tables registered by name, and a Spark that cannot start (the registration is after
    # publication: raising would fail a bulk whose rows are already landed)
    factory = CountingFactory()
    registrar = CatalogRegistrar(sessions(factory).get)
    # When a table is registered twice, Then each attempt fails on its own, counted, and asks again
    registrar.register("orders", tmp_path / "orders", {"2026-11-26"})
    registrar.register("orders", tmp_path / "orders", {"2026-11-26"})
    assert registrar.failures == 2 and factory.calls == 2
