"""Every broker kind's driver: registered once, resolved by its kind string, its declared parts
importable, and a part it lacks refused with an error naming the kind (`mqbridge.drivers`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mqbridge.drivers import DRIVER_KINDS, Driver, driver_for, kinds_with, probe_for, redrive_of, replay_target
from mqbridge.errors import ConfigError
from tests.support.memory import memory_config


@pytest.fixture
def fresh_registry() -> Iterator[None]:
    """`driver_for` caches what it resolved: a test that changes the registry starts and ends uncached."""
    driver_for.cache_clear()
    yield
    driver_for.cache_clear()


@pytest.mark.parametrize("kind", sorted(DRIVER_KINDS))
def test_every_kind_resolves_to_its_driver_and_its_parts_import(kind: str) -> None:
    driver = driver_for(kind)
    assert isinstance(driver, Driver) and driver.kind == kind
    assert callable(driver.source.from_context)
    for part, present in driver.parts().items():
        load = getattr(driver, part)
        assert (load is not None) == present
        if load is not None:
            assert callable(load()), f"{kind}: its {part} loader gave {load()!r}"


def test_the_registry_knows_the_configuration_s_kinds() -> None:
    # config/ validates `kind` against these three: a kind known there but not here could not start
    assert sorted(DRIVER_KINDS) == ["memory", "mq", "stomp"]
    assert kinds_with("redrive") == kinds_with("replay") == kinds_with("backlog") == ["mq", "stomp"]


def test_a_kind_without_a_part_says_so() -> None:
    with pytest.raises(ConfigError, match=r"the memory source cannot re-drive.*re-drive supports mq, stomp"):
        redrive_of("memory")
    source = memory_config()[0].sources["mem"]
    with pytest.raises(ConfigError, match=r"replay cannot send to a memory source \(it sends to mq, stomp sources\)"):
        replay_target("memory", "mem", source, "orders", "r1", in_doubt_wait=1.0)
    assert probe_for("mem", source) is None  # no outside queue: the gauge shows nothing


def test_an_unknown_kind_names_the_known_ones(fresh_registry: None) -> None:
    with pytest.raises(ConfigError, match=r"unsupported source kind 'kafka' \(known: memory, mq, stomp\)"):
        driver_for("kafka")


def test_a_registry_line_that_names_no_driver_is_refused(fresh_registry: None,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(DRIVER_KINDS, "memory", "mqbridge.listeners.memory:MemorySource")
    with pytest.raises(ConfigError, match=r"mqbridge.listeners.memory:MemorySource is not the Driver of kind 'memory'"):
        driver_for("memory")
    monkeypatch.setitem(DRIVER_KINDS, "stomp", "mqbridge.listeners.memory:DRIVER")  # a driver of another kind
    with pytest.raises(ConfigError, match="is not the Driver of kind 'stomp'"):
        driver_for("stomp")
    monkeypatch.setitem(DRIVER_KINDS, "mq", "mqbridge.listeners.nosuch:DRIVER")
    with pytest.raises(ConfigError, match="source kind 'mq' cannot be used: No module named"):
        driver_for("mq")
