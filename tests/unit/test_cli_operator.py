"""The operator's command line: validated options, help with examples and exit codes, commands that
need no secret do not ask for one, the ledger read-only, purge saying it starts Spark, headers and
normalised paths."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from mqbridge.cli import build_parser, main
from mqbridge.commands.help import commands_with_help
from mqbridge.errors import BridgeError, LedgerError, LedgerUnavailableError
from mqbridge.landing.ledger import SqliteLedger, ledger_path, owner_id

#: A configuration whose secrets come from an environment and a file this shell does not have.
WITH_SECRETS = """\
[bridge]
plugin_dirs = []
state_dir = "../state"
[monitoring]
token = "${FILE:/nonexistent/mqbridge-token}"
[spark]
warehouse = "../data"
[types.orders]
[sources.amq]
kind = "stomp"
user = "bridge"
password = "${ENV:MQBRIDGE_TEST_UNSET_PASSWORD}"
[[listeners]]
source = "amq"
queue = "/queue/orders"
message_type = "orders"
backout_queue = "/queue/orders.backout"
"""


def write(tmp_path: Path, text: str = WITH_SECRETS) -> Path:
    """The file in a sub-directory, so its relative paths go through `config/..`."""
    path = tmp_path / "config" / "bridge.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return path


def test_log_level_is_validated_in_any_case(capsys: pytest.CaptureFixture[str]) -> None:
    assert build_parser().parse_args(["run", "-c", "x.toml", "--log-level", "debug"]).log_level == "DEBUG"
    with pytest.raises(SystemExit) as info:
        main(["run", "-c", "x.toml", "--log-level", "LOUD"])
    assert info.value.code == 2
    assert "argument --log-level: invalid choice: 'LOUD' (choose from 'DEBUG', 'INFO', 'WARNING', 'ERROR')" \
        in capsys.readouterr().err


@pytest.mark.parametrize("command", commands_with_help())
def test_each_subcommand_help_has_a_description_an_example_and_exit_codes(
        command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert f"\nexample:\n  mqbridge {command}" in out
    assert "\nexit codes:\n  0  " in out
    assert "2  configuration error" in out or "2  the file cannot be read" in out


def test_tables_needs_no_secret_and_prints_normalised_paths(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tables", "--config", str(write(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"warehouse: {(tmp_path / 'data').resolve()}\n"), out  # not .../config/../data


def test_plugins_needs_no_secret_and_has_a_header(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins", "--config", str(write(tmp_path))]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["NAME", "SOURCE", "VERSION", "PREPROCESSORS", "STATE"]


def test_ledger_reads_without_secrets_and_writes_nothing(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    # Given a ledger a bridge wrote (its heartbeat as owner "bridge-owner")
    path = ledger_path(tmp_path / "state")
    ledger = SqliteLedger.open(path, owner="bridge-owner")
    ledger.prepare("b1", "orders", [], ["m1"])
    ledger.heartbeat()
    ledger.close()
    before = path.read_bytes()
    # When the ledger command looks at it, with the service's secrets missing
    assert main(["ledger", "--config", str(write(tmp_path))]) == 0
    # Then it printed the counts under the normalised path and wrote nothing (no heartbeat of its own)
    out = capsys.readouterr().out
    assert out.startswith(f"ledger: {path.resolve()}\n") and "1 prepared, 0 published" in out
    assert path.read_bytes() == before
    with sqlite3.connect(path) as db:
        assert [row[0] for row in db.execute("SELECT owner FROM owners")] == ["bridge-owner"]


def test_a_ledger_opened_read_only_refuses_writes(tmp_path: Path) -> None:
    path = ledger_path(tmp_path / "state")
    SqliteLedger.open(path, owner=owner_id()).close()
    ledger = SqliteLedger.open_read_only(path, owner=owner_id())
    try:
        assert ledger.stats().identities == 0
        with pytest.raises((LedgerError, LedgerUnavailableError), match="readonly database"):
            ledger.heartbeat()
    finally:
        ledger.close()
    with pytest.raises(LedgerError, match="cannot open read-only"):
        SqliteLedger.open_read_only(tmp_path / "missing.sqlite3", owner=owner_id())


def test_a_postgresql_ledger_url_it_needs_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = WITH_SECRETS.replace("[spark]", "[ledger]\nurl = '${ENV:MQBRIDGE_TEST_UNSET_URL}'\n[spark]")
    assert main(["ledger", "--config", str(write(tmp_path, text))]) == 2
    assert "ledger.url: environment variable MQBRIDGE_TEST_UNSET_URL is not set (this command needs it)" \
        in capsys.readouterr().err


def test_purge_dry_run_says_it_starts_spark_before_it_does(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    def no_spark(**_kwargs: object) -> None:
        raise BridgeError("no Spark in unit tests")

    monkeypatch.setattr("mqbridge.landing.create_spark_session", no_spark)
    assert main(["purge", "--config", str(write(tmp_path)), "--older-than", "30d", "--dry-run"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "dry run: nothing is changed; starting Spark (local[*]) to count the designated rows\n"
    assert "no Spark in unit tests" in captured.err


def test_purge_needs_a_spark_secret_but_not_a_source_password(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    text = WITH_SECRETS.replace('warehouse = "../data"', 'warehouse = "../data"\nremote = "sc://h:15002/;token=${ENV:'
                                                         'MQBRIDGE_TEST_UNSET_TOKEN}"')
    assert main(["purge", "--config", str(write(tmp_path, text)), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "spark.remote: environment variable MQBRIDGE_TEST_UNSET_TOKEN is not set (this command needs it)" in err


def test_status_needs_the_monitoring_token_but_no_other_secret(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    # The token it sends must be there; a source password it never uses need not be
    assert main(["status", "--config", str(write(tmp_path)), "--timeout", "1s"]) == 2
    err = capsys.readouterr().err
    assert "monitoring.token:" in err and "(this command needs it)" in err and "sources.amq" not in err
    without_token = WITH_SECRETS.replace('token = "${FILE:/nonexistent/mqbridge-token}"', 'listen = "127.0.0.1:1"')
    assert main(["status", "--config", str(write(tmp_path, without_token)), "--timeout", "1s"]) == 3
    assert "sources.amq" not in capsys.readouterr().err
