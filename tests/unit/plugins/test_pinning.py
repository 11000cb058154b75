"""Per-listener plugin generations without a broker: a pinned listener keeps the generation it
started with across reloads while a following one takes each; a generation ceiling; an operator's
move; a canary listener that takes a reload first, promotes it after clean units and time, or rolls
it back at the first message it raises on (the others never run it); loaded generations kept in
`sys.modules` while a listener runs them, and released after."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mqbridge.config.loader import parse_config as load_config_text
from mqbridge.counters import Counters
from mqbridge.errors import ConfigError, PluginError
from mqbridge.loop.preprocess import preprocess_unit
from mqbridge.plugins import PluginHost
from mqbridge.plugins.generation import ChainRequest
from tests.support.plugins import STAMP, dropin_modules, listener, make_host, message, request, write_plugin

BROKEN = '''
from mqbridge import hookimpl

__version__ = "{version}"


class Stamp:
    def process(self, message):
        raise RuntimeError("broken release")


@hookimpl
def mqbridge_register_preprocessors(registry):
    registry.add("stamp", lambda options: Stamp())
'''

PINNED, FOLLOWING, CANARY = listener(0), listener(1), listener(2)


def stamp_request(key: int, **policy: Any) -> ChainRequest:
    return dataclasses.replace(request("stamp", key=key), **policy)


_before: set[str] = set()


def loaded() -> list[str]:
    """The drop-in modules in sys.modules that this test loaded (others may leave theirs)."""
    return [name for name in dropin_modules() if name not in _before]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    _before.clear()
    _before.update(dropin_modules())
    path = tmp_path / "plugins"
    write_plugin(path, "stamp", STAMP.format(version="v1"))
    return path


def started(folder: Path, *requests: ChainRequest) -> PluginHost:
    host = make_host(folder, *requests, counters=Counters())
    host.start()
    return host


@pytest.fixture
def pinned_host(folder: Path) -> Iterator[PluginHost]:
    host = started(folder, stamp_request(0, plugins="pinned"), stamp_request(1))
    yield host
    host.close()


@pytest.fixture
def canary_host(folder: Path) -> Iterator[PluginHost]:
    host = started(folder, stamp_request(1), stamp_request(2, canary=True, canary_units=3, canary_seconds=0.0))
    yield host
    host.close()


def unit(host: PluginHost, name: str, count: int = 3) -> list[str]:
    """One unit of work of `count` messages through `name`'s chain, as the listener loop runs it
    (the fallback included): the version each message was stamped with."""
    messages = [message(msg_id=f"m{i}") for i in range(count)]
    _, pre, _ = preprocess_unit(messages, host.chain(name), "t", name)
    assert not pre.failed, pre.failed
    return [m.headers["plugin_version"] for m in pre.submitted]


def reload(host: PluginHost, folder: Path, code: str) -> None:
    write_plugin(folder, "stamp", code)
    assert host.check_for_changes() is True


def test_a_pinned_listener_keeps_its_generation_and_its_module_across_reloads(pinned_host: PluginHost,
                                                                              folder: Path) -> None:
    host = pinned_host
    reload(host, folder, STAMP.format(version="v2"))
    reload(host, folder, STAMP.format(version="v3"))
    assert unit(host, PINNED) == ["v1"] * 3 and unit(host, FOLLOWING) == ["v3"] * 3
    generations = host.listener_generations()
    assert generations[PINNED] == {"generation": 1, "plugins": "pinned", "canary": False}
    assert generations[FOLLOWING] == {"generation": 3, "plugins": "follow", "canary": False}
    # The pinned generation stays loaded; v2, which nobody runs, is released
    assert len(loaded()) == 2


def test_moving_a_pinned_listener_releases_the_generation_nobody_runs(pinned_host: PluginHost, folder: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    host = pinned_host
    reload(host, folder, STAMP.format(version="v2"))
    assert len(loaded()) == 2
    with caplog.at_level(logging.INFO, logger="mqbridge.plugins.host"):
        text = host.move(PINNED, "latest")
    assert text == f"{PINNED}: plugins pinned, generation 2 (was 1)" and text in caplog.text
    assert unit(host, PINNED) == ["v2"] * 3 and len(loaded()) == 1
    # Still pinned: the next reload passes it by, until it follows again
    reload(host, folder, STAMP.format(version="v3"))
    assert unit(host, PINNED) == ["v2"] * 3
    host.move(PINNED, "follow")
    assert unit(host, PINNED) == ["v3"] * 3 and len(loaded()) == 1


def test_a_move_to_a_generation_no_longer_loaded_or_of_a_canary_is_refused(canary_host: PluginHost,
                                                                          folder: Path) -> None:
    with pytest.raises(PluginError, match=r"generation 7 is not loaded any more \(loaded: 1\)"):
        canary_host.move(FOLLOWING, 7)
    with pytest.raises(PluginError, match="is a canary listener"):
        canary_host.move(CANARY, "latest")
    with pytest.raises(PluginError, match="'soon' is not a plugin generation"):
        canary_host.move(FOLLOWING, "soon")
    with pytest.raises(PluginError, match="no listener 'amq:/queue/nope'"):
        canary_host.move("amq:/queue/nope", 1)


def test_a_generation_ceiling_follows_reloads_up_to_it_and_stays(folder: Path) -> None:
    host = started(folder, stamp_request(0, plugins=2), stamp_request(1))
    try:
        assert host.listener_generations()[PINNED]["plugins"] == "up to 2"
        reload(host, folder, STAMP.format(version="v2"))
        assert unit(host, PINNED) == ["v2"] * 3
        reload(host, folder, STAMP.format(version="v3"))
        assert unit(host, PINNED) == ["v2"] * 3 and unit(host, FOLLOWING) == ["v3"] * 3
    finally:
        host.close()


def test_a_canary_runs_a_reload_first_and_promotes_it_after_clean_units(canary_host: PluginHost, folder: Path,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    host = canary_host
    in_flight = host.chain(FOLLOWING)
    with caplog.at_level(logging.INFO, logger="mqbridge.plugins.host"):
        reload(host, folder, STAMP.format(version="v2"))
        # Only the canary runs v2 while it is on trial
        assert unit(host, CANARY) == ["v2"] * 3 and unit(host, FOLLOWING) == ["v1"] * 3
        assert host.status()["canary"]["clean_units"] == 1 and host.generation == 1
        assert unit(host, CANARY) == ["v2"] * 3
        assert unit(host, FOLLOWING) == ["v1"] * 3
        assert unit(host, CANARY) == ["v2"] * 3  # the third clean unit: promoted
        assert unit(host, FOLLOWING) == ["v2"] * 3 and host.generation == 2
        assert in_flight.process(message()).headers["plugin_version"] == "v1"  # type: ignore[union-attr]
        host.on_tick(None)  # type: ignore[arg-type]
    promoted = [r.getMessage() for r in caplog.records if "promoted" in r.getMessage()]
    assert promoted == [f"plugins: generation 2 promoted from the canary listener(s) {CANARY} after 3 units of "
                        "work and 0s without a plugin error"]
    assert all(r.levelno == logging.INFO for r in caplog.records if "promoted" in r.getMessage())
    assert host.status()["canary"] is None and host.counters.total("plugin_canary_promotions") == 1
    assert len(loaded()) == 1  # generation 1 released


def test_a_canary_waits_for_its_time_too(folder: Path) -> None:
    host = started(folder, stamp_request(1), stamp_request(2, canary=True, canary_units=1, canary_seconds=30.0))
    try:
        reload(host, folder, STAMP.format(version="v2"))
        unit(host, CANARY)
        unit(host, CANARY)
        host.on_tick(None)  # type: ignore[arg-type]
        assert unit(host, FOLLOWING) == ["v1"] * 3
        host._canary.started -= 30  # type: ignore[union-attr]  # its time has come
        host.on_tick(None)  # type: ignore[arg-type]
        assert unit(host, FOLLOWING) == ["v2"] * 3
    finally:
        host.close()


def test_a_broken_release_is_rolled_back_on_the_canary_and_never_reaches_the_others(
        canary_host: PluginHost, folder: Path, caplog: pytest.LogCaptureFixture) -> None:
    host = canary_host
    already = host.chain(CANARY)
    with caplog.at_level(logging.INFO, logger="mqbridge.plugins.host"):
        reload(host, folder, BROKEN.format(version="v2"))
        on_v2 = host.chain(CANARY)  # a second unit that took its snapshot before the rollback
        # The unit the broken release raised on is preprocessed again on generation 1: nothing fails
        assert unit(host, CANARY) == ["v1"] * 3
        assert preprocess_unit([message()], on_v2, "t", CANARY)[1].submitted[0].headers["plugin_version"] == "v1"
        assert unit(host, CANARY) == ["v1"] * 3 and unit(host, FOLLOWING) == ["v1"] * 3
        assert already.process(message()).headers["plugin_version"] == "v1"  # type: ignore[union-attr]
        # The same file is not taken again; a fixed one is
        assert host.check_for_changes() is False
    rolled = [r for r in caplog.records if "rolled back" in r.getMessage()]
    assert len(rolled) == 1 and rolled[0].levelno == logging.INFO
    assert f"raised on 3 message(s) of the canary listener {CANARY}" in rolled[0].getMessage()
    assert "no other listener ran it" in rolled[0].getMessage()
    assert host.counters.total("plugin_canary_rollbacks") == 1 and host.generation == 1
    assert host.listener_generations()[CANARY] == {"generation": 1, "plugins": "follow", "canary": True}
    assert len(loaded()) == 1
    reload(host, folder, STAMP.format(version="v3"))
    assert unit(host, CANARY) == ["v3"] * 3 and unit(host, FOLLOWING) == ["v1"] * 3


def test_a_canary_rolls_back_on_a_message_it_raises_on_even_when_others_pass(canary_host: PluginHost,
                                                                            folder: Path) -> None:
    host = canary_host
    reload(host, folder, STAMP.format(version="v2").replace(
        "    def process(self, message):\n",
        "    def process(self, message):\n        if message.msg_id == 'm1':\n            raise ValueError('m1')\n"))
    messages = [message(msg_id=f"m{i}") for i in range(3)]
    _, pre, _ = preprocess_unit(messages, host.chain(CANARY), "t", CANARY)
    assert len(pre.failed) == 1  # a message failure of this unit, as before
    assert host.status()["canary"] is None and unit(host, CANARY) == ["v1"] * 3


def test_a_newer_reload_replaces_the_canary_generation_on_trial(canary_host: PluginHost, folder: Path) -> None:
    host = canary_host
    reload(host, folder, STAMP.format(version="v2"))
    unit(host, CANARY)
    reload(host, folder, STAMP.format(version="v3"))
    assert host.status()["canary"]["generation"] == 3 and host.status()["canary"]["clean_units"] == 0
    assert len(loaded()) == 2  # v1 (the others) and v3 (the canary); v2 released
    for _ in range(3):
        assert unit(host, CANARY) == ["v3"] * 3
    assert unit(host, FOLLOWING) == ["v3"] * 3


BASE = """
[sources.amq]
kind = "stomp"
[types.t]
"""


def entry(queue: str, extra: str) -> str:
    return (f'\n[[listeners]]\nsource = "amq"\nqueue = "{queue}"\nmessage_type = "t"\n'
            f'backout_queue = "{queue}.bo"\n{extra}\n')


def test_the_configuration_carries_the_policy_to_the_host() -> None:
    from mqbridge.plugins.generation import requests_from_config
    config = load_config_text(BASE + entry("/queue/a", 'plugins = "pinned"') + entry("/queue/b", "plugins = 4")
                              + entry("/queue/c", 'plugins_canary = true\nplugins_canary_units = 2\n'
                                                  'plugins_canary_time = "5s"'))
    got = {r.listener: (r.plugins, r.canary, r.canary_units, r.canary_seconds) for r in requests_from_config(config)}
    assert got == {"amq:/queue/a": ("pinned", False, 10, 60.0), "amq:/queue/b": (4, False, 10, 60.0),
                   "amq:/queue/c": ("follow", True, 2, 5.0)}


@pytest.mark.parametrize(("body", "expected"), [
    (entry("/queue/a", 'plugins = "pinned"\nplugins_canary = true'), r"listeners\[0\]\.plugins_canary: needs plugins"),
    (entry("/queue/a", 'plugins = "sometimes"'), r"listeners\[0\]\.plugins"),
    (entry("/queue/a", "plugins = 0"), r"listeners\[0\]\.plugins"),
    (entry("/queue/a", "selector = \"a = 1\"") + entry("/queue/a", 'selector = "a = 2"\nplugins = "pinned"'),
     r"listeners\[1\]\.plugins: plugins and plugins_canary must equal those of listeners\[0\]"),
])
def test_inconsistent_policies_are_configuration_errors(body: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        load_config_text(BASE + body)
