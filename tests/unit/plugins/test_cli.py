"""`mqbridge plugins [--config FILE]` and the chain check in `mqbridge check-config`."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqbridge.cli import main
from tests.support.configs import BridgeToml, orders
from tests.support.plugins import STAMP, write_plugin


def with_chain(chain: str) -> BridgeToml:
    """`orders` with plugins from `plugins` beside the file and this preprocessor chain."""
    return (orders(listener=f"preprocessors = [{chain}]")
            .set("bridge", name="plugins", plugin_dirs=["plugins"]).set("monitoring", listen=""))


def config(tmp_path: Path, chain: str) -> Path:
    return with_chain(chain).write(tmp_path / "bridge.toml")


def test_plugins_without_config_lists_the_builtins(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    for name in ("envelope", "decode", "jsonpath"):
        assert f"  {name:<16} built-in" in out


def test_plugins_lists_folder_plugins_errors_and_chains(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_plugin(tmp_path / "plugins", "stamp", STAMP.format(version="v1"))
    broken = write_plugin(tmp_path / "plugins", "broken", "x = (\n")
    unsafe = write_plugin(tmp_path / "plugins", "unsafe", "X = 1\n", mode=0o664)
    path = config(tmp_path, '"stamp", {name = "envelope", format = "json"}')

    assert main(["plugins", "--config", str(path)]) == 1  # a plugin failed to load
    out = capsys.readouterr().out
    assert "  stamp            folder    v1 mtime 20" in out and "stamp                loaded" in out
    assert f"  {broken}:1: SyntaxError" in out
    assert f"refusing to load plugins from {unsafe}: {unsafe} is group-writable (mode 0664)" in out
    assert "listeners[0] (amq:/queue/orders): stamp -> envelope" in out


def test_plugins_reports_chain_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "plugins").mkdir()
    path = config(tmp_path, '{name = "envelope", format = "yaml"}')
    assert main(["plugins", "--config", str(path)]) == 1
    assert "chain errors:\n  listeners[0] (amq:/queue/orders): preprocessor 'envelope'" in capsys.readouterr().out


def test_check_config_rejects_an_unknown_preprocessor(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "plugins").mkdir()
    assert main(["check-config", str(config(tmp_path, '"envelope"'))]) == 0
    assert main(["check-config", str(config(tmp_path, '"nope"'))]) == 1  # a problem found, not an unreadable file
    assert "listeners[0].preprocessors: unknown preprocessor 'nope'" in capsys.readouterr().out


def test_the_default_plugin_folder_may_be_missing_a_configured_one_may_not(tmp_path: Path) -> None:
    from mqbridge.plugins import PluginHost

    toml = with_chain('"envelope"')
    host = PluginHost.from_config(toml.set("bridge", plugin_dirs=None).parse(tmp_path / "a.toml"))
    host.start()
    assert host.plugin_dirs == [tmp_path / "preprocessors"] and host.errors == []
    host = PluginHost.from_config(toml.parse(tmp_path / "a.toml"))
    host.start()
    assert f"plugin folder {tmp_path / 'plugins'} does not exist" in str(host.errors[0])
