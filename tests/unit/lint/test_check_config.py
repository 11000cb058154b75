"""`mqbridge check-config` as a linter: everything `run` would refuse, one problem per line on the
line of its key, without a broker or Spark; the warnings `run` gives; exit codes 0, 1, 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqbridge.cli import main
from mqbridge.lint import lint_text
from mqbridge.lint.findings import KeyLines
from tests.unit.lint.texts import BASE, check


def test_a_good_file_is_ok_by_either_spelling(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = check(tmp_path, capsys, BASE)
    assert code == 0 and lines == ["bridge.toml: OK (1 sources, 1 types, 1 listeners, 1 listener threads)"]
    # The positional form of earlier versions still works.
    assert main(["check-config", str(tmp_path / "bridge.toml")]) == 0


def test_every_problem_is_one_line_at_its_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Given three mistakes in three tables
    text = BASE.replace("[types.orders]", "[types.orders]\nbulk_size = -5\nbulk_timout = '5s'")
    text = text.replace('kind = "stomp"', 'kind = "stomp"\nport = 0')
    # When it is checked
    code, lines = check(tmp_path, capsys, text)
    # Then each is on its own line, at the key's line, in the file's words
    assert code == 1
    assert lines == [
        "bridge.toml:6: types.orders.bulk_size: -5 is negative (use e.g. 512KB, 5MB, 1GB)",
        "bridge.toml:7: types.orders.bulk_timout: unknown key — did you mean bulk_timeout?",
        "bridge.toml:10: sources.amq.port: must be 1 or more",
        "bridge.toml: 3 errors",
    ]


@pytest.mark.parametrize("change, expected", [
    # MQ's CONNAME is host(port); host:port would fail only at connect.
    (("[sources.amq]\nkind = \"stomp\"", '[sources.amq]\nkind = "mq"\nqueue_manager = "QM1"\nconn_name = "mq:1414"'),
     "bridge.toml:9: sources.amq.conn_name: 'mq:1414' is host:port; IBM MQ writes the port in brackets — "
     "write mq(1414)"),
    (("[monitoring]", "[spark]\nremote = 'sc://spark host:15002'\n[monitoring]"),
     "bridge.toml:4: spark.remote: 'sc://spark host:15002' is not a Spark Connect URL"),
    (("[types.orders]", "[types.orders]\nformat = 'json'\nschema = 'id STRNG'"),
     "bridge.toml:7: types.orders.schema: not a Spark DDL column list: expected a Spark type"),
    (("[types.orders]", "[types.orders]\nformat = 'json'\nschema = 'msg_id STRING'"),
     "bridge.toml:7: types.orders.schema: column 'msg_id' clashes with a landed column"),
    (("[types.orders]", "[types.orders]\nformat = 'xml'\nkeep_body = true\nschema = 'body_text STRING'"),
     "bridge.toml:8: types.orders.schema: column 'body_text' clashes with a landed column"),
    (("kind = \"stomp\"", 'kind = "stomp"\nssl = true\nca_certs = "ca.pem"'),
     "bridge.toml:9: sources.amq.ca_certs: {tmp}/ca.pem: no such file or directory — write the path of the file"),
    # state_dir whose parent is a regular file: mkdir would fail at start (even for root).
    (("plugin_dirs = []", 'plugin_dirs = []\nstate_dir = "bridge.toml/state"'),
     "bridge.toml:3: bridge.state_dir: bridge.toml/state cannot be created: bridge.toml is not a directory — "
     "choose another path"),  # (the test shows the file's own path as bridge.toml)
    # A warehouse under a pseudo file system: the permission bits allow it (root), mkdir does not, and
    # `run` would meet that as a sink outage and wait for ever.
    (("[monitoring]", "[spark]\nwarehouse = '/proc/mqbridge-test/landing'\n[monitoring]"),
     "bridge.toml:4: spark.warehouse: /proc/mqbridge-test/landing cannot be created: /proc refuses new "
     "directories"),
    (("[monitoring]", "[logging]\nfile = '.'\n[monitoring]"),
     "bridge.toml:4: logging.file: {tmp} is a directory — name a file in it"),
    (("plugin_dirs = []", 'plugin_dirs = ["plugins"]'),
     "bridge.toml:2: bridge.plugin_dirs[0]: {tmp}/plugins: no such file or directory"),
    (("kind = \"stomp\"", 'kind = "stomp"\npassword = "${ENV:MQBRIDGE_UNSET_FOR_TEST}"'),
     "bridge.toml:8: sources.amq.password: environment variable MQBRIDGE_UNSET_FOR_TEST is not set — run "
     "check-config with the service's environment"),
    (("message_type = \"orders\"", 'message_type = "orders"\npreprocessors = ["nope"]'),
     "bridge.toml:12: listeners[0].preprocessors: unknown preprocessor 'nope' (known: decode, envelope,"),
])
def test_what_run_would_refuse_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           change: tuple[str, str], expected: str) -> None:
    code, lines = check(tmp_path, capsys, BASE.replace(*change))
    assert code == 1
    assert lines[0].startswith(expected.format(tmp=tmp_path)), lines


def test_an_mq_source_without_a_driver_says_which_extra(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("mqbridge.lint.environment._MQ_DRIVERS", ("mqbridge_no_such_driver",))
    text = BASE.replace('kind = "stomp"', 'kind = "mq"\nqueue_manager = "QM1"\nconn_name = "mq(1414)"')
    code, lines = check(tmp_path, capsys, text)
    assert code == 1
    assert lines[0].startswith("bridge.toml:7: sources.amq.kind: an IBM MQ source needs an MQ driver: "
                               "mqbridge_no_such_driver: No module named")
    assert lines[0].endswith('— pip install "mqbridge[ibmmq]" (or "mqbridge[pymqi]"); both need IBM\'s MQ '
                             "client library on the library path")


def test_warnings_run_gives_pass_unless_strict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Given RabbitMQ with the default identity, an /amq/queue/ backout queue and two types sharing a table
    text = BASE.replace('kind = "stomp"', 'kind = "stomp"\nbroker = "rabbitmq"\nhost = "rabbit.example"')
    text = text.replace("/queue/orders.backout", "/amq/queue/orders.backout")
    text += '[types.audit]\ntable = "orders"\n'
    code, lines = check(tmp_path, capsys, text)
    assert code == 0
    assert lines[:4] == [
        "bridge.toml:6: warning: sources.amq.user: RabbitMQ's default guest identity (by default RabbitMQ accepts "
        "guest over loopback only; rabbit.example is not loopback) — create a user for the bridge and set "
        'user = "mqbridge", password = "${ENV:MQBRIDGE_PASSWORD}"',
        # the line of the listener: it has no identity key (the default, msg_id: per delivery on RabbitMQ)
        "bridge.toml:10: warning: listeners[0].identity: amq:/queue/orders: RabbitMQ gives no stable message id; "
        "without a producer id a crash between landing and the source commit lands the unit again (at-least-once, "
        'counted in mqbridge_possible_duplicates_total) — set identity = "header:NAME" for exactly-once',
        "bridge.toml:14: warning: listeners[0].backout_queue: '/amq/queue/orders.backout': RabbitMQ drops a "
        "message sent to an /amq/queue/ queue that does not exist, so a move to the backout queue can be lost "
        "— write /queue/orders.backout (declared durable on first use)",
        "bridge.toml:16: warning: types.audit.table: types audit and orders can land in the same table 'orders' "
        "— give each type its own table unless they are meant to share it",
    ]
    assert lines[4].startswith("bridge.toml: OK with 4 warnings (")
    # --strict: the same warnings fail the check.
    code, lines = check(tmp_path, capsys, text, "--strict")
    assert code == 1 and lines[-1] == "bridge.toml: 4 warnings (--strict: warnings count)"


@pytest.mark.parametrize("text, expected", [
    ("[bridge\n", "line 1 column 8"),
    (None, "no such file"),
])
def test_a_file_that_cannot_be_read_or_parsed_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      text: str | None, expected: str) -> None:
    path = tmp_path / "bridge.toml"
    if text is not None:
        path.write_text(text)
    assert main(["check-config", "--config", str(path)]) == 2
    assert expected in capsys.readouterr().err


def test_two_different_files_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["check-config", "a.toml", "--config", "b.toml"])
    assert info.value.code == 2
    assert "two configuration files given: a.toml and --config b.toml" in capsys.readouterr().err


def test_help_documents_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["check-config", "--help"])
    out = capsys.readouterr().out
    assert "exit codes:\n  0  nothing `run` would refuse" in out and "2  the file cannot be read or is not TOML" in out


def test_key_lines_follow_tables_arrays_and_dotted_keys() -> None:
    lines = KeyLines('a = 1\n[spark.conf]\n"spark.x.y" = "1"\n[[listeners]]\nq = """\nx = 1\n"""\n'
                     "[[listeners]]\nsource.name = 2\n")
    assert lines.find(("a",)) == 1
    assert lines.find(("spark", "conf", "spark.x.y")) == 3
    assert lines.find(("listeners", 0, "x")) == 4  # inside a multi-line string: not a key; its table's line
    assert lines.find(("listeners", 1, "source", "name")) == 9
    assert lines.find(("types", "orders")) is None


def test_lint_text_reports_what_a_file_would_without_one() -> None:
    report = lint_text(BASE.replace("[types.orders]", "[types.orders]\nlatency = 0"), "<string>")
    assert [f.line("x.toml", report.key_lines) for f in report.findings] == [
        "x.toml:6: types.orders.latency: must be more than 0"]


def test_paths_in_findings_are_normalised(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config").mkdir()
    path = tmp_path / "config" / "bridge.toml"
    path.write_text(BASE.replace('kind = "stomp"', 'kind = "stomp"\nssl = true\nca_certs = "../ca.pem"'))
    assert main(["check-config", str(path)]) == 1
    assert f"sources.amq.ca_certs: {tmp_path.resolve() / 'ca.pem'}: no such file" in capsys.readouterr().out


def test_a_delta_type_needs_what_its_table_format_says(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a type landing into Delta tables, no Delta jars under jars_dir, and delta-rs not installed
    import importlib.util

    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "deltalake" else found(name, *a))
    text = BASE.replace("[types.orders]", f'[spark]\njars_dir = "{tmp_path / "jars"}"\n[types.orders]\n'
                                          'table_format = "delta"')
    # When it is checked
    code, lines = check(tmp_path, capsys, text)
    # Then the format's jars are an error naming the command that fetches them, its reader a warning
    assert code == 1
    assert any("spark.jars_dir: [spark] table_format = \"delta\" needs the Delta Lake jars in" in line
               and "run `mqbridge jars" in line for line in lines), lines
    assert any("warning: spark.table_format: Delta tables are read back (mqbridge tables, where, replay) with "
               'delta-rs, which is not installed — pip install "mqbridge[delta]"' in line for line in lines), lines
    # ... and a Parquet type needs neither
    code, lines = check(tmp_path, capsys, text.replace('table_format = "delta"', ""))
    assert code == 0, lines
