"""Hot reload without a broker: swap under a lock, snapshots per unit of work, a broken new version
never replacing a working one, removed plugins, and no module leaks."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mqbridge.counters import Counters
from mqbridge.plugins import PluginHost
from mqbridge.plugins.generation import Kept
from tests.support.plugins import STAMP, dropin_modules, listener, make_host, message, request, write_plugin


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    path = tmp_path / "plugins"
    write_plugin(path, "stamp", STAMP.format(version="v1"))
    return path


@pytest.fixture
def host(folder: Path) -> Iterator[PluginHost]:
    host = make_host(folder, request("stamp"), counters=Counters())
    host.start()
    yield host
    host.close()


def version(host: PluginHost) -> str:
    out = host.chain(listener(0)).process(message())
    assert out is not None
    return out.headers["plugin_version"]


def test_a_changed_file_is_swapped_in_and_a_running_unit_keeps_its_snapshot(host: PluginHost, folder: Path) -> None:
    # Given a unit of work that took its snapshot before the change
    in_flight = host.chain(listener(0))
    assert host.check_for_changes() is False  # nothing changed yet

    # When the file changes and the control thread checks
    write_plugin(folder, "stamp", STAMP.format(version="v2"))
    assert host.check_for_changes() is True

    # Then the unit in flight finishes on v1 and the next unit runs v2
    assert in_flight.process(message()).headers["plugin_version"] == "v1"  # type: ignore[union-attr]
    assert version(host) == "v2" and host.generation == 2
    assert host.counters.total("plugin_reloads") == 1 and host.counters.gauge("plugin_generation") == 2
    assert host.check_for_changes() is False


def test_rewriting_the_same_content_does_not_reload(host: PluginHost, folder: Path) -> None:
    write_plugin(folder, "stamp", STAMP.format(version="v1"))
    assert host.check_for_changes() is False and host.generation == 1


@pytest.mark.parametrize(("broken", "line", "what"), [
    ("import mqbridge\n\ndef oops(:\n", 3, "SyntaxError"),
    ("import mqbridge\nraise RuntimeError('half written')\n", 2, "RuntimeError: half written"),
    ("from mqbridge import hookimpl\n\n@hookimpl\ndef mqbridge_register_preprocessors(registry, extra):\n    pass\n",
     3, "Argument(s) {'extra'}"),
    ("from mqbridge import hookimpl\n\n@hookimpl\ndef mqbridge_register_preprocessors(registry):\n"
     "    registry.add('stamp', None)\n", 5, "factory None is not callable"),
])
def test_a_broken_new_version_is_not_swapped_in_until_fixed(host: PluginHost, folder: Path, broken: str, line: int,
                                                            what: str, caplog: pytest.LogCaptureFixture) -> None:
    path = folder / "stamp.py"
    before = set(dropin_modules())
    # When a broken version is written over the working one
    write_plugin(folder, "stamp", broken)
    assert host.check_for_changes() is False

    # Then the old version keeps processing, and the status shows the error with file and line
    assert version(host) == "v1" and host.generation == 1
    errors = host.status()["errors"]
    assert len(errors) == 1 and errors[0]["path"] == str(path) and errors[0]["line"] == line, errors
    assert what in errors[0]["error"]
    assert host.describe()[-1]["state"].startswith("keeping the previous version")
    assert host.counters.total("plugin_load_errors") == 1 and host.counters.gauge("plugin_errors") == 1
    assert set(dropin_modules()) == before, "the broken version's module leaked"

    # And it is logged once, however often the folder is rescanned or other files change
    write_plugin(folder, "other", "X = 1\n")
    host.check_for_changes()
    host.check_for_changes()
    assert sum(f"{path}:{line}" in r.getMessage() for r in caplog.records if r.levelno == logging.ERROR) == 1

    # When the file is fixed, the fix is picked up and the error is gone
    write_plugin(folder, "stamp", STAMP.format(version="v3"))
    assert host.check_for_changes() is True
    assert version(host) == "v3" and host.status()["errors"] == []


def test_a_new_version_rejecting_the_configured_options_is_not_swapped_in(folder: Path) -> None:
    host = make_host(folder, request(("stamp", {"header": "x-v"})), counters=Counters())
    host.start()
    # v2 has no `header` option any more
    write_plugin(folder, "stamp", STAMP.format(version="v2").replace('header: str = "plugin_version"', "pass"))
    assert host.check_for_changes() is False
    assert "listeners[0] (amq:/queue/q0): preprocessor 'stamp' (plugin stamp): unknown option(s) header" \
        in host.status()["reload_error"]
    assert host.counters.total("plugin_reload_failures") == 1
    out = host.chain(listener(0)).process(message())
    assert out is not None and out.headers["x-v"] == "v1"
    # Fixed: accepted
    write_plugin(folder, "stamp", STAMP.format(version="v3"))
    assert host.check_for_changes() is True and host.status()["reload_error"] == ""
    host.close()


def test_a_removed_plugin_still_named_by_a_chain_is_kept(host: PluginHost, folder: Path,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    (folder / "stamp.py").unlink()
    write_plugin(folder, "extra", STAMP.format(version="x").replace('"stamp"', '"extra"'))
    assert host.check_for_changes() is True  # `extra` is new
    assert version(host) == "v1"
    assert "preprocessor(s) stamp are still named in the configuration" in caplog.text
    rows = {r["name"]: r for r in host.describe()}
    assert "keeping the loaded version" in rows["stamp"]["state"] and rows["extra"]["state"] == "loaded"


def test_a_removed_unused_plugin_is_dropped(folder: Path) -> None:
    host = make_host(folder, request("envelope"))
    host.start()
    (module_name,) = host.current.module_names()
    (folder / "stamp.py").unlink()
    assert host.check_for_changes() is True
    assert "stamp" not in {r["name"] for r in host.describe()}
    assert module_name not in dropin_modules()
    host.close()


def test_a_file_made_unsafe_keeps_its_loaded_version(host: PluginHost, folder: Path) -> None:
    path = folder / "stamp.py"
    path.chmod(0o666)
    assert host.check_for_changes() is False
    assert version(host) == "v1"
    assert "is world-writable (mode 0666)" in host.status()["errors"][0]["error"]
    path.chmod(0o644)
    host.check_for_changes()
    assert host.status()["errors"] == [] and version(host) == "v1"


def test_reloading_many_times_leaves_one_module_per_file(host: PluginHost, folder: Path) -> None:
    before = set(dropin_modules()) - host.current.module_names()  # other tests' live hosts
    for n in range(2, 12):
        write_plugin(folder, "stamp", STAMP.format(version=f"v{n}"))
        assert host.check_for_changes() is True
        write_plugin(folder, "stamp", "syntax error(\n")
        assert host.check_for_changes() is False
    assert len(host.current.module_names()) == 1
    assert set(dropin_modules()) - before == host.current.module_names()
    host.close()
    assert set(dropin_modules()) == before


def test_no_unit_of_work_mixes_versions_while_reloads_happen(host: PluginHost, folder: Path) -> None:
    # Given a listener-like thread processing units of 5 messages as fast as it can
    stop = threading.Event()
    units: list[tuple[int, set[str]]] = []
    provider = host.chain_provider(listener(0))

    def listen() -> None:
        while not stop.is_set():
            chain = provider()
            versions = set()
            for i in range(5):
                out = chain.process(message(msg_id=f"m{i}"))
                assert out is not None
                versions.add(out.headers["plugin_version"])
            units.append((chain.unit, versions))

    thread = threading.Thread(target=listen)
    thread.start()
    try:
        # When the file is rewritten ten times while it runs
        for n in range(2, 12):
            write_plugin(folder, "stamp", STAMP.format(version=f"v{n}"))
            assert host.check_for_changes() is True
            # let the listener run a few units on this version (polling, with a deadline)
            count, deadline = len(units), time.monotonic() + 10
            while len(units) < count + 3 and thread.is_alive():
                assert time.monotonic() < deadline, "the listener thread stopped making progress"
                time.sleep(0.001)
    finally:
        stop.set()
        thread.join()
    # Then every unit ran one version, and versions only move forward in snapshot order
    assert all(len(versions) == 1 for _, versions in units)
    ordered = [int(versions.pop()[1:]) for _, versions in sorted(units)]
    assert ordered == sorted(ordered) and ordered[-1] == 11 and len(set(ordered)) >= 5


@pytest.mark.parametrize(("change", "kept"), [
    (lambda folder: write_plugin(folder, "stamp", "syntax error(\n"), Kept.NEW_VERSION_FAILED),
    (lambda folder: (folder / "stamp.py").chmod(0o666), Kept.UNSAFE),
    (lambda folder: (folder / "stamp.py").unlink(), Kept.STILL_NAMED),
])
def test_why_a_previous_version_is_kept_is_an_enum_in_the_status(host: PluginHost, folder: Path, change: Any,
                                                                 kept: Kept) -> None:
    change(folder)
    host.check_for_changes()
    (row,) = [r for r in host.status()["plugins"] if r["name"] == "stamp"]
    assert row["kept"] == kept.value and version(host) == "v1"
    assert {r["kept"] for r in host.describe() if r["name"] != "stamp"} == {None}
