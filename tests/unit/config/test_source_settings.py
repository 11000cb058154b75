"""Unit tests of the configuration of sources: secrets kept out of errors and reprs, passwords and
TLS, and the STOMP and IBM MQ settings a broker or queue manager would refuse."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqbridge.config import (
    MqSourceConfig,
    StompSourceConfig,
)
from mqbridge.errors import ConfigError
from tests.unit.config.texts import LISTENER, MINIMAL, SOURCE, TYPES, error, parse


# -- secrets ----------------------------------------------------------------------------------
def test_secrets_are_not_in_errors_nor_repr() -> None:
    env = {"PW": "hunter2-top-secret"}
    stomp = MINIMAL.replace('kind = "stomp"', 'kind = "stomp"\npassword = "${ENV:PW}"')  # to 127.0.0.1
    cfg = parse(stomp, env)
    assert "hunter2" not in repr(cfg) and "hunter2" not in str(cfg)
    mq = TYPES + SOURCE + """
[sources.qm1]
kind = "mq"
queue_manager = "QM1"
conn_name = "h(1414)"
user = "app"
password = "${ENV:PW}"
port = "hunter2-top-secret"
""" + LISTENER
    with pytest.raises(ConfigError) as info:
        parse(mq, env)
    assert "hunter2" not in str(info.value) and "sources.qm1.port: unknown key" in str(info.value)
    # the ValidationError (whose text shows inputs) is not chained to the ConfigError
    assert info.value.__cause__ is None and info.value.__suppress_context__
    message = error(mq.replace('port = "hunter2-top-secret"\n', ""), env)
    assert "hunter2" not in message
    assert message.startswith("demo.toml: sources.qm1.password: set without cipher_spec: without TLS the MQCSP "
                              "password travels in clear")
    message = error(MINIMAL.replace('kind = "stomp"', 'kind = "stomp"\npassword = 123456789'))
    assert message == ('demo.toml: sources.amq.password: must be a string (in quotes, e.g. "text")')


def test_spark_connect_token_and_referenced_conf_values_are_secrets() -> None:
    env = {"S3_KEY": "AKIA-from-env", "WAREHOUSE_OPT": "plain-from-env"}
    cfg = parse(MINIMAL + """
[spark]
remote = "sc://spark.example:15002/;user_id=etl;token=tok-123-secret;session_id=x"
[spark.conf]
"spark.hadoop.fs.s3a.access.key" = "${ENV:S3_KEY}"
"spark.sql.shuffle.partitions" = "4"
"spark.some.option" = "${ENV:WAREHOUSE_OPT}"
"spark.ssl.keyStorePassword" = "written-in-the-file"
""", env)
    secrets = cfg.secrets()
    assert secrets["spark.remote.token[0]"] == "tok-123-secret"
    assert secrets['spark.conf."spark.hadoop.fs.s3a.access.key"'] == "AKIA-from-env"
    assert secrets['spark.conf."spark.some.option"'] == "plain-from-env"  # from ${ENV:}: could be anything
    assert secrets['spark.conf."spark.ssl.keyStorePassword"'] == "written-in-the-file"  # named like a credential
    assert 'spark.conf."spark.sql.shuffle.partitions"' not in secrets
    assert cfg.spark.shown == "sc://spark.example:15002/;user_id=etl;token=***;session_id=x"
    assert "tok-123" not in repr(cfg.spark.shown)
    assert parse(MINIMAL).spark.shown == "local[*]"


def test_mq_password_is_accepted_with_tls_or_explicit_consent() -> None:
    base = TYPES + 'kind = "mq"\nqueue_manager = "QM1"\nconn_name = "h(1414)"\npassword = "pw"\n'
    for extra in ('cipher_spec = "ANY_TLS12_OR_HIGHER"', "allow_plaintext_password = true"):
        cfg = parse(base.replace('kind = "mq"', '[sources.amq]\nkind = "mq"') + extra + "\n" + LISTENER)
        assert isinstance(cfg.sources["amq"], MqSourceConfig)


def test_stomp_password_without_tls_is_refused_unless_allowed() -> None:
    with_password = MINIMAL.replace('kind = "stomp"', 'kind = "stomp"\nhost = "broker.example"\npassword = "${ENV:PW}"')
    message = error(with_password, {"PW": "hunter2-top-secret"})
    assert message.startswith("demo.toml: sources.amq.password: set with ssl = false: without TLS the STOMP "
                              "passcode travels in clear to host 'broker.example'") and "hunter2" not in message
    for extra in ("allow_plaintext_password = true", 'ssl = true\nca_certs = "/etc/ca.pem"'):
        cfg = parse(with_password.replace('kind = "stomp"', 'kind = "stomp"\n' + extra), {"PW": "pw"})
        assert isinstance(cfg.sources["amq"], StompSourceConfig)


@pytest.mark.parametrize(("broker", "vhost", "commit_mode", "ack_mode"), [
    ("activemq", None, "transactional", "cumulative"), ("rabbitmq", "/", "receipted", "individual"),
    ("artemis", None, "receipted", "cumulative")])
def test_stomp_defaults_follow_the_broker(broker: str, vhost: str | None, commit_mode: str, ack_mode: str) -> None:
    amq = parse(MINIMAL.replace('kind = "stomp"', f'kind = "stomp"\nbroker = "{broker}"')).sources["amq"]
    assert isinstance(amq, StompSourceConfig)
    assert (amq.vhost, amq.commit_mode, amq.receipt_timeout, amq.max_message_size) == (vhost, commit_mode, 15.0, None)
    assert amq.ack_mode == ack_mode


def test_a_transactional_commit_is_refused_on_rabbitmq_with_why() -> None:
    # Given RabbitMQ with commit_mode = "transactional" (it answers COMMIT, then applies frame by frame)
    problem = error(MINIMAL.replace('kind = "stomp"', 'kind = "stomp"\nbroker = "rabbitmq"\n'
                                                      'commit_mode = "transactional"'))
    # Then it is refused, saying why and what to write instead; cumulative acks stay allowed (no copies there)
    assert problem.startswith("demo.toml: sources.amq.commit_mode: RabbitMQ does not apply a STOMP transaction "
                              "atomically")
    assert "remove the key" in problem
    rabbit = parse(MINIMAL.replace('kind = "stomp"', 'kind = "stomp"\nbroker = "rabbitmq"\nack_mode = "cumulative"'))
    assert rabbit.sources["amq"].ack_mode == "cumulative"  # type: ignore[union-attr]


def test_stomp_commit_mode_timeouts_and_message_size_are_configurable() -> None:
    amq = parse(MINIMAL.replace('kind = "stomp"', 'kind = "stomp"\nbroker = "artemis"\ncommit_mode = "transactional"'
                                '\nreceipt_timeout = "2s"\nmax_message_size = "1MB"\nvhost = "v1"')).sources["amq"]
    assert isinstance(amq, StompSourceConfig)
    assert ((amq.commit_mode, amq.receipt_timeout, amq.max_message_size, amq.vhost)
            == ("transactional", 2.0, 1 << 20, "v1"))
    assert "sources.amq.max_message_size" in error(
        MINIMAL.replace('kind = "stomp"', 'kind = "stomp"\nmax_message_size = 0'))
    assert "sources.amq.commit_mode" in error(MINIMAL.replace('kind = "stomp"', 'kind = "stomp"\ncommit_mode = "auto"'))


MQ = TYPES + '[sources.qm]\nkind = "mq"\nqueue_manager = "QM1"\nconn_name = "h(1414)"\n'
MQ_LISTENER = LISTENER.replace('"amq"', '"qm"').replace('"/queue/orders"', '"ORDERS"')


@pytest.mark.parametrize("extra, expected", [
    ('user = "app"', "demo.toml: sources.qm.password: required when user is set"),
    ('password = "pw"', "demo.toml: sources.qm.password: set without cipher_spec"),
    ('queue_manager = "' + "Q" * 49 + '"', "demo.toml: sources.qm.queue_manager: must be at most 48 characters"),
    ('channel = ""', "demo.toml: sources.qm.channel: must not be empty"),
    ('channel = "' + "C" * 21 + '"', "demo.toml: sources.qm.channel: must be at most 20 characters"),
    ('conn_name = ""', "demo.toml: sources.qm.conn_name: must not be empty"),
    ('conn_name = "' + "h" * 260 + '(1414)"', "demo.toml: sources.qm.conn_name: must be at most 264 characters"),
])
def test_mq_settings_the_queue_manager_would_refuse_are_config_errors(extra: str, expected: str) -> None:
    # Given one extra (or overriding) key; TOML refuses a key written twice, so drop the default first
    key = extra.split(" = ")[0]
    text = "\n".join(line for line in MQ.splitlines() if not line.startswith(key + " =")) + "\n" + extra + "\n"
    assert error(text + MQ_LISTENER).startswith(expected)


def test_mq_queue_names_are_at_most_48_bytes() -> None:
    assert parse(MQ + MQ_LISTENER.replace('"ORDERS"', '"' + "Q" * 48 + '"'))
    message = error(MQ + MQ_LISTENER.replace('"ORDERS"', '"' + "Q" * 47 + 'é"'))
    assert message.startswith("demo.toml: listeners[0].queue: ") and "longer than 48 bytes" in message
    # A STOMP destination is not an MQ queue name
    assert parse(MINIMAL.replace('"/queue/orders"', '"/queue/' + "o" * 60 + '"'))


@pytest.mark.parametrize("value, expected", [("true", True), ("false", False), ('"qmgr"', "qmgr"), ('"ANY"', "any")])
def test_mq_reconnect_values(value: str, expected: object) -> None:
    text = TYPES + f'[sources.qm]\nkind = "mq"\nqueue_manager = "Q"\nconn_name = "h(1)"\nreconnect = {value}\n'
    cfg = parse(text + LISTENER.replace('"amq"', '"qm"'))
    assert cfg.sources["qm"].reconnect == expected  # type: ignore[union-attr]
    bad = text.replace(f"reconnect = {value}", 'reconnect = "sometimes"')
    assert error(bad + LISTENER.replace('"amq"', '"qm"')).startswith(
        "demo.toml: sources.qm.reconnect: must be true, false")


def test_mq_convert_and_conn_name() -> None:
    text = TYPES + '[sources.qm]\nkind = "mq"\nqueue_manager = "Q"\nconn_name = "a(1414), b(1415)"\nconvert = 1208\n'
    listener = LISTENER.replace('"amq"', '"qm"')
    qm = parse(text + listener).sources["qm"]
    assert isinstance(qm, MqSourceConfig) and qm.convert == 1208 and qm.convert is not True
    assert error(text.replace("1208", '"yes"') + listener).startswith("demo.toml: sources.qm.convert: must be true")
    assert error(text.replace("a(1414), b(1415)", "a(1414) b") + listener).startswith(
        "demo.toml: sources.qm.conn_name: 'a(1414) b' is not host(port)")


def test_stomp_ssl_needs_ca_certs_unless_insecure() -> None:
    ssl = MINIMAL.replace('kind = "stomp"', 'kind = "stomp"\nssl = true')
    assert error(ssl).startswith("demo.toml: sources.amq.ca_certs: ssl = true needs ca_certs")
    # what stomp.py does without ca_certs (tests/unit/listeners/stomp/test_tls.py): it still verifies
    assert "without it the broker is verified against every CA the system trusts" in error(ssl)
    insecure = parse(ssl.replace("ssl = true", "ssl = true\nssl_insecure = true")).sources["amq"]
    assert isinstance(insecure, StompSourceConfig) and insecure.ssl and insecure.ca_certs is None
    verified = parse(ssl.replace("ssl = true", "ssl = true\nca_certs = 'ca.pem'")).sources["amq"]
    assert isinstance(verified, StompSourceConfig) and verified.ca_certs == Path("ca.pem")
    no_ssl = MINIMAL.replace('kind = "stomp"', 'kind = "stomp"\nca_certs = "ca.pem"')
    assert error(no_ssl).startswith("demo.toml: sources.amq.ssl: ca_certs set but ssl = false")
