"""The plaintext password rule (config.plaintext): a password without TLS is accepted to a loopback
address and noted at start, refused elsewhere unless `allow_plaintext_password = true`."""

from __future__ import annotations

import logging

import pytest

from mqbridge.config import BridgeConfig, is_loopback, parse_config, plaintext_notes
from mqbridge.config.plaintext import conn_name_hosts, ledger_exposure
from mqbridge.errors import ConfigError
from tests.support.memory import RecordingExecutor, memory_app, memory_config

BASE = """
[types.orders]
[[listeners]]
source = "src"
queue = "ORDERS"
message_type = "orders"
backout_queue = "ORDERS.BACKOUT"
"""
SECRET = "hunter2-top-secret"


def parse(text: str) -> BridgeConfig:
    return parse_config(BASE + text, "bridge.toml", env={"PW": SECRET})


def refused(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse(text)
    message = str(info.value)
    assert SECRET not in message and "\n" not in message
    return message


def stomp(host: str, extra: str = "") -> str:
    return f'[sources.src]\nkind = "stomp"\nhost = "{host}"\npassword = "${{ENV:PW}}"\n{extra}'


def mq(conn_name: str, extra: str = "") -> str:
    return (f'[sources.src]\nkind = "mq"\nqueue_manager = "QM1"\nconn_name = "{conn_name}"\n'
            f'password = "${{ENV:PW}}"\n{extra}')


def ledger(url: str, extra: str = "") -> str:
    return stomp("127.0.0.1") + f'[ledger]\nurl = "{url}"\n{extra}'


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.1.1", "::1", "[::1]", "localhost", "LocalHost",
                                  "::ffff:127.0.0.1"])
def test_loopback_addresses(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["10.0.0.1", "0.0.0.0", "::", "broker.example", "localhost.example",
                                  "128.0.0.1", ""])
def test_other_addresses_are_not_loopback(host: str) -> None:
    # Names are not resolved: one that points at 127.0.0.1 today may point elsewhere tomorrow
    assert not is_loopback(host)


def test_a_stomp_password_to_loopback_needs_no_tls_and_is_noted_at_start() -> None:
    for host in ("127.0.0.1", "localhost", "::1"):
        cfg = parse(stomp(host))
        notes = plaintext_notes(cfg)
        assert len(notes) == 1 and notes[0].startswith(f"sources.src: the STOMP passcode travels without TLS to {host}")
        assert "loopback" in notes[0] and SECRET not in notes[0]


def test_a_stomp_password_to_another_host_is_refused_unless_allowed() -> None:
    message = refused(stomp("broker.example"))
    assert message.startswith("bridge.toml: sources.src.password: set with ssl = false: without TLS the STOMP "
                              "passcode travels in clear to host 'broker.example', which is not a loopback address")
    assert "allow_plaintext_password = true" in message and "ssl = true" in message
    cfg = parse(stomp("broker.example", "allow_plaintext_password = true"))
    assert plaintext_notes(cfg) == ["sources.src: the STOMP passcode travels without TLS to broker.example "
                                    "(allow_plaintext_password = true)"]


def test_an_mq_password_to_loopback_needs_no_tls() -> None:
    assert conn_name_hosts("localhost(1414), 127.0.0.1(1415)") == ["localhost", "127.0.0.1"]
    cfg = parse(mq("localhost(1414),127.0.0.1(1415)"))
    assert plaintext_notes(cfg)[0].startswith("sources.src: the MQCSP password travels without TLS to localhost")


@pytest.mark.parametrize("conn_name", ["mqhost(1414)", "127.0.0.1(1414),mqhost(1414)"])
def test_an_mq_password_to_any_other_host_is_refused_unless_allowed(conn_name: str) -> None:
    message = refused(mq(conn_name))
    assert message.startswith("bridge.toml: sources.src.password: set without cipher_spec: without TLS the MQCSP "
                              f"password travels in clear to conn_name '{conn_name}'")
    assert parse(mq(conn_name, "allow_plaintext_password = true"))
    assert plaintext_notes(parse(mq(conn_name, 'cipher_spec = "ANY_TLS12_OR_HIGHER"'))) == []


def test_what_a_ledger_url_says_about_its_password() -> None:
    assert ledger_exposure("postgresql://u:pw@db:5432/x") == (True, False, ["db"])
    assert ledger_exposure("postgresql://u@db/x?sslmode=verify-full") == (False, True, ["db"])
    assert ledger_exposure("postgresql://u@localhost/x?password=pw&host=db") == (True, False, ["localhost", "db"])
    assert ledger_exposure("postgresql://u:pw@%2Fvar%2Frun%2Fpostgresql/x") == (True, False, [])  # a Unix socket
    assert ledger_exposure("postgresql://u:pw@[::1]:5432,localhost:5433/x")[2] == ["[::1]", "localhost"]


@pytest.mark.parametrize("url", ["postgresql://u:${ENV:PW}@db.example:5432/x",
                                 "postgresql://u:${ENV:PW}@db.example/x?sslmode=prefer",
                                 "postgresql://u@localhost/x?password=${ENV:PW}&hostaddr=10.1.2.3",
                                 "postgresql://u:${ENV:PW}@localhost,db.example/x"])
def test_a_ledger_password_without_tls_to_another_host_is_refused_unless_allowed(url: str) -> None:
    message = refused(ledger(url))
    assert message.startswith("bridge.toml: ledger.url: has a password but no TLS to ")
    assert "sslmode=verify-full" in message and "[ledger] allow_plaintext_password = true" in message
    cfg = parse(ledger(url, "allow_plaintext_password = true"))
    assert any(note.startswith("[ledger] url: the PostgreSQL password travels without TLS")
               for note in plaintext_notes(cfg))


@pytest.mark.parametrize("url", ["postgresql://u:${ENV:PW}@127.0.0.1:5432/x",
                                 "postgresql://u:${ENV:PW}@db.example/x?sslmode=verify-full",
                                 "postgresql://u:${ENV:PW}@db.example/x?sslmode=require",
                                 "postgresql://u@db.example/x",  # no password in the URL: nothing to expose
                                 "postgresql://u:${ENV:PW}@/x"])  # a Unix-domain socket
def test_a_ledger_url_that_exposes_no_password_is_accepted(url: str) -> None:
    cfg = parse(ledger(url))
    assert all(SECRET not in note for note in plaintext_notes(cfg))


def test_the_note_is_logged_once_when_the_bridge_starts(caplog: pytest.LogCaptureFixture) -> None:
    cfg, _broker = memory_config()
    cfg.sources["amq"] = parse(stomp("127.0.0.1")).sources["src"]  # no listener reads it: only noted
    app = memory_app(cfg, RecordingExecutor())
    with caplog.at_level(logging.WARNING, logger="mqbridge.app"):
        assert app.run(until_idle=0.2) == 0
    notes = [r.getMessage() for r in caplog.records if "travels without TLS" in r.getMessage()]
    assert notes == ["sources.amq.password: the STOMP passcode travels without TLS to 127.0.0.1 (a loopback address: "
                     "it does not leave this machine)"]


def connect(remote: str, extra: str = "") -> str:
    return (f'{stomp("127.0.0.1")}\n[spark]\nremote = "{remote}"\n{extra}'
            '[spark.conf]\n"spark.hadoop.fs.s3a.secret.key" = "${ENV:PW}"\n')


def test_a_secret_spark_setting_to_a_connect_server_elsewhere_without_tls_is_refused_unless_allowed() -> None:
    # Given a Spark Connect server on another host without TLS, and an S3 secret key among the [spark.conf]
    # settings the bridge sets on its session
    message = refused(connect("sc://spark-host:15002"))
    # Then the configuration is refused naming the key, the server and the ways out
    assert "spark.remote" in message and "spark.hadoop.fs.s3a.secret.key" in message
    assert "sc://spark-host:15002" in message and "use_ssl=true" in message and "allow_plaintext_password" in message
    # And accepted with TLS (use_ssl, or a token, which implies it), on loopback, or when allowed
    for ok in (connect("sc://spark-host:15002/;use_ssl=true"), connect("sc://spark-host:15002/;token=${ENV:PW}"),
               connect("sc://127.0.0.1:15002"), connect("sc://spark-host:15002", "allow_plaintext_password = true\n")):
        assert parse(ok).spark.remote is not None


def test_a_connect_server_elsewhere_without_tls_is_accepted_when_no_setting_is_secret() -> None:
    assert parse(f'{stomp("127.0.0.1")}\n[spark]\nremote = "sc://spark-host:15002"\n'
                 '[spark.conf]\n"spark.sql.shuffle.partitions" = "4"\n').spark.remote == "sc://spark-host:15002"
