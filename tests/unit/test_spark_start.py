"""A bridge starts its listeners without waiting for Spark, and starts no Spark it does not need
(`mqbridge.landing.warmup`): counted through the session factory the composition root is given, on
the in-memory source with the real executors (pyarrow writes; a factory that refuses stands for a
Spark that cannot start)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from mqbridge.app import build_app
from mqbridge.config import BridgeConfig, SparkSection
from mqbridge.errors import ConfigError, SparkUnavailableError
from mqbridge.landing.session import SparkSessions
from mqbridge.landing.warmup import SparkWarmup, spark_needed
from mqbridge.listeners.memory import MemoryBroker
from tests.support.configs import BridgeToml
from tests.support.waiting import wait_until


class SessionFactory:
    """Counts the starts of Spark; each waits for `release` (set: at once), then is refused."""

    def __init__(self, *, blocked: bool = False) -> None:
        self.calls = 0
        self.entered = threading.Event()
        self.release = threading.Event()
        if not blocked:
            self.release.set()

    def __call__(self, **_settings: Any) -> Any:
        self.calls += 1
        self.entered.set()
        self.release.wait(30)
        raise SparkUnavailableError("cannot start Spark (master local[1]): refused by the test")


def bridge_config(tmp_path: Path, writer: str, **spark: str) -> tuple[BridgeConfig, MemoryBroker]:
    name = f"spark-start-{tmp_path.name}"
    cfg = (BridgeToml({
        "bridge": {"name": "unit", "state_dir": str(tmp_path / "state"), "control_interval": "200ms",
                   "shutdown_timeout": "5s"},
        "monitoring": {"listen": ""},
        "spark": {"master": "local[1]", "warehouse": str(tmp_path / "landing"), "writer": writer, **spark},
        "types.orders": {"bulk_timeout": "100ms"},
        "sources.mem": {"kind": "memory", "broker": name},
    }).listener(source="mem", queue="orders", message_type="orders", threads=2, batch=10, wait="50ms",
                backout_queue="orders.backout").parse())
    return cfg, MemoryBroker.named(name)


def landed(table: Path) -> int:
    return sum(pq.read_metadata(p).num_rows for p in table.rglob("*.parquet") if "_staging" not in p.parts)


def test_a_bridge_whose_every_bulk_pyarrow_writes_never_starts_spark(tmp_path: Path) -> None:
    # Given 50 messages and a bridge with writer "auto" on a raw type
    cfg, broker = bridge_config(tmp_path, "auto")
    broker.put_many("orders", [f"m{i}".encode() for i in range(50)])
    factory = SessionFactory()
    app = build_app(cfg, session_factory=factory)
    # When it runs until idle
    code = app.run(until_idle=0.3)
    # Then every message landed and was committed, and no Spark session was ever asked for
    assert code == 0 and app.warmup is None
    assert landed(tmp_path / "landing" / "orders") == 50 and broker.depth("orders") == 0
    assert factory.calls == 0


def test_listeners_connect_while_spark_starts_and_a_spark_that_cannot_start_is_an_outage(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Given 30 messages and a bridge whose bulks Spark writes, and a Spark slow to start (then refused)
    cfg, broker = bridge_config(tmp_path, "spark", until_idle_outage_limit="2s")
    broker.put_many("orders", [f"m{i}".encode() for i in range(30)])
    factory = SessionFactory(blocked=True)
    app = build_app(cfg, session_factory=factory)
    codes: list[int] = []
    runner = threading.Thread(target=lambda: codes.append(app.run(until_idle=0.3)), name="test-run")
    runner.start()
    try:
        # When the session is being started, every listener is already connected
        assert factory.entered.wait(30)
        wait_until(lambda: app.bridge.status()["ready"], 30, "every listener to connect")
        assert not factory.release.is_set() and factory.calls == 1
    finally:
        factory.release.set()
        runner.join(60)
    # Then, Spark refused, its sink is unavailable: the run gives up (exit 1) with every message
    # given back to its queue, none moved aside, nothing landed; the error is logged once, clearly
    assert codes == [1] and "sink orders" in app.bridge.gave_up and "cannot start Spark" in app.bridge.gave_up
    assert broker.depth("orders") == 30 and broker.depth("orders.backout") == 0
    assert landed(tmp_path / "landing" / "orders") == 0
    assert "Spark is not available: cannot start Spark" in caplog.text


def test_a_spark_that_cannot_start_fails_an_idle_run_as_an_outage_does(tmp_path: Path) -> None:
    # Given a bridge whose bulks Spark writes, an empty queue, and a Spark that cannot start
    cfg, broker = bridge_config(tmp_path, "spark", until_idle_outage_limit="1s")
    factory = SessionFactory()
    app = build_app(cfg, session_factory=factory)
    # When it runs until idle, Then it does not end as drained: its sink is unavailable (exit 1)
    assert app.run(until_idle=0.2) == 1
    assert "sink orders" in app.bridge.gave_up and "Spark is not available" in app.bridge.gave_up
    assert factory.calls >= 1 and broker.depth("orders") == 0


def section() -> SparkSection:
    return SparkSection(master="local[1]", warehouse=Path("landing"))


def test_what_the_warmup_finds_after_spark_started_stops_the_bridge() -> None:
    # Given a warm-up whose check finds a configuration error once the session is there
    started: list[object] = []

    def refuse() -> None:
        raise ConfigError("types.orders.schema: not a valid Spark DDL schema")

    warmup = SparkWarmup(SparkSessions(section(), create=lambda **_: started.append(1) or object()), [refuse])
    failed: list[BaseException] = []
    outages: list[str] = []
    # When it runs on its own thread
    warmup.start(failed.append, outages.append)
    warmup.join()
    # Then the session was started once, and the error handed over to stop the bridge
    assert started == [1] and [type(e) for e in failed] == [ConfigError] and outages == []


def test_a_spark_that_cannot_start_is_an_outage_not_a_stop(caplog: pytest.LogCaptureFixture) -> None:
    factory = SessionFactory()
    warmup = SparkWarmup(SparkSessions(section(), create=factory), [])
    failed: list[BaseException] = []
    outages: list[str] = []
    with caplog.at_level(logging.ERROR):
        warmup.start(failed.append, outages.append)
        warmup.join()
    assert failed == [] and factory.calls == 1
    assert outages == ["Spark is not available: cannot start Spark (master local[1]): refused by the test"]
    assert "bulks that need it are given back" in caplog.text


@pytest.mark.parametrize(("spark", "types", "purge", "exactly_once", "expected"), [
    ({"writer": "auto"}, {"format": "raw"}, None, True, False),  # pyarrow writes every bulk
    ({"writer": "arrow"}, {"format": "raw"}, None, True, False),
    ({"writer": "spark"}, {"format": "raw"}, None, True, True),
    ({"writer": "auto"}, {"format": "json", "schema": "a STRING"}, None, True, True),  # Spark parses bodies
    ({"writer": "auto", "remote": "sc://spark:15002"}, {"format": "raw"}, None, True, True),  # the server writes
    ({"writer": "auto", "catalog": True}, {"format": "raw"}, None, True, True),  # tables registered by name
    ({"writer": "auto"}, {"format": "raw"}, "1h", True, True),  # the scheduled purge runs in Spark
    ({"writer": "auto"}, {"format": "raw"}, "1h", False, False),  # ... which needs the ledger (else ignored)
])
def test_spark_is_needed_only_for_spark_writes_the_catalog_and_the_scheduled_purge(
        spark: dict[str, Any], types: dict[str, Any], purge: str | None, exactly_once: bool, expected: bool) -> None:
    cfg = (BridgeToml({"bridge": {"exactly_once": exactly_once}, "spark": spark, "purge": {"interval": purge},
                       "types.orders": {**types, "retention": "1d" if purge else None},
                       "sources.mem": {"kind": "memory"}})
           .listener(source="mem", queue="orders", message_type="orders", backout_queue="orders.backout").parse())
    assert spark_needed(cfg, SparkSessions(cfg.spark)) is expected
