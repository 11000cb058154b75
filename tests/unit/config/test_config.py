"""Unit tests of the configuration package: parsing, defaults, substitution and error messages."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from mqbridge.config import (
    MqSourceConfig,
    PreprocessorRef,
    StompSourceConfig,
    load_config,
    parse_config,
    parse_duration,
    parse_size,
)
from mqbridge.config.listener import unit_wait
from mqbridge.errors import ConfigError
from tests.unit.config.texts import LISTENER, MINIMAL, SOURCE, TYPES, error, parse

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE_ENV = {"AMQ_USER": "bridge", "AMQ_PASSWORD": "amq-secret-1", "MQ_PASSWORD": "mq-secret-2"}

# -- whole files ------------------------------------------------------------------------------
def test_example_file_loads_with_its_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in EXAMPLE_ENV.items():
        monkeypatch.setenv(name, value)
    cfg = load_config(ROOT / "config" / "example.toml")
    assert cfg.path == ROOT / "config" / "example.toml" and cfg.base_dir == ROOT / "config"
    assert set(cfg.types) == {"orders", "invoices", "dispatches", "prices", "stock"}
    assert set(cfg.sources) == {"amq", "qm1"}
    assert cfg.types["orders"].schema_ddl and cfg.types["invoices"].table == "invoices"
    amq, qm1 = cfg.sources["amq"], cfg.sources["qm1"]
    assert isinstance(amq, StompSourceConfig) and isinstance(qm1, MqSourceConfig)
    assert amq.user == "bridge" and amq.password is not None and amq.password.get_secret_value() == "amq-secret-1"
    assert cfg.spark.conf == {"spark.sql.shuffle.partitions": "4", "spark.sql.parquet.compression.codec": "zstd"}
    assert cfg.bridge.max_rss == 2 << 30
    assert ((cfg.bridge.exactly_once, cfg.bridge.dedupe_window, cfg.listeners[0].identity)
            == (True, 7 * 86400.0, "msg_id"))


def test_demo_file_loads() -> None:
    cfg = load_config(ROOT / "config" / "demo.toml")
    assert cfg.bridge.name == "demo" and cfg.monitoring.listen == "127.0.0.1:9464"  # the demo shows the status page
    assert cfg.resolve_path(cfg.spark.warehouse) == ROOT / "data" / "demo" / "landing"  # ".." folded


def test_defaults() -> None:
    cfg = parse(MINIMAL)
    assert (cfg.bridge.name, cfg.bridge.control_interval, cfg.bridge.shutdown_timeout) == ("mqbridge", 5.0, 30.0)
    assert cfg.bridge.plugin_dirs is None and cfg.bridge.state_dir == Path("state")  # None: the default folder
    assert cfg.bridge.max_rss is None
    assert (cfg.monitoring.host, cfg.monitoring.port) == ("127.0.0.1", 9464)
    assert (cfg.logging.level, cfg.logging.format, cfg.logging.file) == ("INFO", "text", None)
    assert (cfg.logging.max_bytes, cfg.logging.backup_count) == (50 << 20, 5)
    assert (cfg.spark.master, cfg.spark.remote, cfg.spark.app_name) == ("local[*]", None, "mqbridge")
    assert cfg.spark.warehouse == Path("data/landing") and cfg.spark.conf == {}
    assert (cfg.collector.memory, cfg.collector.max_bulks, cfg.collector.workers) == (256 << 20, 10, 2)
    orders = cfg.types["orders"]
    assert (orders.bulk_size, orders.bulk_timeout, orders.format, orders.schema_ddl) == (5 << 20, 60.0, "raw", None)
    amq = cfg.sources["amq"]
    assert isinstance(amq, StompSourceConfig)
    assert (amq.host, amq.port, amq.broker, amq.heartbeat, amq.connect_timeout) == ("127.0.0.1", 61613, "activemq",
                                                                                     10.0, 10.0)
    assert (amq.ssl, amq.ssl_insecure, amq.ca_certs, amq.user, amq.password) == (False, False, None, None, None)
    assert amq.ack_mode == "cumulative"
    listener = cfg.listeners[0]
    assert (listener.threads, listener.batch, listener.wait, listener.preprocessors) == (None, 500, 1.0, [])
    # threads unset: adaptive, starting with one thread, up to threads_max (mqbridge.supervision.tuning)
    assert (listener.adaptive_threads, listener.start_threads, listener.threads_max) == (True, 1, 8)
    assert (listener.backout_threshold, listener.prefetch) == (None, None)  # None: 3, or MQ's BOTHRESH
    assert listener.identity == "msg_id"
    assert (cfg.bridge.exactly_once, cfg.bridge.dedupe_window) == (True, 7 * 86400.0)
    # Given text without a file name, relative paths are taken from the current directory
    cfg = parse_config(MINIMAL)
    assert cfg.path is None and cfg.base_dir == Path.cwd()


def test_mq_source_defaults_and_listener_overrides_unset_unless_written() -> None:
    cfg = parse(TYPES + """
[sources.qm1]
kind = "mq"
queue_manager = "QM1"
conn_name = "mqhost(1414),mqhost2(1414)"
[[listeners]]
source = "qm1"
queue = "ORDERS.IN"
message_type = "orders"
""")
    qm1 = cfg.sources["qm1"]
    assert isinstance(qm1, MqSourceConfig)
    assert (qm1.channel, qm1.reconnect, qm1.convert, qm1.wait_interval) == ("DEV.APP.SVRCONN", True, False, 1.0)
    # the MQ adapter uses the queue's BOTHRESH/BOQNAME unless the user wrote these keys
    assert cfg.listeners[0].backout_queue is None
    assert cfg.listeners[0].backout_threshold is None



@pytest.mark.parametrize("latency, wait, seconds", [
    ("1s", None, 0.25),  # unset: a quarter of the type's latency target
    ("200ms", None, 0.05),
    ("10s", None, 1.0),  # at most the 1 s default
    ("1s", '"2s"', 2.0),  # written: as written
    ("1s", '"1s"', 1.0),
])
def test_a_unit_waits_to_fill_a_quarter_of_its_types_latency_unless_wait_is_written(
        latency: str, wait: str | None, seconds: float) -> None:
    cfg = parse(f'[types.orders]\nlatency = "{latency}"\n' + SOURCE + LISTENER + (f"wait = {wait}\n" if wait else ""))
    listener = cfg.listeners[0]
    assert unit_wait(listener, cfg.types["orders"].latency) == pytest.approx(seconds)
    assert unit_wait(listener, None) == listener.wait  # a type the configuration does not name


# -- units ------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, seconds", [
    ("500ms", 0.5), ("5s", 5.0), ("2m", 120.0), ("1h", 3600.0), ("1.5s", 1.5), ("10 S", 10.0), ("250MS", 0.25),
    ("7", 7.0), (3, 3.0), (0.25, 0.25), ("0", 0.0), ("7d", 7 * 86400.0), ("1D", 86400.0), ("0.5d", 43200.0),
])
def test_parse_duration(text: str | float, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text, problem", [
    ("5x", "'5x' is not a duration (use e.g. 500ms, 5s, 2m, 1h, 7d)"), ("-5s", "'-5s' is negative"),
    (-1, "-1 is negative"), ("", "is not a duration"), ("s", "is not a duration"), ("1w", "is not a duration"),
    (True, "a duration is a string"), (float("nan"), "is not a duration"),
])
def test_parse_duration_rejects(text: object, problem: str) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)):
        parse_duration(text)  # type: ignore[arg-type]


@pytest.mark.parametrize("text, size", [
    ("100B", 100), ("512KB", 512 * 1024), ("5MB", 5 << 20), ("1GB", 1 << 30), ("1tb", 1 << 40), ("5mb", 5 << 20),
    ("4 MiB", 4 << 20), ("0.5KB", 512), ("1024", 1024), (4096, 4096), (0, 0),
])
def test_parse_size(text: str | int, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text, problem", [
    ("5XB", "'5XB' is not a size (use e.g. 512KB, 5MB, 1GB)"), ("-1MB", "is negative"), (-5, "is negative"),
    ("MB", "is not a size"), (1.5, "a size is a string"), (False, "a size is a string"),
])
def test_parse_size_rejects(text: object, problem: str) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)):
        parse_size(text)  # type: ignore[arg-type]


# -- error messages ---------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    (MINIMAL + "batch = 0\n", "demo.toml: listeners[0].batch: must be 1 or more"),
    (MINIMAL.replace('"5MB"', '"5XB"'),
     "demo.toml: types.orders.bulk_size: '5XB' is not a size (use e.g. 512KB, 5MB, 1GB)"),
    (MINIMAL + LISTENER.replace('"amq"', '"amq2"'), "demo.toml: listeners[1].source: unknown source 'amq2' "
                                                      "(configured: amq)"),
    (MINIMAL.replace('"orders"\n', '"order"\n'), "demo.toml: listeners[0].message_type: unknown message type "
                                                  "'order' (configured: orders)"),
    ("[collector]\nmemroy = 1\n" + MINIMAL, "demo.toml: collector.memroy: unknown key"),
    (MINIMAL.replace("[types.orders]", "[types.orders]\nshema = 'x'"), "demo.toml: types.orders.shema: unknown key"),
    (MINIMAL + LISTENER, "demo.toml: listeners[1]: same source, queue and selector as listeners[0]; raise its threads"),
    (TYPES + SOURCE, "demo.toml: listeners: required key is missing"),
    (MINIMAL.replace('queue = "/queue/orders"\n', ""), "demo.toml: listeners[0].queue: required key is missing"),
    (MINIMAL.replace('kind = "stomp"', 'kind = "kafka"'), "demo.toml: sources.amq.kind: 'kafka' is not a source kind"),
    (MINIMAL.replace('kind = "stomp"', 'host = "h"'), "demo.toml: sources.amq.kind: required key is missing"),
    (MINIMAL.replace('kind = "stomp"', 'kind = "stomp"\nport = 0'),
     "demo.toml: sources.amq.port: must be 1 or more"),
    (MINIMAL.replace('backout_queue = "/queue/orders.backout"', ""),
     "demo.toml: listeners[0].backout_queue: required for a stomp source when backout_threshold > 0"),
    (MINIMAL.replace('kind = "stomp"', 'kind = "stomp"\nack_mode = "auto"'),
     "demo.toml: sources.amq.ack_mode: must be 'cumulative' or 'individual'"),
    (MINIMAL + "threads = 65\n", "demo.toml: listeners[0].threads: must be 64 or less"),
    (MINIMAL + "wait = 'soon'\n", "demo.toml: listeners[0].wait: 'soon' is not a duration"),
    ("[logging]\nlevel = 'loud'\n" + MINIMAL, "demo.toml: logging.level: must be 'DEBUG', 'INFO'"),
    ("[spark]\nremote = 'http://x'\n" + MINIMAL, "demo.toml: spark.remote: a Spark Connect URL starts with sc://"),
    ("[spark.conf]\n'spark.x' = [1]\n" + MINIMAL, 'demo.toml: spark.conf."spark.x": must be a string, number'),
    ("[collector]\nworkers = 0\n" + MINIMAL, "demo.toml: collector.workers: must be 1 or more"),
    (MINIMAL.replace('"5MB"', '"5MB"\nbulk_timeout = "0s"'), "demo.toml: types.orders.bulk_timeout: must be "
                                                            "more than 0"),
    (MINIMAL + "identity = 'msgid'\n", "demo.toml: listeners[0].identity: 'msgid' is not an identity rule "
                                       "(auto, msg_id, header:NAME or body-sha256)"),
    (MINIMAL + "identity = 'header:'\n", "demo.toml: listeners[0].identity: 'header:' is not an identity rule"),
    ("[bridge]\ndedupe_window = '7 days'\n" + MINIMAL, "demo.toml: bridge.dedupe_window: '7 days' is not a duration"),
    ("[bridge]\ndedupe_window = 0\n" + MINIMAL, "demo.toml: bridge.dedupe_window: must be more than 0"),
    ("[bridge]\nexactly_once = 'maybe'\n" + MINIMAL, "demo.toml: bridge.exactly_once: must be true or false"),
    (MINIMAL + "confirm = 'always'\n", "demo.toml: listeners[0].confirm: must be 'off' or 'reply-to'"),
    (MINIMAL.replace('kind = "stomp"', 'kind = "stomp"\ncommit_mode = "receipted"') + "confirm = 'reply-to'\n",
     'demo.toml: listeners[0].confirm: needs commit_mode = "transactional"'),
    (MINIMAL.replace('kind = "stomp"', 'kind = "memory"') + "confirm = 'reply-to'\n",
     "demo.toml: listeners[0].confirm: only for STOMP sources; a memory source has no reply-to"),
])
def test_error_names_file_and_key(text: str, expected: str) -> None:
    assert error(text).startswith(expected)


def test_confirm_is_off_by_default_and_reply_to_on_a_transactional_stomp_source() -> None:
    assert parse(MINIMAL).listeners[0].confirm == "off"
    assert parse(MINIMAL + "confirm = 'reply-to'\n").listeners[0].confirm == "reply-to"


@pytest.mark.parametrize("rule", ["msg_id", "body-sha256", "header:JMSXGroupID", "header:order id"])
def test_listener_identity_rules(rule: str) -> None:
    assert parse(MINIMAL + f"identity = {rule!r}\n").listeners[0].identity == rule


@pytest.mark.parametrize("source", ['kind = "stomp"', 'kind = "stomp"\nbroker = "rabbitmq"',
                                    'kind = "stomp"\nbroker = "artemis"', 'kind = "memory"'])
def test_identity_auto_is_the_message_id_on_every_source(source: str) -> None:
    # Given no identity: msg_id everywhere (on RabbitMQ per delivery: at-least-once, said at start)
    assert parse(MINIMAL.replace('kind = "stomp"', source)).listeners[0].identity == "msg_id"


@pytest.mark.parametrize("source", ['kind = "stomp"\nbroker = "rabbitmq"', 'kind = "stomp"', 'kind = "memory"'])
def test_identity_stamp_is_refused_with_why_and_what_to_write_instead(source: str) -> None:
    # Given identity = "stamp", the default of earlier builds on RabbitMQ
    problem = error(MINIMAL.replace('kind = "stomp"', source) + "identity = 'stamp'\n")
    # Then the configuration is refused: why (the measured RabbitMQ behaviour) and what to write instead
    assert problem.startswith("demo.toml: listeners[0].identity: \"stamp\" is no longer supported")
    assert "RabbitMQ does not apply a transaction atomically" in problem
    assert 'write identity = "header:NAME"' in problem and "leave identity unset" in problem


def test_exactly_once_off_and_dedupe_window_in_days() -> None:
    cfg = parse("[bridge]\nexactly_once = false\ndedupe_window = '2d'\n" + MINIMAL)
    assert (cfg.bridge.exactly_once, cfg.bridge.dedupe_window) == (False, 2 * 86400.0)


def test_several_errors_are_joined_on_one_line_and_counted() -> None:
    text = ("[collector]\nmemroy = 1\nworkers = 0\nmax_bulks = 0\n[bridge]\nname = ''\nfoo = 1\n" + MINIMAL)
    message = error(text)
    assert message.count("demo.toml") == 1 and message.count("; ") == 2 and message.endswith(" (+2 more)")


def test_toml_syntax_error_gives_line_and_column() -> None:
    assert error("[bridge]\nname = 'x'\nplugin_dirs = [\n") == \
        "demo.toml: line 4 column 1: Invalid value (at end of document)"
    assert re.fullmatch(r"demo\.toml: line 1 column 8: .+", error("name = = 1"))


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match=f"^{re.escape(str(path))}: no such file$"):
        load_config(path)


# -- substitution -----------------------------------------------------------------------------
def test_env_and_file_substitution_anywhere_in_strings(tmp_path: Path) -> None:
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "pw").write_text("file-secret\n\n")
    (tmp_path / "user").write_text("alice\n")
    text = MINIMAL.replace('kind = "stomp"', f'''kind = "stomp"
host = "${{ENV:HOST_PREFIX}}-${{ENV:HOST_SUFFIX}}.example.org"
user = "${{FILE:{tmp_path / 'user'}}}"
password = "${{FILE:secrets/pw}}"
allow_plaintext_password = true''') + '[spark.conf]\n"spark.a" = "${env:KEEP_FOR_SPARK}"\n'
    cfg = parse_config(text, str(tmp_path / "bridge.toml"), env={"HOST_PREFIX": "mq", "HOST_SUFFIX": "01"})
    amq = cfg.sources["amq"]
    assert isinstance(amq, StompSourceConfig)
    assert amq.host == "mq-01.example.org" and amq.user == "alice"
    # one trailing newline is stripped, not more; a relative FILE path is taken from the file's directory
    assert amq.password is not None and amq.password.get_secret_value() == "file-secret\n"
    assert cfg.spark.conf == {"spark.a": "${env:KEEP_FOR_SPARK}"}  # lower case: Spark's own syntax
    assert cfg.path == tmp_path / "bridge.toml" and cfg.base_dir == tmp_path


def test_env_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MQBRIDGE_TEST_NAME", "from-env")
    cfg = parse_config("[bridge]\nname = '${ENV:MQBRIDGE_TEST_NAME}'\n" + MINIMAL)
    assert cfg.bridge.name == "from-env"


def test_unset_variable_and_unreadable_file_are_errors(tmp_path: Path) -> None:
    text = MINIMAL.replace('kind = "stomp"', 'kind = "stomp"\npassword = "${ENV:AMQ_PASSWORD}"')
    assert error(text) == "demo.toml: sources.amq.password: environment variable AMQ_PASSWORD is not set"
    missing = tmp_path / "nope"
    message = error(MINIMAL.replace('kind = "stomp"', f'kind = "stomp"\nuser = "${{FILE:{missing}}}"'))
    assert message.startswith(f"demo.toml: sources.amq.user: cannot read {missing}")


# -- listeners, types, sections ---------------------------------------------------------------
def test_preprocessors_mix_names_and_tables() -> None:
    cfg = parse(MINIMAL + 'preprocessors = ["envelope", {name = "decode", charset = "latin-1", strict = true}]\n')
    assert cfg.listeners[0].preprocessors == [
        PreprocessorRef(name="envelope"),
        PreprocessorRef(name="decode", options={"charset": "latin-1", "strict": True}),
    ]
    assert error(MINIMAL + "preprocessors = [{format = 'xml'}]\n") == \
        "demo.toml: listeners[0].preprocessors[0].name: required key is missing"
    assert error(MINIMAL + "preprocessors = ['a', 3]\n").startswith("demo.toml: listeners[0].preprocessors[1]: a "
                                                                    "preprocessor is a name or a table")


def test_stomp_backout_queue_not_needed_when_threshold_is_zero() -> None:
    text = MINIMAL.replace('backout_queue = "/queue/orders.backout"', "backout_threshold = 0")
    assert parse(text).listeners[0].backout_threshold == 0


@pytest.mark.parametrize("listen, host, port", [
    ("127.0.0.1:9464", "127.0.0.1", 9464), ("0.0.0.0:0", "0.0.0.0", 0), ("[::1]:9464", "::1", 9464),
    ("metrics.local:65535", "metrics.local", 65535), ("", None, None),
])
def test_monitoring_listen(listen: str, host: str | None, port: int | None) -> None:
    monitoring = parse(f"[monitoring]\nlisten = '{listen}'\n" + MINIMAL).monitoring
    assert (monitoring.host, monitoring.port, monitoring.enabled) == (host, port, bool(listen))


@pytest.mark.parametrize("listen", ["9464", "host", ":9464", "host:65536", "::1:9464", "host:port", "a b:1"])
def test_monitoring_listen_rejects(listen: str) -> None:
    message = error(f"[monitoring]\nlisten = '{listen}'\n" + MINIMAL)
    assert message.startswith(f"demo.toml: monitoring.listen: {listen!r} is not host:port")


def test_table_defaults_to_the_type_name_and_must_be_safe() -> None:
    cfg = parse(MINIMAL + "[types.invoices]\ntable = 'finance/invoices'\n")
    assert cfg.types["orders"].table == "orders" and cfg.types["orders"].table_name == "orders"
    assert cfg.types["invoices"].table_name == "finance/invoices"
    for table in ("../x", "/abs", "a/../b", "a//b", "a\\\\b", "x=1"):
        assert error(MINIMAL + f"[types.invoices]\ntable = '{table}'\n").startswith(
            "demo.toml: types.invoices.table: ") and "is not a safe table directory" in error(
            MINIMAL + f"[types.invoices]\ntable = '{table}'\n")


@pytest.mark.parametrize("table", ["_iceberg", "_iceberg/orders", "_iceberg/{destination}"])
def test_no_table_lives_in_the_embedded_iceberg_catalogs_folder(table: str) -> None:
    message = error(MINIMAL + f"[types.invoices]\ntable = '{table}'\n")
    assert message.startswith("demo.toml: types.invoices.table: ") and "the embedded Iceberg catalog's folder" \
        in message, message


@pytest.mark.parametrize("name", ["../up", "a/b", "up down", "-x", ".hidden", "ä"])
def test_a_type_name_must_fit_a_bulk_id_and_a_directory(name: str) -> None:
    # Given a type whose name cannot start a bulk id (bulk ids name staging directories), even
    # with a table of its own; then check-config refuses it, naming the type.
    for extra in ("", "table = 'fine'\n"):
        message = error(MINIMAL + f"[types.'{name}']\n{extra}")
        assert "a type name is letters, digits, '.', '_' and '-'" in message and "types." in message


def test_json_format_needs_a_schema_and_raw_takes_none() -> None:
    json_type = MINIMAL.replace('bulk_size = "5MB"', 'bulk_size = "5MB"\nformat = "json"')
    assert error(json_type).startswith('demo.toml: types.orders.schema: format = "json" needs a schema')
    cfg = parse(json_type.replace('format = "json"', 'format = "json"\nschema = "id STRING"'))
    assert cfg.types["orders"].schema_ddl == "id STRING"
    assert error(MINIMAL.replace('bulk_size = "5MB"', 'schema = "id STRING"')).startswith(
        'demo.toml: types.orders.schema: a schema is only used with format = "json" | "xml" | "csv" | "fixed"')


def test_sections_convert_case_sizes_and_scalars() -> None:
    cfg = parse("""
[bridge]
max_rss = "1GB"
control_interval = 2
[logging]
level = "debug"
max_bytes = 1000
[spark]
remote = "sc://spark:15002"
[spark.conf]
"spark.int" = 4
"spark.bool" = true
"spark.float" = 0.5
""" + MINIMAL)
    assert (cfg.bridge.max_rss, cfg.bridge.control_interval) == (1 << 30, 2.0)
    assert (cfg.logging.level, cfg.logging.max_bytes) == ("DEBUG", 1000)
    assert cfg.spark.conf == {"spark.int": "4", "spark.bool": "true", "spark.float": "0.5"}


def test_resolve_path_uses_the_file_directory(tmp_path: Path) -> None:
    path = tmp_path / "bridge.toml"
    path.write_text("[spark]\nwarehouse = 'landing'\n" + MINIMAL)
    cfg = load_config(path)
    assert cfg.resolve_path(cfg.spark.warehouse) == tmp_path / "landing"
    assert cfg.resolve_path("/abs/dir") == Path("/abs/dir")
    assert cfg.resolve_path("~/x") == Path(os.path.expanduser("~/x"))
