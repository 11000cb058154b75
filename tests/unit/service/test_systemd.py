"""The systemd unit: rendered from a configuration, checked by systemd's own `systemd-analyze
verify`, installed and removed by `mqbridge service`."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from mqbridge.cli import main
from mqbridge.config import load_config
from mqbridge.service.systemd import UnitSpec, quote, render_unit, unit_name
from mqbridge.strict_modes import check_trusted
from tests.support.configs import orders


def write_config(folder: Path, *, name: str = "orders", state: str = "state", log: str = "log/bridge.log",
                 warehouse: str = "landing") -> Path:
    toml = (orders()
            .set("bridge", name=name, shutdown_timeout="45s", control_interval="5s", state_dir=state,
                 plugin_dirs=[])
            .set("logging", file=log).set("spark", warehouse=warehouse))
    return toml.write(folder / "bridge.toml")


def executable(path: Path) -> Path:
    """A real executable file for ExecStart (systemd-analyze verify checks that it exists)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


def settings(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            out.setdefault(key, []).append(value)
    return out


def verify(unit: Path) -> subprocess.CompletedProcess[str]:
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing: scripts/setup.sh installs Debian's systemd package"
    return subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60)


def test_unit_has_the_service_settings(tmp_path: Path) -> None:
    # Given a configuration with warehouse, state and log directories
    config_file = write_config(tmp_path / "etc", warehouse="/srv/mqbridge/landing", state="/var/lib/mqbridge",
                               log="/var/log/mqbridge/bridge.log")
    spec = UnitSpec.from_config(load_config(config_file), config_file, user="svc",
                                command=["/opt/mqbridge/bin/mqbridge"])
    spec.readable = [Path("/opt/mqbridge/bin/mqbridge"), Path("/etc/mqbridge/bridge.toml")]

    # When the unit is rendered
    unit = settings(render_unit(spec))

    # Then it is a notify service with a watchdog, reload by SIGHUP, a stop timeout beyond the
    # drain, and the hardening with exactly the configured directories writable
    assert unit["Type"] == ["notify"] and unit["NotifyAccess"] == ["main"]
    assert unit["ExecStart"] == [f"/opt/mqbridge/bin/mqbridge run --config {config_file}"]
    assert unit["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    assert unit["Restart"] == ["on-failure"] and unit["User"] == ["svc"]
    assert unit["WatchdogSec"] == ["60s"] and unit["TimeoutStopSec"] == ["75s"]
    assert unit["KillMode"] == ["mixed"]
    assert unit["NoNewPrivileges"] == ["yes"] and unit["ProtectSystem"] == ["strict"]
    assert unit["ReadWritePaths"] == ["/srv/mqbridge/landing /var/lib/mqbridge /var/log/mqbridge"]
    assert unit["PrivateTmp"] == ["yes"] and unit["ProtectHome"] == ["yes"]
    assert unit["WorkingDirectory"] == ["/var/lib/mqbridge"]


def test_home_and_tmp_are_opened_only_when_the_service_needs_them() -> None:
    spec = UnitSpec(name="x", command=["/home/ops/venv/bin/mqbridge"], config_file=Path("/etc/x.toml"), user="ops",
                    shutdown_timeout=30, watchdog=60, writable=[Path("/tmp/landing")],
                    readable=[Path("/home/ops/venv/bin/mqbridge")])
    unit = settings(render_unit(spec))
    assert unit["ProtectHome"] == ["read-only"] and unit["PrivateTmp"] == ["no"]


def test_the_monitoring_tls_files_are_paths_the_service_reads(tmp_path: Path) -> None:
    toml = (orders().set("bridge", state_dir="/var/lib/mqbridge", plugin_dirs=[]).set("spark", warehouse="/srv/l")
            .set("monitoring", tls_cert="/home/ops/tls/mon.pem", tls_key="tls/mon.key"))
    config_file = toml.write(tmp_path / "bridge.toml")
    spec = UnitSpec.from_config(load_config(config_file), config_file, command=["/opt/mqbridge/bin/mqbridge"])
    assert {Path("/home/ops/tls/mon.pem"), tmp_path / "tls" / "mon.key"} <= set(spec.readable)
    assert settings(render_unit(spec))["ProtectHome"] == ["read-only"]  # the certificate lives under /home


def test_quote_for_systemd() -> None:
    assert quote("/srv/a-b_c/x.toml") == "/srv/a-b_c/x.toml"
    assert quote("/srv/100%/a b") == '"/srv/100%%/a b"'
    assert quote("/a/$HOME", command=True) == '"/a/$$HOME"'
    assert quote('/a/"q"\\') == '"/a/\\"q\\"\\\\"'
    assert unit_name("orders east/1") == "mqbridge-orders-east-1.service"


def test_rendered_unit_passes_systemd_analyze_verify_with_awkward_paths(tmp_path: Path) -> None:
    # Given an installation and a configuration under paths with spaces, % and $
    odd = tmp_path / "opt dir 100% $HOME"
    command = executable(odd / "venv" / "bin" / "mqbridge")
    config_file = write_config(odd / "etc", warehouse="land ing")
    spec = UnitSpec.from_config(load_config(config_file), config_file, user="root", command=[str(command)])
    unit = tmp_path / spec.unit_name
    unit.write_text(render_unit(spec))

    # Then systemd's own parser accepts it (and finds the executable through the quoting)
    result = verify(unit)
    assert result.returncode == 0, result.stdout + result.stderr

    # And a unit whose executable does not exist is rejected: the check is real
    command.unlink()
    assert verify(unit).returncode != 0


def test_cli_prints_installs_and_removes_the_unit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config_file = write_config(tmp_path / "etc", name="east")
    units = tmp_path / "units"
    (units / "multi-user.target.wants").mkdir(parents=True)

    # --print writes nothing and prints the unit from the loaded configuration
    assert main(["service", "install", "--systemd", "--config", str(config_file), "--user", "root", "--print"]) == 0
    printed = capsys.readouterr().out
    assert "Type=notify" in printed and f"--config {config_file}" in printed
    assert not (tmp_path / "etc" / "state").exists()

    # install writes the unit and creates the writable directories
    assert main(["service", "install", "--systemd", "--config", str(config_file), "--user", "root",
                 "--unit-dir", str(units)]) == 0
    out = capsys.readouterr().out
    unit = units / "mqbridge-east.service"
    assert unit.read_text() == printed
    assert "systemctl daemon-reload && systemctl enable --now mqbridge-east.service" in out
    for directory in ("state", "landing", "log"):
        assert (tmp_path / "etc" / directory).is_dir()
    result = verify(unit)
    assert result.returncode == 0, result.stdout + result.stderr

    # remove deletes it (and the enablement symlink) and says what to run
    link = units / "multi-user.target.wants" / unit.name
    os.symlink(unit, link)
    assert main(["service", "remove", "--systemd", "--config", str(config_file), "--unit-dir", str(units)]) == 0
    out = capsys.readouterr().out
    assert not unit.exists() and not link.is_symlink()
    assert "systemctl daemon-reload" in out and "systemctl stop mqbridge-east.service" in out


def test_cli_refuses_what_cannot_work_here(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config_file = write_config(tmp_path / "etc")
    assert main(["service", "install", "--windows", "--config", str(config_file)]) == 1
    assert "only works on Windows" in capsys.readouterr().err
    assert main(["service", "install", "--systemd", "--config", str(config_file), "--user", "no-such-user-x",
                 "--unit-dir", str(tmp_path)]) == 1
    assert "does not exist" in capsys.readouterr().err
    assert main(["service", "start", "--systemd", "--config", str(config_file)]) == 1
    assert "systemctl start mqbridge-orders.service" in capsys.readouterr().err
    assert main(["service", "install", "--systemd", "--config", str(tmp_path / "missing.toml"), "--print"]) == 2


def test_install_creates_the_state_dir_private_whatever_the_umask(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # Given a configuration whose directories do not exist yet, and a umask that makes new
    # directories group-writable (the default of many distributions for ordinary users)
    config_file = write_config(tmp_path / "etc", state="lib/state")
    previous = os.umask(0o002)
    try:
        # When the service is installed
        assert main(["service", "install", "--systemd", "--config", str(config_file), "--user", "root",
                     "--unit-dir", str(tmp_path)]) == 0
    finally:
        os.umask(previous)
    # Then the state_dir is the service user's alone (0700, the bridge's own rule: strict_modes), so
    # the bridge's start-up check accepts it; the warehouse and the log directory, which readers of
    # the tables and the logs may need, follow the umask
    state = tmp_path / "etc" / "lib" / "state"
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    check_trusted(state, "state_dir")
    assert stat.S_IMODE((tmp_path / "etc" / "lib").stat().st_mode) == 0o775  # a parent: as the umask says
    for directory in ("landing", "log"):
        assert stat.S_IMODE((tmp_path / "etc" / directory).stat().st_mode) == 0o775
    assert f"created {state}" in capsys.readouterr().out


def test_the_follow_unit_runs_mqbridge_follow_as_a_simple_service_beside_the_bridge(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Given a configuration with a forward (and one without)
    command = executable(tmp_path / "venv" / "bin" / "mqbridge")
    plain = write_config(tmp_path / "etc", name="east")
    config_file = plain.parent / "forwarding.toml"
    config_file.write_text(plain.read_text() + '\n[[forwards]]\nname = "out"\ntable = "orders"\nsource = "amq"\n'
                                               'to = ["/queue/billing"]\n')
    units = tmp_path / "units"
    units.mkdir()

    # When the follow unit is rendered and installed
    spec = UnitSpec.from_config(load_config(config_file), config_file, user="root", command=[str(command)],
                                subcommand="follow")
    unit = settings(render_unit(spec))
    assert main(["service", "install", "--systemd", "--follow", "--config", str(config_file), "--user", "root",
                 "--unit-dir", str(units)]) == 0

    # Then it is mqbridge-<name>-follow.service, a simple service (follow sends no sd_notify) that runs
    # `follow`, with the bridge's hardening; systemd's parser accepts it; remove --follow deletes it
    assert spec.unit_name == "mqbridge-east-follow.service"
    assert unit["Type"] == ["simple"] and "WatchdogSec" not in unit and "ExecReload" not in unit
    assert unit["ExecStart"] == [f"{command} follow --config {config_file}"]
    assert unit["ProtectSystem"] == ["strict"] and unit["KillMode"] == ["mixed"]
    assert "enable --now mqbridge-east-follow.service" in capsys.readouterr().out
    installed = units / "mqbridge-east-follow.service"
    result = verify(installed)
    assert result.returncode == 0, result.stdout + result.stderr
    assert main(["service", "remove", "--systemd", "--follow", "--config", str(config_file),
                 "--unit-dir", str(units)]) == 0
    assert not installed.exists()

    # And a configuration without [[forwards]] gets no follow unit
    assert main(["service", "install", "--systemd", "--follow", "--config", str(plain), "--user", "root",
                 "--unit-dir", str(units)]) == 1
    assert "no [[forwards]]" in capsys.readouterr().err
    # and a Windows service runs `mqbridge run` only
    assert main(["service", "install", "--windows", "--follow", "--config", str(config_file)]) == 1
    assert "--follow writes a systemd unit" in capsys.readouterr().err
