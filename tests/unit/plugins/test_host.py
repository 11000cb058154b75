"""The plugin host without a broker: loading from every source, start-up validation, disabled
plugins, hookimpl validation and the StrictModes-like permission checks."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import mqbridge.preprocessors
from mqbridge import Message, hookimpl
from mqbridge.config import parse_config
from mqbridge.errors import ConfigError
from mqbridge.message import MessageResult
from mqbridge.plugins import PluginHost, ResultObserver
from mqbridge.plugins.discovery import BUILTIN_PLUGINS, check_safe_path, disabled_from_env
from mqbridge.plugins.generation import ChainRequest, requests_from_config
from tests.support.configs import orders_config
from tests.support.plugins import STAMP, dropin_modules, listener, make_host, message, request, write_plugin


# -- loading -------------------------------------------------------------------------------------
def test_builtins_folder_files_and_packages_are_loaded_the_same_way(tmp_path: Path) -> None:
    # Given a drop-in file and an installed package plugin (an entry point)
    write_plugin(tmp_path / "plugins", "stamp", STAMP.format(version="v1"))

    class Upper:
        @hookimpl
        def mqbridge_register_preprocessors(self, registry: Any) -> None:
            registry.add("upper", lambda _options: (lambda m: Message(m.msg_id, m.body.upper(), m.source,
                                                                      m.destination)))

    entry = SimpleNamespace(name="upper-plugin", value="upper_pkg:plugin", dist=SimpleNamespace(version="2.5"),
                            load=lambda: Upper())

    # When the host starts with a chain naming one preprocessor of each source
    host = make_host(tmp_path / "plugins", request("upper", "stamp", ("envelope", {"format": "json"})),
                     entry_points=lambda: [entry])
    host.start()

    # Then each plugin is listed with its source, version and preprocessors
    rows = {r["name"]: r for r in host.describe()}
    assert rows["envelope"]["source"] == "built-in" and rows["envelope"]["preprocessors"] == ["envelope"]
    assert rows["decode"]["source"] == "built-in" and rows["jsonpath"]["source"] == "built-in"
    assert rows["upper-plugin"]["source"] == "package" and rows["upper-plugin"]["version"] == "2.5"
    assert rows["stamp"]["source"] == "folder" and rows["stamp"]["version"] == "v1"
    assert rows["stamp"]["mtime"] and rows["stamp"]["path"].endswith("stamp.py")
    # And the chain runs them in the configured order
    out = host.chain(listener(0)).process(message(b"abc"))
    assert out is not None and out.headers["plugin_version"] == "v1"
    assert b'"body": "ABC"' in out.body and out.headers["mqbridge-envelope"] == "json"


def test_entry_points_naming_a_builtin_module_are_not_loaded_twice(tmp_path: Path) -> None:
    entry = SimpleNamespace(name="envelope", value="mqbridge.preprocessors.envelope", dist=None,
                            load=lambda: pytest.fail("must not load"))
    host = make_host(None, request("envelope"), entry_points=lambda: [entry])
    host.start()
    assert [r["name"] for r in host.describe()].count("envelope") == 1


def test_the_builtin_package_folder_as_plugin_dir_does_not_duplicate_builtins() -> None:
    host = make_host(Path(mqbridge.preprocessors.__file__).parent, request("envelope", "decode"))
    host.start()
    assert host.errors == []
    assert sorted(r["name"] for r in host.describe()) == ["decode", "envelope", "jsonpath"]


def test_unknown_preprocessor_is_a_config_error_naming_listener_and_plugin(tmp_path: Path) -> None:
    host = make_host(None, request("envelope", "nope", key=0))
    with pytest.raises(ConfigError) as info:
        host.start()
    text = str(info.value)
    assert "listeners[0] (amq:/queue/q0)" in text and "unknown preprocessor 'nope'" in text
    assert "known: decode, envelope, jsonpath" in text


@pytest.mark.parametrize(("options", "expected"), [
    ({"format": "yaml"}, "format: must be 'xml' or 'json'"),
    ({"fromat": "xml"}, "unknown option(s) fromat (accepted: format)"),
])
def test_invalid_options_are_a_config_error_naming_listener_and_plugin(options: dict[str, Any], expected: str) -> None:
    host = make_host(None, request(("envelope", options)))
    with pytest.raises(ConfigError) as info:
        host.start()
    assert "listeners[0] (amq:/queue/q0): preprocessor 'envelope' (plugin envelope)" in str(info.value)
    assert expected in str(info.value)


def test_options_reach_the_preprocessor_validated(tmp_path: Path) -> None:
    write_plugin(tmp_path, "stamp", STAMP.format(version="v1"))
    host = make_host(tmp_path, request(("stamp", {"header": "x-version"})))
    host.start()
    out = host.chain(listener(0)).process(message())
    assert out is not None and out.headers["x-version"] == "v1" and "plugin_version" not in out.headers


def test_a_broken_file_is_reported_with_file_and_line_and_named_in_the_config_error(tmp_path: Path) -> None:
    path = write_plugin(tmp_path, "stamp", "from mqbridge import hookimpl\n\ndef broken(:\n    pass\n")
    before = dropin_modules()
    host = make_host(tmp_path, request("stamp"))
    with pytest.raises(ConfigError) as info:
        host.start()
    assert f"{path}:3: SyntaxError" in str(info.value)
    assert dropin_modules() == before


def test_an_import_error_points_at_the_line_in_the_plugin(tmp_path: Path) -> None:
    path = write_plugin(tmp_path, "bad", "import os\n\nimport no_such_module_xyz\n")
    host = make_host(tmp_path)
    host.start()  # nothing names it: the bridge starts, the error is shown
    assert [str(e) for e in host.errors] == [
        f"{path}:3: ModuleNotFoundError: No module named 'no_such_module_xyz'"]
    assert host.status()["errors"][0]["line"] == 3
    assert any(r["name"] == "bad" and r["state"].startswith("error:") for r in host.describe())


@pytest.mark.parametrize(("code", "expected"), [
    ("def mqbridge_register_preprocessors(registry):\n    pass\n",
     "mqbridge_register_preprocessors is not marked with @hookimpl"),
    ("from mqbridge import hookimpl\n\n@hookimpl\ndef mqbridge_register_preprocesors(registry):\n    pass\n",
     "unknown hook 'mqbridge_register_preprocesors'"),
    ("from mqbridge import hookimpl\n\n@hookimpl\ndef mqbridge_classify(message, queue):\n    pass\n",
     "mqbridge_classify"),
    ("from mqbridge import hookimpl\n\n@hookimpl\ndef mqbridge_register_preprocessors(registry):\n"
     "    registry.add('envelope', lambda o: None)\n",
     "preprocessor 'envelope' is already registered by plugin 'envelope'"),
    ("from mqbridge import hookimpl\n\n@hookimpl\ndef mqbridge_register_preprocessors(registry):\n"
     "    raise RuntimeError('boom')\n",
     "mqbridge_register_preprocessors failed: RuntimeError: boom"),
])
def test_hookimpl_validation_errors_are_load_errors(tmp_path: Path, code: str, expected: str) -> None:
    write_plugin(tmp_path, "faulty", code)
    host = make_host(tmp_path)
    host.start()
    assert len(host.errors) == 1 and expected in host.errors[0].message, host.errors
    assert host.errors[0].path == str(tmp_path / "faulty.py") and host.errors[0].line
    assert "faulty" not in {r["name"] for r in host.describe() if r["state"] == "loaded"}


def test_disabled_plugins_are_never_run(tmp_path: Path) -> None:
    # Given a drop-in that would fail loudly if it ran, and the env var naming it and a built-in
    write_plugin(tmp_path, "evil", "raise SystemExit('ran')\n")
    disabled = disabled_from_env({"MQBRIDGE_DISABLED_PLUGINS": " evil, decode ,"})
    assert disabled == {"evil", "decode"}
    host = make_host(tmp_path, request("envelope"), disabled=disabled)
    host.start()
    assert host.errors == []
    rows = {r["name"]: r for r in host.describe()}
    assert rows["evil"]["state"] == rows["decode"]["state"] == "disabled by MQBRIDGE_DISABLED_PLUGINS"
    # And naming a disabled plugin's preprocessor says why it is unknown
    host = make_host(tmp_path, request("decode"), disabled=disabled)
    with pytest.raises(ConfigError, match="plugin 'decode' is disabled by MQBRIDGE_DISABLED_PLUGINS"):
        host.start()


def test_disabled_plugins_default_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MQBRIDGE_DISABLED_PLUGINS", "jsonpath")
    host = PluginHost([], [], entry_points=lambda: [])
    host.start()
    assert "jsonpath" not in {r["name"] for r in host.describe() if r["state"] == "loaded"}


def test_files_starting_with_underscore_or_not_python_are_ignored(tmp_path: Path) -> None:
    write_plugin(tmp_path, "_helper", "raise RuntimeError('not a plugin')\n")
    (tmp_path / "notes.txt").write_text("hello")
    host = make_host(tmp_path)
    host.start()
    assert host.errors == [] and len(host.describe()) == 3


def test_a_missing_plugin_folder_is_reported(tmp_path: Path) -> None:
    host = make_host(tmp_path / "nope")
    host.start()
    assert "does not exist" in str(host.errors[0])


def test_requests_from_config_accept_names_and_tables() -> None:
    text = orders_config(listener='preprocessors = ["decode", {name = "envelope", format = "json"}]')
    text = text.replace("/queue/orders\"", "/queue/a\"", 1)
    text += '[[listeners]]\nsource = "amq"\nqueue = "/queue/b"\nmessage_type = "orders"\nbackout_threshold = 0\n'
    assert requests_from_config(parse_config(text)) == [
        ChainRequest("amq:/queue/a", "listeners[0] (amq:/queue/a)",
                     (("decode", {}), ("envelope", {"format": "json"}))),
        ChainRequest("amq:/queue/b", "listeners[1] (amq:/queue/b)", ()),
    ]


def test_routing_to_an_unconfigured_type_is_a_config_error() -> None:
    host = make_host(None, request(("jsonpath", {"path": "$.kind", "types": {"a": "orders", "b": "nope"}})),
                     known_types=["orders"])
    with pytest.raises(ConfigError, match=r"routes to unconfigured message type\(s\) nope"):
        host.start()


# -- safety --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("mode", "why"), [(0o664, "is group-writable (mode 0664)"),
                                           (0o646, "is world-writable (mode 0646)")])
def test_writable_plugin_files_are_refused(tmp_path: Path, mode: int, why: str) -> None:
    path = write_plugin(tmp_path, "stamp", STAMP.format(version="v1"), mode=mode)
    host = make_host(tmp_path, request("stamp"))
    with pytest.raises(ConfigError) as info:
        host.start()
    assert f"refusing to load plugins from {path}: {path} {why}" in str(info.value)


@pytest.mark.parametrize(("mode", "why"), [(0o775, "group-writable (mode 0775)"),
                                           (0o757, "world-writable (mode 0757)"),
                                           (0o1777, "world-writable (mode 1777)")])
def test_a_writable_plugin_folder_refuses_the_start_even_if_no_chain_names_its_plugins(
        tmp_path: Path, mode: int, why: str) -> None:
    # Given a writable plugin folder (sticky bit or not) whose plugin no listener names
    folder = tmp_path / "plugins"
    write_plugin(folder, "stamp", STAMP.format(version="v1"))
    folder.chmod(mode)
    host = make_host(folder, request("envelope"))
    # Then the start is refused with the folder and why
    with pytest.raises(ConfigError) as info:
        host.start()
    assert f"unsafe plugin path: refusing to load plugins from {folder}: {folder} is {why}" in str(info.value)
    # (a listing does not start the bridge: it shows the folder as not loaded)
    listing = make_host(folder, request("envelope"))
    listing.start(strict=False)
    assert len(listing.errors) == 1 and "stamp" not in {r["name"] for r in listing.describe()}


def test_a_writable_directory_above_the_folder_is_refused_unless_sticky(tmp_path: Path) -> None:
    parent = tmp_path / "shared"
    folder = parent / "plugins"
    write_plugin(folder, "stamp", STAMP.format(version="v1"))
    parent.chmod(0o777)
    with pytest.raises(Exception, match=f"{parent} \\(a directory above {folder}\\) is world-writable"):
        check_safe_path(folder, 0)
    parent.chmod(0o1777)  # like /tmp: others cannot replace what they do not own
    check_safe_path(folder, 0)
    check_safe_path(folder / "stamp.py", 0)


def test_a_symlinked_file_is_checked_where_it_really_lives(tmp_path: Path) -> None:
    unsafe = tmp_path / "unsafe"
    target = write_plugin(unsafe, "real", STAMP.format(version="v1"))
    unsafe.chmod(0o777)
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "stamp.py").symlink_to(target)
    host = make_host(folder)
    with pytest.raises(ConfigError, match="unsafe plugin path"):
        host.start()
    assert f"{unsafe} (a directory above {folder / 'stamp.py'}) is world-writable" in str(host.errors[0])


@pytest.mark.parametrize(("owner", "service_uid", "refused"), [
    (0, 4242, False),  # root may own plugin files of any service user
    (4242, 4242, False),  # the service user itself
    (4343, 4242, True),  # someone else
    (4343, 0, True),
])
def test_plugin_files_must_belong_to_the_service_user_or_root(tmp_path: Path, owner: int, service_uid: int,
                                                              refused: bool) -> None:
    if os.geteuid() != 0:
        pytest.skip("changing a file's owner needs root")
    path = write_plugin(tmp_path / "plugins", "stamp", STAMP.format(version="v1"))
    os.chown(path, owner, owner)
    host = make_host(tmp_path / "plugins", service_uid=service_uid)
    if refused:
        with pytest.raises(ConfigError, match=f"unsafe plugin path: refusing to load plugins from {path}"):
            host.start()
    else:
        host.start()
    loaded = "stamp" in {r["name"] for r in host.describe() if r["state"] == "loaded"}
    assert loaded is not refused
    if refused:
        assert f"{path} is owned by uid {owner}" in str(host.errors[0])
        assert f"not by the service user (uid {service_uid}" in str(host.errors[0])


def test_a_folder_owned_by_someone_else_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("changing a directory's owner needs root")
    folder = tmp_path / "plugins"
    write_plugin(folder, "stamp", STAMP.format(version="v1"))
    os.chown(folder, 4343, 4343)
    host = make_host(folder, service_uid=4242)
    with pytest.raises(ConfigError, match="unsafe plugin path"):
        host.start()
    assert f"{folder}: {folder} is owned by uid 4343" in str(host.errors[0])


# -- built-ins -----------------------------------------------------------------------------------
def test_the_builtins_are_declared_once_and_the_entry_points_agree() -> None:
    # pyproject's `[project.entry-points.mqbridge]` lists the built-ins so the installed metadata
    # names every plugin; it must list exactly BUILTIN_PLUGINS, which the host loads.
    import importlib.metadata

    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    pyproject = tomllib.loads((Path(__file__).resolve().parents[3] / "pyproject.toml").read_text())
    declared = pyproject["project"]["entry-points"]["mqbridge"]
    assert declared == {module.rsplit(".", 1)[-1]: module for module in BUILTIN_PLUGINS}
    installed = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="mqbridge")}
    assert {name: installed.get(name) for name in declared} == declared, "reinstall: metadata is stale"
    # And the preprocessors package documents no list of its own to keep in step
    assert "BUILTIN_PLUGINS" in (mqbridge.preprocessors.__doc__ or "")


# -- the plugins' result hook ----------------------------------------------------------------------
def test_the_result_observer_hands_a_bulks_results_to_the_hook_once_each_and_counts_what_it_raises(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Given a folder plugin implementing mqbridge_result that records ids and raises for one
    write_plugin(tmp_path, "seen", "from mqbridge import hookimpl\nSEEN = []\n"
                 "@hookimpl\ndef mqbridge_result(message, result):\n"
                 "    SEEN.append(message.msg_id)\n"
                 "    if message.msg_id == 'bad':\n        raise ValueError('no')\n")
    host = make_host(tmp_path)
    host.start()
    observer = ResultObserver(host)
    results = [(message(b"x", msg_id=msg_id), MessageResult.success(msg_id)) for msg_id in ("a", "bad", "b")]
    # When the collector hands it a bulk's results at once, then one result on its own
    observer.many(results)
    observer(*results[2])
    # Then the hook saw each of them, in order, the one that raised too
    (module,) = [sys.modules[name] for name in dropin_modules() if "seen" in name]
    assert module.SEEN == ["a", "bad", "b", "b"]
    assert sum(host.counters.snapshot()["counters"]["plugin_observer_errors"].values()) == 1
    assert "mqbridge_result hook failed (logged once): ValueError: no" in caplog.text


def test_the_result_observer_does_nothing_when_no_plugin_implements_the_hook(tmp_path: Path) -> None:
    host = make_host(tmp_path)
    host.start()
    ResultObserver(host).many([(message(b"x", msg_id="a"), MessageResult.success("a"))])
    assert not host.counters.snapshot()["counters"].get("plugin_observer_errors")
